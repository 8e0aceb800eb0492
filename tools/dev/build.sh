#!/usr/bin/env bash
# Development helper: several people (or agents) share one build tree on this 2-core machine;
# ninja runs are serialised with a lock so they do not thrash. Usage: tools/dev/build.sh TARGET...
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
exec flock /tmp/varscope-build.lock ninja -C "${VARSCOPE_BUILD_DIR:-$here/build}" "$@"
