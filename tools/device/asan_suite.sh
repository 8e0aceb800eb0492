#!/usr/bin/env bash
# Issue #36's sanitizer suite on the GPU machine's CPU cores: the `asan` preset's settings
# (packaging/sanitize.sh's options) built from a copy of this tree in /tmp/srcasan, every shipped
# model put beside it, ctest on many cores. The shipped models exceed one call's upload together
# with the tree, so a call can stage some of them in /tmp/models and a later call (same warm
# machine) the rest (session 31 did: bench/results/2026-11-29-h200/session31).
#   STAGE=build bash tools/device/asan_suite.sh   # copy the tree, configure, build (setsid: it
#                                                 # outlives the call), stage the models it carries
#   STAGE=stage bash tools/device/asan_suite.sh   # stage the models this call carries
#   STAGE=test  bash tools/device/asan_suite.sh   # wait for the build, stage, run ctest
# lscpu is printed: session 31's 4 Infinity parity failures on that CPU are blamed on MKL's
# AVX-512 path on Intel CPUs, which the tests' launcher now pins to AVX2 (tests/CMakeLists.txt).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
JOBS=${JOBS:-24}
DEPS=${DEPS:-$PWD/.device/deps-x}
stage_models() {
  mkdir -p /tmp/models/emoji-t2i-t5
  cp resources/models/*.safetensors /tmp/models/ 2>/dev/null
  cp resources/models/emoji-t2i-t5/model.safetensors /tmp/models/emoji-t2i-t5/ 2>/dev/null
  ls /tmp/models /tmp/models/emoji-t2i-t5
}
case "${STAGE:-test}" in
build)
  rm -rf /tmp/srcasan && cp -a . /tmp/srcasan && cp -a "$DEPS" /tmp/deps-asan
  stage_models
  ( cd /tmp/srcasan && cmake -S . -B /tmp/basan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DVARSCOPE_SANITIZE=ON \
      -DVARSCOPE_BUILD_GUI=OFF -DVARSCOPE_WITH_OPENCV=OFF -DVARSCOPE_WITH_CUDA=OFF \
      -DVARSCOPE_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH=/tmp/deps-asan \
      > /tmp/asan_cmake.log 2>&1 || { tail -20 /tmp/asan_cmake.log; exit 1; }
    ASAN_OPTIONS=detect_leaks=0:detect_odr_violation=0 setsid nohup ninja -C /tmp/basan -j "$JOBS" \
      varscope-cli varscope_tests > /tmp/asan_build.log 2>&1 < /dev/null & )
  echo "asan build started" ;;
stage) stage_models ;;
test)
  stage_models
  while pgrep -f "ninja -C /tmp/basan" >/dev/null; do sleep 5; done
  tail -1 /tmp/asan_build.log; grep -m3 -A8 "error:" /tmp/asan_build.log
  cp /tmp/models/*.safetensors /tmp/srcasan/resources/models/
  cp /tmp/models/emoji-t2i-t5/model.safetensors /tmp/srcasan/resources/models/emoji-t2i-t5/
  lscpu | grep -E "Model name|Flags" | cut -c1-200
  cd /tmp/srcasan || exit 1
  export LD_LIBRARY_PATH=/tmp/deps-asan/lib:${LD_LIBRARY_PATH:-}
  export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_odr_violation=0:abort_on_error=0:allocator_may_return_null=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  export LSAN_OPTIONS="suppressions=$PWD/fuzz/lsan.supp"
  export OMP_NUM_THREADS=2 CUDA_VISIBLE_DEVICES=
  timeout "${ASAN_TEST_TIMEOUT:-480}" ctest --test-dir /tmp/basan -j "$JOBS" --timeout 400 \
    --output-on-failure --exclude-regex '^varscope_gpu_tests_NOT_BUILT$' > /tmp/asan_ctest.log 2>&1
  echo "asan ctest rc=$?"
  grep -E "tests passed|tests failed|Total Test time" /tmp/asan_ctest.log
  grep -E "\(Failed\)|\(Timeout\)|Not Run" /tmp/asan_ctest.log | head -30
  echo "sanitizer reports: $(grep -c 'runtime error\|ERROR: AddressSanitizer\|ERROR: LeakSanitizer' /tmp/asan_ctest.log)"
  gzip -c /tmp/asan_ctest.log > "$OUT/asan_ctest.log.gz" ;;
*) echo "STAGE must be build, stage or test"; exit 2 ;;
esac
