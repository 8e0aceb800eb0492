#!/usr/bin/env python3
"""fp32 sgemm vs torch's dynamic int8 linear (FBGEMM) at the embedded VAR-d16's layer shapes, 1 thread.

Times per-process CPU time (time.process_time), so a machine shared with builds still gives the
CPU's own rate. Used for bench/results/2026-11-25-cpu/emoji_var_cpu_floor.md.
Usage: .venv/bin/python tools/bench/cpu_int8_linear_bench.py
"""
import time

import torch

torch.set_num_threads(1)


def cpu_ms(fn, n=20):
    for _ in range(3):
        fn()
    t = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - t) / n * 1e3


def main():
    total_fp32 = total_int8 = 0.0
    # rows: 2 x tokens of a scale (CFG halves); (K, N): qkv, proj, fc1, fc2 of a width-256 block
    for rows in (512, 338, 200, 128, 72, 50, 32, 18, 8, 2):
        for k, n in ((256, 768), (256, 256), (256, 1024), (1024, 256)):
            x = torch.randn(rows, k)
            lin = torch.nn.Linear(k, n)
            w = lin.weight.detach()
            q = torch.ao.nn.quantized.dynamic.Linear(k, n)
            qw = torch.quantize_per_channel(w, (w.abs().amax(1) / 127).double(),
                                            torch.zeros(n, dtype=torch.long), 0, torch.qint8)
            q.set_weight_bias(qw, lin.bias.detach())
            with torch.no_grad():
                t_fp32 = min(cpu_ms(lambda: lin(x)) for _ in range(3))
                t_int8 = min(cpu_ms(lambda: q(x)) for _ in range(3))
            total_fp32 += t_fp32
            total_int8 += t_int8
            flop = 2 * rows * k * n
            print(f"{rows:4d} x {k:4d} -> {n:4d}: fp32 {t_fp32:.3f} ms ({flop / t_fp32 / 1e6:.1f} GFLOP/s), "
                  f"int8 {t_int8:.3f} ms ({flop / t_int8 / 1e6:.1f}), fp32/int8 {t_fp32 / t_int8:.2f}")
    print(f"sum: fp32 {total_fp32:.1f} ms, int8 {total_int8:.1f} ms")


if __name__ == "__main__":
    main()
