#!/usr/bin/env bash
# Installs the clusternet Wireshark dissector (dissector/clusternet.lua) for
# the current user, into the "Personal Lua Plugins" folder that
# `tshark -G folders` reports (~/.local/lib/wireshark/plugins when tshark is
# not installed yet), and prints where. Wireshark and tshark load it at their
# next start; `--remove` uninstalls it. scripts/install-deps.sh installs tshark.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=""
if command -v tshark >/dev/null 2>&1; then
  dir=$(tshark -G folders 2>/dev/null | awk -F'\t' '/^Personal Lua Plugins:/ {print $2}' | tr -d '\r')
fi
[ -n "$dir" ] || dir="$HOME/.local/lib/wireshark/plugins"
dest="$dir/clusternet.lua"

if [ "${1:-}" = "--remove" ]; then
  rm -f "$dest"
  echo "install-dissector: removed $dest"
  exit 0
fi
if [ $# -gt 0 ]; then
  echo "usage: $0 [--remove]" >&2
  exit 2
fi

mkdir -p "$dir"
install -m 0644 dissector/clusternet.lua "$dest"
echo "install-dissector: installed $dest"

if ! command -v tshark >/dev/null 2>&1; then
  echo "install-dissector: tshark not found (scripts/install-deps.sh installs it); Wireshark will load the plugin from there"
  exit 0
fi
# Check that tshark loads it: its protocols must be registered.
protos=$(tshark -G protocols 2>&1 | awk -F'\t' '$3 == "cnedp" || $3 == "cnesp" || $3 == "ctp" || $3 == "netgauge" {print $3}' | sort | tr '\n' ' ')
if [ "$protos" != "cnedp cnesp ctp netgauge " ]; then
  echo "install-dissector: tshark did not register the dissector's protocols (got: ${protos:-none}); run 'tshark -G protocols' to see its Lua errors" >&2
  exit 1
fi
echo "install-dissector: tshark loads it (protocols: ${protos% }); try: tshark -i IFACE -Y 'cnesp || cnedp'"
