#!/usr/bin/env bash
# Set up (packaging/setup.sh), configure with CMake + Ninja and build VARScope.
#
#   bash packaging/build.sh [--no-gui] [--werror | --no-werror]
#
#   --no-gui      do not build the Qt desktop app (also implied when Qt 6 is not found)
#   --werror      compiler warnings are errors (run-tests.sh passes this when CI=true)
#   --no-werror   warnings are not errors. Without either, a new build folder gets
#                 --no-werror and an existing one keeps what it was built with, so that
#                 launch.sh after a CI=true test build does not rebuild everything.
#
# Environment:
#   VARSCOPE_NO_GUI=1        same as --no-gui
#   VARSCOPE_BUILD_DIR=DIR   build directory (default: <repo>/build)
#   VARSCOPE_BUILD_TYPE=T    CMake build type (default: Release)
#   VARSCOPE_JOBS=N          parallel compile jobs (default: nproc)
#   VARSCOPE_VENV=DIR        venv with torch==2.11.0 (default: <repo>/.venv), see setup.sh
#   Torch_DIR=DIR            use an existing LibTorch instead of the venv's wheel
#   VARSCOPE_CMAKE_ARGS="…"  extra arguments for the CMake configure step
#   VARSCOPE_PRINT_CONFIGURE=1  print the CMake configure command and stop (no setup, no
#                            build; tests/packaging_test.sh)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '[build] %s\n' "$*"; }
die() { printf '[build] error: %s\n' "$*" >&2; exit 1; }

gui=ON
if [ "${VARSCOPE_NO_GUI:-0}" = "1" ]; then
    gui=OFF
fi
werror=""  # neither flag: decided below from the build folder
for arg in "$@"; do
    case "$arg" in
        --no-gui) gui=OFF ;;
        --werror) werror=ON ;;
        --no-werror) werror=OFF ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) die "unknown argument '$arg' (expected --no-gui, --werror, --no-werror)" ;;
    esac
done

if [ "$gui" = OFF ]; then
    export VARSCOPE_NO_GUI=1
fi
if [ "${VARSCOPE_PRINT_CONFIGURE:-0}" != 1 ]; then
    bash "$ROOT/packaging/setup.sh"
fi

# Qt 6 present? Look for the Qt6Widgets CMake package where find_package would.
have_qt6() {
    local d
    for d in ${Qt6_DIR:+"$Qt6_DIR/.."} ${CMAKE_PREFIX_PATH:+${CMAKE_PREFIX_PATH//:/ }} \
             /usr/lib/*/cmake /usr/lib/cmake /usr/local/lib/cmake /usr/local/lib/*/cmake; do
        case "$d" in
            */cmake) [ -f "$d/Qt6Widgets/Qt6WidgetsConfig.cmake" ] && return 0 ;;
            *) [ -f "$d/lib/cmake/Qt6Widgets/Qt6WidgetsConfig.cmake" ] && return 0 ;;
        esac
    done
    return 1
}
if [ "$gui" = ON ] && ! have_qt6; then
    log "Qt 6 (Qt6Widgets) not found: building without the GUI"
    gui=OFF
fi

BUILD_DIR="${VARSCOPE_BUILD_DIR:-$ROOT/build}"
case "$BUILD_DIR" in
    /*) ;;
    *) BUILD_DIR="$ROOT/$BUILD_DIR" ;;
esac

# Another -Werror value changes every compile command, which rebuilds everything: keep the
# folder's own unless asked.
if [ -z "$werror" ]; then
    werror=OFF
    if [ -f "$BUILD_DIR/CMakeCache.txt" ] &&
       grep -qxiE 'VARSCOPE_WERROR:BOOL=(ON|TRUE|YES|1)' "$BUILD_DIR/CMakeCache.txt"; then
        werror=ON
        log "warnings stay errors as in the last build of $BUILD_DIR (--no-werror turns this off)"
    fi
fi

args=(-S "$ROOT" -B "$BUILD_DIR"
      "-DCMAKE_BUILD_TYPE=${VARSCOPE_BUILD_TYPE:-Release}"
      "-DVARSCOPE_BUILD_GUI=$gui"
      "-DVARSCOPE_WERROR=$werror")
# Ninja on a fresh build dir; an existing one keeps the generator it was made with.
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    args+=(-G Ninja)
fi
if [ -n "${Torch_DIR:-}" ]; then
    args+=("-DTorch_DIR=$Torch_DIR")
    log "LibTorch: Torch_DIR=$Torch_DIR"
else
    VENV="${VARSCOPE_VENV:-$ROOT/.venv}"
    case "$VENV" in
        /*) ;;
        *) VENV="$PWD/$VENV" ;;
    esac
    args+=("-DVARSCOPE_PYTHON=$VENV/bin/python")
    log "LibTorch: torch wheel of $VENV/bin/python"
fi
if [ -n "${VARSCOPE_CMAKE_ARGS:-}" ]; then
    # Word splitting intended: several -D arguments in one variable.
    # shellcheck disable=SC2206
    args+=(${VARSCOPE_CMAKE_ARGS})
fi

if command -v ccache >/dev/null 2>&1; then
    log "ccache: $(command -v ccache) (CMake sets it as the compiler launcher)"
fi
log "configure: $BUILD_DIR (GUI=$gui, Werror=$werror)"
if [ "${VARSCOPE_PRINT_CONFIGURE:-0}" = 1 ]; then
    printf '%s\n' "cmake ${args[*]}"
    exit 0
fi
cmake "${args[@]}"

jobs="${VARSCOPE_JOBS:-$(nproc 2>/dev/null || echo 2)}"
log "build: cmake --build $BUILD_DIR -j$jobs"
start=$SECONDS
cmake --build "$BUILD_DIR" -j"$jobs"
log "built in $((SECONDS - start)) s: $BUILD_DIR"
