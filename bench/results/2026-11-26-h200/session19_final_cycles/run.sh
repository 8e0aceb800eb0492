#!/usr/bin/env bash
# Session 19 final: side by side with the ratios in cycles.
set -u
S=/tmp/s19capi; mkdir -p $S; PIDS=()
for f in tools/bench/csla_sm90_capi.cu kernels/cuda/csla_attention_sm90_d64.cu kernels/cuda/csla_attention_sm90_d128.cu kernels/block_list_order.cpp; do
  timeout 240 nvcc -O3 -std=c++17 -Xcompiler -fPIC -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I. -c $f -o $S/$(basename $f).o > $S/$(basename $f).log 2>&1 & PIDS+=($!)
done
wait "${PIDS[@]}"; nvcc -shared $S/*.o -o $S/lib.so || { cat $S/*.log | tail; exit 1; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv
mkdir -p "$OUT"
PYTHONUNBUFFERED=1 timeout 400 python3 tools/bench/csla_vs_torch.py --lib $S/lib.so --blocks 64 --iters 100 \
  --clocks 1 --commit "$(git rev-parse --short HEAD 2>/dev/null)+wt" --out "$OUT/side_by_side_cycles.json" 2>&1 | grep -vi warn | tee "$OUT/side_by_side_cycles.log" | tail -8
