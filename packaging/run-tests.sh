#!/usr/bin/env bash
# Set up, build and run every VARScope test.
#
#   bash packaging/run-tests.sh [--no-gui] [--werror]
#
# Arguments go to packaging/build.sh; CI=true adds --werror. GPU tests skip themselves
# (reported as skipped) when no CUDA device is visible. Then the fuzz step: the reader harnesses
# built with clang-14 + ASan + UBSan in build-fuzz/ and run for a fixed budget each
# (packaging/fuzz.sh --ci; skipped with a message where clang-14 or libFuzzer is missing).
# Exits non-zero on any failure, a fuzzing finding included.
#
# Environment: as packaging/build.sh (VARSCOPE_BUILD_DIR, VARSCOPE_VENV, Torch_DIR, ...), plus
#   VARSCOPE_CTEST_ARGS="…"    extra ctest arguments, e.g. "-R Pth" or "-L gpu"
#   VARSCOPE_FUZZ_SECONDS=N    seconds per fuzz harness (default 15); 0 turns the fuzz step off
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '[tests] %s\n' "$*"; }

build_args=("$@")
if [ "${CI:-}" = "true" ]; then
    build_args+=(--werror)
    log "CI=true: building with --werror"
fi
# The fuzz step's compiler comes with the other packages (setup.sh), not for the app alone.
export VARSCOPE_FUZZ_PACKAGES=1
bash "$ROOT/packaging/build.sh" ${build_args[@]+"${build_args[@]}"}

BUILD_DIR="${VARSCOPE_BUILD_DIR:-$ROOT/build}"
case "$BUILD_DIR" in
    /*) ;;
    *) BUILD_DIR="$ROOT/$BUILD_DIR" ;;
esac

# GUI tests need a Qt platform; without a display use the offscreen one.
if [ -z "${DISPLAY:-}" ] && [ -z "${WAYLAND_DISPLAY:-}" ] && [ -z "${QT_QPA_PLATFORM:-}" ]; then
    export QT_QPA_PLATFORM=offscreen
fi

ctest_args=(--test-dir "$BUILD_DIR" --output-on-failure --no-tests=error -j2)
if [ -n "${VARSCOPE_CTEST_ARGS:-}" ]; then
    # shellcheck disable=SC2206  # word splitting intended
    ctest_args+=(${VARSCOPE_CTEST_ARGS})
fi
log "ctest ${ctest_args[*]}"
ctest "${ctest_args[@]}"

# Fuzzing (docs/reliability.md): a crash, leak or sanitizer report fails the tests.
log "fuzz step: packaging/fuzz.sh --ci (VARSCOPE_FUZZ_SECONDS=${VARSCOPE_FUZZ_SECONDS:-15} per harness)"
bash "$ROOT/packaging/fuzz.sh" --ci
