#!/usr/bin/env bash
# Fetches what the tests run for real from Debian's archive into a cache:
#   nvml/<version>/      libnvidia-ml1 of bookworm (535), trixie (550) and
#                        experimental (555), non-free: NVIDIA's NVML as a
#                        node installs it (tests/integration/real_nvml_test.cpp);
#   promtool/<version>/  promtool of sid (3.x), beside bookworm's 2.42, so
#                        that the rules' tests run under both
#                        (tests/e2e/CMakeLists.txt, AlertRules.*).
# Through a private apt configuration (its own sources list, lists and
# archives under the cache; the machine's sources are neither read nor
# changed), the archive's signatures checked with the machine's Debian
# keyring; each package unpacked with dpkg -x. What is already there is
# not fetched again. Where the archive cannot be reached it says so
# loudly, writes why to CACHE/status, and exits 0: the tests then skip,
# saying why.
# Usage: tests/archive/fetch.sh CACHE_DIR
set -uo pipefail
cache=${1:?usage: fetch.sh CACHE_DIR}
apt="$cache/apt"
mkdir -p "$apt/lists/partial" "$apt/archives/partial" || exit 0
# Where the archive answers but a step fails, the message says which.

# name package suite component path: one per line; the file is the one
# whose path in the package matches (find -path), kept under its name.
wanted="nvml libnvidia-ml1 bookworm non-free */libnvidia-ml.so.1
nvml libnvidia-ml1 trixie non-free */libnvidia-ml.so.1
nvml libnvidia-ml1 experimental non-free */libnvidia-ml.so.1
promtool promtool sid main */bin/promtool"

# Says why nothing could be fetched, and stops.
unreachable() {
  echo "fetch.sh: WARNING: cannot fetch from Debian's archive ($1): the tests that run its packages will skip" >&2
  echo "unreachable: $1" >"$cache/status"
  exit 0
}

# Cached when every line's version file names an unpacked file.
cached=1
while read -r name package suite component path; do
  file=${path##*/}
  v="$cache/$name/$suite.version"
  [[ -f $v && -e "$cache/$name/$(cat "$v")/$file" ]] || cached=0
done <<<"$wanted"
if ((cached)); then
  echo "ok (cached): $(cd "$cache" && cat ./*/*.version | tr '\n' ' ')" | tee "$cache/status"
  exit 0
fi

[[ $(dpkg --print-architecture 2>/dev/null) == amd64 ]] || unreachable "these packages are fetched for amd64 only"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
signed=""
[[ -r $keyring ]] && signed=" [signed-by=$keyring]"
: >"$apt/sources.list"
while read -r name package suite component path; do
  echo "deb$signed http://deb.debian.org/debian $suite $component" >>"$apt/sources.list"
done <<<"$wanted"
sort -u -o "$apt/sources.list" "$apt/sources.list"
opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt" -o "Dir::Cache::Archives=$apt/archives"
  -o Debug::NoLocking=1 -o APT::Sandbox::User=root -o Acquire::Retries=1
  -o Acquire::http::Timeout=20)
out=$(timeout 180 apt-get "${opts[@]}" update 2>&1) || unreachable "apt-get update: $(tail -1 <<<"$out")"
if grep -qE '^(E:|Err:)' <<<"$out"; then
  unreachable "apt-get update: $(grep -E '^(E:|Err:)' <<<"$out" | head -1)"
fi
while read -r name package suite component path; do
  file=${path##*/}
  version=$(apt-cache "${opts[@]}" show "$package/$suite" 2>/dev/null | sed -n 's/^Version: //p' | head -1)
  [[ -n $version ]] || unreachable "no $package in $suite $component"
  upstream=${version%-*}
  dir="$cache/$name/$upstream"
  if [[ ! -e "$dir/$file" ]]; then
    (cd "$apt/archives" && timeout 300 apt-get "${opts[@]}" download "$package=$version" >/dev/null 2>&1) ||
      unreachable "apt-get download $package=$version failed"
    deb=$(ls "$apt/archives/${package}_${version/:/%3a}"_*.deb 2>/dev/null | head -1)
    [[ -n $deb ]] || unreachable "$package=$version: no package downloaded"
    rm -rf "$dir.tmp" && mkdir -p "$dir.tmp" && dpkg -x "$deb" "$dir.tmp/root" ||
      unreachable "dpkg -x $deb failed"
    found=$(find "$dir.tmp/root" \( -type f -o -type l \) -path "$path" | head -1)
    [[ -n $found ]] || unreachable "$deb holds no $file"
    # The file and its versioned names beside it (libnvidia-ml.so.1 ->
    # libnvidia-ml.so.535.261.03), as the package installs them.
    stem=$file
    [[ $file == *.so.* ]] && stem=${file%%.so.*}.so.
    cp -P "$(dirname "$found")/$stem"* "$dir.tmp/" && rm -rf "$dir.tmp/root" "$deb" &&
      rm -rf "$dir" && mv "$dir.tmp" "$dir" || unreachable "could not unpack $deb"
  fi
  echo "$upstream" >"$cache/$name/$suite.version"
done <<<"$wanted"
# The package lists are not needed once all is unpacked (sid's are large).
rm -rf "$apt/lists" "$apt"/*.bin
echo "ok: $(cd "$cache" && cat ./*/*.version | tr '\n' ' ')" | tee "$cache/status"
