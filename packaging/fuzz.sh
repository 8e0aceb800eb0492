#!/usr/bin/env bash
# Build the libFuzzer harnesses (CMake preset `fuzz`: clang-14, ASan + UBSan, in build-fuzz/)
# and run each for SECONDS.
#
#   bash packaging/fuzz.sh [--ci] [SECONDS] [HARNESS ...]
#
#   --ci      the fixed-budget step of packaging/run-tests.sh: skip with a message (exit 0) when
#             clang-14 or libFuzzer cannot build a fuzzer here, or when SECONDS is 0; default
#             harnesses: the six readers (with fuzz_t5 the step took 318 s here, over CI's
#             5-minute budget; fuzz_accel_json and fuzz_config_json build all of core)
#   SECONDS   per harness (default 60; with --ci VARSCOPE_FUZZ_SECONDS, default 15)
#   HARNESS   fuzz_json fuzz_pickle fuzz_pth fuzz_safetensors fuzz_teacher_input fuzz_npz (the
#             readers: a few sources each) fuzz_t5 (a few more) fuzz_accel_json fuzz_config_json
#             (these two build all of core); default: all
#
# Each run starts from the seeds of fuzz/make_seeds.py, the inputs earlier findings left in
# tests/fixtures/fuzz/<harness>/ and what earlier runs kept in build-fuzz/corpus/<harness>/.
# Harnesses run side by side, VARSCOPE_JOBS at a time. Inputs that crash, leak, hang or trip a
# sanitizer land in build-fuzz/crashes/; the script then exits 1 (2: it could not build or run).
# It prints executions, edges covered, corpus size and findings per harness, and the build and
# run times (docs/reliability.md records runs).
#
# Needs clang-14 and libfuzzer-14-dev (Debian: apt-get install clang-14 libfuzzer-14-dev;
# packaging/setup.sh installs them for run-tests.sh, unless VARSCOPE_FUZZ_SECONDS=0).
# Environment: VARSCOPE_VENV and Torch_DIR (as packaging/build.sh), VARSCOPE_JOBS (compile jobs
# and harnesses at a time, default nproc), VARSCOPE_FUZZ_SECONDS (--ci's SECONDS),
# VARSCOPE_FUZZ_ARGS (more libFuzzer flags).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '[fuzz] %s\n' "$*"; }
die() { printf '[fuzz] error: %s\n' "$*" >&2; exit 2; }

in_ci=(fuzz_json fuzz_pickle fuzz_pth fuzz_safetensors fuzz_teacher_input fuzz_npz)
all=("${in_ci[@]}" fuzz_t5 fuzz_accel_json fuzz_config_json)

ci=0
if [ "${1:-}" = "--ci" ]; then
    ci=1
    shift
fi
secs=60
[ "$ci" = 0 ] || secs="${VARSCOPE_FUZZ_SECONDS:-15}"
if [ $# -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then
    secs=$1
    shift
fi
[[ "$secs" =~ ^[0-9]+$ ]] || die "SECONDS must be a whole number, got '$secs' (VARSCOPE_FUZZ_SECONDS?)"
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
    if [ "$ci" = 1 ]; then harnesses=("${in_ci[@]}"); else harnesses=("${all[@]}"); fi
fi
for h in "${harnesses[@]}"; do
    [[ " ${all[*]} " == *" $h "* ]] || die "unknown harness '$h' (expected: ${all[*]})"
done

# --ci: a switch or a missing toolchain skips the step; it never fails the tests.
skip() {
    log "skipped: $* (docs/reliability.md: Fuzzing in CI)"
    exit 0
}
if [ "$ci" = 1 ] && [ "$secs" = 0 ]; then
    skip "VARSCOPE_FUZZ_SECONDS=0"
fi
# Can clang-14 link a sanitized fuzzer here? (libFuzzer is a separate package on Debian.)
toolchain_problem() {
    command -v clang++-14 >/dev/null || { echo "clang++-14 not found"; return; }
    local tmp
    tmp="$(mktemp -d)"
    printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
        'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' >"$tmp/probe.cpp"
    if ! clang++-14 -fsanitize=fuzzer,address,undefined "$tmp/probe.cpp" -o "$tmp/probe" \
            >"$tmp/log" 2>&1; then
        echo "clang++-14 cannot link a fuzzer with ASan + UBSan (libfuzzer-14-dev missing?): $(head -c 300 "$tmp/log")"
    # ... and run it? (LeakSanitizer, for one, refuses to run under ptrace or some sandboxes.)
    elif ! ASAN_OPTIONS=detect_leaks=1 "$tmp/probe" -runs=1 >"$tmp/log" 2>&1; then
        echo "a fuzzer built with ASan + UBSan does not run here: $(grep -m1 -i 'error\|fatal' "$tmp/log" | head -c 300)"
    fi
    rm -rf "$tmp"
}
problem="$(toolchain_problem)"
if [ -n "$problem" ]; then
    [ "$ci" = 1 ] && skip "$problem"
    die "$problem (apt-get install clang-14 libfuzzer-14-dev)"
fi

BUILD="$ROOT/build-fuzz"
jobs="${VARSCOPE_JOBS:-$(nproc 2>/dev/null || echo 2)}"
cmake_args=(--preset fuzz -S "$ROOT")
if [ -n "${Torch_DIR:-}" ]; then
    cmake_args+=("-DTorch_DIR=$Torch_DIR")
elif [ -n "${VARSCOPE_VENV:-}" ]; then
    cmake_args+=("-DVARSCOPE_PYTHON=$VARSCOPE_VENV/bin/python")
fi
start=$SECONDS
log "configure: cmake ${cmake_args[*]}"
(cd "$ROOT" && cmake "${cmake_args[@]}" >/dev/null)
log "build: ${harnesses[*]}"
cmake --build "$BUILD" -j"$jobs" --target "${harnesses[@]}"
build_secs=$((SECONDS - start))
log "built in $build_secs s"

python3 "$ROOT/fuzz/make_seeds.py" "$BUILD/seeds" >/dev/null
mkdir -p "$BUILD/crashes"
# Leaks are findings too (LeakSanitizer checks after inputs that allocated more than they freed).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# One known leak inside LibTorch's zip reader (fuzz/lsan.supp says which and why).
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$ROOT/fuzz/lsan.supp:print_suppressions=0}"

# One harness: libFuzzer writes new inputs to the first folder only; the seeds and the
# regression inputs of tests/fixtures/fuzz are read, never changed.
run_one() {
    local h=$1 corpus="$BUILD/corpus/$1" rc=0
    local dirs=("$corpus" "$BUILD/seeds/$h")
    [ -d "$ROOT/tests/fixtures/fuzz/$h" ] && dirs+=("$ROOT/tests/fixtures/fuzz/$h")
    mkdir -p "$corpus"
    # shellcheck disable=SC2086  # VARSCOPE_FUZZ_ARGS: several flags
    "$BUILD/fuzz/$h" -max_total_time="$secs" -print_final_stats=1 -timeout=25 \
        -rss_limit_mb=4096 -max_len=65536 -artifact_prefix="$BUILD/crashes/$h-" \
        ${VARSCOPE_FUZZ_ARGS:-} "${dirs[@]}" >"$BUILD/$h.log" 2>&1 || rc=$?
    echo "$rc" >"$BUILD/$h.rc"
}

log "run: ${harnesses[*]}, $secs s each, $jobs at a time"
start=$SECONDS
running=0
for h in "${harnesses[@]}"; do
    rm -f "$BUILD/$h.rc"
    if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
    run_one "$h" &
    running=$((running + 1))
done
wait
run_secs=$((SECONDS - start))

failed=0
printf '%-20s %12s %8s %8s %s\n' harness executions edges corpus result
for h in "${harnesses[@]}"; do
    out="$BUILD/$h.log"
    rc="$(cat "$BUILD/$h.rc" 2>/dev/null || echo '?')"
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out" | tail -1)
    edges=$(grep -o 'cov: [0-9]*' "$out" | tail -1 | cut -d' ' -f2)
    printf '%-20s %12s %8s %8s %s\n' "$h" "${execs:-?}" "${edges:-?}" \
        "$(find "$BUILD/corpus/$h" -type f | wc -l)" \
        "$([ "$rc" = 0 ] && echo ok || echo "FOUND (rc $rc, $out)")"
    if [ "$rc" != 0 ]; then
        failed=1
        tail -30 "$out" >&2
    fi
done
log "build $build_secs s + runs $run_secs s = $((build_secs + run_secs)) s"
if [ "$failed" = 1 ]; then
    log "findings: the inputs are in $BUILD/crashes/; each becomes a regression input in" \
        "tests/fixtures/fuzz/<harness>/ (tests/fixtures/fuzz/README.md)"
fi
exit "$failed"
