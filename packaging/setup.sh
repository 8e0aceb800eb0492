#!/usr/bin/env bash
# VARScope set-up for a fresh Debian 12 machine. Idempotent: a second run changes nothing
# and takes seconds.
#
#   1. system packages (apt), only those missing; `apt-get update` only when something is.
#   2. a project-local Python venv with torch==2.11.0 (+ numpy), whose wheel provides LibTorch.
#      Skipped when Torch_DIR is set (an existing LibTorch is used instead).
#
# Environment:
#   VARSCOPE_NO_GUI=1     skip the Qt / QCustomPlot / Xvfb packages
#   VARSCOPE_FUZZ_PACKAGES=1 also clang-14 / libfuzzer-14-dev (run-tests.sh sets it for its fuzz
#                            step unless VARSCOPE_FUZZ_SECONDS=0; the app alone does not need them)
#   VARSCOPE_VENV=DIR     venv location (default: <repo>/.venv)
#   Torch_DIR=DIR         use this LibTorch (…/share/cmake/Torch); no venv, no pip
#   VARSCOPE_SKIP_APT=1   do not touch system packages (e.g. no root, packages managed elsewhere)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TORCH_VERSION="2.11.0"

log() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

# Run a command as root: directly when we are root, else through sudo when it exists.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

# ---------------------------------------------------------------------------------------------
# 1. System packages
# ---------------------------------------------------------------------------------------------
packages=(
    build-essential cmake ninja-build ccache git pkg-config
    python3 python3-venv python3-pip
    libopencv-dev libopencv-contrib-dev
    libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev libsentencepiece-dev
    clang-format
)
# The fuzz step of run-tests.sh (packaging/fuzz.sh --ci): clang with libFuzzer and the sanitizers
fuzz_packages=(clang-14 libfuzzer-14-dev)
if [ "${VARSCOPE_FUZZ_PACKAGES:-0}" = "1" ] && [ "${VARSCOPE_FUZZ_SECONDS:-}" != "0" ]; then
    packages+=("${fuzz_packages[@]}")
fi
# xdotool and x11-apps (xwd): the window test that drives the app under Xvfb
gui_packages=(qt6-base-dev qt6-svg-dev libqcustomplot-dev xvfb xauth xdotool x11-apps)
if [ "${VARSCOPE_NO_GUI:-0}" = "1" ]; then
    log "VARSCOPE_NO_GUI=1: skipping GUI packages (${gui_packages[*]})"
else
    packages+=("${gui_packages[@]}")
fi

if [ "${VARSCOPE_SKIP_APT:-0}" = "1" ]; then
    log "VARSCOPE_SKIP_APT=1: not checking system packages"
elif ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    log "no dpkg/apt-get on this machine: skipping system packages (install the equivalents yourself)"
else
    missing=()
    for p in "${packages[@]}"; do
        status="$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)"
        if [ "$status" != "install ok installed" ]; then
            missing+=("$p")
        fi
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        log "system packages: all ${#packages[@]} present"
    else
        log "system packages: installing ${#missing[@]} missing: ${missing[*]}"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
    fi
fi

# ---------------------------------------------------------------------------------------------
# 2. LibTorch: the PyPI torch wheel in a project-local venv (unless Torch_DIR is given)
# ---------------------------------------------------------------------------------------------
if [ -n "${Torch_DIR:-}" ]; then
    [ -d "$Torch_DIR" ] || die "Torch_DIR=$Torch_DIR is not a directory"
    log "Torch_DIR is set ($Torch_DIR): using that LibTorch, no venv"
    exit 0
fi

VENV="${VARSCOPE_VENV:-$ROOT/.venv}"
case "$VENV" in
    /*) ;;
    *) VENV="$PWD/$VENV" ;;
esac
PY="$VENV/bin/python"

if [ ! -x "$PY" ]; then
    command -v python3 >/dev/null 2>&1 || die "python3 not found (install python3 python3-venv)"
    log "creating venv $VENV"
    python3 -m venv "$VENV"
else
    log "venv $VENV exists"
fi

# Installed versions from package metadata: `import torch` would take seconds and load CUDA.
installed="$("$PY" - <<'EOF'
import importlib.metadata as m
def v(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return "none"
print(v("torch"), v("numpy"))
EOF
)"
read -r have_torch have_numpy <<<"$installed"

if [ "$have_torch" = "$TORCH_VERSION" ] && [ "$have_numpy" != "none" ]; then
    log "torch $have_torch and numpy $have_numpy already installed"
else
    log "installing torch==$TORCH_VERSION and numpy into $VENV (found torch: $have_torch, numpy: $have_numpy)"
    log "the wheel pulls the NVIDIA CUDA runtime wheels (~3.5 GB): this takes several minutes"
    "$PY" -m pip install --disable-pip-version-check "torch==$TORCH_VERSION" numpy \
        || die "pip could not install torch==$TORCH_VERSION (its message is above). Behind a" \
               "proxy or a private index, set pip's PIP_INDEX_URL, PIP_CERT or HTTPS_PROXY and" \
               "run this again: the venv stays, only what is missing is fetched."
    have_torch="$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))')"
    [ "$have_torch" = "$TORCH_VERSION" ] || die "pip left torch $have_torch, wanted $TORCH_VERSION"
    log "torch $have_torch installed"
fi
log "done (python: $PY)"
