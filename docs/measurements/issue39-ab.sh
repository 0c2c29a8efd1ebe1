#!/usr/bin/env bash
# Issue 39's before/after table: the issue's own commands, run with the
# branch point's build (B=/work/wt-bulk-before) and this branch's (A=.),
# alternating per round, in one session; the load average before each run.
#   docs/measurements/issue39-ab.sh ROUNDS [mtu...]
set -uo pipefail
rounds=${1:-2}; shift || true
mtus=${*:-1500 9000}
A=$(cd "$(dirname "$0")/../.." && pwd)
B=${B:-/work/wt-bulk-before}
load() { echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"; }
prog=$A/target/osu-ompi
for r in $(seq 1 "$rounds"); do
  for mtu in $mtus; do
    for v in B A; do
      d=${!v}
      echo "### round $r, MTU $mtu, build $v ($d)"
      load
      if [ "$mtu" = 1500 ]; then
        "$d/target/release/comm-osu" latency-p50 --local 2 --link edp --mtu "$mtu" --ompi "$prog" \
          --provider "$d/target/fi" --repeat 1 -m 8:8 -i 5000 -x 500 2>&1 | grep -v "^#\s*$"
      fi
      load
      "$d/target/release/comm-osu" bw --local 2 --link edp --mtu "$mtu" --ompi "$prog" \
        --provider "$d/target/fi" --repeat 1 -m 1048576:1048576 -i 100 -x 10 2>&1
      load
      "$d/target/release/netgauge" --local --hosts 2 --mtu "$mtu" -x stream -m edp,comm-edp \
        -s 1048576 -c 300 2>&1 | tail -12
    done
  done
done
load
