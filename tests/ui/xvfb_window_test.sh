#!/usr/bin/env bash
# The real app in a real X window (issue #37): starts `varscope` on the embedded text-to-image
# model under xvfb-run (1600x1000), drives it with xdotool and checks screenshots and exported
# settings (tests/ui/xvfb_window_test.py says what). Exits 77 (ctest SKIP_RETURN_CODE) when
# Xvfb, xdotool, xwd, Python 3 or the app binary are missing.
#
#   tests/ui/xvfb_window_test.sh BUILD/ui/varscope [SHOTS_DIR]
set -u
app=${1:-}
shots=${2:-$(mktemp -d /tmp/varscope-xvfb-shots.XXXXXX)}
here=$(cd "$(dirname "$0")" && pwd)

skip() {
    echo "SKIP: $*"
    exit 77
}
[ -n "$app" ] && [ -x "$app" ] || skip "no app binary at '${app}' (build the varscope target)"
for tool in xvfb-run Xvfb xdotool xwd; do
    command -v "$tool" >/dev/null 2>&1 ||
        skip "$tool is not installed (apt-get install xvfb xauth xdotool x11-apps)"
done
python=$(command -v python3 || true)
[ -n "$python" ] || skip "python3 is not installed"

mkdir -p "$shots" || exit 1
# -a: a free display number; the screen of the issue's newcomer test.
exec xvfb-run -a -s "-screen 0 1600x1000x24 -nolisten tcp" \
    "$python" "$here/xvfb_window_test.py" "$app" "$shots"
