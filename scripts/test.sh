#!/usr/bin/env bash
# The project's test command (README.md; CI runs it through .ci/run).
#
# Unit, property and simulation tests run everywhere. Tests on real links
# (veth pairs between network namespaces) need root: without it they print
# why they skip, except under CI=true, where they must run and fail loudly.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
cargo test --workspace --release "$@"
