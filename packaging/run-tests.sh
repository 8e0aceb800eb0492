#!/usr/bin/env bash
# Set up, build and run every VARScope test.
#
#   bash packaging/run-tests.sh [--no-gui] [--werror]
#
# Arguments go to packaging/build.sh; CI=true adds --werror. GPU tests skip themselves
# (reported as skipped) when no CUDA device is visible. Exits non-zero on any failure.
#
# Environment: as packaging/build.sh (VARSCOPE_BUILD_DIR, VARSCOPE_VENV, Torch_DIR, ...), plus
#   VARSCOPE_CTEST_ARGS="…"  extra ctest arguments, e.g. "-R Pth" or "-L gpu"
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '[tests] %s\n' "$*"; }

build_args=("$@")
if [ "${CI:-}" = "true" ]; then
    build_args+=(--werror)
    log "CI=true: building with --werror"
fi
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
