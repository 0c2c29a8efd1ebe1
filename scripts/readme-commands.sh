#!/usr/bin/env bash
# Runs the commands of README.md's main job and examples as a newcomer
# pastes them, each in a fresh shell from the repository's root, and fails
# when one fails. CI runs it after the tests (.ci/run).
#
#   scripts/readme-commands.sh [--full] [--only REGEX] [--list]
#                              [--table FILE] [--timeout SECONDS] [--fail-fast]
#
# The commands come from README.md itself: every line of the ```sh blocks
# of the sections named in SECTIONS below (comment lines skipped, `\`
# continuations joined), in order. Prompts say where a line runs:
#   nodeA$ CMD   a server of a two-host example: started in the background
#                in network namespace "nodeA", stopped with SIGINT (Ctrl-C)
#                once the block's nodeB$ lines ran; it must still be serving
#                then (a server that died early fails the check)
#   nodeB$ CMD   the client: runs in namespace "nodeB"
#   cluster$ CMD needs a real cluster of several machines: listed, not run
# The two namespaces are joined by a veth pair named eth0 at both ends;
# nodeA's eth0 has the MAC the README's client command names
# (52:54:00:12:34:56), and the host names nodeA and nodeB resolve to the
# two ends (/etc/netns/<ns>/hosts, which `ip netns exec` mounts).
#
# Counts: unless --full, NETGAUGE_MAX_COUNT (default 100 here) caps every
# netgauge's -c and --warmup, which netgauge honours and says so on
# stderr; the commands themselves run unchanged.
#
# Output: one line per command (exit code, wall time), each command's
# output in target/readme-commands/NN.log, and with --table FILE a
# Markdown table of the same. Needs root (namespaces; the README's
# examples run as root). Exit status: 0 when every command succeeded, 1
# otherwise, 2 on bad usage.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# The README sections whose ```sh blocks are the main job and the examples.
# Not run: "Hardening a host" (installs a daemon and system directories),
# "Wireshark" (installs a plugin, captures on a real interface) and "The
# ecosystem's test suites" (scripts/test.sh runs each of them, before this).
SECTIONS=(
  "The two commands"
  "On two real cluster nodes"
  "Without privileges: \`--link udp\`"
  "More than two hosts, and MPI"
  "MPI programs on clusternet"
)
# Lines of those blocks not run here, with the reason (regex on the command).
SKIP_RE=('^scripts/test\.sh( |$)' ' \./mpi_program$')
SKIP_WHY=("the test command: CI runs it as its own step (.ci/run)"
  "./mpi_program stands for the reader's program (the provider's tests run theirs under mpirun)")

usage() { sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; }

full=0 only="" list=0 table="" timeout_s=1800 fail_fast=0
while [ $# -gt 0 ]; do
  case "$1" in
    --full) full=1 ;;
    --only) only=${2:?--only needs a regex}; shift ;;
    --list) list=1 ;;
    --table) table=${2:?--table needs a file}; shift ;;
    --timeout) timeout_s=${2:?--timeout needs seconds}; shift ;;
    --fail-fast) fail_fast=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "readme-commands: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# --- extraction -------------------------------------------------------------
# Prints one command per line: the section's index, a tab, the line.
extract() {
  awk -v sections="$(printf '%s\n' "${SECTIONS[@]}")" '
    BEGIN { n = split(sections, want, "\n"); for (i = 1; i <= n; i++) if (want[i] != "") idx[want[i]] = i }
    /^## / { h = substr($0, 4); cur = (h in idx) ? idx[h] : 0; seen[h] = 1; next }
    /^```sh[ \t]*$/ { if (cur) inblock = 1; next }
    /^```/ { inblock = 0; next }
    inblock {
      line = $0
      if (cont != "") { line = cont " " line; cont = "" }
      if (line ~ /\\[ \t]*$/) { sub(/\\[ \t]*$/, "", line); cont = line; next }
      sub(/^[ \t]+/, "", line)
      if (line == "" || line ~ /^#/) next
      print cur "\t" line
    }
    END { for (i = 1; i <= n; i++) if (want[i] != "" && !(want[i] in seen)) { print "MISSING\t" want[i]; } }
  ' README.md
}

mapfile -t lines < <(extract)
for l in "${lines[@]}"; do
  if [[ $l == MISSING$'\t'* ]]; then
    echo "readme-commands: README.md has no section \"${l#MISSING$'\t'}\" (update SECTIONS in $0)" >&2
    exit 1
  fi
done
[ ${#lines[@]} -gt 0 ] || { echo "readme-commands: no commands found in README.md" >&2; exit 1; }

if [ $list -eq 1 ]; then
  for l in "${lines[@]}"; do echo "${l#*$'\t'}"; done
  exit 0
fi

[ "$(id -u)" -eq 0 ] || { echo "readme-commands: run as root (network namespaces; the README's examples run as root)" >&2; exit 1; }

# --- the two "nodes" ----------------------------------------------------------
ns_a="rc$$A" ns_b="rc$$B"
nodes_up=0
servers=()   # "pid<TAB>index" of running nodeA$ servers
cleanup() {
  for s in "${servers[@]}"; do kill -KILL -- "-${s%%$'\t'*}" 2>/dev/null; done
  if [ $nodes_up -eq 1 ]; then
    ip netns del "$ns_a" 2>/dev/null
    ip netns del "$ns_b" 2>/dev/null
    rm -rf "/etc/netns/$ns_a" "/etc/netns/$ns_b"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

nodes() {
  [ $nodes_up -eq 1 ] && return 0
  nodes_up=1
  ip netns add "$ns_a" && ip netns add "$ns_b" &&
    ip link add "${ns_a}e" type veth peer name "${ns_b}e" &&
    ip link set "${ns_a}e" netns "$ns_a" && ip link set "${ns_b}e" netns "$ns_b" &&
    ip -n "$ns_a" link set "${ns_a}e" name eth0 address 52:54:00:12:34:56 &&
    ip -n "$ns_b" link set "${ns_b}e" name eth0 address 52:54:00:12:34:57 &&
    ip -n "$ns_a" addr add 198.19.0.1/24 dev eth0 && ip -n "$ns_b" addr add 198.19.0.2/24 dev eth0 &&
    for ns in "$ns_a" "$ns_b"; do
      ip -n "$ns" link set lo up && ip -n "$ns" link set eth0 up || return 1
      mkdir -p "/etc/netns/$ns"
      printf '127.0.0.1 localhost\n198.19.0.1 nodeA\n198.19.0.2 nodeB\n' >"/etc/netns/$ns/hosts"
    done
}

# --- running ------------------------------------------------------------------
logdir=target/readme-commands
rm -rf "$logdir"
mkdir -p "$logdir"
export NETGAUGE_MAX_COUNT
if [ $full -eq 0 ]; then NETGAUGE_MAX_COUNT=${NETGAUGE_MAX_COUNT:-100}; else unset NETGAUGE_MAX_COUNT; fi
# A fresh shell: no variables of the caller but these.
fresh_env=(env -i "HOME=$HOME" "PATH=$PATH" "LANG=${LANG:-C.UTF-8}" "TERM=${TERM:-dumb}"
  "USER=${USER:-root}" "CI=${CI:-}")
[ -n "${NETGAUGE_MAX_COUNT:-}" ] && fresh_env+=("NETGAUGE_MAX_COUNT=$NETGAUGE_MAX_COUNT")

results=()   # "index<TAB>status<TAB>seconds<TAB>command"
failed=0
n=0
record() { # index status seconds command
  results+=("$1"$'\t'"$2"$'\t'"$3"$'\t'"$4")
  printf 'readme-commands: [%02d] %-7s %6ss  %s\n' "$1" "$2" "$3" "$4"
  if [ "$2" != 0 ] && [ "$2" != skipped ] && [ "$2" != "0 (^C)" ]; then
    failed=1
    printf 'readme-commands: [%02d] failed; its output (last 30 lines of %s/%02d.log):\n' "$1" "$logdir" "$1" >&2
    tail -n 30 "$logdir/$(printf %02d "$1").log" >&2
  fi
}

# Stops the block's servers with SIGINT (Ctrl-C); each must still have been
# running, and must exit within 20 s.
stop_servers() {
  local s pid i st
  for s in "${servers[@]}"; do
    pid=${s%%$'\t'*} i=${s#*$'\t'}
    local log="$logdir/$(printf %02d "$i").log"
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid"; st=$?
      echo "(the server had exited with status $st before its clients were done)" >>"$log"
      record "$i" "$st" "$(( $(date +%s) - ${starts[$i]} ))" "${cmds[$i]}"
      continue
    fi
    kill -INT -- "-$pid" 2>/dev/null
    for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL -- "-$pid" 2>/dev/null
      echo "(the server did not exit within 20 s of SIGINT)" >>"$log"
      wait "$pid"; record "$i" "no-exit" "$(( $(date +%s) - ${starts[$i]} ))" "${cmds[$i]}"
      continue
    fi
    wait "$pid"; st=$?
    # Ctrl-C ends a server that serves until stopped: 130 (SIGINT) or 0.
    case $st in 0|130) st="0 (^C)" ;; esac
    record "$i" "$st" "$(( $(date +%s) - ${starts[$i]} ))" "${cmds[$i]}"
  done
  servers=()
}

declare -A starts cmds
prev_section=""
for l in "${lines[@]}"; do
  section=${l%%$'\t'*} cmd=${l#*$'\t'}
  if [ "$section" != "$prev_section" ] && [ ${#servers[@]} -gt 0 ]; then stop_servers; fi
  prev_section=$section
  n=$((n + 1))
  [ -n "$only" ] && ! [[ $cmd =~ $only ]] && continue
  cmds[$n]=$cmd
  log="$logdir/$(printf %02d $n).log"
  echo "\$ $cmd" >"$log"
  why=""
  for k in "${!SKIP_RE[@]}"; do [[ $cmd =~ ${SKIP_RE[$k]} ]] && why=${SKIP_WHY[$k]}; done
  [[ $cmd == 'cluster$ '* ]] && why="needs a cluster of several machines"
  if [ -n "$why" ]; then
    echo "skipped: $why" >>"$log"
    results+=("$n"$'\t'"skipped"$'\t'"-"$'\t'"$cmd ($why)")
    printf 'readme-commands: [%02d] skipped          %s (%s)\n' "$n" "$cmd" "$why"
    continue
  fi
  case $cmd in
    'nodeA$ '*|'nodeB$ '*)
      nodes >>"$log" 2>&1 || { record "$n" "setup" 0 "$cmd"; continue; }
      ns=$ns_a; [[ $cmd == 'nodeB$ '* ]] && ns=$ns_b
      run=(ip netns exec "$ns" "${fresh_env[@]}" bash -c "${cmd#node?\$ }")
      [[ $cmd == 'nodeB$ '* ]] && run=(timeout -k 10 "$timeout_s" "${run[@]}") ;;
    *)
      if [ ${#servers[@]} -gt 0 ]; then stop_servers; fi
      run=(timeout -k 10 "$timeout_s" "${fresh_env[@]}" bash -c "$cmd") ;;
  esac
  starts[$n]=$(date +%s)
  if [[ $cmd == 'nodeA$ '* ]]; then
    # Job control for this one start: the server gets a process group of
    # its own and SIGINT's default action (a script's background jobs
    # ignore SIGINT otherwise).
    set -m
    "${run[@]}" >>"$log" 2>&1 </dev/null &
    servers+=("$!"$'\t'"$n")
    set +m
    sleep 1   # the server binds and announces itself
    continue
  fi
  t0=$(date +%s%N)
  "${run[@]}" >>"$log" 2>&1 </dev/null
  st=$?
  ds=$(( ($(date +%s%N) - t0) / 100000000 ))
  secs="$((ds / 10)).$((ds % 10))"
  [ $st -eq 124 ] && echo "(timed out after $timeout_s s)" >>"$log"
  record "$n" "$st" "$secs" "$cmd"
  if [ $failed -eq 1 ] && [ $fail_fast -eq 1 ]; then break; fi
done
[ ${#servers[@]} -gt 0 ] && stop_servers

if [ -n "$table" ]; then
  {
    echo "| # | command | exit | wall (s) |"
    echo "|---|---|---|---|"
    for r in "${results[@]}"; do
      IFS=$'\t' read -r i st secs c <<<"$r"
      printf '| %s | `%s` | %s | %s |\n' "$i" "${c//|/\\|}" "$st" "$secs"
    done
  } >"$table"
fi
if [ $failed -eq 1 ]; then
  echo "readme-commands: a README command failed (logs in $logdir)" >&2
  exit 1
fi
echo "readme-commands: every README command ran (logs in $logdir)"
