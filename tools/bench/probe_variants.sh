#!/usr/bin/env bash
# A/B rounds of kernel variants with the LibTorch-free probe (tools/bench/csla_sm90_probe.cu) on
# the GPU machine. Each variant is a source tree DIR/src_<v> (e.g. `git archive HEAD kernels
# tools/bench/csla_sm90_probe.cu` unpacked and edited); carry DIR to the device.
#   probe_variants.sh build DIR v1 v2 ...          every object of every variant in parallel
#   probe_variants.sh rounds DIR "v1 v2 ..." IMPLS R [ENV=VALUE ...]
#       R alternated rounds (checks in round 1 only); prints Table 1 block 64, every block
#       active, block 128 and VAR-d30 512px block 64 (ms) per variant and round; the logs stay
#       in DIR/log_<v>_<round>.txt (put them in one file before copying them to $OUT: a device
#       call returns at most eight files).
# IMPLS: schedule letters as the probe takes them (c = 12, the default CSLA schedule at d128).
set -u
cmd=${1:?build or rounds}
dir=${2:?variant folder}
shift 2
list="$(cd "$(dirname "$0")" && pwd)/probe_sources.txt"  # the probe's translation units
cd "$dir" || exit 1
FILES=$(cat "$list")
case "$cmd" in
build)
    pids=()
    for v in "$@"; do
        mkdir -p "obj_$v"
        for f in $FILES; do
            n=$(basename "$f" .cu)
            timeout 300 nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
                --expt-relaxed-constexpr -I"src_$v" -c "src_$v/$f" -o "obj_$v/$n.o" \
                > "obj_$v/$n.log" 2>&1 &
            pids+=($!)
        done
    done
    for p in "${pids[@]}"; do wait "$p"; done  # not a bare wait: a caller's tee would hang it
    for v in "$@"; do
        if nvcc -gencode=arch=compute_90a,code=sm_90a "obj_$v"/*.o -o "bin_$v" > "obj_$v/link.log" 2>&1
        then echo "built bin_$v"
        else echo "build of $v failed"; cat "obj_$v"/*.log | head -30
        fi
    done
    ;;
rounds)
    variants=${1:?variants}
    impls=${2:?impls}
    rounds=${3:?rounds}
    shift 3
    for r in $(seq 1 "$rounds"); do
        for v in $variants; do
            extra="--no-check"
            [ "$r" = 1 ] && extra=""
            env "$@" timeout 120 "./bin_$v" --impls "$impls" --dense --iters 30 $extra \
                > "log_${v}_$r.txt" 2>&1
            printf "round %s %-8s rc=%s " "$r" "$v" $?
            grep -A1 -E "^(infinity-8b-1024 block 64|dense block 64|infinity-8b-1024 block 128|var-d30-512 block 64)" \
                "log_${v}_$r.txt" | grep "csla impl" | awk '{printf "%s ", $5}'
            grep -E "checks:" "log_${v}_$r.txt" | tr '\n' ' '
            echo
        done
    done
    ;;
*) echo "usage: $0 build DIR v... | rounds DIR \"v...\" IMPLS R [ENV=VALUE...]" >&2; exit 2 ;;
esac
