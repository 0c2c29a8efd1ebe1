#!/usr/bin/env bash
# The project's test command (README.md; CI runs it through .ci/run).
#
#   scripts/test.sh [CARGO TEST ARGS...]     e.g. --no-fail-fast, -- --nocapture
#   scripts/test.sh -h | --help
#
# Installs missing system packages (scripts/install-deps.sh), then: the
# style gates (rustfmt, clippy with -D warnings, the API documentation
# without broken or private links: cargo doc -D warnings), the declared
# rust-version when that toolchain is installed, every test of the
# workspace, and the tests of the `mpi` features (netgauge's mpirun/srun
# launch, comm's MPI bootstrap). Arguments go to every `cargo test`.
#
# Unit, property and simulation tests run everywhere. Tests on real links
# (veth pairs between network namespaces) need root: without it they print
# why they skip, except under CI=true, where they must run and fail loudly.
#
# The tests build with the `ci` profile (Cargo.toml): release's
# optimization, which the tests on real links need, without its LTO and
# full debug info, so that the test binaries link in a fraction of the
# time; benchmarks and `cargo build --release` keep the release profile.
# Each step prints its wall time.
set -euo pipefail
case "${1:-}" in
  -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
cd "$(dirname "$0")/.."
scripts/install-deps.sh
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"

t_all=$SECONDS
step() { # name command...
  local t=$SECONDS name=$1
  shift
  echo "test.sh: $name" >&2
  "$@"
  echo "test.sh: $name: $((SECONDS - t)) s" >&2
}

# Style gates first (cheap, and a red CI should name the real cause).
step "rustfmt" cargo fmt --all -- --check
step "clippy" cargo clippy --workspace --all-targets --quiet -- -D warnings
step "doc" env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
# The rust-version Cargo.toml declares, checked when that toolchain is
# installed (`rustup toolchain install 1.88 --profile minimal`).
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
if rustup toolchain list 2>/dev/null | grep -q "^$msrv"; then
  step "msrv $msrv" env CARGO_TARGET_DIR=target/msrv cargo "+$msrv" check --workspace --all-targets --quiet
fi
step "tests" cargo test --workspace --profile ci "$@"
# netgauge's MPI launch (feature mpi, Open MPI from install-deps.sh).
step "clippy netgauge mpi" cargo clippy -p netgauge --features mpi --all-targets --quiet -- -D warnings
step "tests netgauge mpi" cargo test --profile ci -p netgauge --features mpi --test mpi "$@"
# comm's MPI bootstrap under mpirun (feature mpi).
step "clippy comm mpi" cargo clippy -p comm --features mpi --all-targets --quiet -- -D warnings
step "tests comm mpi" cargo test --profile ci -p comm --features mpi --test mpi_bootstrap "$@"
echo "test.sh: all steps passed in $((SECONDS - t_all)) s" >&2
