#!/usr/bin/env bash
# MPI's dynamic processes under Open MPI, over the provider `clusternet`:
# the programs of fabric/tests/mpi/ for MPI_Comm_join (comm_join.c),
# MPI_Comm_connect / MPI_Comm_accept (connect_accept.c) and MPI_Comm_spawn
# (spawn.c), each first under Open MPI's ob1/tcp (so that a failure below is
# the provider's, not the program's), then over the provider (pml cm, mtl
# ofi, the UDP link on loopback). Each run has a time limit.
#
#   scripts/mpi-dynproc.sh [--timeout S]
#
# Prints one line per program and MPI; fails when a program fails under
# either. Runs as root (mpirun --allow-run-as-root). Binaries and logs:
# target/mpi-dynproc/. Environment: CLUSTERNET_FI_DIR, a folder holding
# libclusternet-fi.so to test instead of building it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
timeout_s=120
case "${1:-}" in
  --timeout) timeout_s=${2:?}; shift 2 ;;
  -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "mpi-dynproc: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac
out=$root/target/mpi-dynproc
mkdir -p "$out"
if [ -n "${CLUSTERNET_FI_DIR:-}" ]; then
  fi_dir=$(cd "$CLUSTERNET_FI_DIR" && pwd)
else
  fi_dir=$(FI_BUILD_PROFILE=${FI_BUILD_PROFILE:-ci} scripts/build-provider.sh | sed -n 's/^export FI_PROVIDER_PATH=//p')
fi
[ -f "$fi_dir/libclusternet-fi.so" ] || { echo "mpi-dynproc: no $fi_dir/libclusternet-fi.so" >&2; exit 1; }

job_pgid=
cleanup() {
  [ -n "$job_pgid" ] && kill -KILL -- "-$job_pgid" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# program, ranks, arguments
runs=(
  "comm_join 2"
  "connect_accept 2"
  "connect_accept 3"
  "spawn 1 2"
  "spawn 2 2"
)
for p in comm_join connect_accept spawn; do
  mpicc -Wall -Wextra -Werror -O2 -o "$out/$p" "fabric/tests/mpi/$p.c"
done

fail=0 pass=0
for r in "${runs[@]}"; do
  read -r prog np args <<<"$r"
  for mpi in ob1 provider; do
    # Everything in the environment, so that spawned processes get it too.
    env=(OMPI_MCA_btl=self,tcp)
    case $mpi in
      ob1) env+=(OMPI_MCA_pml=ob1) ;;
      provider) env+=(OMPI_MCA_pml=cm OMPI_MCA_mtl=ofi OMPI_MCA_mtl_ofi_provider_include=clusternet
          FI_PROVIDER_PATH="$fi_dir" FI_CLUSTERNET_LINK=udp FI_CLUSTERNET_IFACE=lo) ;;
    esac
    log=$out/$prog-np$np-$mpi.log
    t0=$SECONDS st=0
    # shellcheck disable=SC2086 # args are words
    env "${env[@]}" setsid timeout -k 10 "$timeout_s" mpirun --allow-run-as-root --oversubscribe \
      -np "$np" "$out/$prog" $args >"$log" 2>&1 &
    job_pgid=$!
    wait "$job_pgid" || st=$?
    # Whatever of the job is left (ranks of a stopped mpirun).
    kill -KILL -- "-$job_pgid" 2>/dev/null || true
    job_pgid=
    if [ $st -eq 0 ] && grep -q "^$prog: ok" "$log"; then
      result=pass
      pass=$((pass + 1))
    else
      result=FAIL
      [ $st -eq 124 ] && result="FAIL (timeout ${timeout_s} s)"
      fail=$((fail + 1))
    fi
    printf 'mpi-dynproc %-15s np=%s %-8s %s (%d s; %s)\n' "$prog" "$np" "$mpi" "$result" \
      $((SECONDS - t0)) "${log#"$root"/}"
    [ "$result" = pass ] || tail -4 "$log" | sed 's/^/    /'
  done
done
echo "mpi-dynproc: $pass passed, $fail failed"
[ $fail -eq 0 ]
