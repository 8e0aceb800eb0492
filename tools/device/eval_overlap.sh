#!/usr/bin/env bash
# One GPU-machine call for issue #34 (generation + scoring >= 90 % of generation alone): build
# the CLI and the GPU tests from a snapshot, run the overlap GPU test (EvalOverlapGpu.*: the
# overlapped shards equal the inline ones on CUDA), then `varscope-cli bench eval` on
# tools/device/configs/eval_overlap_d30.json (VAR-d30 random weights, 256², bf16, batch 64,
# 4 seeds, baseline + skip2): images/s of generation alone, + inline scoring, + overlapped
# scoring, once with the manifest's own metrics (PSNR/SSIM/token agreement) and once with
# --stand-in-metrics (also the FID Inception, synthetic weights, and a random emoji network).
# Logs and JSON land in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/eval_overlap.log") 2>&1
BUILD=${BUILD:-/tmp/build}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv
cmake -S . -B "$BUILD" -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF \
  -DVARSCOPE_WERROR=OFF -DVARSCOPE_CUDA_ARCHS=90a -DVARSCOPE_PYTHON="$(command -v python3)" \
  -DCMAKE_PREFIX_PATH="$PWD/.device/deps" > /tmp/cmake.log 2>&1 || { tail -20 /tmp/cmake.log; exit 1; }
ninja -C "$BUILD" -j16 varscope-cli varscope_gpu_tests \
  > /tmp/build.log 2>&1 || { grep -B2 -A12 -m5 "error" /tmp/build.log; exit 1; }
timeout 180 "$BUILD/tests/varscope_gpu_tests" --gtest_filter="${GPU_TESTS:-EvalOverlapGpu.*}" \
  > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran" "$OUT/gpu_tests.log"
CLI="$BUILD/app/cli/varscope-cli"
M=tools/device/configs/eval_overlap_d30.json
timeout 280 "$CLI" bench eval "$M" --json "$OUT/bench_eval_d30.json" --force \
  > "$OUT/bench_eval.txt" 2> "$OUT/bench_eval.err"
echo "bench eval rc=$?"; cat "$OUT/bench_eval.txt"; tail -3 "$OUT/bench_eval.err"
timeout 280 "$CLI" bench eval "$M" --stand-in-metrics --json "$OUT/bench_eval_d30_metrics.json" \
  --force > "$OUT/bench_eval_metrics.txt" 2> "$OUT/bench_eval_metrics.err"
echo "bench eval --stand-in-metrics rc=$?"; cat "$OUT/bench_eval_metrics.txt"
tail -3 "$OUT/bench_eval_metrics.err"
