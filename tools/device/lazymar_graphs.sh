#!/usr/bin/env bash
# One GPU-machine call for LazyMAR under whole-step CUDA graphs (issue #7, helper "graphs"): build
# the CLI and the GPU tests from a snapshot, run the MAR graph / LazyMAR / DiffLoss GPU tests,
# then `bench mar` MAR-B baseline vs LazyMAR with --compare-hook-graphs (LazyMAR timed again with
# its transformer eager, the previous path, in the same process), each under its own timeout.
# Call (snapshot as in common.md; carry [$S, .device/deps-x]):
#   cd $S && mkdir -p .device && ln -sfn ../../.device/deps-x .device/deps &&
#   DEADLINE_S=300 bash tools/device/lazymar_graphs.sh
# Env: DEADLINE_S (stop starting work), GTEST_FILTER, MAR_RUNS ("model:batch:methods:repeat ...").
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/lazymar_graphs.log") 2>&1
T0=$(date +%s); stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
left() { echo $(( ${DEADLINE_S:-300} - ($(date +%s) - T0) )); }
lim() { local want=$1 l; l=$(left); (( l < want )) && echo $(( l > 5 ? l : 5 )) || echo $want; }
BUILD=${BUILD:-/tmp/build-lg}
date -u; nvidia-smi -L; git log -1 --format='%H %s' 2>/dev/null | cut -c1-100
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
cmake -S . -B $BUILD -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF -DVARSCOPE_WERROR=OFF \
  -DVARSCOPE_CUDA_ARCHS=90a -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$PWD/.device/deps" \
  > $OUT/cmake.log 2>&1 || { tail -20 $OUT/cmake.log; exit 1; }
timeout $(lim 240) ninja -C $BUILD -j16 varscope-cli varscope_gpu_tests > $OUT/build.log 2>&1 || {
  grep -B2 -A12 -m3 error $OUT/build.log; tail -5 $OUT/build.log; exit 1; }
stamp built
timeout $(lim 150) $BUILD/tests/varscope_gpu_tests \
  --gtest_filter="${GTEST_FILTER:-MarGraph*:*LazyMar*:HeadMlp*:KernelsDiffLoss*}" > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc=$?"
grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED|^\[  SKIPPED|^\[       OK|Failure|\[MAR graphs\]|what\(\)|CUDA error" \
  $OUT/gpu_tests.log | head -60
stamp tests
for run in ${MAR_RUNS:-mar_base:1:baseline,lazymar:3 mar_base:16:baseline,lazymar:1}; do
  IFS=: read -r M B METH R <<< "$run"
  (( $(left) < 25 )) && { stamp "skip $run (no time)"; continue; }
  tag=$(basename "${METH##*,}" .json)
  timeout $(lim 120) $BUILD/app/cli/varscope-cli bench mar --models $M --methods $METH --device cuda \
    --precision bf16 --batch $B --num-iter 64 --cfg 3.0 --warmup 1 --repeat $R --compare-hook-graphs \
    --json $OUT/mar_${M}_b${B}_${tag}.json --force 2>&1 | grep -v '^\['
  stamp "mar $run"
done
stamp done
