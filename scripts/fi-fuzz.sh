#!/usr/bin/env bash
# Fuzzes the provider `clusternet` through libfabric's API: builds
# fabric/tests/c/fi_fuzz.c (see its header: random legal and illegal
# sequences of fi_* calls on the provider's objects) and runs it for a
# measured time over the UDP link on loopback, in a network namespace of
# its own. Prints the run's length, sequences and calls; fails when the
# provider crashes the process or a sequence hangs (the input that did it
# is kept as target/fi-fuzz/crash-SEED.bin; replay: target/fi-fuzz/fi_fuzz
# FILE with the same environment).
#
#   scripts/fi-fuzz.sh [--time SECONDS] [--seed S]
#
# Default 60 s, seed from the clock (printed). With clang and
# -fsanitize=fuzzer the same file is a libFuzzer target:
#   clang -g -O1 -fsanitize=fuzzer,address -DFI_FUZZ_LIBFUZZER \
#     -o target/fi-fuzz/fi_fuzz_lf fabric/tests/c/fi_fuzz.c -lfabric
# Needs root for the namespace (without it: runs in this namespace).
# Environment: CLUSTERNET_FI_DIR, a folder holding libclusternet-fi.so to
# test instead of building it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
time_s=60
seed=$(( $(date +%s) ^ $$ ))
while [ $# -gt 0 ]; do
  case $1 in
    --time) time_s=${2:?}; shift 2 ;;
    --seed) seed=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fi-fuzz: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
out=$root/target/fi-fuzz
mkdir -p "$out"
if [ -n "${CLUSTERNET_FI_DIR:-}" ]; then
  fi_dir=$(cd "$CLUSTERNET_FI_DIR" && pwd)
else
  fi_dir=$(FI_BUILD_PROFILE=${FI_BUILD_PROFILE:-ci} scripts/build-provider.sh | sed -n 's/^export FI_PROVIDER_PATH=//p')
fi
[ -f "$fi_dir/libclusternet-fi.so" ] || { echo "fi-fuzz: no $fi_dir/libclusternet-fi.so" >&2; exit 1; }
cc -O1 -g -Wall -Wextra -Werror -o "$out/fi_fuzz" fabric/tests/c/fi_fuzz.c -lfabric

ns=
cleanup() {
  [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
wrap=()
if [ "$(id -u)" -eq 0 ]; then
  ns=fz$$
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  wrap=(ip netns exec "$ns")
fi

st=0
t0=$SECONDS
env FI_PROVIDER_PATH="$fi_dir" FI_CLUSTERNET_LINK=udp FI_CLUSTERNET_IFACE=lo \
  FI_FUZZ_SAVE="$out/current.bin" \
  timeout -k 10 $((time_s + 120)) "${wrap[@]}" "$out/fi_fuzz" --seed "$seed" --time "$time_s" \
  >"$out/run.log" 2>&1 || st=$?
took=$((SECONDS - t0))
cat "$out/run.log"
if [ $st -ne 0 ]; then
  cp "$out/current.bin" "$out/crash-$seed.bin" 2>/dev/null || true
  echo "fi-fuzz: FAIL: fi_fuzz ended with status $st after $took s (seed $seed); the input of the last" \
    "sequence: target/fi-fuzz/crash-$seed.bin"
  echo "fi-fuzz: 0 passed, 1 failed"
  exit 1
fi
echo "fi-fuzz: ran $took s (seed $seed), no crash or hang"
echo "fi-fuzz: 1 passed, 0 failed"
