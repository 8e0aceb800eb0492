#!/usr/bin/env python3
"""Where AMS-KV's similarity check spends its time (issue #4), in isolation on the GPU.

The same tensor operations as ams_kv::similarity (core/accel/ams_kv.cpp) on VAR-d30 shapes at
batch 128 with CFG (256 rows, 30 heads x 64 channels, fp16, keys read as views of a token-major
cache buffer), for the three checks of the 256px schedule (8x8 -> 10x10, 10x10 -> 13x13,
13x13 -> 16x16). Each variant is timed three ways: CUDA events around the kernels only; host
wall time synchronised before and after (what VARSCOPE_PROFILE_AMS_KV measures), including
the final device-to-host read; and per-kernel times from torch.profiler. Candidates:
  gram:      the current two batched Gram GEMMs (outputs padded) + float sums + one transfer;
  gram_f32o: the same with float GEMM outputs (no fp16 round trip, no separate sum kernels);
  direct:    bilinear upsampling (channels-last) and sum((cur - up)^2) in float;
  separable: sum ||cur||^2 + <W^T W prev - 2 W^T cur, prev>, W = w1 (x) w1 applied per axis.
Prints a table and writes JSON to $OUT/ams_kv_similarity_profile.json.
"""
import json
import os
import time

import torch
import torch.nn.functional as F

dev = os.environ.get("DEVICE", "cuda")
R, H, C = int(os.environ.get("ROWS", 256)), 30, 64
HC = H * C
PAIRS = [(8, 10), (10, 13), (13, 16)]
CAP = 174  # a cache-efficient layer's buffer (C_min) at the 256px schedule
torch.manual_seed(0)


def up_weights(pp, pc):
    eye = torch.eye(pp, device=dev).unsqueeze(0)
    w1 = F.interpolate(eye, size=pc, mode="linear", align_corners=False)[0].t()
    return torch.kron(w1, w1)


def unit_keys(tokens):
    # Token-major buffer slice, as the compact cache hands it out: (R, t, H*c) view with the
    # row stride of the buffer's capacity.
    buf = torch.randn(R, max(CAP, tokens), H, C, device=dev, dtype=torch.float16)
    buf = F.normalize(buf.float(), dim=-1).half()
    return buf[:, :tokens].flatten(2)


def gram(prev, cur, w, wtw):
    def gs(a, b):
        m, n = a.size(1), b.size(1)
        ld = (n + 7) // 8 * 8
        out = torch.empty(R, m, ld, dtype=a.dtype, device=dev)[:, :, :n]
        torch.bmm(a, b.transpose(1, 2), out=out)
        return out.sum(0, dtype=torch.float)

    cross, g = gs(cur, prev), gs(prev, prev)
    sq = torch.linalg.vector_norm(cur, 2, dtype=torch.float).square()
    return torch.stack([sq, torch.dot(w.flatten(), cross.flatten()),
                        torch.dot(wtw.flatten(), g.flatten())]).to("cpu", torch.double)


def gram_f32o(prev, cur, w, wtw):
    def gs(a, b):
        return torch.bmm(a, b.transpose(1, 2), out_dtype=torch.float).sum(0)

    cross, g = gs(cur, prev), gs(prev, prev)
    sq = torch.linalg.vector_norm(cur, 2, dtype=torch.float).square()
    return torch.stack([sq, torch.dot(w.flatten(), cross.flatten()),
                        torch.dot(wtw.flatten(), g.flatten())]).to("cpu", torch.double)


def direct(prev, cur, pp, pc):
    x = prev.view(R, pp, pp, HC).permute(0, 3, 1, 2)  # channels-last NCHW view
    u = F.interpolate(x, size=(pc, pc), mode="bilinear", align_corners=False)
    u = u.permute(0, 2, 3, 1).reshape(R, pc * pc, HC)
    return torch.linalg.vector_norm(cur - u, 2, dtype=torch.float).square().to("cpu",
                                                                                torch.double)


def separable(prev, cur, pp, pc, w1t, g1):
    def along(m, x, p):
        a = m.size(0)
        y = torch.matmul(m, x.reshape(R, p, p * HC))
        return torch.matmul(m, y.reshape(R * a, p, HC)).reshape(R, a * a, HC)

    g = along(g1, prev, pp)
    g.sub_(along(w1t, cur, pc), alpha=2)
    sq = torch.linalg.vector_norm(cur, 2, dtype=torch.float).square()
    return torch.stack([sq, torch.zeros((), device=dev),
                        (g * prev).sum(dtype=torch.float)]).to("cpu", torch.double)


def timed(fn, n=10):
    fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    wall = []
    ev = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e3)
        ev.append(e0.elapsed_time(e1))
    wall.sort()
    ev.sort()
    return wall[n // 2], ev[n // 2]


def main():
    out = {"device": torch.cuda.get_device_name(), "rows": R, "heads": H, "channels": C,
           "checks": []}
    print(f"{out['device']}: rows {R}, {H} heads x {C}, fp16")
    print(f"{'pair':>8} {'variant':>10} {'wall ms':>8} {'events ms':>9}  value")
    for pp, pc in PAIRS:
        prev, cur = unit_keys(pp * pp), unit_keys(pc * pc)
        w = up_weights(pp, pc)
        wtw = w.t() @ w
        eye = torch.eye(pp, device=dev).unsqueeze(0)
        w1t = F.interpolate(eye, size=pc, mode="linear", align_corners=False)[0]
        w1t_h, g1_h = w1t.half(), (w1t @ w1t.t()).half()
        ref = None
        row = {"pair": [pp, pc]}
        variants = {"gram": lambda: gram(prev, cur, w, wtw),
                    "gram_f32o": lambda: gram_f32o(prev, cur, w, wtw),
                    "direct": lambda: direct(prev, cur, pp, pc),
                    "separable": lambda: separable(prev, cur, pp, pc, w1t_h, g1_h)}
        for name, fn in variants.items():
            try:
                r = fn()
                val = float(r[0] - 2 * r[1] + r[2]) if r.numel() == 3 else float(r)
                wall, ev = timed(fn)
            except Exception as e:  # e.g. out_dtype not supported here
                print(f"{pp}->{pc} {name}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
                continue
            ref = ref if ref is not None else val
            row[name] = {"wall_ms": wall, "event_ms": ev, "sum_sq": val}
            print(f"{pp:>3}->{pc:<3} {name:>10} {wall:8.3f} {ev:9.3f}  {val:.6g}"
                  f" (rel {abs(val - ref) / max(abs(ref), 1e-30):.1e})")
        # Per-kernel breakdown of the current variant.
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA,
                                                torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                gram(prev, cur, w, wtw)
            torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=12,
                                          max_name_column_width=60)
        print(table)
        row["gram_profile"] = table
        out["checks"].append(row)
    path = os.path.join(os.environ.get("OUT", "/tmp"), "ams_kv_similarity_profile.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
