#!/usr/bin/env bash
# Outage scenarios of docs/measurements/issue33-survive.txt, reproducible: link
# flaps, blackholes, floods and dead peers during netgauge runs between
# network namespaces (root). Every scenario is bounded in time, and the
# namespaces it makes (named ol<pid>...) are removed on exit, also on
# failure or Ctrl-C.
#
#   scripts/outage.sh flap MODE SECONDS [down|recreate]
#       two hosts on a veth pair; after 2 s of a run, the client's end goes
#       down for SECONDS (or the pair is deleted and re-created with the
#       same names and MACs: new interface indexes)
#   scripts/outage.sh blackhole MODE SECONDS spoof|block|stop
#       three hosts on a bridge (client, server, attacker); after 2 s,
#       for SECONDS: the attacker floods the client with frames carrying
#       the server's source MAC (the bridge moves the server's entry to the
#       attacker's port), or the server's bridge port stops forwarding
#       (`bridge link set dev ... state 0`, disabled: without STP the
#       kernel puts a port set to blocking, 4, back to forwarding at once),
#       or the server process is stopped
#       (SIGSTOP, then SIGCONT)
#   scripts/outage.sh flood MODE [ROUNDS]
#       three hosts on a bridge; the attacker floods both ends from its own
#       MAC as fast as one thread sends: ESP pure ACKs with random numbers
#       (attacked), or the same frames with a foreign ethertype (floor);
#       alternating rounds; prints goodput attacked / floor
#   scripts/outage.sh kill MODE | restart MODE
#       two hosts; the server is killed (SIGKILL) mid-stream; with restart
#       a new server starts on the same port at once
#
# MODE: esp, ctp-edp, comm-edp (streams), edp (ping-pong), tcp (iperf3,
# reference).
# Environment: NETGAUGE (default target/release/netgauge), SIZE (65536),
# COUNT (stream messages, default 40000; ping-pong 300000), USER_TIMEOUT
# (netgauge --user-timeout; default the protocols' 60 s), TIMEOUT
# (netgauge --timeout, default 150), RATE (spoofing flood, frames/s,
# default 200000).
set -euo pipefail
cd "$(dirname "$0")/.."

NG=${NETGAUGE:-target/release/netgauge}
SIZE=${SIZE:-65536}
TIMEOUT=${TIMEOUT:-150}
RATE=${RATE:-200000}
P=ol$$
A=${P}a B=${P}b C=${P}c SW=${P}s
MAC_A=02:0c:00:00:00:01 MAC_B=02:0c:00:00:00:02 MAC_C=02:0c:00:00:00:03
IP_A=198.19.0.1 IP_B=198.19.0.2
LOG=$(mktemp -d /tmp/outage.XXXXXX)
PIDS=()

die() { echo "outage.sh: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
[ -x "$NG" ] || die "no $NG: cargo build --release -p netgauge (or set NETGAUGE)"

cleanup() {
    set +e # a process already gone must not end the clean-up early
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null || true; done
    for ns in "$A" "$B" "$C" "$SW"; do ip netns del "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM

host() { # ns mac ip
    ip -n "$1" link set lo up
    ip -n "$1" link set eth0 address "$2"
    ip -n "$1" addr add "$3/24" dev eth0
    ip -n "$1" link set eth0 up
}

pair() {
    ip netns add "$A"; ip netns add "$B"
    ip link add eth0 netns "$A" type veth peer name eth0 netns "$B"
    host "$A" $MAC_A $IP_A; host "$B" $MAC_B $IP_B
}

recreate_pair() {
    ip link add eth0 netns "$A" address $MAC_A type veth peer name eth0 netns "$B" address $MAC_B
    ip -n "$A" addr add $IP_A/24 dev eth0; ip -n "$B" addr add $IP_B/24 dev eth0
    ip -n "$A" link set eth0 up; ip -n "$B" link set eth0 up
}

bridge3() {
    ip netns add "$SW"
    ip -n "$SW" link add br0 type bridge stp_state 0
    ip -n "$SW" link set br0 up
    local i=0
    for ns in "$A" "$B" "$C"; do
        ip netns add "$ns"
        ip link add "p$ns" netns "$SW" type veth peer name eth0 netns "$ns"
        ip -n "$SW" link set "p$ns" master br0 up
    done
    host "$A" $MAC_A $IP_A; host "$B" $MAC_B $IP_B; host "$C" $MAC_C 198.19.0.3
}

pattern_of() { case "$1" in edp) echo one_one ;; *) echo stream ;; esac; }
count_of() { case "$1" in edp) echo "${COUNT:-300000}" ;; *) echo "${COUNT:-40000}" ;; esac; }
size_of() { case "$1" in edp) echo "${SIZE_PP:-64}" ;; *) echo "$SIZE" ;; esac; }

# Starts the server of MODE in namespace B (pid in SERVER).
start_server() {
    local mode=$1 ut=()
    [ -n "${USER_TIMEOUT:-}" ] && ut=(--user-timeout "$USER_TIMEOUT")
    if [ "$mode" = tcp ]; then
        ip netns exec "$B" iperf3 -s -1 -B $IP_B >"$LOG/server.out" 2>&1 &
    else
        ip netns exec "$B" "$NG" -a --once -m "$mode" -I eth0 -x "$(pattern_of "$mode")" \
            -s "$(size_of "$mode")" -c "$(count_of "$mode")" --timeout "$TIMEOUT" "${ut[@]}" -v \
            >"$LOG/server.out" 2>"$LOG/server.err" &
    fi
    SERVER=$!
    PIDS+=("$SERVER")
    sleep 0.5
}

# Starts the client of MODE in namespace A (pid in CLIENT).
start_client() {
    local mode=$1 ut=()
    [ -n "${USER_TIMEOUT:-}" ] && ut=(--user-timeout "$USER_TIMEOUT")
    if [ "$mode" = tcp ]; then
        ip netns exec "$A" iperf3 -c $IP_B -t "${TCP_SECONDS:-20}" >"$LOG/client.out" 2>&1 &
    else
        ip netns exec "$A" "$NG" -m "$mode" -I eth0 -R $MAC_B -x "$(pattern_of "$mode")" \
            -s "$(size_of "$mode")" -c "$(count_of "$mode")" --timeout "$TIMEOUT" "${ut[@]}" -v --json \
            >"$LOG/client.out" 2>"$LOG/client.err" &
    fi
    CLIENT=$!
    PIDS+=("$CLIENT")
    T0=$(date +%s.%N)
}

# Waits for the client (bounded by TIMEOUT + 60 s); prints what it did.
finish() {
    local rc=0 t
    for _ in $(seq $((TIMEOUT + 60))); do
        kill -0 "$CLIENT" 2>/dev/null || break
        sleep 1
    done
    kill -0 "$CLIENT" 2>/dev/null && { echo "client still running after $((TIMEOUT + 60)) s: killed"; kill -KILL "$CLIENT"; }
    wait "$CLIENT" || rc=$?
    t=$(echo "$(date +%s.%N) - $T0" | bc)
    echo "== client exit $rc after ${t% *} s"
    if [ -f "$LOG/client.err" ]; then
        python3 - "$LOG/client.out" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if "mode" not in r:
        continue
    lat = r.get("lat_us") or {}
    print(f"{r['mode']} {r['pattern']} {r['size']} B x {r['iterations']}: "
          f"{r.get('mbit_s', 0):.0f} Mbit/s, p50 {lat.get('p50', '-')} us, "
          f"resends {r.get('resends', 0)}, loss {r.get('loss', 0)}")
    print("  " + (r.get("transport_stats") or ""))
PY
        sed 's/\x1b\[[0-9;]*m//g' "$LOG/client.err" | grep -E 'WARN|ERROR|netgauge:|INFO netgauge' | cut -c1-260 || true
        echo "-- server"
        sed 's/\x1b\[[0-9;]*m//g' "$LOG/server.err" | grep -E 'WARN|ERROR|netgauge:' | cut -c1-260 || true
    else
        tail -n 6 "$LOG/client.out"
    fi
    # A server that lost its client (a restarted one never had it) waits
    # for another: give it a few seconds, then end it.
    for _ in 1 2 3 4 5; do kill -0 "$SERVER" 2>/dev/null || break; sleep 1; done
    kill -KILL "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    return 0
}

scenario=${1:-}; shift || true
case "$scenario" in
flap)
    mode=${1:?MODE}; secs=${2:?SECONDS}; how=${3:-down}
    pair
    start_server "$mode"; start_client "$mode"
    sleep 2
    echo "== $(date +%T.%N | cut -c1-12) flap ($how) of the client's link for $secs s"
    if [ "$how" = recreate ]; then
        ip -n "$A" link del eth0; sleep "$secs"; recreate_pair
    else
        ip -n "$A" link set eth0 down; sleep "$secs"; ip -n "$A" link set eth0 up
    fi
    echo "== $(date +%T.%N | cut -c1-12) link back"
    finish
    ;;
blackhole)
    mode=${1:?MODE}; secs=${2:?SECONDS}; how=${3:?spoof|block|stop}
    bridge3
    start_server "$mode"; start_client "$mode"
    sleep 2
    echo "== $(date +%T.%N | cut -c1-12) blackhole ($how) for $secs s"
    case "$how" in
    spoof) ip netns exec "$C" "$NG" flood -I eth0 --to $MAC_A --from $MAC_B --rate "$RATE" --seconds "$secs" ;;
    block) bridge -n "$SW" link set dev "p$B" state 0; sleep "$secs"
           bridge -n "$SW" link set dev "p$B" state 3 ;;
    stop) kill -STOP "$SERVER"; sleep "$secs"; kill -CONT "$SERVER" ;;
    *) die "blackhole: spoof, block or stop" ;;
    esac
    echo "== $(date +%T.%N | cut -c1-12) path back"
    finish
    ;;
flood)
    mode=${1:?MODE}; rounds=${2:-3}
    bridge3
    for r in $(seq "$rounds"); do
        for kind in floor attacked; do
            et=esp; [ $kind = floor ] && et=foreign
            start_server "$mode"; start_client "$mode"
            ip netns exec "$C" "$NG" flood -I eth0 --to "$MAC_B:19470,$MAC_A" --ethertype $et \
                --seconds "$TIMEOUT" >"$LOG/flood.out" 2>&1 &
            FLOOD=$!; PIDS+=("$FLOOD")
            wait "$CLIENT" || echo "round $r $kind: client failed: $(tail -n 2 "$LOG/client.err")"
            kill -INT "$FLOOD" 2>/dev/null; kill -KILL "$FLOOD" 2>/dev/null || true; wait "$FLOOD" 2>/dev/null || true
            wait "$SERVER" 2>/dev/null || true
            g=$(grep -o '"mbit_s":[0-9.]*' "$LOG/client.out" | head -1 | cut -d: -f2)
            echo "round $r $kind: ${g:-?} Mbit/s"
            for end in server client; do
                st=$(cat "$LOG/$end.out" "$LOG/$end.err" 2>/dev/null | grep -o 'runtime rx_frames [0-9]* .*rst_pauses [0-9]*' | tail -n 1 |
                    sed -E 's/ (kernel_filter_errors|link outages).*(responder)/ \2/' || true)
                [ -n "$st" ] && echo "  $end $st"
            done
            echo "$kind ${g:-0}" >>"$LOG/goodput"
        done
    done
    awk '{v[$1]=v[$1]" "$2} END {for (k in v) print k":"v[k]}' "$LOG/goodput"
    python3 - "$LOG/goodput" <<'PY'
import statistics, sys
g = {}
for line in open(sys.argv[1]):
    k, v = line.split()
    g.setdefault(k, []).append(float(v))
f, a = statistics.median(g["floor"]), statistics.median(g["attacked"])
print(f"median floor {f:.0f} Mbit/s, attacked {a:.0f} Mbit/s: attacked/floor {a / f:.2f}")
PY
    ;;
kill|restart)
    mode=${1:?MODE}
    pair
    start_server "$mode"; start_client "$mode"
    sleep 2
    echo "== $(date +%T.%N | cut -c1-12) SIGKILL of the server"
    kill -KILL "$SERVER"
    if [ "$scenario" = restart ]; then
        start_server "$mode"
        echo "== $(date +%T.%N | cut -c1-12) new server started"
    fi
    finish
    ;;
*)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
