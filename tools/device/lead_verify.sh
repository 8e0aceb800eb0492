#!/usr/bin/env bash
# One GPU-machine call that verifies HEAD: build the CLI and the GPU tests from a snapshot, run
# every GPU test, then (time left) MAR loops at larger batches, each under its own timeout,
# writing to $OUT as it goes.
# Call (snapshot as in mar_fused_bench.sh; carry [$S, .device/deps-x]):
#   cd $S && mkdir -p .device && ln -sfn ../../.device/deps-x .device/deps &&
#   DEADLINE_S=350 bash tools/device/lead_verify.sh
# Env: DEADLINE_S (stop starting work), MAR_RUNS
# ("model:batch:methods[:repeat[:tag[:VAR=V,...[:--flag,value,...]]]] ..."; methods comma-separated
# presets or JSON files; tag names the JSON; VAR=V set and flags added for that run only), MAR_REPEAT (timed runs each, 1), HEAD_ROWS (e.g.
# "1,4,7": bench mar --head-rows for MAR-B after the tests), GTEST_FILTER (default: all
# GPU tests), VAR_SPEED ("depths:batches:our-precisions", e.g. "30:1,16:tf32,bf16-autocast":
# tools/parity/var_speed.py against the official VAR code carried in .device/varref, never
# committed; runs after the GPU tests, before MAR_RUNS), MAR_FLAGS (more `bench mar` flags for every
# MAR run, e.g. --split), MAR_TIMEOUT (seconds per MAR run, 120).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/lead_verify.log") 2>&1
T0=$(date +%s); stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
left() { echo $(( ${DEADLINE_S:-350} - ($(date +%s) - T0) )); }
lim() { local want=$1 l; l=$(left); (( l < want )) && echo $(( l > 5 ? l : 5 )) || echo $want; }
BUILD=${BUILD:-/tmp/build-verify}
date -u; nvidia-smi -L; git log -1 --format='%H %s' 2>/dev/null | cut -c1-100
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
cmake -S . -B $BUILD -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF -DVARSCOPE_WERROR=OFF \
  -DVARSCOPE_CUDA_ARCHS=90a -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$PWD/.device/deps" \
  > $OUT/cmake.log 2>&1 || { tail -20 $OUT/cmake.log; exit 1; }
timeout $(lim 240) ninja -C $BUILD -j16 varscope-cli varscope_gpu_tests > $OUT/build.log 2>&1 || {
  grep -B2 -A12 -m3 error $OUT/build.log; tail -5 $OUT/build.log; exit 1; }
stamp built
timeout $(lim 180) $BUILD/tests/varscope_gpu_tests --gtest_filter="${GTEST_FILTER:-*}" > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc=$?"
grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED|^\[  SKIPPED|Failure|\[MAR graphs\]|what\(\)|CUDA error" $OUT/gpu_tests.log | head -40
stamp tests
if [[ -n "${VAR_SPEED:-}" ]]; then
  IFS=: read -r D Bs P <<< "$VAR_SPEED"
  PYTHONUNBUFFERED=1 timeout $(lim 200) python3 tools/parity/var_speed.py --official "$PWD/.device/varref" \
    --cli $BUILD/app/cli/varscope-cli --work /tmp/speed --out $OUT/var_speed.json --depths $D \
    --batches $Bs --ours-precisions "$P" 2>&1 | grep -v "^+ "
  stamp "var speed"
fi
if [[ -n "${HEAD_ROWS:-}" ]]; then
  timeout $(lim 90) $BUILD/app/cli/varscope-cli bench mar --models mar_base --device cuda --precision bf16 \
    --head-rows $HEAD_ROWS --json $OUT/head_mar_base.json --force 2>&1 | grep -v '^\['
  stamp "head bench"
fi
for run in ${MAR_RUNS:-}; do
  IFS=: read -r M B METH REP TAG ENVS FLAGS <<< "$run"
  (( $(left) < 30 )) && { stamp "skip $run (no time)"; continue; }
  timeout $(lim ${MAR_TIMEOUT:-120}) env ${ENVS//,/ } $BUILD/app/cli/varscope-cli bench mar --models $M --methods $METH --device cuda \
    --precision bf16 --batch $B --num-iter 64 --cfg 3.0 --warmup 1 --repeat ${REP:-${MAR_REPEAT:-1}} ${MAR_FLAGS:-} ${FLAGS//,/ } \
    --json $OUT/mar_${M}_b${B}${TAG:+_$TAG}.json --force 2>&1 | grep -v '^\['
  stamp "mar $run"
done
stamp done
