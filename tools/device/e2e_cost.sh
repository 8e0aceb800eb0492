#!/usr/bin/env bash
# One GPU-machine call for issue #30: build the CLI and the GPU tests from a snapshot
# (/work/main/.device/snap.sh), run the GPU tests (GPU_TESTS: a gtest filter, default all; CPU_TESTS:
# a filter of the CPU suite to run there too, default none), then
# `varscope-cli bench e2e` with its per-step cost model for VAR-d30 (random weights) on the
# 13-scale 1024x1024 schedule in bf16, for each batch in BATCHES (default "1 8"). Each step is
# skipped once the call has run BUDGET_S seconds (default 480), so the call ends inside its
# limit. Logs and JSON land in $OUT (at most 8 files come back).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/e2e_cost.log") 2>&1
T0=$(date +%s); elapsed() { echo $(( $(date +%s) - T0 )); }
stamp() { echo "[$(elapsed) s] $*"; }
left() { [ "$(elapsed)" -lt "${BUDGET_S:-480}" ]; }
BUILD=${BUILD:-/tmp/build}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv
cmake -S . -B "$BUILD" -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF \
  -DVARSCOPE_WERROR=OFF -DVARSCOPE_CUDA_ARCHS=90a -DVARSCOPE_PYTHON="$(command -v python3)" \
  -DCMAKE_PREFIX_PATH="$PWD/.device/deps" > /tmp/cmake.log 2>&1 || { tail -20 /tmp/cmake.log; exit 1; }
ninja -C "$BUILD" -j16 varscope-cli varscope_gpu_tests ${CPU_TESTS:+varscope_tests} \
  > /tmp/build.log 2>&1 || { grep -B2 -A12 -m5 "error" /tmp/build.log; exit 1; }
stamp built
if [ -n "${CPU_TESTS:-}" ]; then  # a gtest filter of the CPU suite, run here too
  "$BUILD/tests/varscope_tests" --gtest_filter="$CPU_TESTS" > "$OUT/cpu_tests.log" 2>&1
  echo "cpu tests rc=$?"; grep -E "^\[  FAILED  \]|tests ran|PASSED" "$OUT/cpu_tests.log" | head
fi
timeout "${TEST_TIMEOUT_S:-180}" "$BUILD/tests/varscope_gpu_tests" --gtest_filter="${GPU_TESTS:-*}" \
  > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran" "$OUT/gpu_tests.log" | head -30
stamp tested
CLI="$BUILD/app/cli/varscope-cli"
P1024=1,2,4,6,8,12,16,20,24,32,40,48,64
for B in ${BATCHES:-1 8}; do
  left || { stamp "batch $B skipped (budget)"; continue; }
  methods=${METHODS:-"baseline;skip;fastvar;sparvar;lazyvar;ams_kv;sparvar+skip;fastvar+ams_kv"}
  [ "$B" = 1 ] && methods=${METHODS_B1:-$methods}
  timeout $(( ${BUDGET_S:-480} + 40 - $(elapsed) )) "$CLI" bench e2e --random 30 \
    --patch-nums $P1024 --device cuda --precision bf16 --batch "$B" --seed 0 \
    --methods "$methods" --warmup "${WARMUP:-1}" --repeat "${REPEAT:-3}" \
    --json "$OUT/e2e_d30_1024x13_b${B}_bf16.json" > "$OUT/e2e_b${B}.txt" 2> "$OUT/e2e_b${B}.err"
  echo "bench batch $B rc=$?"; tail -3 "$OUT/e2e_b${B}.err"
  stamp "e2e batch $B"
done
for B in ${BATCHES:-1 8}; do [ -f "$OUT/e2e_b${B}.txt" ] && tail -14 "$OUT/e2e_b${B}.txt"; done
