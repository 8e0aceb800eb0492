#!/usr/bin/env bash
# Build the libFuzzer harnesses (CMake preset `fuzz`: clang-14, ASan + UBSan, in build-fuzz/)
# and run each for SECONDS.
#
#   bash packaging/fuzz.sh [SECONDS] [HARNESS ...]
#
#   SECONDS   per harness (default 60)
#   HARNESS   fuzz_json fuzz_pickle fuzz_pth fuzz_safetensors fuzz_teacher_input fuzz_npz (the readers;
#             a few sources each) fuzz_accel_json fuzz_config_json (these build all of core);
#             default: all
#
# Each run starts from the seeds of fuzz/make_seeds.py and what earlier runs kept in
# build-fuzz/corpus/<harness>/. Inputs that crash, leak, hang or trip a sanitizer land in
# build-fuzz/crashes/; the script then exits 1. It prints executions, edges covered, corpus size
# and findings per harness (docs/reliability.md records a run).
#
# Needs clang-14 and libfuzzer-14-dev (Debian: apt-get install clang-14 libfuzzer-14-dev).
# Environment: VARSCOPE_VENV (as packaging/build.sh), VARSCOPE_JOBS (compile jobs, default
# nproc), VARSCOPE_FUZZ_ARGS (more libFuzzer flags, e.g. "-jobs=4").
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '[fuzz] %s\n' "$*"; }
die() { printf '[fuzz] error: %s\n' "$*" >&2; exit 2; }

secs=60
if [ $# -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then
    secs=$1
    shift
fi
all=(fuzz_json fuzz_pickle fuzz_pth fuzz_safetensors fuzz_teacher_input fuzz_npz fuzz_accel_json
     fuzz_config_json)
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=("${all[@]}")
for h in "${harnesses[@]}"; do
    [[ " ${all[*]} " == *" $h "* ]] || die "unknown harness '$h' (expected: ${all[*]})"
done
command -v clang++-14 >/dev/null || die "clang++-14 not found (apt-get install clang-14 libfuzzer-14-dev)"

BUILD="$ROOT/build-fuzz"
cmake_args=(--preset fuzz -S "$ROOT")
if [ -n "${VARSCOPE_VENV:-}" ]; then
    cmake_args+=("-DVARSCOPE_PYTHON=$VARSCOPE_VENV/bin/python")
fi
log "configure: cmake ${cmake_args[*]}"
(cd "$ROOT" && cmake "${cmake_args[@]}" >/dev/null)
log "build: ${harnesses[*]}"
cmake --build "$BUILD" -j"${VARSCOPE_JOBS:-$(nproc 2>/dev/null || echo 2)}" --target "${harnesses[@]}"

python3 "$ROOT/fuzz/make_seeds.py" "$BUILD/seeds" >/dev/null
mkdir -p "$BUILD/crashes"
# Leaks are findings too (LeakSanitizer checks after inputs that allocated more than they freed).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# One known leak inside LibTorch's zip reader (fuzz/lsan.supp says which and why).
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$ROOT/fuzz/lsan.supp:print_suppressions=0}"

failed=0
summary=()
for h in "${harnesses[@]}"; do
    corpus="$BUILD/corpus/$h"
    mkdir -p "$corpus"
    out="$BUILD/$h.log"
    log "$h: ${secs} s"
    rc=0
    # shellcheck disable=SC2086  # VARSCOPE_FUZZ_ARGS: several flags
    "$BUILD/fuzz/$h" -max_total_time="$secs" -print_final_stats=1 -timeout=25 \
        -rss_limit_mb=4096 -max_len=65536 -artifact_prefix="$BUILD/crashes/$h-" \
        ${VARSCOPE_FUZZ_ARGS:-} "$corpus" "$BUILD/seeds/$h" >"$out" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out" | tail -1)
    edges=$(grep -o 'cov: [0-9]*' "$out" | tail -1 | cut -d' ' -f2)
    summary+=("$(printf '%-20s %12s %8s %8s %s' "$h" "${execs:-?}" "${edges:-?}" \
                 "$(find "$corpus" -type f | wc -l)" "$([ "$rc" = 0 ] && echo ok || echo "FOUND (rc $rc, $out)")")")
    if [ "$rc" != 0 ]; then
        failed=1
        tail -30 "$out" >&2
    fi
done
printf '%-20s %12s %8s %8s %s\n' harness executions edges corpus result
printf '%s\n' "${summary[@]}"
exit "$failed"
