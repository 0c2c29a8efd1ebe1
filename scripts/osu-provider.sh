#!/usr/bin/env bash
# The OSU micro-benchmarks (OMB 7.4, the suite's own code) over the
# libfabric provider `clusternet` beside Open MPI's TCP BTL, on the same
# virtual cluster, alternating, with netgauge's bulk floor in the same run.
#
#   scripts/osu-provider.sh [--mtu "1500 9000"] [--repeat N] [--quick]
#                           [--fi DIR] [--no-udp]
#
# Builds OMB 7.4 from ../shared/third_party/osu-micro-benchmarks-7.4.tar.gz
# with Debian's Open MPI (mpicc) into ${CARGO_TARGET_DIR:-target}/omb, the
# provider into target/fi (scripts/build-provider.sh), comm-osu and netgauge
# (release); then, per MTU:
#
#   netgauge --local --bridge -x stream -m eth,edp,tcp (the floor, 1 MiB,
#            on a bridge: the topology of mpirun's cluster, where OSU runs)
#   netgauge --local -x stream -m eth,edp,tcp (the same on a veth pair)
#   netgauge --local --bridge -x stream_bidir -m eth,edp,tcp (both ways
#            at once: osu_bibw's floor)
#   netgauge --local --hosts 4 -x msgrate -m eth,edp,tcp (2 pairs at once)
#   comm-osu BENCH --local N --link edp --mtu M --ompi OMB/osu_X --osu
#            --provider target/fi --repeat R --counters
#
# for osu_latency, osu_bw, osu_bibw (2 ranks) and osu_mbw_mr, osu_alltoall
# (4 ranks, 2 pairs for mbw_mr), and osu_bw at 1 MiB alone for the CPU
# time per MiB of each job (getrusage of mpirun and its ranks); then over
# the UDP link on loopback (unless --no-udp) osu_latency and osu_bw.
# --fi DIR: the provider in DIR instead of target/fi (an older build, for
# a before/after table). Each comm-osu run prints both outputs,
# the ratio provider / TCP per size and run, and (--counters) the
# provider's counters of every rank at close: CTP's resends and duplicates,
# the pulls' asks and parts (FI_LOG_LEVEL=info for the provider only, on
# stderr). The load average is printed before each step: ratios within one
# run only. Root (virtual cluster). --quick: fewer sizes and iterations.
set -euo pipefail
cd "$(dirname "$0")/.."
mtus="1500 9000"
repeat=2
quick=0
fi_dir=
udp=1
while [ $# -gt 0 ]; do
  case "$1" in
    --mtu) mtus=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --fi) fi_dir=$2; shift 2 ;;
    --no-udp) udp=0; shift ;;
    *) echo "osu-provider: unknown argument $1" >&2; exit 2 ;;
  esac
done
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}
target=${CARGO_TARGET_DIR:-target}
omb=$target/omb
tarball=../shared/third_party/osu-micro-benchmarks-7.4.tar.gz
if [ ! -x "$omb/c/mpi/pt2pt/standard/osu_latency" ]; then
  mkdir -p "$omb"
  tar -xzf "$tarball" -C "$omb" --strip-components=1
  (cd "$omb" && autoreconf -fi >/dev/null 2>&1 && ./configure CC=mpicc CXX=mpicxx >/dev/null \
    && make -j1 >/dev/null)
fi
pt2pt=$omb/c/mpi/pt2pt/standard
coll=$omb/c/mpi/collective/blocking
scripts/build-provider.sh >/dev/null
fi_dir=${fi_dir:-$target/fi}
cargo build --release -p comm-osu -p netgauge --quiet
osu=$target/release/comm-osu
ng=$target/release/netgauge
load() { echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"; }
if [ $quick = 1 ]; then
  lat="-m 0:65536 -i 2000 -x 200"; bw="-m 1:4194304 -i 100 -x 10"; a2a="-m 1:65536 -i 200 -x 20"
else
  lat="-m 0:1048576 -i 10000 -x 1000"; bw="-m 1:4194304 -i 1000 -x 100"; a2a="-m 1:1048576 -i 1000 -x 100"
fi
# comm-osu KIND N PROGRAM LINK MTU OMB-OPTIONS...
run() {
  local kind=$1 n=$2 prog=$3 link=$4 mtu=$5
  shift 5
  load
  echo "## $osu $kind --local $n --link $link --mtu $mtu --ompi $prog --osu --provider $fi_dir --repeat $repeat --counters $*"
  "$osu" "$kind" --local "$n" --link "$link" --mtu "$mtu" --ompi "$prog" --osu \
    --provider "$fi_dir" --repeat "$repeat" --counters "$@" 2>&1 || true
}
for mtu in $mtus; do
  echo "## MTU $mtu"
  load
  # The floor on the OSU runs' own topology (comm-osu's cluster is bridged
  # for mpirun), then on a veth pair (one crossing less per frame).
  echo "## $ng --local --bridge --mtu $mtu -x stream -m eth,edp,tcp -s 1048576 -c 300"
  "$ng" --local --bridge --mtu "$mtu" -x stream -m eth,edp,tcp -s 1048576 -c 300
  load
  echo "## $ng --local --mtu $mtu -x stream -m eth,edp,tcp -s 1048576 -c 300"
  "$ng" --local --mtu "$mtu" -x stream -m eth,edp,tcp -s 1048576 -c 300
  load
  echo "## $ng --local --bridge --mtu $mtu -x stream_bidir -m eth,edp,tcp -s 1048576 -c 300"
  "$ng" --local --bridge --mtu "$mtu" -x stream_bidir -m eth,edp,tcp -s 1048576 -c 300 || true
  load
  echo "## $ng --local --hosts 4 --mtu $mtu -x msgrate -m eth,edp,tcp -s 1048576 -c 300"
  "$ng" --local --hosts 4 --mtu "$mtu" -x msgrate -m eth,edp,tcp -s 1048576 -c 300 || true
  for b in latency:2:osu_latency:$pt2pt:lat bw:2:osu_bw:$pt2pt:bw bibw:2:osu_bibw:$pt2pt:bw \
           bw:4:osu_mbw_mr:$pt2pt:bw latency:4:osu_alltoall:$coll:a2a; do
    IFS=: read -r kind n prog dir sizes <<<"$b"
    case $sizes in lat) s=$lat ;; bw) s=$bw ;; a2a) s=$a2a ;; esac
    # shellcheck disable=SC2086
    run "$kind" "$n" "$dir/$prog" edp "$mtu" $s
  done
  run bw 2 "$pt2pt/osu_bw" edp "$mtu" -m 1048576:1048576 -i 200 -x 20
done
if [ $udp = 1 ]; then
  echo "## UDP link on loopback"
  # shellcheck disable=SC2086
  run latency 2 "$pt2pt/osu_latency" udp 1500 $lat
  # shellcheck disable=SC2086
  run bw 2 "$pt2pt/osu_bw" udp 1500 $bw
fi
load
