#!/usr/bin/env bash
# Builds the libfabric provider `clusternet` (crate fabric/, clusternet-fi)
# and puts it where libfabric looks for it: libfabric loads external
# providers named lib<name>-fi.so from the folders of FI_PROVIDER_PATH,
# while cargo names the library libclusternet_fi.so.
#
#   scripts/build-provider.sh [DIR]
#
# DIR defaults to ${CARGO_TARGET_DIR:-target}/fi. Prints the FI_PROVIDER_PATH
# to export; then `fi_info -p clusternet` lists the provider. Needs
# libfabric-dev and libclang (scripts/install-deps.sh).
#
# FI_BUILD_PROFILE picks cargo's profile (default release); the test
# suites (scripts/fabtests.sh, scripts/mpi4py-suite.sh) take `ci`, which
# scripts/test.sh has built already.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
dir=${1:-$target/fi}
profile=${FI_BUILD_PROFILE:-release}
cargo build --profile "$profile" -p clusternet-fi --lib --quiet
mkdir -p "$dir"
# Copy, then rename into place: a process that has the old library mapped
# keeps its copy. (Cargo's folder for the dev profile is `debug`.)
[ "$profile" = dev ] && profile=debug
cp "$target/$profile/libclusternet_fi.so" "$dir/.libclusternet-fi.so.new"
mv -f "$dir/.libclusternet-fi.so.new" "$dir/libclusternet-fi.so"
dir=$(cd "$dir" && pwd)
echo "export FI_PROVIDER_PATH=$dir"
