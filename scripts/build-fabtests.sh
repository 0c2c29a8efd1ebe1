#!/usr/bin/env bash
# Builds libfabric's own test suite, fabtests 1.17.0 (the release that
# matches Debian's libfabric 1.17.0), from ../shared/third_party (never
# copied into the tree) into target/fabtests, installed in
# target/fabtests/install, and prints the folder of its programs and of
# runfabtests.sh (install/bin).
#
#   scripts/build-fabtests.sh [--force]
#
# The build is skipped when target/fabtests/install was built from the same
# tarball, libfabric-dev, compiler and this script (a stamp file there
# records them); --force rebuilds. Needs autoconf, automake, libtool, make,
# gcc and libfabric-dev (scripts/install-deps.sh). make runs with
# MAKE_JOBS jobs (default 1: the machine's two cores are shared).
#
# Environment: FABTESTS_TARBALL (default
# ../shared/third_party/fabtests-1.17.0.tar.gz seen from the project's root).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
force=0
case "${1:-}" in
  --force) force=1 ;;
  -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "build-fabtests: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac
tarball=${FABTESTS_TARBALL:-$root/../shared/third_party/fabtests-1.17.0.tar.gz}
[ -f "$tarball" ] || { echo "build-fabtests: no $tarball (shared/third_party beside the checkout)" >&2; exit 1; }
dir=$root/target/fabtests
install=$dir/install
stamp=$install/.built-from

# What the build depends on, one line each.
want=$(
  sha256sum "$tarball" | cut -d' ' -f1
  dpkg-query -W -f='${Package} ${Version}\n' libfabric-dev 2>/dev/null || echo "libfabric-dev ?"
  cc --version | head -1
  sha256sum "$0" | cut -d' ' -f1
)
if [ $force -eq 0 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
  [ -x "$install/bin/runfabtests.sh" ] && [ -x "$install/bin/fi_rdm_tagged_pingpong" ]; then
  echo "build-fabtests: $install is up to date" >&2
  echo "$install/bin"
  exit 0
fi

echo "build-fabtests: building fabtests from $tarball into $dir" >&2
t0=$SECONDS
rm -rf "$dir"
mkdir -p "$root/target"
# The archive holds one folder, fabtests/.
tar xzf "$tarball" -C "$root/target"
log=$root/target/fabtests-build.log
{
  cd "$dir"
  ./autogen.sh
  ./configure --prefix="$install" --with-libfabric=/usr
  make -j"${MAKE_JOBS:-1}"
  make install
} >"$log" 2>&1 || {
  echo "build-fabtests: the build failed; the last lines of $log:" >&2
  tail -30 "$log" >&2
  exit 1
}
echo "$want" >"$stamp"
echo "build-fabtests: built in $((SECONDS - t0)) s (log: $log)" >&2
echo "$install/bin"
