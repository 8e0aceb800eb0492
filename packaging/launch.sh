#!/usr/bin/env bash
# Set up, build and launch VARScope.
#
#   bash packaging/launch.sh [--no-gui] [--cli]
#
# Launches the desktop app (build/ui/varscope) when it was built and a display is available.
# Otherwise runs a CLI demo: the embedded emoji text-to-image model (else the emoji VAR)
# when it is present, else a small random-weight VAR (CPU, a few seconds), and says where the
# image went.
#
#   --no-gui   build without the GUI (implies --cli)
#   --cli      run the CLI demo even when the GUI exists
#
# Environment: as packaging/build.sh (VARSCOPE_BUILD_DIR, VARSCOPE_VENV, Torch_DIR, ...), plus
#   VARSCOPE_DEVICE=cpu|cuda   device of the CLI demo (default: cpu)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '[launch] %s\n' "$*"; }
die() { printf '[launch] error: %s\n' "$*" >&2; exit 1; }

build_args=()
cli_only=0
for arg in "$@"; do
    case "$arg" in
        --no-gui) build_args+=(--no-gui); cli_only=1 ;;
        --cli) cli_only=1 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) die "unknown argument '$arg' (expected --no-gui, --cli)" ;;
    esac
done

bash "$ROOT/packaging/build.sh" ${build_args[@]+"${build_args[@]}"}

BUILD_DIR="${VARSCOPE_BUILD_DIR:-$ROOT/build}"
case "$BUILD_DIR" in
    /*) ;;
    *) BUILD_DIR="$ROOT/$BUILD_DIR" ;;
esac
GUI="$BUILD_DIR/ui/varscope"
CLI="$BUILD_DIR/app/cli/varscope-cli"

# --- desktop app ------------------------------------------------------------------------------
if [ "$cli_only" = 0 ] && [ -x "$GUI" ]; then
    if [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; then
        log "starting $GUI"
        exec "$GUI"
    fi
    log "the GUI is built ($GUI) but there is no display (DISPLAY/WAYLAND_DISPLAY unset): running the CLI demo"
fi

# --- CLI demo ---------------------------------------------------------------------------------
[ -x "$CLI" ] || die "$CLI was not built"
OUT_DIR="$ROOT/out"
mkdir -p "$OUT_DIR"
# PNG needs OpenCV in the build; without it the CLI writes .ppm.
ext=png
if "$CLI" generate --help 2>&1 | grep -q 'no OpenCV'; then
    ext=ppm
fi
OUT="$OUT_DIR/demo.$ext"
DEVICE="${VARSCOPE_DEVICE:-cpu}"

EMBEDDED_VAR="$ROOT/resources/models/emoji-var.safetensors"
EMBEDDED_VAE="$ROOT/resources/models/emoji-vqvae.safetensors"
EMBEDDED_T2I="$ROOT/resources/models/emoji-t2i-infinity.safetensors"
if [ -f "$EMBEDDED_T2I" ]; then  # no checkpoint named: the CLI's default, the text-to-image model
    model=(--prompt "red heart, twemoji style")
    log "generating from a sentence with the embedded emoji text-to-image model on $DEVICE"
elif [ -f "$EMBEDDED_VAR" ]; then
    model=(--var "$EMBEDDED_VAR" --vae "$EMBEDDED_VAE" --prompt "red heart" --cfg 3)
    log "generating with the embedded emoji model ($EMBEDDED_VAR) on $DEVICE"
else
    model=(--random 4 --patch-nums "1,2,3,4")
    log "no embedded model yet ($EMBEDDED_VAR): random-weight VAR-d4 demo on $DEVICE (expect noise, not a picture)"
fi
cmd=("$CLI" generate "${model[@]}" --device "$DEVICE" --seed 0 --out "$OUT" --force)
log "${cmd[*]}"
"${cmd[@]}"
log "image written to $OUT"
