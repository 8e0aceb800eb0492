#!/usr/bin/env bash
# One GPU-machine session for the kernels issue (#6): build the GPU tests and the CLI for sm_90a,
# run the kernel GPU tests, time FlexAttention (Python), then `bench attention` and `bench cs4a`.
# Everything lands in $OUT. Needs the carried .device/deps (packaging/device-deps.sh).
# Knobs: SKIP_FLEX=1, SKIP_TESTS=1, BENCH_ITERS (default 50), GTEST_FILTER (default Kernels*).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/kernels_run.log") 2>&1
T0=$(date +%s)
# The shared checkout is edited by several people at once; SRC may point at a clean snapshot of
# a commit (git archive HEAD, carried), which then builds instead of the working tree.
SRC=${SRC:-.}
[ -d "$SRC/resources" ] || ln -s "$PWD/resources" "$SRC/resources"
echo "source: $SRC"
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi -L
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
cmake -S "$SRC" -B /tmp/build -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF \
  -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$PWD/.device/deps" \
  -DVARSCOPE_WERROR=OFF -DVARSCOPE_CUDA_ARCHS=90a > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
stamp configured
ninja -C /tmp/build -j16 varscope_gpu_tests varscope-cli > "$OUT/build.log" 2>&1 || { grep -B2 -A12 -m3 "error" "$OUT/build.log"; exit 1; }
stamp built
cuobjdump --dump-resource-usage /tmp/build/kernels/libvarscope_kernels.a 2>/dev/null | grep -E "Function|REG" | head -4
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  /tmp/build/tests/varscope_gpu_tests --gtest_filter="${GTEST_FILTER:-Kernels*}" > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|Failure|error|Expected|Which is|kernel .* vs torch" "$OUT/gpu_tests.log" | head -40
  stamp tested
fi
ITERS=${BENCH_ITERS:-50}
if [ "${SKIP_FLEX:-0}" != 1 ]; then
  PYTHONUNBUFFERED=1 timeout 200 python3 "$SRC/tools/bench/flex_attention_bench.py" --iters "$ITERS" \
    --out "$OUT/flex.json" > "$OUT/flex.log" 2>&1
  echo "flex rc=$?"; grep -E "^flex|Error" "$OUT/flex.log" | head -10
  stamp flex
fi
CLI=/tmp/build/app/cli/varscope-cli
FLEX_ARG=(); [ -f "$OUT/flex.json" ] && FLEX_ARG=(--flex-json "$OUT/flex.json")
$CLI bench attention --iters "$ITERS" "${FLEX_ARG[@]}" --json "$OUT/attention.json"
stamp attention
$CLI bench cs4a --iters "$ITERS" --json "$OUT/cs4a.json"
stamp cs4a
echo DONE
