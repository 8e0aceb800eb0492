#!/usr/bin/env bash
# Check that VARScope's C++ and CUDA sources are formatted by .clang-format.
#
#   bash packaging/check-format.sh          # check; exit 1 and list the files to fix
#   bash packaging/check-format.sh --fix    # rewrite those files in place (clang-format -i)
#   bash packaging/check-format.sh FILE...  # check (or --fix) only these files
#
# Scope: *.cpp *.cc *.cxx *.h *.hpp *.cu *.cuh *.inl under app/ ui/ core/ kernels/ visualization/
# tests/ (the files git tracks; every such file outside a git checkout). Directories named
# third_party/, external/ or vendor/ are left out. VARSCOPE_FORMAT_JOBS=N: parallel checks.
#
# The formatter is pinned: clang-format output changes between major versions, so every machine
# must run the same one. CLANG_FORMAT=/path/to/binary overrides; otherwise clang-format-14
# (Debian 12's `clang-format` package), or `clang-format` if it reports version 14.
#
# Exit status: 0 all formatted, 1 files to fix (listed), 2 no usable clang-format / bad usage.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WANT_MAJOR=14
log() { printf '[format] %s\n' "$*"; }
die() { printf '[format] error: %s\n' "$*" >&2; exit 2; }

fix=0
files=()
for arg in "$@"; do
    case "$arg" in
        --fix) fix=1 ;;
        -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option $arg (use --fix or --help)" ;;
        *) files+=("$arg") ;;
    esac
done

# --- the pinned binary -------------------------------------------------------------------------
major_of() { "$1" --version 2>/dev/null | sed -n 's/.*clang-format version \([0-9][0-9]*\).*/\1/p' | head -n1; }
if [ -n "${CLANG_FORMAT:-}" ]; then
    CF="$CLANG_FORMAT"
    command -v "$CF" >/dev/null 2>&1 || die "CLANG_FORMAT=$CF not found"
    [ "$(major_of "$CF")" = "$WANT_MAJOR" ] \
        || log "warning: $CF is version $(major_of "$CF"), the tree is formatted with $WANT_MAJOR"
elif command -v "clang-format-$WANT_MAJOR" >/dev/null 2>&1; then
    CF="clang-format-$WANT_MAJOR"
elif command -v clang-format >/dev/null 2>&1 && [ "$(major_of clang-format)" = "$WANT_MAJOR" ]; then
    CF="clang-format"
else
    die "clang-format $WANT_MAJOR not found (apt-get install clang-format on Debian 12," \
        "or set CLANG_FORMAT=/path/to/clang-format-$WANT_MAJOR)"
fi
[ -f "$ROOT/.clang-format" ] || die "$ROOT/.clang-format is missing"
(cd "$ROOT" && "$CF" --style=file --dump-config >/dev/null) || die "$CF cannot read $ROOT/.clang-format"

# --- the files ---------------------------------------------------------------------------------
cd "$ROOT"
dirs=(app ui core kernels visualization tests)
exts='\.(cpp|cc|cxx|h|hpp|cu|cuh|inl)$'
skip='(^|/)(third_party|external|vendor)/'
if [ "${#files[@]}" -eq 0 ]; then
    if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        mapfile -t files < <(git ls-files -- "${dirs[@]}" | grep -E "$exts" | grep -Ev "$skip" || true)
    else
        mapfile -t files < <(find "${dirs[@]}" -type f 2>/dev/null | grep -E "$exts" \
                             | grep -Ev "$skip" | sort || true)
    fi
fi
[ "${#files[@]}" -gt 0 ] || die "no source files found under ${dirs[*]}"

if [ "$fix" = "1" ]; then
    log "$CF -i on ${#files[@]} files"
    printf '%s\0' "${files[@]}" | xargs -0 -n 50 "$CF" -i --style=file
    log "done; review with: git diff --stat"
    exit 0
fi

# One clang-format call per file (in parallel), so that a failing file is named exactly once.
for f in "${files[@]}"; do
    [ -f "$f" ] || die "$f: no such file"
done
jobs="${VARSCOPE_FORMAT_JOBS:-$(nproc 2>/dev/null || echo 2)}"
mapfile -t bad < <(printf '%s\0' "${files[@]}" \
    | xargs -0 -P "$jobs" -I{} sh -c \
        '"$0" --dry-run -Werror --style=file "$1" >/dev/null 2>&1 || printf "%s\n" "$1"' "$CF" {} \
    | LC_ALL=C sort)

if [ "${#bad[@]}" -eq 0 ]; then
    log "all ${#files[@]} files formatted ($CF, $("$CF" --version | sed 's/.*version //'))"
    exit 0
fi
log "${#bad[@]} of ${#files[@]} files are not formatted ($CF):"
printf '  %s\n' "${bad[@]}"
log "fix them with: bash packaging/check-format.sh --fix   (or: $CF -i FILE)"
exit 1
