#!/usr/bin/env bash
# libfabric's own test suite (fabtests 1.17.0) against the provider
# `clusternet`: runfabtests.sh's sets and, one by one, the eight FI_EP_RDM
# tagged tests of issue 38, over the UDP link on loopback and over EDP
# (the packet link) between two network namespaces joined by a veth pair.
# Prints each set's pass / fail / excluded / not-run counts.
#
#   scripts/fabtests.sh [--link udp|edp|both] [--set SET] [--timeout S]
#   scripts/fabtests.sh --valgrind
#
# SET: unit, functional, short, quick (= unit + functional + short, as
# runfabtests.sh defines it; counted per part), rdm8 (the eight tagged
# tests), or all (quick and rdm8, the default). --link defaults to both.
# --timeout: seconds per test program of runfabtests.sh's sets (default
# 20); each of the eight gets three times that, each under valgrind
# fifteen times. --valgrind: instead, fi_rdm_tagged_pingpong (-I 50),
# fi_rdm_tagged_peek and fi_recv_cancel with both sides under valgrind's
# memcheck over the UDP link (fabric/valgrind.supp).
#
# Tests run with fabtests' normal addressing (the server's address from
# fi_getinfo(node, service), the client sends its own name in band; no
# -E / -b). The exclude file fabric/fabtests.exclude lists what the
# provider does not claim, each with its reason. The script fails when a
# test that is not excluded fails (a test that answers FI_ENODATA or
# FI_ENOSYS on both sides is "not run", as runfabtests.sh counts it).
#
# Needs root (network namespaces; the packet link's CAP_NET_RAW): without
# it the script says so and skips, except under CI=true, where it fails.
# Everything runs in namespaces of its own (a private loopback for the UDP
# link), removed at the end, even on failure, and runfabtests.sh runs in a
# PID namespace of its own, where its clean-up (kill -9 of every fi_*
# process) reaches only its own tests. Logs: target/fabtests/logs/.
#
# Environment: CLUSTERNET_FI_DIR, a folder holding libclusternet-fi.so to
# test instead of building it (scripts/build-provider.sh with
# FI_BUILD_PROFILE, default ci).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

links=(udp edp)
set_arg=all
timeout_s=20
valgrind=0
while [ $# -gt 0 ]; do
  case $1 in
    --link) case ${2:-} in udp|edp) links=("$2") ;; both) links=(udp edp) ;;
              *) echo "fabtests: --link udp|edp|both" >&2; exit 2 ;; esac; shift 2 ;;
    --set) set_arg=${2:-}; shift 2 ;;
    --timeout) timeout_s=${2:-}; shift 2 ;;
    --valgrind) valgrind=1; shift ;;
    -h|--help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fabtests: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case $set_arg in
  unit|functional|short) parts=("$set_arg"); rdm8=0 ;;
  quick) parts=(unit functional short); rdm8=0 ;;
  rdm8) parts=(); rdm8=1 ;;
  all) parts=(unit functional short); rdm8=1 ;;
  *) echo "fabtests: --set unit|functional|short|quick|rdm8|all" >&2; exit 2 ;;
esac

if [ "$(id -u)" -ne 0 ]; then
  if [ "${CI:-}" = true ]; then
    echo "fabtests: FAIL: needs root (network namespaces, CAP_NET_RAW), and CI=true" >&2
    exit 1
  fi
  echo "fabtests: skipped: needs root (network namespaces, CAP_NET_RAW)" >&2
  exit 0
fi

bin=$(scripts/build-fabtests.sh)
if [ -n "${CLUSTERNET_FI_DIR:-}" ]; then
  fi_dir=$(cd "$CLUSTERNET_FI_DIR" && pwd)
else
  fi_dir=$(FI_BUILD_PROFILE=${FI_BUILD_PROFILE:-ci} scripts/build-provider.sh | sed -n 's/^export FI_PROVIDER_PATH=//p')
fi
[ -f "$fi_dir/libclusternet-fi.so" ] || { echo "fabtests: no $fi_dir/libclusternet-fi.so" >&2; exit 1; }
export FI_PROVIDER_PATH=$fi_dir
exclude=$root/fabric/fabtests.exclude
logs=$root/target/fabtests/logs
work=$(mktemp -d "${TMPDIR:-/tmp}/fabtests.XXXXXX")
mkdir -p "$logs"

# ---- namespaces and clean-up -------------------------------------------
tag=ft$$
namespaces=()
pids=()
cleanup() {
  local p n
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for n in "${namespaces[@]}"; do ip netns del "$n" 2>/dev/null || true; done
  # the veth pair, should it not have reached its namespaces
  ip link del "${tag}s" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The UDP link on loopback: one namespace with its own lo.
make_udp() {
  local ns=${tag}u
  ip netns add "$ns"
  namespaces+=("$ns")
  ip -n "$ns" link set lo up
  S_NS=$ns C_NS=$ns S_ADDR=127.0.0.1 C_ADDR=127.0.0.1
  LINK_ENV=(FI_CLUSTERNET_LINK=udp FI_CLUSTERNET_IFACE=lo)
}

# EDP: two namespaces, a veth pair named ft0 on both ends, MTU 1500, fixed
# MACs and IPv4 addresses with each other's neighbour entry.
make_edp() {
  local s=${tag}s c=${tag}c
  ip netns add "$s"
  namespaces+=("$s")
  ip netns add "$c"
  namespaces+=("$c")
  ip link add "${tag}s" type veth peer name "${tag}c"
  ip link set "${tag}s" netns "$s"
  ip link set "${tag}c" netns "$c"
  local i=1 n
  for n in "$s" "$c"; do
    ip -n "$n" link set lo up
    ip -n "$n" link set "${tag}${n: -1}" name ft0
    ip -n "$n" link set ft0 address "02:66:74:00:00:0$i" mtu 1500
    ip -n "$n" addr add "198.18.0.$i/24" dev ft0
    ip -n "$n" link set ft0 up
    i=$((i + 1))
  done
  # Nodes are given as IPv4 addresses, as on a cluster that runs IP on the
  # same interfaces: the provider finds the MAC in the neighbour table, and
  # the tests' own out-of-band sockets (fi_unexpected_msg) reach the peer.
  ip -n "$s" neigh replace 198.18.0.2 lladdr 02:66:74:00:00:02 dev ft0 nud permanent
  ip -n "$c" neigh replace 198.18.0.1 lladdr 02:66:74:00:00:01 dev ft0 nud permanent
  S_NS=$s C_NS=$c S_ADDR=198.18.0.1 C_ADDR=198.18.0.2
  LINK_ENV=(FI_CLUSTERNET_LINK=packet FI_CLUSTERNET_IFACE=ft0)
}

# runfabtests.sh reaches its hosts with `ssh HOST CMD`; this one runs CMD
# in network namespace HOST (it inherits the environment).
mkdir -p "$work/bin"
cat >"$work/bin/ssh" <<'EOF'
#!/usr/bin/env bash
# runfabtests.sh's "ssh [-n] [-o OPT]... HOST CMD": CMD in namespace HOST.
while [ $# -gt 0 ]; do
  case $1 in -n) shift ;; -o) shift 2 ;; *) break ;; esac
done
host=$1
shift
exec ip netns exec "$host" bash -c "$*"
EOF
chmod +x "$work/bin/ssh"

# ---- runfabtests.sh sets -------------------------------------------------
declare -A count
failed_total=0
failures=()

# run_set LINK PART: one runfabtests.sh set; counts its results.
run_set() {
  local link=$1 part=$2 log=$logs/$1-$2.log n_tests
  n_tests=$(grep -c . <<<"$(sed -n "/^${part}_tests=(/,/^)/p" "$bin/runfabtests.sh")")
  local t0=$SECONDS
  # In a PID namespace of its own (its clean-up kills every fi_* it sees),
  # in a folder of its own (its temporary files go to the working folder).
  mkdir -p "$work/$link-$part"
  (
    cd "$work/$link-$part"
    env PATH="$work/bin:$PATH" "${LINK_ENV[@]}" \
      timeout -k 10 $((n_tests * (timeout_s + 5) + 60)) \
      unshare --pid --fork --kill-child --mount-proc \
      "$bin/runfabtests.sh" -v -p "$bin" -t "$part" -f "$exclude" -T "$timeout_s" \
      -s "$S_ADDR" -c "$C_ADDR" clusternet "$S_NS" "$C_NS"
  ) >"$log" 2>&1 || true
  local pass fail excl notrun
  pass=$(grep -c '^  result: Pass' "$log" || true)
  fail=$(grep -c '^  result: Fail' "$log" || true)
  excl=$(grep -c '^  result: Excluded' "$log" || true)
  notrun=$(grep -c '^  result: Notrun' "$log" || true)
  count[$link-$part]="$pass $fail $excl $notrun"
  printf 'fabtests %-4s %-10s %3d passed, %3d failed, %3d excluded, %3d not run  (%d s; %s)\n' \
    "$link" "$part" "$pass" "$fail" "$excl" "$notrun" $((SECONDS - t0)) "${log#"$root"/}"
  # Each failing test with its command.
  awk -v link="$link" '/^- name:/ {sub(/^- name: +/, ""); name = $0}
    /^  result: Fail/ {print "  FAIL " link ": " name}' "$log"
  if ! grep -q '^# Total Pass' "$log"; then
    echo "  FAIL $link $part: runfabtests.sh did not finish (see the log)"
    fail=$((fail + 1))
  fi
  if [ "$fail" -gt 0 ]; then
    failed_total=$((failed_total + fail))
    failures+=("$link $part: $fail")
  fi
}

# ---- one client/server pair ---------------------------------------------
# run_pair LINK NAME PREFIX -- TEST ARGS...: the server in S_NS, the client
# in C_NS, each limited to the timeout; sets PAIR_RESULT (pass, fail,
# notrun) and PAIR_DETAIL.
run_pair() {
  local link=$1 name=$2 prefix=$3
  shift 4
  local test=$1
  shift
  local slog=$logs/$link-$name.server.log clog=$logs/$link-$name.client.log
  # The eight run each program whole (-S all: every size), so they get
  # three times the per-test timeout.
  local limit=$((timeout_s * 3))
  # Under valgrind (a prefix) programs run some 20 to 50 times slower.
  [ -n "$prefix" ] && limit=$((timeout_s * 15))
  local s_cmd=(env "${LINK_ENV[@]}" timeout -k 5 "$limit" ip netns exec "$S_NS" $prefix
    "$bin/$test" -p clusternet "$@" -s "$S_ADDR")
  local c_cmd=(env "${LINK_ENV[@]}" timeout -k 5 "$limit" ip netns exec "$C_NS" $prefix
    "$bin/$test" -p clusternet "$@" -s "$C_ADDR" "$S_ADDR")
  local t0=$SECONDS s_ret=0 c_ret=0
  { echo "+ ${s_cmd[*]}"; } >"$slog"
  { echo "+ ${c_cmd[*]}"; } >"$clog"
  "${s_cmd[@]}" >>"$slog" 2>&1 &
  local spid=$!
  pids=("$spid")
  sleep 1
  "${c_cmd[@]}" >>"$clog" 2>&1 || c_ret=$?
  if [ $c_ret -ne 0 ]; then
    sleep 2
    kill "$spid" 2>/dev/null || true
  fi
  wait "$spid" || s_ret=$?
  pids=()
  PAIR_DETAIL="server $s_ret, client $c_ret, $((SECONDS - t0)) s"
  if [ $s_ret -eq 0 ] && [ $c_ret -eq 0 ]; then
    PAIR_RESULT=pass
  elif { [ $s_ret -eq 61 ] && [ $c_ret -eq 61 ]; } || { [ $s_ret -eq 38 ] && [ $c_ret -eq 38 ]; }; then
    PAIR_RESULT=notrun
  else
    PAIR_RESULT=fail
  fi
}

# The eight FI_EP_RDM tagged tests of issue 38.
rdm8_tests=(
  "fi_rdm_tagged_pingpong"
  "fi_rdm_tagged_pingpong -v"
  "fi_rdm_tagged_pingpong -S all"
  "fi_rdm_tagged_bw -v"
  "fi_rdm_tagged_peek"
  "fi_unexpected_msg -e rdm"
  "fi_recv_cancel -e rdm -V"
  "fi_cq_data -e rdm"
)

run_rdm8() {
  local link=$1 t pass=0 fail=0 notrun=0 i=0 t0=$SECONDS
  for t in "${rdm8_tests[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086 # the test's arguments are words
    run_pair "$link" "rdm8-$i" "" -- $t
    printf '  %-4s %-34s %-6s (%s)\n' "$link" "$t" "$PAIR_RESULT" "$PAIR_DETAIL"
    case $PAIR_RESULT in
      pass) pass=$((pass + 1)) ;;
      notrun) notrun=$((notrun + 1)) ;;
      *) fail=$((fail + 1)) ;;
    esac
  done
  count[$link-rdm8]="$pass $fail 0 $notrun"
  printf 'fabtests %-4s %-10s %3d passed, %3d failed, %3d excluded, %3d not run  (%d s; target/fabtests/logs/%s-rdm8-*.log)\n' \
    "$link" rdm8 "$pass" "$fail" 0 "$notrun" $((SECONDS - t0)) "$link"
  if [ $fail -gt 0 ]; then
    failed_total=$((failed_total + fail))
    failures+=("$link rdm8: $fail")
  fi
}

# ---- valgrind -------------------------------------------------------------
if [ $valgrind -eq 1 ]; then
  command -v valgrind >/dev/null || { echo "fabtests: no valgrind (scripts/install-deps.sh)" >&2; exit 1; }
  make_udp
  supp=$root/fabric/valgrind.supp
  bad=0
  # The ping-pong with 50 iterations per size (every size of its default
  # set): memcheck sees every path; 1000 took ~110 s under valgrind.
  for t in "fi_rdm_tagged_pingpong -I 50" "fi_rdm_tagged_peek" "fi_recv_cancel -e rdm -V"; do
    name=vg-${t%% *}
    rm -f "$logs"/udp-"$name".*.vg
    # One log per process (%p); any memcheck error makes the exit code 97.
    vg="valgrind --tool=memcheck --error-exitcode=97 --leak-check=no --track-origins=yes
      --num-callers=30 --suppressions=$supp --log-file=$logs/udp-$name.%p.vg"
    # shellcheck disable=SC2086 # the test's arguments are words
    run_pair udp "$name" "$vg" -- $t
    errors=$(cat "$logs"/udp-"$name".*.vg 2>/dev/null | sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' | awk '{s += $1} END {print s + 0}')
    invalid=$(cat "$logs"/udp-"$name".*.vg 2>/dev/null | grep -c 'Invalid \(read\|write\)' || true)
    printf 'valgrind %-28s %-6s memcheck errors %d (invalid read/write %d)  (%s)\n' \
      "$t" "$PAIR_RESULT" "$errors" "$invalid" "$PAIR_DETAIL"
    grep -h 'ERROR SUMMARY\|Invalid \(read\|write\)' "$logs"/udp-"$name".*.vg 2>/dev/null | sed 's/^/  /' || true
    if [ "$PAIR_RESULT" != pass ] || [ "$errors" -ne 0 ]; then bad=$((bad + 1)); fi
  done
  echo "valgrind: $((3 - bad)) passed, $bad failed (logs: target/fabtests/logs/udp-vg-*)"
  [ $bad -eq 0 ]
  exit
fi

# ---- main ------------------------------------------------------------------
echo "fabtests: provider $fi_dir/libclusternet-fi.so, fabtests $bin, timeout ${timeout_s} s per test"
for link in "${links[@]}"; do
  for n in "${namespaces[@]}"; do ip netns del "$n" 2>/dev/null || true; done
  namespaces=()
  "make_$link"
  echo "fabtests: $link: server $S_ADDR in $S_NS, client $C_ADDR in $C_NS (${LINK_ENV[*]})"
  for part in "${parts[@]}"; do run_set "$link" "$part"; done
  if [ ${#parts[@]} -eq 3 ]; then
    q=(0 0 0 0)
    for part in "${parts[@]}"; do
      read -r -a c <<<"${count[$link-$part]}"
      for k in 0 1 2 3; do q[k]=$((q[k] + c[k])); done
    done
    printf 'fabtests %-4s %-10s %3d passed, %3d failed, %3d excluded, %3d not run\n' \
      "$link" quick "${q[@]}"
  fi
  [ $rdm8 -eq 1 ] && run_rdm8 "$link"
done
passed=0
for k in "${!count[@]}"; do
  read -r -a c <<<"${count[$k]}"
  passed=$((passed + c[0]))
done
if [ $failed_total -gt 0 ]; then
  echo "fabtests: failures in ${failures[*]}"
fi
echo "fabtests: $passed passed, $failed_total failed"
[ $failed_total -eq 0 ]
