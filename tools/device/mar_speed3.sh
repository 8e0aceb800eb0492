#!/usr/bin/env bash
# One GPU-machine call for MAR sampling speed, round 3 (issue #7): build the CLI and the GPU
# tests from a snapshot, then, each step under its own timeout and writing to $OUT as it goes:
#  1. GPU tests: fused DiffLoss kernels (folded input projection and lean kernels == plain ones
#     bit for bit, vs float64), MAR graphs, every other MAR GPU test;
#  2. MAR-B b1 whole loop, the new kernels (default) and the previous ones (VARSCOPE_DIFF_FOLD_PROJ=0
#     VARSCOPE_DIFF_LEAN=0) in two processes of one call, with nvidia-smi sampling SM clocks,
#     power and clock-event reasons every 100 ms (why is the first timed run faster?);
#  3. the head alone per decoded-token count, both settings;
#  4. LazyMAR vs baseline at larger batches while time is left (MAR_BATCH_RUNS);
#  5. why the first timed run is ~10 % faster (step `pause`): runs 1.5 s apart
#     (VARSCOPE_BENCH_PAUSE_MS; the GPU idles in between) vs back to back, and 3 warm-up runs
#     instead of 1, with the nvidia-smi sampling on.
# Call (see mar_fused_bench.sh for the snapshot; carry [$S, .device/deps-x]):
#   cd $S && mkdir -p .device && ln -sfn ../../.device/deps-x .device/deps &&
#   SRC=. DEADLINE_S=330 bash tools/device/mar_speed3.sh
# Env: SRC, DEADLINE_S (stop starting work), MAR_STEPS (tests loop head batch pause large;
# default tests loop head batch), EXTRA (more bench mar arguments of a loop, e.g. --split), TARGETS (ninja targets, default varscope-cli varscope_gpu_tests),
# REPEAT (timed runs, default 6), MAR_BATCH_RUNS ("model:batch ..." for step 4).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/j
exec > >(tee "$OUT/mar_speed3.log") 2>&1
T0=$(date +%s); stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
left() { echo $(( ${DEADLINE_S:-540} - ($(date +%s) - T0) )); }
lim() { local want=$1 l; l=$(left); (( l < want )) && echo $(( l > 5 ? l : 5 )) || echo $want; }
want() { [[ " ${MAR_STEPS:-tests loop head batch} " == *" $1 "* ]]; }
clocks() { nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_event_reasons.active \
    --format=csv -lms 100 > "$OUT/$1" 2>&1 & CLK=$!; }
pack() { tar -C /tmp/j -cf "$OUT/results.tar" . 2>/dev/null; }
ts() { while IFS= read -r l; do printf '%s %s\n' "$(date +%H:%M:%S.%N | cut -c1-12)" "$l"; done; }
SRC=${SRC:-.}; BUILD=${BUILD:-/tmp/build-mar}
date -u; nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
cmake -S "$SRC" -B $BUILD -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF -DVARSCOPE_WERROR=OFF \
  -DVARSCOPE_CUDA_ARCHS=90a -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$PWD/.device/deps" \
  > /tmp/j/cmake.log 2>&1 || { tail -20 /tmp/j/cmake.log; exit 1; }
timeout 330 ninja -C $BUILD -j16 ${TARGETS:-varscope-cli varscope_gpu_tests} > /tmp/j/build.log 2>&1 || {
  grep -B2 -A12 -m3 error /tmp/j/build.log; tail -5 /tmp/j/build.log; exit 1; }
stamp built
cuobjdump --dump-resource-usage $BUILD/kernels/libvarscope_kernels.a 2>/dev/null | grep -A1 "linear_kernel" \
  | grep -E "REG" | sed 's/^ *//' | cut -c1-100 | sort | uniq -c | head -12
CLI=$BUILD/app/cli/varscope-cli

if want tests; then
  timeout $(lim 150) $BUILD/tests/varscope_gpu_tests --gtest_filter='KernelsDiffLoss*:MarGraph*:*Mar*' \
    > $OUT/gpu_tests.log 2>&1
  echo "gpu tests rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[       OK|^\[  FAILED|Failure|\[diffusion|\[MAR loop|what\(\)|CUDA error" \
    $OUT/gpu_tests.log | head -60
  stamp tests
fi
loop() {  # label model batch methods repeat [env...]
  local L=$1 M=$2 B=$3 METH=$4 R=$5; shift 5
  (( $(left) < 25 )) && { stamp "skip $L (no time)"; return; }
  env "$@" timeout $(lim 150) $CLI bench mar --models $M --methods $METH --device cuda \
    --precision bf16 --batch $B --num-iter 64 --cfg 3.0 --warmup ${WARMUP:-1} --repeat $R ${EXTRA:-} \
    --json /tmp/j/loop_$L.json --force 2>&1 | grep --line-buffered -v '^\[' | ts
  pack; stamp "loop $L"
}
if want loop; then
  clocks clocks.csv
  R=${REPEAT:-6}
  loop new_mar_base_b1 mar_base 1 baseline,lazymar $R
  loop old_mar_base_b1 mar_base 1 baseline $R VARSCOPE_DIFF_FOLD_PROJ=0 VARSCOPE_DIFF_LEAN=0
  loop new2_mar_base_b1 mar_base 1 baseline $R
  kill $CLK 2>/dev/null
fi
if want head; then
  for S in new old; do
    E=(); [[ $S == old ]] && E=(VARSCOPE_DIFF_FOLD_PROJ=0 VARSCOPE_DIFF_LEAN=0)
    (( $(left) < 30 )) && break
    env "${E[@]}" timeout $(lim 60) $CLI bench mar --models mar_base --device cuda --precision bf16 --cfg 3.0 \
      --head-rows ${HEAD_ROWS:-1,4,5,7} --json /tmp/j/head_${S}_mar_base.json --force 2>&1 | grep -v '^\[' | tail -14
    pack
  done
  stamp head
fi
if want batch; then
  for mb in ${MAR_BATCH_RUNS:-mar_base:16 mar_base:64 mar_huge:1 mar_huge:16}; do
    loop "${mb%%:*}_b${mb##*:}" "${mb%%:*}" "${mb##*:}" baseline,lazymar 1
  done
fi
if want pause; then
  clocks clocks_pause.csv
  EXTRA=--split loop pause0_mar_base_b1 mar_base 1 baseline 5
  loop pause1500_mar_base_b1 mar_base 1 baseline 5 VARSCOPE_BENCH_PAUSE_MS=1500
  WARMUP=3 loop warm3_mar_base_b1 mar_base 1 baseline 4
  kill $CLK 2>/dev/null
fi
want large && loop mar_large_b1 mar_large 1 baseline,lazymar 2
stamp done
