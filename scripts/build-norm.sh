#!/usr/bin/env bash
# Builds benches/norm/norm_mcast.cpp (the NORM driver of netgauge's `norm`
# mode, `netgauge -m norm -x 1toN --hosts N`; NORM = RFC 5740, Debian's
# libnorm) into ${1:-$CARGO_TARGET_DIR/release}/norm_mcast. Installs
# libnorm-dev (and g++) with apt-get if they are missing. netgauge also
# builds it itself when libnorm-dev is present.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out_dir="${1:-${CARGO_TARGET_DIR:-$here/target}/release}"
missing=()
[ -f /usr/include/normApi.h ] || missing+=(libnorm-dev)
command -v c++ >/dev/null 2>&1 || missing+=(g++)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "build-norm: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
mkdir -p "$out_dir"
c++ -O2 -Wall -o "$out_dir/norm_mcast" "$here/benches/norm/norm_mcast.cpp" -lnorm
echo "build-norm: $out_dir/norm_mcast"
