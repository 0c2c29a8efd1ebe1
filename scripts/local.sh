#!/usr/bin/env bash
# The project's main job (README.md): installs what is missing on a fresh
# machine (scripts/install-deps.sh), then builds netgauge and runs it on a
# two-host virtual cluster it builds itself: `netgauge --local`, with any
# extra arguments passed on (e.g. `scripts/local.sh --busy-poll -s 64`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
exec cargo run --release -p netgauge -- --local "$@"
