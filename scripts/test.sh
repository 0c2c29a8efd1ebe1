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
# Style gates first (cheap, and a red CI should name the real cause).
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
# The rust-version Cargo.toml declares, checked when that toolchain is
# installed (`rustup toolchain install 1.88 --profile minimal`).
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
if rustup toolchain list 2>/dev/null | grep -q "^$msrv"; then
  CARGO_TARGET_DIR=target/msrv cargo "+$msrv" check --workspace --all-targets --quiet
fi
cargo test --workspace --release "$@"
# netgauge's MPI launch (feature mpi, Open MPI from install-deps.sh).
cargo clippy -p netgauge --features mpi --all-targets --quiet -- -D warnings
cargo test --release -p netgauge --features mpi --test mpi "$@"
# comm's MPI bootstrap under mpirun (feature mpi).
cargo clippy -p comm --features mpi --all-targets --quiet -- -D warnings
cargo test --release -p comm --features mpi --test mpi_bootstrap "$@"
