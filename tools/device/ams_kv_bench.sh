#!/usr/bin/env bash
# One GPU-machine run for AMS-KV (issue #4): build the CLI + GPU tests from a snapshot, run the
# GPU tests (they print the similarity check's timing in isolation, fused kernel vs the Gram
# reference), then the throughput rows of VAR-d30 (random weights, 256px schedule, fp16, cfg 1.5):
# img/s (median and spread of REPEAT timed batches), peak device memory, KV bytes; then AMS-KV's
# part timer in the loop (VARSCOPE_PROFILE_AMS_KV=1) with the kernel and with the reference
# (VARSCOPE_AMS_KV_SIMILARITY=reference) while time is left before DEADLINE seconds.
# On a card with more than 80 GB the process is capped at the memory of an 80 GB H100
# (PYTORCH_CUDA_ALLOC_CONF per_process_memory_fraction), so "fits" means "fits an 80 GB card".
# Results land in $OUT; ams_kv_summary.md is the table.
# Needs (carried): .device/deps (packaging/device-deps.sh). SRC = the snapshot to build.
#
# Rows (v3 defaults): per batch in ROWS, "B:methods:repeat", methods ';'-separated in run order
# (AMS-KV first, so its peak memory is measured before the baseline's graphs hold their cache).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/ams_kv_bench.log") 2>&1
T0=$(date +%s); stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
left() { echo $(( ${DEADLINE:-420} - ($(date +%s) - T0) )); }
SRC=${SRC:-.}
BUILD=${BUILD:-/tmp/build-amskv}  # not /tmp/build: other scripts configure it from other snapshots
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
cmake -S "$SRC" -B $BUILD -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF -DVARSCOPE_WERROR=OFF \
  -DVARSCOPE_CUDA_ARCHS=90a -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$PWD/.device/deps" \
  > /tmp/cmake.log 2>&1 || { tail -20 /tmp/cmake.log; exit 1; }
ninja -C $BUILD -j16 varscope-cli varscope_gpu_tests > /tmp/build.log 2>&1 || { grep -A12 -m3 error /tmp/build.log; exit 1; }
grep -E "spill|warning" /tmp/build.log | grep -i scale_similarity | head -5
stamp built
# (At most 8 files come back: the GPU test results go into this log.)
timeout 150 $BUILD/tests/varscope_gpu_tests --gtest_filter="${GPU_TESTS:-*AmsKv*}" > /tmp/gpu_tests.log 2>&1; echo "gpu tests rc=$?"
grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) |Failure|Expected|Which is|actual|similarity_timing|error" /tmp/gpu_tests.log | head -80
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
for ROW in ${ROWS:-"128:ams_kv;baseline:5" "256:ams_kv:3" "64:baseline:5"}; do
  B=${ROW%%:*}; REST=${ROW#*:}; M=${REST%:*}; R=${REST##*:}
  [ "$(left)" -gt 45 ] || { stamp "skipped batch $B ($M): DEADLINE"; continue; }
  $CLI bench e2e $COMMON --batch $B --methods "$M" --warmup 1 \
    --repeat $R --json "$OUT/e2e_d30_256_b${B}_fp16_amskv.json" 2>&1 | tail -4
  stamp "batch $B ($M, $R timed)"
done
# Where AMS-KV's own work goes in the loop (synchronised part timer, one batch after a warm-up):
# the fused kernel, then the Gram reference (the v2 path).
for P in ${PROFILE_PATHS:-kernel reference}; do
  [ "$(left)" -gt 40 ] || { stamp "skipped profile $P: DEADLINE"; continue; }
  if [ "$P" = reference ]; then export VARSCOPE_AMS_KV_SIMILARITY=reference; else unset VARSCOPE_AMS_KV_SIMILARITY; fi
  VARSCOPE_PROFILE_AMS_KV=1 $CLI bench e2e $COMMON --batch 128 --methods "ams_kv" --warmup 1 --repeat 1 \
    --json /tmp/profile_$P.json 2>&1 | grep -E "ams_kv profile|ams_kv " | tail -2 | sed "s/^/[$P] /"
  stamp "profile $P"
done
unset VARSCOPE_AMS_KV_SIMILARITY
python3 - "$OUT" <<'EOF' | tee "$OUT/ams_kv_summary.md"
import glob, json, os, sys
rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "e2e_d30_256_b*_fp16_amskv.json"))):
    j = json.load(open(path))
    c, b = j["config"], j["batch"]
    dense = sum(p * p for p in c["patch_nums"]) * c["depth"] * 2 * c["embed_dim"] * 2 * b * 2
    for m in j["methods"]:
        rows.append((b, m, dense, j.get("cuda_graphs")))
print("| batch | method | ms per batch (median) | img/s (median) | img/s min-max | runs | peak GiB | KV final | identical tokens |")
print("|---|---|---|---|---|---|---|---|---|")
for b, m, dense, g in sorted(rows, key=lambda r: (r[0], r[1]["name"])):
    if "error" in m:
        print(f"| {b} | {m['name']} | {m['error']} | | | | | | |"); continue
    each = m.get("total_ms_each", [m["median_total_ms"]])
    ips = [b * 1000.0 / t for t in each]
    same = m.get("identical_tokens")
    print(f"| {b} | {m['name']}{' (graphs)' if m.get('cuda_graphs') else ''} | {m['median_total_ms']:.1f} |"
          f" {b * 1000.0 / m['median_total_ms']:.1f} | {min(ips):.1f}-{max(ips):.1f} | {len(each)} |"
          f" {m['peak_device_bytes'] / 2**30:.1f} | {100 * m['kv_bytes_end'] / dense:.1f} % |"
          f" {'' if same is None else f'{100 * same:.1f} %'} |")
EOF
stamp done
