#!/usr/bin/env bash
# One GPU-machine session for the foundation issue: build core + CLI + tests against the
# machine's preinstalled torch 2.11, run every test, official-parity check (d16), and per-scale
# timings of random-weight d16 / d30. Results go to $OUT (the device tool brings them back).
# Needs (git-ignored, carried): .device/deps (packaging/device-deps.sh) and .device/varref (a
# local copy of the official VAR code's models/ and dist.py, never committed).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG="$OUT/foundation.log"
exec > >(tee "$LOG") 2>&1
nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
cmake -S . -B /tmp/build -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF \
  -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$PWD/.device/deps" -DVARSCOPE_WERROR=OFF || exit 1
time ninja -C /tmp/build -j16 || exit 1
CLI=/tmp/build/app/cli/varscope-cli
[ "${SKIP_CPU_TESTS:-0}" = 1 ] || (cd /tmp/build && ctest --output-on-failure -j8 2>&1 | tail -25)
/tmp/build/tests/varscope_gpu_tests 2>&1 | tail -8
[ "${SKIP_PARITY:-0}" = 1 ] || python3 tools/parity/var_parity.py --official .device/varref --cli "$CLI" --depth 16 \
  --device cuda --work /tmp/parity --out "$OUT/parity_d16_cuda.json" 2>&1 | tail -40
for d in 16 30; do
  for p in fp32 bf16; do
    $CLI generate --random $d --device cuda --precision $p --class 207 --seed 0 --warmup 2 --repeat 5 \
      --timings-json "$OUT/var_d${d}_b1_${p}.json" -q 2>&1 | tail -2
  done
done
$CLI generate --random 30 --device cuda --precision fp32 --class 207 --batch 16 --seed 0 --warmup 1 \
  --repeat 3 --timings-json "$OUT/var_d30_b16_fp32.json" -q 2>&1 | tail -2
echo DONE
