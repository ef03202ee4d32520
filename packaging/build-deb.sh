#!/usr/bin/env bash
# Builds nodewatch's Debian package with dpkg-buildpackage: the committed
# tree (git ls-files, plus what is staged) is laid out in a scratch
# directory with packaging/debian/ as its debian/, built there with
# `dpkg-buildpackage -us -uc -b`, and checked with lintian. The package
# lands in the directory given (default build-deb/) as
# nodewatch_<version>_<arch>.deb. Needs the build dependencies
# (packaging/install-deps.sh --test installs them and debhelper, lintian).
# Usage: packaging/build-deb.sh [OUTDIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$root/build-deb}")
mkdir -p "$out"
# One fixed folder per user, so that the compiler's command lines (which
# name it, in -ffile-prefix-map) are the same from one build to the next
# and a compiler cache (packaging/test.sh) can serve them; one build at a
# time.
work="${TMPDIR:-/tmp}/nodewatch-deb.$(id -u)"
exec 9>"$work.lock"
flock 9
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
export CCACHE_BASEDIR="$work" CCACHE_STATSLOG="$work/ccache.log"
src="$work/nodewatch"
mkdir -p "$src"
# The source: what git tracks (a checkout's build directories stay out).
# (tar keeps the fixtures' symbolic links as links.)
(cd "$root" && git ls-files -z --cached | tar --null --no-recursion -cf - -T -) | tar -xf - -C "$src"
rm -rf "$src/debian"
cp -r "$root/packaging/debian" "$src/debian"
# The revision the binary reports: the checkout's, as a plain build has it
# (CMake reads it from the environment; the tree built here is no checkout).
NODEWATCH_REVISION=$("$root/packaging/revision.sh")
export NODEWATCH_REVISION
# All cores (debhelper builds with one job unless told).
export DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS:+$DEB_BUILD_OPTIONS }parallel=$(nproc)"
(cd "$src" && dpkg-buildpackage -us -uc -b >"$work/build.log" 2>&1) || {
  tail -50 "$work/build.log" >&2
  echo "dpkg-buildpackage failed" >&2
  exit 1
}
# What the compiler cache served: packaging/test.sh compiles its plain
# build with the package's flags, so that the cache it filled serves every
# object.
if [[ -s "$work/ccache.log" ]]; then
  CCACHE_STATSLOG="$work/ccache.log" ccache --show-log-stats 2>/dev/null |
    grep -Ei '^ *(hits|misses):' | sed 's/^ */package build: compiler cache /'
fi
version=$(cd "$src" && dpkg-parsechangelog -S Version)
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
deb="nodewatch_${version}_${arch}.deb"
cp "$work/$deb" "$out/"
echo "built $out/$deb"
if command -v lintian >/dev/null; then
  # --fail-on warning: an error or a warning fails the build.
  lintian --fail-on error,warning --display-info "$work"/nodewatch_"${version}"_"${arch}".changes
fi
