#!/usr/bin/env bash
# One GPU-machine call for MAR on CUDA (issue #7): build the CLI and the GPU tests from a clean
# snapshot, then, each step under its own timeout and writing to $OUT as it goes:
#  1. the MAR GPU tests (graphed == eager tokens, LazyMAR with the graphed diffusion);
#  2. `bench mar` MAR-B (b1, 64 steps, CFG 3 linear, 100 diffusion steps, bf16): baseline vs
#     LazyMAR with CUDA graphs, plus one eager run per method (--compare-eager);
#  3. the parity tool on CUDA (fp32, MAR-B 256 px, 64 steps: official vs ours for one random
#     stream) and the official sampler's latency (fp16 autocast) when OFFICIAL is given;
#  4. `bench mar` MAR-B fp32 (graphed vs eager), MAR-L and MAR-H (bf16) if time is left.
# MAR_PLAN=head instead: baseline vs LazyMAR vs LazyMAR + the head-side condition cache
# (head_cfg_period 7), MAR-B/H batch 1 and MAR-H batch 16.
# Env: SRC (snapshot, default .), OFFICIAL (folder with LTH14/mar's models/ and diffusion/),
# DEADLINE_S (seconds from start to stop starting work, default 560).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/mar_bench.log") 2>&1
T0=$(date +%s); stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
left() { echo $(( ${DEADLINE_S:-560} - ($(date +%s) - T0) )); }
SRC=${SRC:-.}; BUILD=${BUILD:-/tmp/build-mar}
nvidia-smi -L; python3 -c 'import torch, timm; print("torch", torch.__version__, "cuda", torch.version.cuda, "timm", timm.__version__)'
cmake -S "$SRC" -B $BUILD -G Ninja -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF -DVARSCOPE_WERROR=OFF \
  -DVARSCOPE_CUDA_ARCHS=90a -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$PWD/.device/deps" \
  > $OUT/cmake.log 2>&1 || { tail -20 $OUT/cmake.log; exit 1; }
ninja -C $BUILD -j16 varscope-cli varscope_gpu_tests > $OUT/build.log 2>&1 || { grep -A12 -m3 error $OUT/build.log; exit 1; }
stamp built
CLI=$BUILD/app/cli/varscope-cli
lim() { local want=$1 l; l=$(left); (( l < want )) && echo $(( l > 5 ? l : 5 )) || echo $want; }

timeout $(lim 90) $BUILD/tests/varscope_gpu_tests --gtest_filter='MarGraph*' 2>&1 | tail -25
stamp gpu-tests

HEAD='{"lazymar":{"head_cfg_period":7}}'  # LazyMAR + the head-side condition cache
bench() {  # model precision batch timeout methods extra-args...
  local M=$1 P=$2 B=$3 T=$4 METHODS=$5; shift 5
  (( $(left) < 20 )) && { stamp "skip $M $P b$B (no time)"; return; }
  timeout $(lim $T) $CLI bench mar --models $M --methods "$METHODS" --device cuda \
    --precision $P --batch $B --num-iter 64 --cfg 3.0 --warmup 1 --repeat ${MAR_REPEAT:-3} "$@" \
    --json "$OUT/mar_${M}_64_b${B}_${P}.json" 2>&1 | grep -v '^\[' | tail -12
  stamp "bench $M $P b$B"
}
official() {
  [ -n "${OFFICIAL:-}" ] && (( $(left) > 120 )) || return
  timeout $(lim 170) python3 $SRC/tools/parity/mar_parity.py --official "$OFFICIAL" --cli $CLI \
    --work /tmp/marwork --out $OUT/mar_parity_cuda.json --configs base256 --device cuda --speed 2>&1 \
    | grep -v '^+' | tail -40
  stamp parity
}
case ${MAR_PLAN:-full} in
  full)  # round 1: graphs vs eager, parity and the official speed, B/L/H at batch 1
    bench mar_base bf16 1 120 baseline,lazymar --compare-eager
    official
    bench mar_huge bf16 1 90 baseline,lazymar
    bench mar_large bf16 1 80 baseline,lazymar
    bench mar_base fp32 1 100 baseline,lazymar --compare-eager ;;
  head)  # round 2: LazyMAR with the head-side condition cache, batch 1 and 16
    bench mar_base bf16 1 60 "baseline,lazymar,$HEAD"
    bench mar_huge bf16 1 80 "baseline,lazymar,$HEAD"
    MAR_REPEAT=1 bench mar_huge bf16 16 120 "baseline,lazymar,$HEAD" ;;
esac
stamp done
