#!/usr/bin/env bash
# One GPU-machine run for the acceleration engine (issue #4): build core + CLI + GPU tests from a
# clean snapshot, run the GPU tests, then `varscope-cli bench e2e` for VAR-d30 (random weights)
# at the 256px schedule and at the extended 13-scale schedule up to 64x64 tokens, and AMS-KV's
# large-batch memory runs. Results land in $OUT.
# Needs (carried): .device/deps (packaging/device-deps.sh); SRC = a `git archive` snapshot.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/accel_bench.log") 2>&1
T0=$(date +%s); stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
SRC=${SRC:-.}
[ -d "$SRC/resources/models" ] || { rm -rf "$SRC/resources"; ln -s "$PWD/resources" "$SRC/resources"; }
nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
cmake -S "$SRC" -B /tmp/build -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF -DVARSCOPE_WERROR=OFF \
  -DVARSCOPE_CUDA_ARCHS=90a -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$PWD/.device/deps" \
  > /tmp/cmake.log 2>&1 || { tail -20 /tmp/cmake.log; exit 1; }
ninja -C /tmp/build -j16 varscope-cli varscope_gpu_tests > /tmp/build.log 2>&1 || { grep -A12 -m3 error /tmp/build.log; exit 1; }
stamp built
/tmp/build/tests/varscope_gpu_tests > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" "$OUT/gpu_tests.log" | head -20
stamp tested
CLI=/tmp/build/app/cli/varscope-cli
P256=1,2,3,4,5,6,8,10,13,16
P1024=1,2,4,6,8,12,16,20,24,32,40,48,64
$CLI bench e2e --random 30 --patch-nums $P256 --device cuda --precision bf16 --class 207 --seed 0 \
  --warmup 2 --repeat 5 --json "$OUT/e2e_d30_256_b1_bf16.json" 2>&1 | tail -12
stamp e2e-256
$CLI bench e2e --random 30 --patch-nums $P1024 --device cuda --precision bf16 --class 207 --seed 0 \
  --warmup 1 --repeat 3 --json "$OUT/e2e_d30_1024x13_b1_bf16.json" 2>&1 | tail -12
stamp e2e-1024
for B in ${AMS_BATCHES:-64 128 256}; do
  $CLI bench e2e --random 30 --patch-nums $P256 --device cuda --precision fp16 --batch $B --cfg 1.5 --seed 0 \
    --methods "baseline;ams_kv" --warmup 1 --repeat 2 --json "$OUT/e2e_d30_256_b${B}_fp16_amskv.json" 2>&1 | tail -5
  stamp "ams-kv batch $B"
done
