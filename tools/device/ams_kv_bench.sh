#!/usr/bin/env bash
# One GPU-machine run for AMS-KV (issue #4): build the CLI + GPU tests from a snapshot, run the
# GPU tests, profile the similarity check in isolation, time AMS-KV's parts once (VARSCOPE_PROFILE_AMS_KV=1), then the throughput table of
# VAR-d30 (random weights, 256px schedule, fp16, cfg 1.5): baseline vs AMS-KV per batch, img/s,
# peak device memory, KV bytes. On a card with more than 80 GB the process is capped at the
# memory of an 80 GB H100 (PYTORCH_CUDA_ALLOC_CONF per_process_memory_fraction), so "fits" means
# "fits an 80 GB card" everywhere. Results land in $OUT; ams_kv_summary.md is the table.
# Needs (carried): .device/deps (packaging/device-deps.sh). SRC = the snapshot to build.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/ams_kv_bench.log") 2>&1
T0=$(date +%s); stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
SRC=${SRC:-.}
BUILD=${BUILD:-/tmp/build-amskv}  # not /tmp/build: other scripts configure it from other snapshots
nvidia-smi --query-gpu=name,memory.total --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
cmake -S "$SRC" -B $BUILD -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF -DVARSCOPE_WERROR=OFF \
  -DVARSCOPE_CUDA_ARCHS=90a -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$PWD/.device/deps" \
  > /tmp/cmake.log 2>&1 || { tail -20 /tmp/cmake.log; exit 1; }
ninja -C $BUILD -j16 varscope-cli varscope_gpu_tests > /tmp/build.log 2>&1 || { grep -A12 -m3 error /tmp/build.log; exit 1; }
stamp built
# (At most 8 files come back: the GPU test results go into this log.)
timeout 120 $BUILD/tests/varscope_gpu_tests --gtest_filter="${GPU_TESTS:-*}" > /tmp/gpu_tests.log 2>&1; echo "gpu tests rc=$?"
grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) |Failure" /tmp/gpu_tests.log | head -80
stamp tested

# An 80 GB cap on larger cards: the total memory of an H100 80GB HBM3 (81559 MiB).
TOTAL_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "${TOTAL_MIB:-0}" -gt 85000 ]; then
  FRACTION=$(python3 -c "print(round(81559 / $TOTAL_MIB, 4))")
  export PYTORCH_CUDA_ALLOC_CONF="per_process_memory_fraction:$FRACTION"
  echo "capped at 81559 MiB of $TOTAL_MIB MiB: PYTORCH_CUDA_ALLOC_CONF=$PYTORCH_CUDA_ALLOC_CONF"
fi

CLI=$BUILD/app/cli/varscope-cli
P256=1,2,3,4,5,6,8,10,13,16
COMMON="--random 30 --patch-nums $P256 --device cuda --precision fp16 --cfg 1.5 --seed 0"
# The similarity check in isolation (CUDA events, host wall time, torch.profiler kernels) and
# candidate formulations of it (Python only; the loop runs ams_kv::similarity).
python3 "$SRC/tools/device/ams_kv_similarity_profile.py" 2>&1 | tee /tmp/sim_profile.txt | grep -vE "^-|^ *$" | head -120
stamp "similarity profile"
# Where AMS-KV's own work goes in the loop (synchronised part timer, one batch after a warm-up).
VARSCOPE_PROFILE_AMS_KV=1 $CLI bench e2e $COMMON --batch 128 --methods "ams_kv" --warmup 1 --repeat 1 \
  --json /tmp/profile.json 2>&1 | grep -E "ams_kv profile|ams_kv " | tail -3
stamp profile
# Per batch: AMS-KV first (its peak memory measured before the baseline's graphs hold their
# own cache), then the baseline with CUDA graphs; EXTRA_METHODS at the batches in EXTRA_BATCHES.
for B in ${BASE_BATCHES:-32 64 128 256}; do
  M="${METHODS:-ams_kv;baseline}"
  case " ${EXTRA_BATCHES:-} " in *" $B "*) M="${M%%;*};${EXTRA_METHODS};${M#*;}";; esac
  case " ${BASELINE_ONLY_BATCHES:-} " in *" $B "*) M="baseline";; esac
  $CLI bench e2e $COMMON --batch $B --methods "$M" --warmup 1 \
    --repeat ${REPEAT:-2} --json "$OUT/e2e_d30_256_b${B}_fp16_amskv.json" 2>&1 | tail -5
  stamp "batch $B"
done
for B in ${AMS_ONLY_BATCHES:-384 512}; do
  M="ams_kv"
  case " ${EXTRA_BATCHES:-} " in *" $B "*) M="$M;${EXTRA_METHODS}";; esac
  $CLI bench e2e $COMMON --batch $B --methods "$M" --warmup 1 --repeat ${AMS_REPEAT:-1} \
    --json "$OUT/e2e_d30_256_b${B}_fp16_amskv.json" 2>&1 | tail -4
  stamp "batch $B (AMS-KV only)"
done
python3 "$SRC/tools/device/ams_kv_summary.py" "$OUT" | tee "$OUT/ams_kv_summary.md"
