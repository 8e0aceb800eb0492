#!/usr/bin/env python3
"""Our sm_90a CSLA kernel, FlexAttention, SDPA-flash and SDPA-cuDNN timed in one process, call
after call (issue #6's ratios, measured side by side).

`varscope-cli bench attention` times our kernels against flash and cuDNN in one run, but Flex is
Python-only, so its time there comes from flex_attention_bench.py, run before the CLI in another
process. A GPU's clock drifts over a call (our kernel has measured 10 % slower at the end of a
CLI run than at its start), so this script times every contestant in each iteration, in an order
that rotates from one iteration to the next, each call after an L2 flush. Our kernel is reached
through tools/bench/csla_sm90_capi.cu (ctypes, raw device pointers), on block lists in core's
order (kernels/block_list_order.h); "ours_ascending" is the same kernel on ascending lists, the
order before 2026-11-26, timed in the same iterations.

Before timing, every contestant's output is checked against fp32 SDPA with the same mask
expanded to tokens: ours may be at most twice Flex's error (FlashAttention's test rule: at most 2x
the framework's own error at that precision). Exit code 1 when that fails or a contestant errs.

Two more Flex settings can be timed for reference (not the goal's contestant, which is Flex with
the block mask and its full blocks, Flex's fastest path for this mask): --token-flex (the CSLA
token mask: other attention) and --partial-flex (the same block lists as partial blocks only: the
same attention on Flex's masking path).
"""
import argparse
import ctypes
import datetime
import json
import statistics
import sys

import torch
from torch.nn.attention.flex_attention import flex_attention

from flex_attention_bench import (CONFIGS, active_blocks, block_mask_of, csla_token_mask,
                                  flex_call, flex_partial_call, flex_token_call, fp32_sdpa,
                                  masked_reference, rel_error)
from gpu_clock_sampler import GpuSampler, NvmlUnavailable, hold


def block_lists(lib, bm, ascending=False):
    """Active key blocks of each query block in rows of the longest list's length (the kernel
    reads only the first count entries), in core's order (the C entry point's
    varscope_order_block_lists) or, with ascending, in ascending order (the order before
    2026-11-26, kept as a contestant)."""
    counts, indices = active_blocks(bm)
    stride = max(1, int(counts.max()))
    lists = indices[:, :stride].contiguous()
    if not ascending:
        host, host_counts = lists.cpu().contiguous(), counts.cpu().contiguous()
        if lib.varscope_order_block_lists(ctypes.c_void_p(host.data_ptr()),
                                          ctypes.c_void_p(host_counts.data_ptr()),
                                          ctypes.c_int64(host.shape[0]),
                                          ctypes.c_int64(stride)) != 0:
            raise RuntimeError("varscope_order_block_lists refused the lists")
        lists = host.to(bm.device)
    return lists, counts, stride


def ours_call(lib, q, k, v, bm, b, ascending=False):
    lists, counts, stride = block_lists(lib, bm, ascending)  # on bm's device, q's
    out = torch.empty_like(q)
    batch, heads, lq, d = q.shape
    lk = k.shape[2]

    def fn():
        err = lib.varscope_csla_sm90_bf16(
            ctypes.c_void_p(q.data_ptr()), ctypes.c_void_p(k.data_ptr()),
            ctypes.c_void_p(v.data_ptr()), ctypes.c_void_p(out.data_ptr()), batch, heads, lq, lk,
            d, ctypes.c_void_p(lists.data_ptr()), ctypes.c_void_p(counts.data_ptr()), stride, b,
            ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if err != 0:
            raise RuntimeError(f"varscope_csla_sm90_bf16 returned cudaError {err}")
        return out

    return fn


def add_flex(fns, row, key, call):
    """A Flex setting (flex_run's (fn, options, errors)) under key: its call into fns where a tile
    setting ran, its options and errors into row. Returns the call or None."""
    fn, opts, errors = call
    row[f"{key}_kernel_options"] = opts
    if errors:
        row[f"{key}_errors"] = errors
    if fn is not None:
        fns[key] = fn
    return fn


def time_side_by_side(fns, warmup, iters, flush):
    """Per contestant, its times over `iters` iterations; iteration i runs the contestants in
    the order rotated by i, each after an L2 flush."""
    names = list(fns)
    for _ in range(warmup):
        for n in names:
            fns[n]()
    torch.cuda.synchronize()
    events = {n: [] for n in names}
    for i in range(iters):
        r = i % len(names)
        for n in names[r:] + names[:r]:
            flush.fill_(i & 0xFF)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fns[n]()
            stop.record()
            events[n].append((start, stop))
    torch.cuda.synchronize()
    return {n: [s.elapsed_time(e) for s, e in events[n]] for n in names}


def quarters(xs):
    q = max(1, len(xs) // 4)
    return [xs[i:i + q] for i in range(0, q * 4, q)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True, help="libvarscope_csla_capi.so (csla_sm90_capi.cu)")
    ap.add_argument("--configs", nargs="+", default=["infinity-8b-1024"], choices=list(CONFIGS))
    ap.add_argument("--blocks", nargs="+", type=int, default=[64, 128])
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--token-flex", action="store_true",
                    help="also time Flex on the CSLA token mask with the same blocks (other "
                         "attention than the block mask's: for reference only)")
    ap.add_argument("--partial-flex", action="store_true",
                    help="also time Flex on the same block lists given as partial blocks only "
                         "(BlockMask.from_kv_blocks: the same attention on Flex's masking path)")
    ap.add_argument("--clocks", type=float, default=0.0, metavar="SECONDS",
                    help="after the timing, run each contestant back to back for SECONDS and "
                         "report the SM clock and power it held (NVML; gpu_clock_sampler.py)")
    ap.add_argument("--commit", default="")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.iters < 4 or a.warmup < 0:
        sys.exit("--iters must be at least 4 and --warmup not negative")
    if not 0.0 <= a.clocks <= 60.0:
        sys.exit("--clocks takes 0 (off) to 60 seconds per contestant")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        sys.exit("csla_vs_torch.py needs a Hopper GPU (the kernel is built for sm_90a)")
    try:
        lib = ctypes.CDLL(a.lib)
        lib.varscope_csla_sm90_bf16.restype = ctypes.c_int
    except (OSError, AttributeError) as e:
        sys.exit(f"cannot use {a.lib} (build it from tools/bench/csla_sm90_capi.cu): {e}")
    dev = torch.device("cuda")
    sampler = None
    if a.clocks > 0:
        props = torch.cuda.get_device_properties(dev)
        bus = (f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
               if hasattr(props, "pci_bus_id") else None)
        try:
            sampler = GpuSampler(pci_bus_id=bus)
        except NvmlUnavailable as e:
            sys.exit(f"--clocks needs NVML: {e}")
    flush = torch.empty(2 * torch.cuda.get_device_properties(dev).L2_cache_size, dtype=torch.uint8,
                        device=dev)
    compiled = torch.compile(flex_attention, dynamic=False)
    flash = torch.ops.aten._scaled_dot_product_flash_attention
    cudnn = torch.ops.aten._scaled_dot_product_cudnn_attention
    results, failed = [], False
    for name in a.configs:
        pns, batch, heads, d = CONFIGS[name]
        tm = csla_token_mask(pns)
        lq, lk = tm.shape
        torch.manual_seed(0)
        q, k, v = (torch.randn(batch, heads, n, d, device=dev, dtype=torch.bfloat16)
                   for n in (lq, lk, lk))
        tm_dev = tm.to(dev)
        token_want = None  # fp32 SDPA with the token mask: one per config, for --token-flex
        for b in a.blocks:
            bm = block_mask_of(tm, b).to(dev)
            row = {"config": name, "block": b, "block_sparsity": 1.0 - bm.float().mean().item(),
                   "impl": 12 if d == 128 else 10}  # the dispatch's kernel (pruned-kernels.md)
            fns = {"ours": ours_call(lib, q, k, v, bm, b),
                   "ours_ascending": ours_call(lib, q, k, v, bm, b, ascending=True)}
            add_flex(fns, row, "flex", flex_call(compiled, q, k, v, bm, b))
            if a.partial_flex:
                add_flex(fns, row, "flex_partial", flex_partial_call(compiled, q, k, v, bm, b))
            want = masked_reference(q, k, v, bm, b)
            row["rel_error_vs_fp32"] = {n: rel_error(f(), want) for n, f in fns.items()}
            del want
            errs = row["rel_error_vs_fp32"]
            if "flex" not in errs:
                print(f"FAIL {name} block {b}: Flex did not run ({row.get('flex_errors')})",
                      flush=True)
                failed = True
            elif not errs["ours"] <= 2 * errs["flex"]:
                print(f"FAIL {name} block {b}: ours' error {errs['ours']:.2e} is over twice "
                      f"Flex's {errs['flex']:.2e}", flush=True)
                failed = True
                results.append(row)
                continue
            if a.token_flex:
                tok_fn = add_flex(fns, row, "flex_token",
                                  flex_token_call(compiled, q, k, v, tm_dev, b))
                if tok_fn is not None:
                    if token_want is None:
                        token_want = fp32_sdpa(q, k, v, tm_dev)
                    row["flex_token_rel_error_vs_fp32_token_mask"] = rel_error(tok_fn(), token_want)
            fns["flash"] = lambda: flash(q, k, v)
            fns["cudnn"] = lambda: cudnn(q, k, v, None, False)
            times = time_side_by_side(fns, a.warmup, a.iters, flush)
            med = {n: statistics.median(t) for n, t in times.items()}
            row["median_ms"] = med
            row["speedup_of_ours"] = {n: med[n] / med["ours"] for n in med if n != "ours"}
            row["speedup_by_quarter"] = {
                n: [statistics.median(o) / statistics.median(x)
                    for o, x in zip(quarters(times[n]), quarters(times["ours"]))]
                for n in med if n != "ours"}
            row["ideal_speedup"] = 1.0 / max(1e-9, 1.0 - row["block_sparsity"])
            if sampler is not None:
                held = {n: hold(f, flush, a.clocks, sampler) for n, f in fns.items()}
                row["held_clock_and_power"] = held
                row["power_limit_w"] = sampler.power_limit_w()
                # The same ratios counted in cycles (time x held clock): what they would be if
                # every contestant ran at one clock. An estimate: the clock moves within a launch.
                if held.get("ours"):
                    ours_cycles = med["ours"] * held["ours"]["sm_clock_mhz"]
                    row["speedup_of_ours_in_cycles"] = {
                        n: med[n] * held[n]["sm_clock_mhz"] / ours_cycles
                        for n in med if n != "ours" and held.get(n)}
                print(f"{name} block {b}, each run back to back for {a.clocks:g} s: " + " | ".join(
                    f"{n} {h['sm_clock_mhz']:.0f} MHz (min {h['sm_clock_mhz_min']:.0f}) "
                    f"{h['power_w']:.0f} W" for n, h in held.items() if h) +
                    f" (power limit {row['power_limit_w']} W)", flush=True)
                if "speedup_of_ours_in_cycles" in row:
                    print(f"{name} block {b}, ours in cycles: " + " | ".join(
                        f"x{x:.2f} {n}" for n, x in row["speedup_of_ours_in_cycles"].items()),
                        flush=True)
            results.append(row)
            print(f"{name} block {b} ({100 * row['block_sparsity']:.2f} % sparse): ours "
                  f"{med['ours']:.4f} ms | " + " | ".join(
                      f"{n} {med[n]:.4f} ms = x{row['speedup_of_ours'][n]:.2f} (quarters "
                      + " ".join(f"{x:.2f}" for x in row["speedup_by_quarter"][n]) + ")"
                      for n in med if n != "ours"), flush=True)
    env = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "date": datetime.date.today().isoformat(), "commit": a.commit, "warmup": a.warmup,
           "iterations": a.iters, "statistic": "median", "l2_flush": True,
           "order": "every contestant in each iteration, order rotated per iteration"}
    with open(a.out, "w") as f:
        json.dump({"benchmark": "csla_vs_torch", "environment": env, "results": results}, f,
                  indent=2)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
