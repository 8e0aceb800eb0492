#!/usr/bin/env bash
# One GPU-machine run for LazyMAR (issue #7): build the CLI from a clean snapshot, then
# `varscope-cli bench mar` for MAR-B/L/H with random weights at 64 steps, batch 1, CFG 3 (linear),
# 100 diffusion steps: baseline vs LazyMAR (paper defaults: start 5, τ 9, 16 % of the decoder
# positions computed), latency medians, FLOPs and their ratios from the same run. Results in $OUT.
# MAR_MODELS lists model:timeout_s pairs (batch-1 runs take ~10 s and more each: the DiffLoss head is launch-bound).
# Needs (carried): .device/deps (packaging/device-deps.sh); SRC = a `git archive` snapshot.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/mar_bench.log") 2>&1
T0=$(date +%s); stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
SRC=${SRC:-.}
nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
cmake -S "$SRC" -B ${BUILD:-/tmp/build-mar} -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF -DVARSCOPE_WERROR=OFF \
  -DVARSCOPE_CUDA_ARCHS=90a -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$PWD/.device/deps" \
  > /tmp/cmake.log 2>&1 || { tail -20 /tmp/cmake.log; exit 1; }
ninja -C ${BUILD:-/tmp/build-mar} -j16 varscope-cli > /tmp/build.log 2>&1 || { grep -A12 -m3 error /tmp/build.log; exit 1; }
stamp built
CLI=${BUILD:-/tmp/build-mar}/app/cli/varscope-cli
PREC=${MAR_PRECISION:-bf16}
for MT in ${MAR_MODELS:-mar_base:200 mar_huge:300 mar_large:250}; do
  M=${MT%%:*}; TL=${MT#*:}
  timeout $TL $CLI bench mar --models $M --methods ${MAR_METHODS:-baseline,lazymar} \
    --device cuda --precision $PREC --batch ${MAR_BATCH:-1} --num-iter 64 --cfg 3.0 \
    --warmup 1 --repeat ${MAR_REPEAT:-3} ${MAR_SPLIT:+--split} --json "$OUT/mar_${M}_64_b${MAR_BATCH:-1}_${PREC}.json" 2>&1 | tail -8
  stamp "$M"
done
