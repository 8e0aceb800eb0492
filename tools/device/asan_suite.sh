#!/usr/bin/env bash
# Issue #36's sanitizer suite on the GPU machine's CPU cores: packaging/sanitize.sh (the `asan`
# preset and its sanitizer options) run in a copy of this tree at /tmp/srcasan, with every shipped
# model put beside it. The shipped models exceed one call's upload together with the tree, so a
# call can stage some of them in /tmp/models and a later call (same warm machine) the rest
# (session 31 did: bench/results/2026-11-29-h200/session31).
#   STAGE=build bash tools/device/asan_suite.sh   # copy the tree, build (setsid: it outlives the
#                                                 # call), stage the models this call carries
#   STAGE=stage bash tools/device/asan_suite.sh   # stage the models this call carries
#   STAGE=test  bash tools/device/asan_suite.sh   # wait for the build, stage, run the tests
# lscpu is printed: session 31's 4 Infinity parity failures on that CPU are blamed on MKL's
# AVX-512 path on Intel CPUs, which the tests' launcher now pins to AVX2 (tests/CMakeLists.txt).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export VARSCOPE_SANITIZE_JOBS=${JOBS:-24}
export VARSCOPE_SANITIZE_CMAKE_ARGS="-DCMAKE_PREFIX_PATH=/tmp/deps-asan -DVARSCOPE_PYTHON=$(command -v python3)"
export LD_LIBRARY_PATH=/tmp/deps-asan/lib:${LD_LIBRARY_PATH:-}
stage_models() {
  mkdir -p /tmp/models/emoji-t2i-t5
  cp resources/models/*.safetensors /tmp/models/ 2>/dev/null
  cp resources/models/emoji-t2i-t5/model.safetensors /tmp/models/emoji-t2i-t5/ 2>/dev/null
  ls /tmp/models /tmp/models/emoji-t2i-t5
}
case "${STAGE:-test}" in
build)
  rm -rf /tmp/srcasan && cp -a . /tmp/srcasan && cp -a "${DEPS:-$PWD/.device/deps-x}" /tmp/deps-asan
  stage_models
  setsid nohup bash /tmp/srcasan/packaging/sanitize.sh --build-only > /tmp/asan_build.log 2>&1 < /dev/null &
  echo "asan build started" ;;
stage) stage_models ;;
test)
  stage_models
  while pgrep -f "sanitize.sh --build-only" >/dev/null; do sleep 5; done
  tail -1 /tmp/asan_build.log; grep -m3 -A8 "error:" /tmp/asan_build.log
  cp /tmp/models/*.safetensors /tmp/srcasan/resources/models/
  cp /tmp/models/emoji-t2i-t5/model.safetensors /tmp/srcasan/resources/models/emoji-t2i-t5/
  lscpu | grep -E "Model name|Flags" | cut -c1-200
  export OMP_NUM_THREADS=2 CUDA_VISIBLE_DEVICES=
  timeout "${ASAN_TEST_TIMEOUT:-480}" bash /tmp/srcasan/packaging/sanitize.sh --test-only \
    > /tmp/asan_ctest.log 2>&1
  echo "asan ctest rc=$?"
  grep -E "tests passed|tests failed|Total Test time" /tmp/asan_ctest.log
  grep -E "\(Failed\)|\(Timeout\)|Not Run" /tmp/asan_ctest.log | head -30
  echo "sanitizer reports: $(grep -c 'runtime error\|ERROR: AddressSanitizer\|ERROR: LeakSanitizer' /tmp/asan_ctest.log)"
  gzip -c /tmp/asan_ctest.log > "$OUT/asan_ctest.log.gz" ;;
*) echo "STAGE must be build, stage or test"; exit 2 ;;
esac
