#!/usr/bin/env bash
# Compares the SASS of one sm90 kernel between two source trees (e.g. a `git archive` of the base
# commit and the working tree), so a change meant for one part of a kernel can be checked not to
# move ptxas's code elsewhere. Prints, for the whole kernel and for the consumer's part (between
# the two setmaxnreg instructions of the persistent kernels, or the whole kernel where there are
# none), how many opcode lines differ: as compiled, and with register names ignored.
# (Session 15: the persistent kernel's claimed index first moved the producer's TMA coordinates
# out of uniform registers; this comparison told the consumer apart from the producer.)
#   tools/dev/sm90_sass_diff.sh BASE_TREE NEW_TREE [KERNEL_REGEX] [CU_FILE] [NVCC_FLAGS...]
# KERNEL_REGEX defaults to schedule 12 at d128 (persistent_kernelILi128ELb1E), CU_FILE to
# kernels/cuda/csla_attention_sm90_d128.cu. cuobjdump comes from PATH or the venv's triton.
# KEEP=1 keeps the cubins and opcode lists (it prints where), e.g. to diff the consumer parts.
set -euo pipefail
base=${1:?base tree}
new=${2:?new tree}
kernel=${3:-persistent_kernelILi128ELb1E}
cu=${4:-kernels/cuda/csla_attention_sm90_d128.cu}
shift $(($# < 4 ? $# : 4))
here="$(cd "$(dirname "$0")/../.." && pwd)"
cuobjdump=$(command -v cuobjdump || true)
[ -n "$cuobjdump" ] || cuobjdump=$(find "$here/.venv" -name cuobjdump -type f 2>/dev/null | head -1)
[ -x "$cuobjdump" ] || { echo "no cuobjdump found" >&2; exit 1; }
work=$(mktemp -d)
[ -n "${KEEP:-}" ] && echo "files kept in $work"
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

ops() {  # tree name [nvcc flags]: the kernel's instructions, one per line, immediates as H
    local tree=$1 name=$2
    shift 2
    nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
        -I"$tree" "$@" -cubin "$tree/$cu" -o "$work/$name.cubin" >/dev/null
    local fn
    fn=$("$cuobjdump" -sass "$work/$name.cubin" 2>/dev/null | grep -oE "Function : [^ ]*$kernel[^ ]*" |
        awk '{print $3}' | head -1)
    [ -n "$fn" ] || { echo "no kernel matching $kernel in $tree/$cu" >&2; exit 1; }
    "$cuobjdump" -sass -fun "$fn" "$work/$name.cubin" 2>/dev/null | grep -oE '^ +/\*[0-9a-f]{4}\*/ +[^;]*' |
        sed -E 's/^ +\/\*[0-9a-f]{4}\*\/ +//; s/0x[0-9a-f]+/H/g' > "$work/$name.ops"
    local a b
    a=$(grep -n 'SETMAXREG.TRY_ALLOC' "$work/$name.ops" | head -1 | cut -d: -f1 || true)
    b=$(grep -n 'SETMAXREG.DEALLOC' "$work/$name.ops" | head -1 | cut -d: -f1 || true)
    if [ -n "$a" ] && [ -n "$b" ] && [ "$a" -lt "$b" ]; then
        sed -n "${a},${b}p" "$work/$name.ops" > "$work/$name.consumer"
    else
        cp "$work/$name.ops" "$work/$name.consumer"
    fi
}
count() {  # file1 file2: differing lines, as is and with register names ignored
    local raw norm
    raw=$(diff "$1" "$2" | grep -c '^[<>]' || true)
    norm=$(diff <(sed -E 's/\bU?R[0-9]+/R/g; s/\bU?P[0-9]/P/g' "$1") \
                <(sed -E 's/\bU?R[0-9]+/R/g; s/\bU?P[0-9]/P/g' "$2") | grep -c '^[<>]' || true)
    echo "$raw differing lines, $norm with register names ignored"
}
ops "$base" base "$@"
ops "$new" new "$@"
echo "kernel $kernel: $(wc -l < "$work/base.ops") vs $(wc -l < "$work/new.ops") instructions"
echo "  whole kernel: $(count "$work/base.ops" "$work/new.ops")"
echo "  consumer:     $(count "$work/base.consumer" "$work/new.consumer")"
