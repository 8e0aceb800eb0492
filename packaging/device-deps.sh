#!/usr/bin/env bash
# Assemble .device/deps/: a relocatable CMake prefix with the header-only and static
# dependencies that the GPU machine lacks (it has cmake, ninja, nvcc and torch, but no apt and
# no network): CLI11, nlohmann-json, GoogleTest/GoogleMock and SentencePiece, copied from this
# Debian machine with their Debian layout (include/, share/cmake/, lib/x86_64-linux-gnu/...;
# libsentencepiece.so in lib/). Their CMake configs locate everything relative to themselves
# (SentencePiece: the top-level CMakeLists' search of CMAKE_PREFIX_PATH), so on the GPU machine
#
#   cmake --preset no-gui -DCMAKE_PREFIX_PATH=$PWD/.device/deps
#
# finds them there. GTest's config lives under lib/<multiarch>/cmake, which CMake only searches
# when it knows the multiarch triplet; lib/cmake/GTest/ holds a forwarding config so that it is
# found on any distribution.
#
#   bash packaging/device-deps.sh [--check]     (--check: also verify with a throwaway project)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.device/deps"
MULTIARCH="x86_64-linux-gnu"
log() { printf '[device-deps] %s\n' "$*"; }
die() { printf '[device-deps] error: %s\n' "$*" >&2; exit 1; }

check=0
for arg in "$@"; do
    case "$arg" in
        --check) check=1 ;;
        *) die "unknown argument '$arg' (expected --check)" ;;
    esac
done

need_pkgs=(libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev libsentencepiece-dev)
for p in "${need_pkgs[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" = "install ok installed" ] \
        || die "$p is not installed here (run packaging/setup.sh first)"
done

# Paths relative to / that go into the prefix with the same relative layout.
items=(
    usr/include/CLI
    usr/share/cmake/CLI11
    usr/include/nlohmann
    usr/share/cmake/nlohmann_json
    usr/include/gtest
    usr/include/gmock
    "usr/lib/$MULTIARCH/cmake/GTest"
    usr/include/sentencepiece_processor.h
    usr/include/sentencepiece_trainer.h
)
for lib in /usr/lib/"$MULTIARCH"/libgtest*.a /usr/lib/"$MULTIARCH"/libgmock*.a; do
    [ -f "$lib" ] || die "missing $lib"
    items+=("${lib#/}")
done

rm -rf "$DEST"
mkdir -p "$DEST"
for item in "${items[@]}"; do
    [ -e "/$item" ] || die "missing /$item"
    rel="${item#usr/}"
    mkdir -p "$DEST/$(dirname "$rel")"
    cp -a "/$item" "$DEST/$rel"
done

# SentencePiece (a shared library needing only libc/libstdc++) goes to lib/, which CMake's
# find_library searches on any distribution; the build tree's RPATH then finds it at run time.
# Real files, not symlinks: the link name for the linker, the soname for the loader.
for lib in libsentencepiece.so libsentencepiece.so.0 libsentencepiece_train.so libsentencepiece_train.so.0; do
    [ -e "/usr/lib/$MULTIARCH/$lib" ] || die "missing /usr/lib/$MULTIARCH/$lib"
    cp -L "/usr/lib/$MULTIARCH/$lib" "$DEST/lib/$lib"
done

# Forwarding config: <prefix>/lib/cmake/GTest is searched everywhere; the real config computes
# its prefix from its own location, which stays lib/<multiarch>/cmake/GTest.
fwd="$DEST/lib/cmake/GTest"
mkdir -p "$fwd"
cat >"$fwd/GTestConfig.cmake" <<CMAKE
# Forwards to the Debian GTest config in lib/$MULTIARCH (written by packaging/device-deps.sh).
include("\${CMAKE_CURRENT_LIST_DIR}/../../$MULTIARCH/cmake/GTest/GTestConfig.cmake")
CMAKE
cat >"$fwd/GTestConfigVersion.cmake" <<CMAKE
include("\${CMAKE_CURRENT_LIST_DIR}/../../$MULTIARCH/cmake/GTest/GTestConfigVersion.cmake")
CMAKE

{
    echo "Copied by packaging/device-deps.sh from $(hostname) on $(date -u +%Y-%m-%dT%H:%M:%SZ):"
    dpkg-query -W -f='${Package} ${Version}\n' "${need_pkgs[@]}"
} >"$DEST/VERSIONS.txt"
log "wrote $DEST ($(du -sh "$DEST" | cut -f1)):"
sed 's/^/[device-deps]   /' "$DEST/VERSIONS.txt"

if [ "$check" = 1 ]; then
    tmp="$(mktemp -d /tmp/varscope-device-deps.XXXXXX)"
    trap 'rm -rf "$tmp"' EXIT
    cat >"$tmp/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(device_deps_check LANGUAGES CXX)
if(NO_MULTIARCH)
    # As on a distribution without Debian multiarch: only lib/cmake/GTest (the forwarder) is searched.
    set(CMAKE_LIBRARY_ARCHITECTURE "")
endif()
find_package(CLI11 REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(GTest REQUIRED)
foreach(v CLI11_DIR nlohmann_json_DIR GTest_DIR)
    message(STATUS "${v}=${${v}}")
    if(NOT "${${v}}" MATCHES "^${DEPS}/")
        message(FATAL_ERROR "${v} is not under ${DEPS}")
    endif()
endforeach()
get_target_property(_inc GTest::gtest INTERFACE_INCLUDE_DIRECTORIES)
get_target_property(_lib GTest::gtest IMPORTED_LOCATION_NONE)
get_target_property(_cli CLI11::CLI11 INTERFACE_INCLUDE_DIRECTORIES)
get_target_property(_json nlohmann_json::nlohmann_json INTERFACE_INCLUDE_DIRECTORIES)
message(STATUS "GTest include=${_inc} lib=${_lib}; CLI11 include=${_cli}; json include=${_json}")
add_executable(t t.cpp)
target_link_libraries(t PRIVATE CLI11::CLI11 nlohmann_json::nlohmann_json GTest::gtest_main)
CMAKE
    cat >"$tmp/t.cpp" <<'CPP'
#include <CLI/CLI.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
TEST(DeviceDeps, Works) {
    CLI::App app{"t"};
    EXPECT_EQ(nlohmann::json::parse("{\"a\": 1}")["a"], 1);
}
CPP
    # Copy the prefix somewhere else first: proves it is relocatable.
    cp -a "$DEST" "$tmp/deps"
    # /usr ignored so nothing can come from the system packages. Twice: with the multiarch
    # triplet known (Debian/Ubuntu compilers) and without it (other distributions).
    for no_multiarch in OFF ON; do
        log "configure check (NO_MULTIARCH=$no_multiarch)"
        cmake -S "$tmp" -B "$tmp/build-$no_multiarch" -G Ninja -DDEPS="$tmp/deps" -DNO_MULTIARCH="$no_multiarch" \
            -DCMAKE_PREFIX_PATH="$tmp/deps" -DCMAKE_IGNORE_PREFIX_PATH=/usr \
            | grep -E '_DIR=|include=' | sed 's/^/[device-deps]   /'
        # The compiler could also see /usr/include here; the check is about what CMake found.
        cmake --build "$tmp/build-$no_multiarch" >/dev/null
        "$tmp/build-$no_multiarch/t" --gtest_brief=1 >/dev/null
    done
    log "check passed: CMake found CLI11, nlohmann_json and GTest inside the copied prefix; test program ran"
fi
