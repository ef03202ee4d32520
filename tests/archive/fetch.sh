#!/usr/bin/env bash
# Fetches the vendor libraries of Debian's archive that the tests load for
# real (tests/integration/real_nvml_test.cpp) into a cache:
#   libnvidia-ml1 of bookworm (535), trixie (550) and experimental (555),
#   non-free: NVIDIA's NVML as a node installs it.
# Through a private apt configuration (its own sources list, lists and
# archives under the cache; the machine's sources are never read or
# changed), the archive's signatures checked with the machine's Debian
# keyring; each package unpacked with dpkg -x into
# CACHE/nvml/<version>/. A version already there is not fetched again.
# Where the archive cannot be reached it says so loudly, writes why to
# CACHE/nvml/status, and exits 0: the tests then skip, saying why.
# Usage: tests/archive/fetch.sh CACHE_DIR
set -uo pipefail
cache=${1:?usage: fetch.sh CACHE_DIR}
suites=(bookworm trixie experimental)
nvml="$cache/nvml"
apt="$cache/apt"
mkdir -p "$nvml" "$apt/lists/partial" "$apt/archives/partial" || exit 0

say_unreachable() {
  echo "fetch.sh: WARNING: Debian's archive is not reachable ($1): the tests of the real NVML libraries will skip" >&2
  echo "unreachable: $1" >"$nvml/status"
  exit 0
}

have=0
for suite in "${suites[@]}"; do
  [[ -f "$nvml/$suite.version" && -e "$nvml/$(cat "$nvml/$suite.version")/libnvidia-ml.so.1" ]] && ((have++))
done
if ((have == ${#suites[@]})); then
  echo "ok (cached): $(cd "$nvml" && cat ./*.version | tr '\n' ' ')" >"$nvml/status"
  cat "$nvml/status"
  exit 0
fi

keyring=/usr/share/keyrings/debian-archive-keyring.gpg
signed=""
[[ -r $keyring ]] && signed=" [signed-by=$keyring]"
: >"$apt/sources.list"
for suite in "${suites[@]}"; do
  echo "deb$signed http://deb.debian.org/debian $suite non-free" >>"$apt/sources.list"
done
opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt" -o "Dir::Cache::Archives=$apt/archives"
  -o Debug::NoLocking=1 -o APT::Sandbox::User=root -o Acquire::Retries=1
  -o Acquire::http::Timeout=20 -o APT::Architecture=amd64)
[[ $(dpkg --print-architecture) == amd64 ]] || say_unreachable "NVIDIA's libraries are fetched for amd64 only"
out=$(timeout 180 apt-get "${opts[@]}" update 2>&1) || say_unreachable "apt-get update: $(tail -1 <<<"$out")"
if grep -qE '^(E:|Err:)' <<<"$out"; then
  say_unreachable "apt-get update: $(grep -E '^(E:|Err:)' <<<"$out" | head -1)"
fi
for suite in "${suites[@]}"; do
  version=$(apt-cache "${opts[@]}" show "libnvidia-ml1/$suite" 2>/dev/null | sed -n 's/^Version: //p' | head -1)
  [[ -n $version ]] || say_unreachable "no libnvidia-ml1 in $suite non-free"
  upstream=${version%-*}
  if [[ ! -e "$nvml/$upstream/libnvidia-ml.so.1" ]]; then
    (cd "$apt/archives" && timeout 180 apt-get "${opts[@]}" download "libnvidia-ml1=$version" >/dev/null 2>&1) ||
      say_unreachable "apt-get download libnvidia-ml1=$version failed"
    deb=$(ls "$apt/archives"/libnvidia-ml1_"${version/:/%3a}"_*.deb 2>/dev/null | head -1)
    [[ -n $deb ]] || say_unreachable "libnvidia-ml1=$version: no package downloaded"
    rm -rf "$nvml/$upstream.tmp" && mkdir -p "$nvml/$upstream.tmp" && dpkg -x "$deb" "$nvml/$upstream.tmp/root" ||
      say_unreachable "dpkg -x $deb failed"
    lib=$(find "$nvml/$upstream.tmp/root" -name libnvidia-ml.so.1 | head -1)
    [[ -n $lib ]] || say_unreachable "$deb holds no libnvidia-ml.so.1"
    # The library and its versioned name, as the package installs them.
    cp -P "$(dirname "$lib")"/libnvidia-ml.so.* "$nvml/$upstream.tmp/" &&
      rm -rf "$nvml/$upstream.tmp/root" && rm -rf "${nvml:?}/$upstream" && mv "$nvml/$upstream.tmp" "$nvml/$upstream" ||
      say_unreachable "could not unpack $deb"
  fi
  echo "$upstream" >"$nvml/$suite.version"
done
echo "ok: $(cd "$nvml" && cat ./*.version | tr '\n' ' ')" >"$nvml/status"
cat "$nvml/status"
