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
# launch, comm's MPI bootstrap), then the ecosystem's test suites against
# the libfabric provider (issue 38): fabtests over the UDP link and over
# EDP, one fabtests run under valgrind, mpi4py's suite under ob1 and over
# the provider, MPI's dynamic processes, the provider's fuzzer. A failing
# suite does not stop the others; the run fails at the end, naming them.
# Arguments go to every `cargo test`.
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
  -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

# The ecosystem's suites against the provider (issue 38), each with its
# time: they use the provider the tests built (profile ci).
failed_suites=()
suite() { # name command...: a step whose failure is reported at the end
  local t=$SECONDS name=$1 st=0
  shift
  echo "test.sh: $name" >&2
  "$@" || st=$?
  if [ $st -ne 0 ]; then
    failed_suites+=("$name")
    echo "test.sh: $name: $((SECONDS - t)) s, FAILED (status $st)" >&2
  else
    echo "test.sh: $name: $((SECONDS - t)) s" >&2
  fi
}
suite "fabtests udp" scripts/fabtests.sh --link udp
suite "fabtests edp" scripts/fabtests.sh --link edp
suite "fabtests valgrind" scripts/fabtests.sh --valgrind
suite "mpi4py suite" scripts/mpi4py-suite.sh
suite "mpi dynamic processes" scripts/mpi-dynproc.sh
suite "provider fuzzer" scripts/fi-fuzz.sh --time 60
if [ ${#failed_suites[@]} -gt 0 ]; then
  echo "test.sh: failed: ${failed_suites[*]} (after $((SECONDS - t_all)) s)" >&2
  exit 1
fi
echo "test.sh: all steps passed in $((SECONDS - t_all)) s" >&2
