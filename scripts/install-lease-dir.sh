#!/bin/sh
# Makes this host's EDP/ESP port leases privileged (issue 13, break 7):
# creates group `clusternet` and the lease directory /run/clusternet/leases
# (mode 2770, owner root, that group), now and at every boot through
# systemd-tmpfiles. Afterwards only root and members of the group can hold
# ports: a user without privilege can no longer squat a server's port, the
# ephemeral range or the responder's control port. Every process on the
# host then uses the directory (see edp/src/ports.rs); add the users who run
# the stack with capabilities (setcap) to the group:
#   usermod -aG clusternet <user>
set -eu
DIR=${CLUSTERNET_LEASE_DIR:-/run/clusternet/leases}
if [ "$(id -u)" != 0 ]; then
    echo "run as root: creates group clusternet and $DIR" >&2
    exit 1
fi
getent group clusternet >/dev/null || groupadd --system clusternet
install -d -m 0755 -o root -g root "$(dirname "$DIR")"
install -d -m 2770 -o root -g clusternet "$DIR"
if [ -d /etc/tmpfiles.d ] && [ "$DIR" = /run/clusternet/leases ]; then
    cat > /etc/tmpfiles.d/clusternet.conf <<CONF
d /run/clusternet 0755 root root -
d /run/clusternet/leases 2770 root clusternet -
CONF
fi
echo "port leases now privileged in $DIR (group clusternet)"
