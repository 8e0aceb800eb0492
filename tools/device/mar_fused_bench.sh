#!/usr/bin/env bash
# One GPU-machine call for the fused DiffLoss-head kernels (issue #7's MAR speed goals): build
# the CLI and the GPU tests from a snapshot, then, each step under its own timeout and writing
# to $OUT as it goes:
#  1. GPU tests: the fused kernels vs float64 (2x the framework's bf16 error), the reverse
#     diffusion and the MAR loop (graphs == eager, PDL on == off), the existing MAR graph tests;
#  2. `bench mar --head-rows`: the DiffLoss head alone per decoded-token count, CUDA graphs of
#     the module path vs the fused kernels (PDL on/off): time, kernels per diffusion step;
#  3. `bench mar --compare-modules`: the whole loop (MAR-B/L/H b1, MAR-H b16 if time is left),
#     baseline and LazyMAR, fused vs module-path head in the same process: latency, kernels per
#     decoding step, max |token difference|.
# Call used in session 6 (the working tree plus carried paths must stay under 64 MiB: the
# snapshot leaves out ui/, visualization/, CPU tests, other tools; the deps copy drops gmock's
# headers, which nothing includes):
#   S=.tsnap-x; git archive HEAD -- . ':!resources/models' ':!docs' ':!bench' | tar -x -C $S
#   (cd $S && rm -rf ui visualization tests/ui tests/fixtures && find tests -maxdepth 1 \
#     -name '*_test.cpp' -delete && find tools -type f ! -name mar_fused_bench.sh -delete)
#   cp -a .device/deps .device/deps-x && rm -rf .device/deps-x/include/gmock
#   run: cd $S && mkdir -p .device && ln -sfn ../../.device/deps-x .device/deps &&
#        SRC=. DEADLINE_S=300 MAR_STEPS="tests head base huge" bash tools/device/mar_fused_bench.sh
#   (carry [$S, .device/deps-x]; ~125 s build, ~10 s tests, ~35 s head bench per model, ~35 s
#   MAR-B loop, ~75 s MAR-H loop on an H100). To time the row split against 16-row tiles:
#   MAR_STEPS="tests head base base_split" HEAD_ROWS=1,4,5,7,16,32.
# Env: SRC (snapshot, default .), DEADLINE_S (stop starting work, default 540), MAR_STEPS
# (space-separated list of steps to run: tests head base base_split large huge huge16; default
# all), HEAD_ROWS (decoded-token counts of the head bench, default 1,4,5,7,16,48).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/mar_fused.log") 2>&1
T0=$(date +%s); stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
left() { echo $(( ${DEADLINE_S:-540} - ($(date +%s) - T0) )); }
lim() { local want=$1 l; l=$(left); (( l < want )) && echo $(( l > 5 ? l : 5 )) || echo $want; }
want() { [[ " ${MAR_STEPS:-tests head base base_split large huge huge16} " == *" $1 "* ]]; }
SRC=${SRC:-.}; BUILD=${BUILD:-/tmp/build-mar}
date -u; nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
cmake -S "$SRC" -B $BUILD -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF -DVARSCOPE_WERROR=OFF \
  -DVARSCOPE_CUDA_ARCHS=90a -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$PWD/.device/deps" \
  > $OUT/cmake.log 2>&1 || { tail -20 $OUT/cmake.log; exit 1; }
timeout 330 ninja -C $BUILD -j16 varscope-cli varscope_gpu_tests > $OUT/build.log 2>&1 || {
  grep -B2 -A12 -m3 error $OUT/build.log; tail -5 $OUT/build.log; exit 1; }
stamp built
cuobjdump --dump-resource-usage $BUILD/kernels/libvarscope_kernels.a 2>/dev/null | grep -A1 diffloss \
  | grep -E "REG" | sed 's/^ *//' | cut -c1-120 | sort | uniq -c | head -12
CLI=$BUILD/app/cli/varscope-cli

if want tests; then
  timeout $(lim 150) $BUILD/tests/varscope_gpu_tests --gtest_filter='KernelsDiffLoss*:MarGraph*' \
    > $OUT/gpu_tests.log 2>&1
  echo "gpu tests rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[       OK|^\[  FAILED|Failure|\[diffusion|\[MAR loop|what\(\)|CUDA error" \
    $OUT/gpu_tests.log | head -60
  stamp tests
fi
if want head; then
  for M in mar_base mar_huge; do
    timeout $(lim 90) $CLI bench mar --models $M --device cuda --precision bf16 --cfg 3.0 \
      --head-rows ${HEAD_ROWS:-1,4,5,7,16,48} --json $OUT/head_${M}.json --force 2>&1 | grep -v '^\[' | tail -30
  done
  stamp head
fi
bench() {  # model batch timeout repeat [json suffix]
  local M=$1 B=$2 T=$3 R=$4 SUF=${5:-}
  (( $(left) < 30 )) && { stamp "skip $M b$B$SUF (no time)"; return; }
  timeout $(lim $T) $CLI bench mar --models $M --methods ${METHODS:-baseline,lazymar} --device cuda \
    --precision bf16 --batch $B --num-iter 64 --cfg 3.0 --warmup 1 --repeat $R --compare-modules \
    --json "$OUT/loop_${M}_b${B}${SUF}.json" --force 2>&1 | grep -v '^\[' | tail -24
  stamp "bench $M b$B$SUF"
}
want base && bench mar_base 1 100 3
# The 16-row tiles per CTA instead of the default 8-row split (VARSCOPE_DIFF_ROW_SPLIT=0), baseline only.
want base_split && VARSCOPE_DIFF_ROW_SPLIT=0 METHODS=baseline bench mar_base 1 60 3 _no_row_split
want huge && bench mar_huge 1 110 2
want huge16 && bench mar_huge 16 120 1
want large && bench mar_large 1 90 2
stamp done
