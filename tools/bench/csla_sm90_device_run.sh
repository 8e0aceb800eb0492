#!/usr/bin/env bash
# One GPU-machine call for the experimental sm_90a CSLA kernel (attention variant 3, issue #6):
# build the GPU tests and the CLI for sm_90a from a clean snapshot, run the sm90 kernel test (and,
# if it fails, again with the V descriptor's strides swapped, to tell a descriptor orientation
# error from anything else), the existing kernel GPU tests, FlexAttention's timing, then
# `bench attention` (every sm90 implementation side by side with v1/v2, flash, cuDNN, bool mask).
# Every step has a timeout so that the call ends inside the lease's 600 s; logs land in $OUT.
#   SRC=.ksnap (git archive of the commit to build), carried .device/deps (packaging/device-deps.sh)
# Knobs: BENCH_ITERS (50), SKIP_FLEX=1, SKIP_OTHER_TESTS=1, BENCH_CONFIGS (all), DEADLINE_S (540).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
T0=$(date +%s)
DEADLINE=${DEADLINE_S:-540}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
SRC=${SRC:-.}
[ -d "$SRC/resources" ] || ln -s "$PWD/resources" "$SRC/resources"
echo "source: $SRC ($(cat "$SRC/.commit" 2>/dev/null || echo working tree))"
nvidia-smi -L
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
cmake -S "$SRC" -B /tmp/build -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF \
  -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$PWD/.device/deps" \
  -DVARSCOPE_WERROR=OFF -DVARSCOPE_CUDA_ARCHS=90a > /tmp/cmake.log 2>&1 || { tail -30 /tmp/cmake.log; exit 1; }
stamp configured
timeout 300 ninja -C /tmp/build -j16 varscope_gpu_tests varscope-cli > /tmp/build.log 2>&1 || {
  grep -B2 -A12 -m3 "error" /tmp/build.log; tail -5 /tmp/build.log; exit 1; }
stamp built
cuobjdump --dump-resource-usage /tmp/build/kernels/libvarscope_kernels.a 2>/dev/null \
  | grep -A1 "csla_sm90" | grep -E "Function|REG" | sed 's/^ *//' | cut -c1-160

T=/tmp/build/tests/varscope_gpu_tests
timeout 90 $T --gtest_filter='KernelsCslaSm90*' > "$OUT/gpu_tests_sm90.log" 2>&1
rc=$?; echo "sm90 test rc=$rc"
grep -E "^\[  (PASSED|FAILED|SKIPPED|     OK) |Failure|sm90 .* vs torch|not deterministic|empty rows|lse|what\(\)|CUDA error" "$OUT/gpu_tests_sm90.log" | head -30
if [ $rc -ne 0 ]; then
  VARSCOPE_SM90_VDESC_SWAP=1 timeout 90 $T --gtest_filter='KernelsCslaSm90*' > /tmp/swap.log 2>&1
  echo "sm90 test with VDESC_SWAP=1 rc=$?"
  grep -E "^\[  (PASSED|FAILED) |sm90 .* vs torch|CUDA error" /tmp/swap.log | head -12
  cp /tmp/swap.log "$OUT/gpu_tests_sm90_swap.log"
fi
stamp sm90-tested
if [ "${SKIP_OTHER_TESTS:-0}" != 1 ]; then
  timeout 120 $T --gtest_filter='Kernels*:-KernelsCslaSm90*' > "$OUT/gpu_tests_kernels.log" 2>&1
  echo "other kernel GPU tests rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" "$OUT/gpu_tests_kernels.log" | head -20
  stamp tested
fi
ITERS=${BENCH_ITERS:-50}
if [ "${SKIP_FLEX:-0}" != 1 ] && [ "$(left)" -gt 200 ]; then
  PYTHONUNBUFFERED=1 timeout 150 python3 "$SRC/tools/bench/flex_attention_bench.py" --iters "$ITERS" \
    --out "$OUT/flex.json" > /tmp/flex.log 2>&1
  echo "flex rc=$?"; grep -E "^flex|Error" /tmp/flex.log | head -10
  stamp flex
fi
FLEX_ARG=(); [ -f "$OUT/flex.json" ] && FLEX_ARG=(--flex-json "$OUT/flex.json")
CONFIGS=(); [ -n "${BENCH_CONFIGS:-}" ] && CONFIGS=(--configs $BENCH_CONFIGS)
B=$(left); [ "$B" -gt 20 ] || { echo "no time left for the bench"; exit 0; }
timeout "$B" /tmp/build/app/cli/varscope-cli bench attention --iters "$ITERS" "${CONFIGS[@]}" \
  "${FLEX_ARG[@]}" --json "$OUT/attention.json"
echo "bench rc=$?"
stamp attention
echo DONE
