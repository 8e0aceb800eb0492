#!/usr/bin/env python3
"""SDPA time against the key count around AMS-KV's C_min at VAR-d30's shapes (issue #30).

`counts`: cuDNN and flash at 1,024-4,096 queries and 2,176-2,433 keys (batch 20, 30 heads, 64
channels, bf16). `strides`: is the slow path the count or the buffer? 2,309 keys contiguous, as a
view of a 2,432-row buffer (BHLD and BLHD), and padded to 2,432 with a -inf bias; each output
compared bitwise with the contiguous one. Writes JSON to the given path.
Usage: sdpa_key_counts.py counts|strides OUT.json
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B, H, D = 20, 30, 64


def timed(fn, n=20):
    for _ in range(3):
        fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    s.record()
    for _ in range(n):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / n


def rand(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


def counts():
    rows = []
    for lq in (1024, 1600, 2304, 4096):
        q = rand(B, H, lq, D)
        for lk in (2176, 2304, 2305, 2309, 2368, 2432, 2433):
            k, v = rand(B, H, lk, D), rand(B, H, lk, D)
            row = {"lq": lq, "lk": lk}
            for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
                with sdpa_kernel([be]):
                    ms = timed(lambda: F.scaled_dot_product_attention(q, k, v))
                row[name], row[name + "_tflops"] = ms, 4 * B * H * lq * lk * D / ms / 1e9
            rows.append(row)
            print(row, flush=True)
    return {"batch": B, "heads": H, "head_dim": D, "torch": torch.__version__, "rows": rows}


def strides():
    rows = []
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        for lq in (1024, 4096):
            q, kb, vb = rand(B, H, lq, D), rand(B, H, 2432, D), rand(B, H, 2432, D)
            k, v = kb[:, :, :2309].contiguous(), vb[:, :, :2309].contiguous()
            ref = F.scaled_dot_product_attention(q, k, v)
            kl, vl = kb.transpose(1, 2).contiguous(), vb.transpose(1, 2).contiguous()
            kl2, vl2 = kl[:, :2309].contiguous(), vl[:, :2309].contiguous()
            kp, vp = kb.clone(), vb.clone()
            kp[:, :, :2309], vp[:, :, :2309] = k, v
            bias = torch.zeros(1, 1, lq, 2432, device="cuda", dtype=torch.bfloat16)
            bias[..., 2309:] = float("-inf")
            cases = {
                "contig_2309": lambda: F.scaled_dot_product_attention(q, k, v),
                "view_of_2432_bhld": lambda: F.scaled_dot_product_attention(q, kb[:, :, :2309], vb[:, :, :2309]),
                "view_of_2432_blhd": lambda: F.scaled_dot_product_attention(
                    q, kl[:, :2309].transpose(1, 2), vl[:, :2309].transpose(1, 2)),
                "contig_2309_blhd": lambda: F.scaled_dot_product_attention(q, kl2.transpose(1, 2), vl2.transpose(1, 2)),
                "pad2432_bias": lambda: F.scaled_dot_product_attention(q, kp, vp, attn_mask=bias),
            }
            for name, fn in cases.items():
                ms, out = timed(fn), fn()
                r = {"lq": lq, "case": name, "ms": ms, "bitwise_equal": bool(torch.equal(out, ref)),
                     "max_abs_diff": (out.float() - ref.float()).abs().max().item()}
                rows.append(r)
                print(r, flush=True)
    return rows


if __name__ == "__main__":
    torch.manual_seed(0)
    result = {"counts": counts, "strides": strides}[sys.argv[1]]()
    json.dump(result, open(sys.argv[2], "w"), indent=1)
