#!/usr/bin/env bash
# The fuzz step of packaging/run-tests.sh (packaging/fuzz.sh --ci) skips with a message, not a
# failure, when it is switched off or clang-14 / libFuzzer cannot build a fuzzer; outside --ci a
# missing toolchain is an error. Nothing here builds or fuzzes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
fuzz() { bash "$ROOT/packaging/fuzz.sh" "$@" >"$tmp/out" 2>&1; }

VARSCOPE_FUZZ_SECONDS=0 fuzz --ci || fail "VARSCOPE_FUZZ_SECONDS=0 should skip, got: $(cat "$tmp/out")"
grep -q 'skipped: VARSCOPE_FUZZ_SECONDS=0' "$tmp/out" || fail "no skip message: $(cat "$tmp/out")"

# A PATH without clang++-14 (only what the script needs before its toolchain check).
mkdir "$tmp/bin"
for tool in bash dirname; do ln -s "$(command -v "$tool")" "$tmp/bin/$tool"; done
PATH="$tmp/bin" fuzz --ci 5 || fail "a missing clang++-14 should skip --ci, got: $(cat "$tmp/out")"
grep -q 'skipped: clang++-14 not found' "$tmp/out" || fail "no skip message: $(cat "$tmp/out")"
rc=0
PATH="$tmp/bin" fuzz 5 || rc=$?
[ "$rc" = 2 ] || fail "without --ci a missing clang++-14 should exit 2, got $rc: $(cat "$tmp/out")"

# A clang++-14 that cannot link libFuzzer (clang-14 without libfuzzer-14-dev).
mkdir "$tmp/nolib"
printf '#!/bin/sh\necho "ld: cannot find libclang_rt.fuzzer-x86_64.a" >&2\nexit 1\n' >"$tmp/nolib/clang++-14"
chmod +x "$tmp/nolib/clang++-14"
PATH="$tmp/nolib:$PATH" fuzz --ci 5 || fail "clang without libFuzzer should skip --ci, got: $(cat "$tmp/out")"
grep -q 'skipped: clang++-14 cannot link a fuzzer' "$tmp/out" || fail "no skip message: $(cat "$tmp/out")"

# A clang++-14 whose fuzzers do not run here (LeakSanitizer under ptrace, say).
mkdir "$tmp/norun"
cat >"$tmp/norun/clang++-14" <<'CLANG'
#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
printf '#!/bin/sh\necho "==1==LeakSanitizer has encountered a fatal error." >&2\nexit 1\n' >"$out"
chmod +x "$out"
CLANG
chmod +x "$tmp/norun/clang++-14"
PATH="$tmp/norun:$PATH" fuzz --ci 5 || fail "fuzzers that cannot run should skip --ci, got: $(cat "$tmp/out")"
grep -q 'skipped: a fuzzer built with ASan + UBSan does not run here: .*LeakSanitizer' "$tmp/out" ||
    fail "no skip message: $(cat "$tmp/out")"

rc=0
VARSCOPE_FUZZ_SECONDS=abc fuzz --ci || rc=$?
if [ "$rc" != 2 ] || ! grep -q "SECONDS must be a whole number, got 'abc'" "$tmp/out"; then
    fail "a bad VARSCOPE_FUZZ_SECONDS should be refused: $rc $(cat "$tmp/out")"
fi
rc=0
fuzz --ci 5 fuzz_nothing || rc=$?
if [ "$rc" != 2 ] || ! grep -q "unknown harness 'fuzz_nothing'" "$tmp/out"; then
    fail "an unknown harness should be refused: $rc $(cat "$tmp/out")"
fi
echo "fuzz step: ok"
