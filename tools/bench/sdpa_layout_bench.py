# SDPA at AMS-KV's 1024^2 last-scale shapes (VAR-d30: 30 heads x 64, batch 16 x 2 CFG rows, 4,096
# queries) for the key lengths the baseline and AMS-KV attend to (10,521 = every scale; 6,405 =
# C_max; 2,309 = C_min; 1,600), keys/values head-major (as the baseline's preallocated cache) vs
# token-major (the compact cache's permuted view), per backend; device time by CUDA events, median
# of 10 after 3 warm-ups. Session 39 (issue #30): bench/results/2026-11-30-h200/session39/.
#   python3 tools/bench/sdpa_layout_bench.py      (an NVIDIA GPU, torch with CUDA)
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
torch.manual_seed(0)
B, H, D, LQ = 32, 30, 64, 4096
def t(fn, n=10):
    for _ in range(3): fn()
    ts = []
    for _ in range(n):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort(); return ts[len(ts) // 2]
q = torch.randn(B, H, LQ, D, device='cuda', dtype=torch.bfloat16)
# The loop's queries: a (B, H, L, c) view of the (B, L, 3, H, c) projection (token-major, every
# third head-row), as project_qkv's permute leaves them where no fused kernel copies them.
qkv = torch.randn(B, LQ, 3, H, D, device='cuda', dtype=torch.bfloat16)
q_tok = (qkv.permute(2, 0, 3, 1, 4)[0] * 1.0)  # an elementwise op keeps the permuted strides
print("q token-major strides", q_tok.stride(), "contiguous", q_tok.is_contiguous(), flush=True)
for LK in (10521, 6405, 2309):
    kh = torch.randn(B, H, LK, D, device='cuda', dtype=torch.bfloat16); vh = torch.randn_like(kh)
    kt = kh.transpose(1, 2).contiguous().transpose(1, 2); vt = vh.transpose(1, 2).contiguous().transpose(1, 2)
    # the baseline's cache: head-major with the whole schedule's capacity, narrowed
    kc = torch.randn(B, H, 10521, D, device='cuda', dtype=torch.bfloat16)[:, :, :LK]
    vc = torch.randn(B, H, 10521, D, device='cuda', dtype=torch.bfloat16)[:, :, :LK]
    flops = 4 * B * H * LQ * LK * D
    for ql, qq in (("q contiguous", q), ("q token-major", q_tok)):
        row = []
        for lay, k, v in (("kv capacity view", kc, vc), ("kv token-major", kt, vt)):
            ms = t(lambda: F.scaled_dot_product_attention(qq, k, v, scale=0.125))
            row.append(f"{lay} {ms:7.2f} ms {flops/ms/1e9:6.0f} TF/s")
        print(f"LK {LK:5d} default {ql:13s} | " + " | ".join(row), flush=True)
    del kc, vc
for LK in (10521, 6405, 2309, 1600):
    kh = torch.randn(B, H, LK, D, device='cuda', dtype=torch.bfloat16); vh = torch.randn_like(kh)
    kt = kh.transpose(1, 2).contiguous().transpose(1, 2); vt = vh.transpose(1, 2).contiguous().transpose(1, 2)
    flops = 4 * B * H * LQ * LK * D
    for name, be in (("default", None), ("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        row = []
        for lay, k, v in (("head-major", kh, vh), ("token-major", kt, vt)):
            try:
                if be is None: ms = t(lambda: F.scaled_dot_product_attention(q, k, v, scale=0.125))
                else:
                    with sdpa_kernel([be]): ms = t(lambda: F.scaled_dot_product_attention(q, k, v, scale=0.125))
                row.append(f"{lay} {ms:7.2f} ms {flops/ms/1e9:6.0f} TF/s")
            except Exception as e:
                row.append(f"{lay} n/a ({str(e).splitlines()[0][:60]})")
        print(f"LK {LK:5d} {name:9s} | " + " | ".join(row), flush=True)
    # the copy that would make a token-major view head-major
    print(f"LK {LK:5d} contiguous() of K and V: {t(lambda: (kt.contiguous(), vt.contiguous())):.2f} ms", flush=True)
