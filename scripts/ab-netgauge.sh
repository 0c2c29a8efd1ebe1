#!/usr/bin/env bash
# A/B comparison of two netgauge builds on one machine, alternating, so
# that both see the same noise (the machine's load drifts between runs).
#
#   scripts/ab-netgauge.sh [-r ROUNDS] [-o DIR] BIN_A BIN_B -- NETGAUGE ARGS...
#
# e.g. (a build of the branch point in ../before, this tree's release build):
#   scripts/ab-netgauge.sh -r 3 ../before/target/release/netgauge \
#       target/release/netgauge -- --local --busy-poll -s 64 -c 20000 \
#       -m edp,esp,ctp-edp,ctp-udp,comm-edp,comm-udp
#
# Runs A, B, A, B, ... ROUNDS times each with the same arguments plus
# `--csv`, prints the load average before each run, and ends with a table
# per mode and size: each build's p50 half round trip (us; one_one) or
# Mbit/s (stream) per round, their medians, and B / A of the medians.
# The CSV files stay in DIR (default: a new temporary folder). Needs root
# for `--local` virtual clusters over EDP (as netgauge itself).
set -euo pipefail
rounds=3
out=""
while getopts "r:o:h" o; do
  case $o in
    r) rounds=$OPTARG ;;
    o) out=$OPTARG ;;
    h) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 3 ] && [ "$3" = "--" ] || { echo "usage: $0 [-r N] [-o DIR] BIN_A BIN_B -- ARGS..." >&2; exit 2; }
a=$1 b=$2
shift 3
for bin in "$a" "$b"; do
  [ -x "$bin" ] || { echo "ab-netgauge: $bin is not an executable netgauge" >&2; exit 2; }
done
out=${out:-$(mktemp -d /tmp/ab-netgauge.XXXXXX)}
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for side in A B; do
    bin=$a
    [ "$side" = B ] && bin=$b
    echo "ab-netgauge: round $r $side ($bin) load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    "$bin" "$@" --csv "$out/$side-$r.csv" >"$out/$side-$r.txt" 2>&1 || {
      echo "ab-netgauge: $side round $r failed; see $out/$side-$r.txt" >&2
      tail -5 "$out/$side-$r.txt" >&2
      exit 1
    }
  done
done
python3 - "$out" "$rounds" <<'EOF'
import csv, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
vals = {}  # (mode, size, pattern) -> side -> [value]
for side in "AB":
    for r in range(1, rounds + 1):
        for row in csv.DictReader(open(f"{out}/{side}-{r}.csv")):
            stream = row.get("pattern") == "stream" or not row.get("p50_us")
            v = row["mbit_s"] if stream else row["p50_us"]
            if not v:
                continue
            key = (row["mode"], int(row["size_bytes"]), "Mbit/s" if stream else "p50 us")
            vals.setdefault(key, {"A": [], "B": []})[side].append(float(v))
print(f"{'mode':10} {'size':>7} {'unit':7} {'A rounds':>28} {'B rounds':>28} {'A med':>9} {'B med':>9} {'B/A':>6}")
for key in sorted(vals):
    mode, size, unit = key
    a, b = vals[key]["A"], vals[key]["B"]
    if not a or not b:
        continue
    ma, mb = statistics.median(a), statistics.median(b)
    fa = " ".join(f"{x:.2f}" for x in a)
    fb = " ".join(f"{x:.2f}" for x in b)
    print(f"{mode:10} {size:>7} {unit:7} {fa:>28} {fb:>28} {ma:>9.2f} {mb:>9.2f} {mb / ma:>6.3f}")
print(f"(CSV and outputs in {out})")
EOF
