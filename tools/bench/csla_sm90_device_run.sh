#!/usr/bin/env bash
# One GPU-machine call for the sm_90a CSLA and CS4A kernels (issue #6): build the GPU tests and
# the CLI for sm_90a from a clean snapshot; the sm90 kernel tests (CSLA and CS4A, each kernel the
# dispatch runs); every other GPU test (the whole varscope_gpu_tests binary: kernels under the
# default, SparVAR, AMS-KV, VAR/MAR graphs); FlexAttention's timing; `bench attention` (the sm90
# kernel side by side with the sm_80 one, flash, cuDNN, bool mask, Flex) and `bench cs4a`. The
# attention bench runs only when the sm90 tests passed, so a wrong or hanging kernel cannot take
# the timings with it. Every step has a timeout so that the call ends inside the lease's 600 s;
# logs land in $OUT.
#   SRC=.tsnap-x (git archive of the commit to build), carried .device/deps (packaging/device-deps.sh)
# (The probe that timed every sm90 schedule, and its per-item trace, were deleted with the
# schedules that were never the default: bench/results/pruned-kernels.md.)
# Knobs: BENCH_ITERS (50), SKIP_FLEX=1, SKIP_SIDE=1 (csla_vs_torch.py; SIDE_ITERS, 100;
# SIDE_CLOCKS, 2: seconds each contestant runs back to back for its SM clock and power, 0 = off),
# CLI_CLOCKS (1: seconds `bench attention --clocks` holds each contestant; 0 = off),
# SKIP_OTHER_TESTS=1, SKIP_ATTENTION=1, SKIP_CS4A=1,
# SM90_FILTER (gtest filter of the first test step, default *Sm90*),
# BENCH_CONFIGS (all), DEADLINE_S (540).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
T0=$(date +%s)
DEADLINE=${DEADLINE_S:-540}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
SRC=${SRC:-.}
[ -e "$SRC/resources" ] || ln -s "$PWD/resources" "$SRC/resources"
echo "source: $SRC ($(cat "$SRC/.commit" 2>/dev/null || echo working tree))"
date -u
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
cmake -S "$SRC" -B /tmp/build -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF \
  -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$PWD/.device/deps" \
  -DVARSCOPE_WERROR=OFF -DVARSCOPE_CUDA_ARCHS=90a > /tmp/cmake.log 2>&1 || { tail -30 /tmp/cmake.log; exit 1; }
stamp configured
timeout 300 ninja -C /tmp/build -j16 varscope_gpu_tests varscope-cli > /tmp/build.log 2>&1 || {
  grep -B2 -A12 -m3 "error" /tmp/build.log; tail -5 /tmp/build.log; exit 1; }
stamp built
LIB=/tmp/build/kernels/libvarscope_kernels.a
cuobjdump --dump-resource-usage "$LIB" 2>/dev/null \
  | grep -A1 "sm90_attention" | grep -E "Function|REG" | sed 's/^ *//' | cut -c1-160
# Instruction counts of each sm90 kernel (template <head dim, stages, gathered>) as built.
for f in $(cuobjdump -sass "$LIB" 2>/dev/null | grep -oE "Function : _ZN[^ ]*sm90_attention_kernel[^ ]*" | awk '{print $3}' | sort -u); do
  cuobjdump -sass -fun "$f" "$LIB" 2>/dev/null > /tmp/sass.txt
  echo "$f: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' /tmp/sass.txt) instructions, $(grep -c LDGSTS /tmp/sass.txt) LDGSTS, $(grep -c HGMMA /tmp/sass.txt) HGMMA, $(grep -c 'BAR' /tmp/sass.txt) BAR"
done

T=/tmp/build/tests/varscope_gpu_tests
timeout 150 $T --gtest_filter="${SM90_FILTER:-*Sm90*}" > "$OUT/gpu_tests_sm90.log" 2>&1
echo "sm90 tests rc=$?"
grep -E "^\[  (PASSED|FAILED|SKIPPED|     OK) |Failure|sm90 .* vs torch|not deterministic|empty rows|: lse|what\(\)|CUDA error" "$OUT/gpu_tests_sm90.log" | head -40
SM90_OK=1
grep -q "^\[       OK \] KernelsCslaSm90.BlockSparseMatchesReference " "$OUT/gpu_tests_sm90.log" || SM90_OK=0
echo "sm90 CSLA test passed: $SM90_OK"
stamp sm90-tested
if [ "${SKIP_OTHER_TESTS:-0}" != 1 ]; then
  timeout 120 $T --gtest_filter='-*Sm90*' > "$OUT/gpu_tests_all.log" 2>&1
  echo "all other GPU tests rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[       OK|tests? from .* ran" "$OUT/gpu_tests_all.log" | head -60
  stamp tested
fi
ITERS=${BENCH_ITERS:-50}
if [ "${SKIP_FLEX:-0}" != 1 ] && [ "$(left)" -gt 200 ]; then
  PYTHONUNBUFFERED=1 timeout 150 python3 "$SRC/tools/bench/flex_attention_bench.py" --iters "$ITERS" \
    --out "$OUT/flex.json" > /tmp/flex.log 2>&1
  echo "flex rc=$?"; grep -E "^flex|Error" /tmp/flex.log | head -10
  stamp flex
fi
# Our default kernel, Flex, flash and cuDNN in one Python process, call after call
# (tools/bench/csla_vs_torch.py; our kernel through the C entry point csla_sm90_capi.cu).
if [ "${SKIP_SIDE:-0}" != 1 ] && [ "$(left)" -gt 200 ]; then
  PIDS=()  # a bare `wait` would also wait for the tee above, which never ends
  for u in capi csla_attention_sm90_d64 csla_attention_sm90_d128 block_list_order; do
    f="$SRC/kernels/cuda/$u.cu"; [ "$u" = capi ] && f="$SRC/tools/bench/csla_sm90_capi.cu"
    [ "$u" = block_list_order ] && f="$SRC/kernels/block_list_order.cpp"
    timeout 240 nvcc -O3 -std=c++17 -Xcompiler -fPIC -gencode=arch=compute_90a,code=sm_90a \
      --expt-relaxed-constexpr -I"$SRC" -c "$f" -o "/tmp/capi_$u.o" > "/tmp/capi_$u.log" 2>&1 &
    PIDS+=($!)
  done
  wait "${PIDS[@]}"
  nvcc -shared /tmp/capi_*.o -o /tmp/libvarscope_csla_capi.so > /tmp/capi_link.log 2>&1 \
    || cat /tmp/capi_*.log | tail -20
  PYTHONUNBUFFERED=1 timeout 220 python3 "$SRC/tools/bench/csla_vs_torch.py" \
    --lib /tmp/libvarscope_csla_capi.so --iters "${SIDE_ITERS:-100}" --token-flex --partial-flex \
    --clocks "${SIDE_CLOCKS:-2}" \
    --commit "$(cat "$SRC/.commit" 2>/dev/null)" --out "$OUT/side_by_side.json" \
    > "$OUT/side_by_side.log" 2>&1
  echo "side by side rc=$?"; grep -vi "warn" "$OUT/side_by_side.log" | tail -10
  stamp side-by-side
fi
FLEX_ARG=(); [ -f "$OUT/flex.json" ] && FLEX_ARG=(--flex-json "$OUT/flex.json")
CONFIGS=(); [ -n "${BENCH_CONFIGS:-}" ] && CONFIGS=(--configs $BENCH_CONFIGS)
CLI=/tmp/build/app/cli/varscope-cli
B=$(left); [ "$B" -gt 20 ] || { echo "no time left for the bench"; exit 0; }
[ "$SM90_OK" = 1 ] || echo "bench attention left out: the sm90 CSLA test did not pass"
if [ "${SKIP_ATTENTION:-0}" != 1 ] && [ "$SM90_OK" = 1 ]; then
  timeout "$B" $CLI bench attention --iters "$ITERS" "${CONFIGS[@]}" \
    "${FLEX_ARG[@]}" --clocks "${CLI_CLOCKS:-1}" --json "$OUT/attention.json"
  echo "bench attention rc=$?"
  stamp attention
fi
if [ "${SKIP_CS4A:-0}" != 1 ]; then
  B=$(left); [ "$B" -gt 15 ] || { echo "no time left for cs4a"; exit 0; }
  timeout "$B" $CLI bench cs4a --iters "$ITERS" "${CONFIGS[@]}" --json "$OUT/cs4a.json"
  echo "bench cs4a rc=$?"
  stamp cs4a
fi
echo DONE
