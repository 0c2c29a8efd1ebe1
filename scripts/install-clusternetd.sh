#!/bin/sh
# Builds and installs clusternetd, the host's EDP echo / ESP RST responder
# (issue 13): the binary to /usr/local/bin with CAP_NET_RAW as a file
# capability (setcap, for runs outside systemd), a system user clusternetd
# in group clusternet, the privileged port-lease directory
# (scripts/install-lease-dir.sh), and the systemd unit, enabled on the
# interfaces given:
#   sudo scripts/install-clusternetd.sh eth1 [eth2 ...]
set -eu
[ "$#" -ge 1 ] || { echo "usage: $0 IFACE [IFACE...]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/install-lease-dir.sh"
if [ -z "${SUDO_USER:-}" ]; then
    cargo build --release -p clusternetd --manifest-path "$here/Cargo.toml"
else
    su "$SUDO_USER" -c "cargo build --release -p clusternetd --manifest-path '$here/Cargo.toml'"
fi
target=${CARGO_TARGET_DIR:-$here/target}
install -m 0755 "$target/release/clusternetd" /usr/local/bin/clusternetd
setcap cap_net_raw+ep /usr/local/bin/clusternetd
getent passwd clusternetd >/dev/null ||
    useradd --system --no-create-home --shell /usr/sbin/nologin -g clusternet clusternetd
install -d -m 0750 -o root -g clusternet /etc/clusternet
args=""
for i in "$@"; do args="$args -i $i"; done
echo "CLUSTERNETD_ARGS=\"$args\"" > /etc/clusternet/clusternetd.env
install -m 0644 "$here/clusternetd/clusternetd.service" /etc/systemd/system/clusternetd.service
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    systemctl enable --now clusternetd
    systemctl --no-pager status clusternetd || true
else
    echo "no systemd: run /usr/local/bin/clusternetd$args"
fi
