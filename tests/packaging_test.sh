#!/usr/bin/env bash
# packaging/build.sh keeps a build folder's -Werror setting unless asked: launch.sh after a
# CI=true test build passed -DVARSCOPE_WERROR=OFF, changed every compile command and rebuilt
# everything.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
configure() { VARSCOPE_BUILD_DIR="$tmp/build" VARSCOPE_PRINT_CONFIGURE=1 bash "$ROOT/packaging/build.sh" --no-gui "$@"; }

configure | grep -q -- '-DVARSCOPE_WERROR=OFF' || fail "a new build folder should get Werror OFF"
mkdir -p "$tmp/build"
printf 'VARSCOPE_WERROR:BOOL=ON\n' > "$tmp/build/CMakeCache.txt"
configure | grep -q -- '-DVARSCOPE_WERROR=ON' || fail "a -Werror build folder should keep it"
configure --no-werror | grep -q -- '-DVARSCOPE_WERROR=OFF' || fail "--no-werror should turn it off"
printf 'VARSCOPE_WERROR:BOOL=OFF\n' > "$tmp/build/CMakeCache.txt"
configure --werror | grep -q -- '-DVARSCOPE_WERROR=ON' || fail "--werror should turn it on"
configure | grep -q -- '-DVARSCOPE_WERROR=OFF' || fail "an OFF build folder should stay OFF"
echo "packaging: ok"
