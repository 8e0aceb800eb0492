#!/usr/bin/env python3
"""FlexAttention timing for `varscope-cli bench attention --flex-json` (Flex is Python-only).

Builds SparVAR's CSLA block mask the way core/accel/csla_mask.cpp does (sinks = scales <= 5,
windows 3 for the middle key scales and [3, 5, 7] for the last three, round-half-to-even
rescaling, block = OR over its tokens), runs torch.compile'd flex_attention on random bf16 inputs
and times it like the C++ bench: CUDA events, warm-up, an L2 flush before each call, the median.
"""
import argparse
import json
import statistics

import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

CONFIGS = {
    "infinity-8b-1024": ([1, 2, 4, 6, 8, 12, 16, 20, 24, 32, 40, 48, 64], 1, 24, 128),
    "var-d30-256": ([1, 2, 3, 4, 5, 6, 8, 10, 13, 16], 2, 30, 64),
    "var-d30-512": ([1, 2, 3, 4, 6, 9, 13, 18, 24, 32], 2, 30, 64),
}


def round_half_even(num, den):
    q, twice_rem = divmod(num, den)[0], 2 * (num % den)
    return q + 1 if twice_rem > den or (twice_rem == den and q % 2 == 1) else q


def csla_token_mask(pns, sink_scales=5, windows=(3, 5, 7), middle=3):
    k = len(pns) - 1
    pq = pns[k]
    parts = []
    for h, ph in enumerate(pns):
        if h < sink_scales:
            parts.append(torch.ones(pq * pq, ph * ph, dtype=torch.bool))
            continue
        dist = k - h
        w = windows[len(windows) - 1 - dist] if dist < len(windows) else middle
        r = w // 2
        near = torch.zeros(pq, ph, dtype=torch.bool)
        for x in range(pq):
            c = round_half_even(x * ph, pq)
            near[x, max(0, c - r):min(ph - 1, c + r) + 1] = True
        parts.append((near.view(pq, 1, ph, 1) & near.view(1, pq, 1, ph)).reshape(pq * pq, ph * ph))
    return torch.cat(parts, 1)


def block_mask_of(token_mask, b):
    lq, lk = token_mask.shape
    nq, nk = -(-lq // b), -(-lk // b)
    padded = torch.nn.functional.pad(token_mask.to(torch.uint8), (0, nk * b - lk, 0, nq * b - lq))
    return padded.view(nq, b, nk, b).amax(dim=(1, 3)).bool()


def flex_call(compiled, q, k, v, bm, b):
    """compiled flex_attention with block mask bm (nq x nk, block b) and the first kernel tile
    setting that runs. The mask is constant per block, so every active block is a full block and
    Flex never evaluates mask_mod inside one: its fastest case. Returns (fn, options, errors)."""
    return flex_with(compiled, q, k, v, block_lookup(bm, b), b)


def block_lookup(bm, b):
    """mask_mod of a block mask: whether the block of (query, key) is active."""
    def mask_mod(bi, hi, qi, ki):
        return bm[qi // b, ki // b]

    return mask_mod


def active_blocks(bm):
    """Per query block, how many key blocks are active, and all key block indices with the active
    ones first, ascending (a stable sort of "inactive")."""
    counts = bm.sum(1).to(torch.int32)
    return counts, torch.argsort((~bm).to(torch.int8), dim=1, stable=True).to(torch.int32)


def flex_token_call(compiled, q, k, v, token_mask, b):
    """compiled flex_attention with the CSLA token mask itself as mask_mod, blocks of b: the
    same active blocks as block_mask_of(token_mask, b), but the blocks the mask cuts through are
    partial, and Flex evaluates mask_mod on each of their scores. That is other attention than
    CSLA's block mask (SparVAR's Eq. 3: every token of an active block attends); it is timed for
    reference only (it reproduces the issue's Flex anchor, see csla_s16.md)."""
    def mask_mod(bi, hi, qi, ki):
        return token_mask[qi, ki]

    return flex_with(compiled, q, k, v, mask_mod, b)


def flex_partial_call(compiled, q, k, v, bm, b):
    """compiled flex_attention with bm's block lists given straight to BlockMask.from_kv_blocks
    and no full blocks: the same attention as flex_call's, but Flex then takes every active block
    as partial and evaluates mask_mod (bm's lookup) on each of its scores. Timed for reference
    only: flex_call's full blocks are Flex's fast path for this mask. (The lookup is needed:
    uncompiled Flex applies mask_mod alone and ignores the block lists.)"""
    lq, lk = q.shape[2], k.shape[2]
    counts, indices = active_blocks(bm)
    mask = BlockMask.from_kv_blocks(counts[None, None], indices[None, None], BLOCK_SIZE=b,
                                    mask_mod=block_lookup(bm, b), seq_lengths=(lq, lk))
    return flex_run(compiled, q, k, v, mask, b)


def flex_with(compiled, q, k, v, mask_mod, b):
    lq, lk = q.shape[2], k.shape[2]
    mask = create_block_mask(mask_mod, None, None, lq, lk, device=q.device, BLOCK_SIZE=b)
    return flex_run(compiled, q, k, v, mask, b)


def flex_run(compiled, q, k, v, mask, b):
    """The first kernel tile setting that runs: (fn, options, errors)."""
    errors = []
    for opts in (None, {"BLOCK_M": b, "BLOCK_N": b}, {"BLOCK_M": 64, "BLOCK_N": 64}):
        def fn(opts=opts):
            return compiled(q, k, v, block_mask=mask, kernel_options=opts)
        try:
            fn()
            return fn, opts, errors
        except Exception as e:  # noqa: BLE001 - report and try the next tile setting
            errors.append(f"{opts}: {type(e).__name__}: {str(e)[:200]}")
    return None, None, errors


def masked_reference(q, k, v, bm, b):
    """fp32 SDPA with bm expanded to tokens: the ground truth for every contestant."""
    lq, lk = q.shape[2], k.shape[2]
    return fp32_sdpa(q, k, v, bm.repeat_interleave(b, 0).repeat_interleave(b, 1)[:lq, :lk])


def fp32_sdpa(q, k, v, token_mask):
    return torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                            attn_mask=token_mask)


def rel_error(out, want):
    return ((out.float() - want).norm() / want.norm()).item()


def time_ms(fn, warmup, iters, flush):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        flush.fill_(i & 0xFF)
        starts[i].record()
        fn()
        stops[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, stops))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", nargs="+", default=["infinity-8b-1024"])
    ap.add_argument("--blocks", nargs="+", type=int, default=[64, 128])
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sdpa", action="store_true",
                    help="also time dense SDPA flash and cuDNN per config (same timing), for "
                         "ratios measured in the same call as a kernel probe")
    ap.add_argument("--no-flex", action="store_true", help="skip FlexAttention (with --sdpa)")
    a = ap.parse_args()
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    flush = torch.empty(2 * l2, dtype=torch.uint8, device=dev)
    compiled = torch.compile(flex_attention, dynamic=False)
    results = []
    for name in a.configs:
        pns, batch, heads, d = CONFIGS[name]
        tm = csla_token_mask(pns)
        lq, lk = tm.shape
        torch.manual_seed(0)
        q = torch.randn(batch, heads, lq, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(batch, heads, lk, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(batch, heads, lk, d, device=dev, dtype=torch.bfloat16)
        if a.sdpa:
            row = {"config": name, "q_len": lq, "kv_len": lk}
            flash = torch.ops.aten._scaled_dot_product_flash_attention
            cudnn = torch.ops.aten._scaled_dot_product_cudnn_attention
            row["sdpa_flash_ms"] = time_ms(lambda: flash(q, k, v), a.warmup, a.iters, flush)
            row["sdpa_cudnn_ms"] = time_ms(lambda: cudnn(q, k, v, None, False), a.warmup, a.iters,
                                           flush)
            results.append(row)
            print(f"sdpa {name}: flash {row['sdpa_flash_ms']:.3f} ms cudnn "
                  f"{row['sdpa_cudnn_ms']:.3f} ms", flush=True)
        for b in ([] if a.no_flex else a.blocks):
            bm = block_mask_of(tm, b).to(dev)
            sparsity = 1.0 - bm.float().mean().item()

            row = {"config": name, "block": b, "block_sparsity": sparsity}
            fn, opts, errors = flex_call(compiled, q, k, v, bm, b)
            if errors:
                row["errors"] = errors
            if fn is not None:
                want = masked_reference(q, k, v, bm, b)
                row["rel_error_vs_fp32_sdpa"] = rel_error(fn(), want)
                del want
                row["flex_ms"] = time_ms(fn, a.warmup, a.iters, flush)
                row["kernel_options"] = opts
            results.append(row)
            print(f"flex {name} block {b}: sparsity {100 * sparsity:.2f}% "
                  f"{row.get('flex_ms', float('nan')):.3f} ms err {row.get('rel_error_vs_fp32_sdpa')}",
                  flush=True)
    env = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "cuda": torch.version.cuda, "warmup": a.warmup, "iterations": a.iters,
           "statistic": "median", "l2_flush": True}
    with open(a.out, "w") as f:
        json.dump({"benchmark": "flex_attention", "environment": env, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
