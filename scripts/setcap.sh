#!/usr/bin/env bash
# Grants CAP_NET_RAW to a binary so it opens AF_PACKET sockets without root
# (DESIGN.md, principle 8). With no path: target/release/netgauge of this
# repository. With --admin also CAP_NET_ADMIN (only needed to force socket
# buffers above net.core.rmem_max or to create virtual links).
#
#   scripts/setcap.sh                      # target/release/netgauge
#   scripts/setcap.sh path/to/binary ...   # other binaries
#   scripts/setcap.sh --admin              # cap_net_raw,cap_net_admin+ep
#
# Run as root (or via sudo). A rebuilt binary loses its capabilities: run
# this again after every `cargo build --release`.
set -euo pipefail

caps="cap_net_raw+ep"
paths=()
for arg in "$@"; do
    case "$arg" in
        --admin) caps="cap_net_raw,cap_net_admin+ep" ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) paths+=("$arg") ;;
    esac
done
if [ ${#paths[@]} -eq 0 ]; then
    root="$(cd "$(dirname "$0")/.." && pwd)"
    paths=("$root/target/release/netgauge")
fi

if ! command -v setcap >/dev/null 2>&1; then
    echo "setcap: not found; install it with: apt-get install libcap2-bin" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
        echo "setcap needs root: run this script as root" >&2
        exit 1
    fi
fi

for p in "${paths[@]}"; do
    if [ ! -f "$p" ]; then
        echo "$p: no such file (build it first, e.g. cargo build --release -p netgauge)" >&2
        exit 1
    fi
    $sudo setcap "$caps" "$p"
    getcap "$p"
done
