#!/usr/bin/env bash
# One GPU-machine run for issue #6 (CUDA graphs, batch-1 speed, tokens vs the official VAR): build
# the CLI and the GPU tests from a clean snapshot, run the GPU tests (graph == eager tokens for
# the baseline and the graph-safe accelerators among them), compare with the official VAR sampler
# (tools/parity/var_speed.py: fp32, bf16 and bf16-autocast against the official fp32 and bf16
# autocast runs, same weights, tokens per scale), then `bench e2e` at the 256px schedule: the
# baseline and each accelerator with CUDA graphs and eagerly. Results land in $OUT as they come.
# Needs (carried): .device/deps (packaging/device-deps.sh), .device/varref (a local copy of the
# official code's models/ and dist.py, never committed); SRC = a `git archive` snapshot.
# Knobs: DEPTHS (30), BATCHES (1,16), OURS_PRECISIONS, DEADLINE / SPEED_TIMEOUT (s), E2E_METHODS,
# SKIP_TESTS, SKIP_E2E.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/graphs_bench.log") 2>&1
T0=$(date +%s); stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
SRC=${SRC:-.}
ROOT=$PWD
[ -d "$SRC/resources/models" ] || { rm -rf "$SRC/resources"; ln -s "$ROOT/resources" "$SRC/resources"; }
nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
cmake -S "$SRC" -B /tmp/build -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF -DVARSCOPE_WERROR=OFF \
  -DVARSCOPE_CUDA_ARCHS=90a -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$ROOT/.device/deps" \
  > /tmp/cmake.log 2>&1 || { tail -20 /tmp/cmake.log; exit 1; }
ninja -C /tmp/build -j16 varscope-cli varscope_gpu_tests > /tmp/build.log 2>&1 || { grep -A12 -m3 error /tmp/build.log; exit 1; }
stamp built
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout ${TESTS_TIMEOUT:-150} /tmp/build/tests/varscope_gpu_tests --gtest_filter="${GTEST_FILTER:-*}" \
    > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|Failure|Expected|Which is|scale [0-9]" "$OUT/gpu_tests.log" | head -40
  stamp tested
fi
CLI=/tmp/build/app/cli/varscope-cli
P256=1,2,3,4,5,6,8,10,13,16
CSLA='{"sparvar": {"enabled": true, "cs4a_fraction": 0}}'
# Accelerators first (short), then the comparison with the official code (long, timed out).
if [ -z "${SKIP_E2E:-}" ]; then
  timeout ${E2E_TIMEOUT:-120} $CLI bench e2e --random 30 --patch-nums $P256 --device cuda --precision bf16 \
    --class 207 --seed 0 --warmup 2 --repeat 5 --json "$OUT/e2e_d30_256_b1_bf16_accel_graphs.json" --methods \
    "${E2E_METHODS:-baseline;baseline@eager;skip;skip@eager;fastvar;fastvar@eager;lazyvar;lazyvar@eager;$CSLA;$CSLA@eager;sparvar}" \
    2>&1 | tail -14
  stamp e2e-256
fi
# Whatever time is left before DEADLINE (s since the start) goes to the comparison.
SPEED_TIMEOUT=${SPEED_TIMEOUT:-$(( ${DEADLINE:-520} - ($(date +%s) - T0) ))}
echo "speed comparison: ${SPEED_TIMEOUT} s at most"
PYTHONUNBUFFERED=1 timeout $SPEED_TIMEOUT python3 "$SRC/tools/parity/var_speed.py" \
  --official "$ROOT/.device/varref" --cli "$CLI" --work /tmp/speed --out "$OUT/var_speed.json" \
  --depths ${DEPTHS:-30} --batches ${BATCHES:-1,16} --ours-precisions "${OURS_PRECISIONS:-bf16-autocast,bf16,fp32}" --emulate \
  2>&1 | grep -v "^+ "
stamp speed
