#!/usr/bin/env python3
"""Does torch's SDPA give bitwise the same output for the same keys/values stored contiguously
(the official VAR: torch.cat of the cache, cast by autocast) and as a narrowed view of a
preallocated (B, H, capacity, d) buffer (varscope's KV cache)? Per scale of the 256px schedule,
VAR-d30 heads, bf16, at several batch sizes; also which SDPA backend torch picks for each.

With --official DIR: the official sampler under bf16 autocast, as is and with its KV cache
replaced by such a preallocated bf16 buffer (nothing else changed), tokens compared per scale."""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F


def prealloc_forward(self, x, attn_bias):
    """The official SelfAttention.forward (no flash / xformers) with varscope's cache layout."""
    B, L, C = x.shape
    qkv = F.linear(input=x, weight=self.mat_qkv.weight,
                   bias=torch.cat((self.q_bias, self.zero_k_bias, self.v_bias)))
    q, k, v = qkv.view(B, L, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
    scale_mul = self.scale_mul_1H11.clamp_max(self.max_scale_mul).exp()
    q = F.normalize(q, dim=-1).mul(scale_mul)
    k = F.normalize(k, dim=-1)
    if self.cached_k is None:  # a new call (kv_caching(True) resets it)
        shape = (B, self.num_heads, self.prealloc_capacity, self.head_dim)
        self.kbuf = torch.empty(shape, device=x.device, dtype=torch.bfloat16)
        self.vbuf = torch.empty_like(self.kbuf)
        self.cached_k, self.n = True, 0
    self.kbuf[:, :, self.n:self.n + L] = k
    self.vbuf[:, :, self.n:self.n + L] = v
    self.n += L
    oup = F.scaled_dot_product_attention(q, self.kbuf[:, :, :self.n], self.vbuf[:, :, :self.n],
                                         scale=self.scale)
    return self.proj_drop(self.proj(oup.transpose(1, 2).reshape(B, L, C)))


def official_check(args, report):
    sys.path.insert(0, os.path.abspath(args.official))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import models  # noqa: E402  (official code)
    import models.var as official_var  # noqa: E402
    from models.basic_var import SelfAttention  # noqa: E402
    from var_parity import randomise_  # noqa: E402

    gen = torch.Generator().manual_seed(0)
    vae, var = models.build_vae_var(device=torch.device("cuda"), depth=args.depth,
                                    shared_aln=False, flash_if_available=False,
                                    fused_if_available=False)
    randomise_(vae, gen)
    randomise_(var, gen)
    vae.eval()
    var.eval()
    for m in var.modules():
        if isinstance(m, SelfAttention):
            m.prealloc_capacity = sum(p * p for p in var.patch_nums)

    def tokens(batch, prealloc):
        labels = torch.randint(0, 1000, (batch,), generator=torch.Generator().manual_seed(batch))
        labels[0] = 207
        drawn, original = [], official_var.sample_with_top_k_top_p_

        def recording(*a, **k):
            out = original(*a, **k)
            drawn.append(out[:, :, 0].cpu())
            return out

        official_var.sample_with_top_k_top_p_ = recording
        saved = SelfAttention.forward
        if prealloc:
            SelfAttention.forward = prealloc_forward
        try:
            with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
                var.autoregressive_infer_cfg(B=batch, label_B=labels.cuda(), g_seed=0, cfg=4.0,
                                             top_k=900, top_p=0.95)
        finally:
            SelfAttention.forward = saved
            official_var.sample_with_top_k_top_p_ = original
        return drawn

    for b in map(int, args.batches.split(",")):
        plain, pre = tokens(b, False), tokens(b, True)
        row = {"official_prealloc_vs_plain_batch": b,
               "identical_per_scale": [(x == y).float().mean().item() for x, y in zip(pre, plain)]}
        report.append(row)
        print(json.dumps(row), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--heads", type=int, default=30)
    ap.add_argument("--out", default="")
    ap.add_argument("--official", default="", help="folder of the official models/ (optional)")
    ap.add_argument("--depth", type=int, default=30)
    args = ap.parse_args()
    pns = [1, 2, 3, 4, 5, 6, 8, 10, 13, 16]
    cap = sum(p * p for p in pns)
    g = torch.Generator(device="cuda").manual_seed(0)
    report = []
    for b in map(int, args.batches.split(",")):
        R, H, d = 2 * b, args.heads, 64
        kbuf = torch.empty(R, H, cap, d, device="cuda", dtype=torch.bfloat16)
        vbuf = torch.empty_like(kbuf)
        cur = 0
        for si, pn in enumerate(pns):
            n = pn * pn
            q = torch.randn(R, n, H, d, device="cuda", generator=g).transpose(1, 2)
            q = F.normalize(q, dim=-1).to(torch.bfloat16)  # the official q's strides
            k = F.normalize(torch.randn(R, H, n, d, device="cuda", generator=g), dim=-1)
            v = torch.randn(R, H, n, d, device="cuda", generator=g).to(torch.bfloat16)
            kbuf[:, :, cur:cur + n] = k.to(torch.bfloat16)
            vbuf[:, :, cur:cur + n] = v
            cur += n
            kv, vv = kbuf[:, :, :cur], vbuf[:, :, :cur]
            kc, vc = kv.contiguous(), vv.contiguous()
            o_view = F.scaled_dot_product_attention(q, kv, vv, scale=1.0)
            o_cont = F.scaled_dot_product_attention(q, kc, vc, scale=1.0)
            row = {"batch": b, "scale": si, "lq": n, "lk": cur,
                   "backend_view": int(torch._fused_sdp_choice(q, kv, vv, scale=1.0)),
                   "backend_contiguous": int(torch._fused_sdp_choice(q, kc, vc, scale=1.0)),
                   "bitwise_equal": bool(torch.equal(o_view, o_cont)),
                   "max_abs_diff": (o_view.float() - o_cont.float()).abs().max().item()}
            report.append(row)
            print(json.dumps(row), flush=True)
    if args.official:
        official_check(args, report)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
