#!/usr/bin/env bash
# Installs the Debian packages nodewatch needs to build and test, and nothing
# when they are all present (a fast no-op). Usage:
#   packaging/install-deps.sh          build and run dependencies
#   packaging/install-deps.sh --test   plus what the test suite and benchmark use
set -euo pipefail

build_pkgs=(
  build-essential cmake ninja-build pkg-config git
  prometheus-cpp-dev libboost-dev libspdlog-dev libtomlplusplus-dev libcli11-dev
  zlib1g-dev libre2-dev
  libssl-dev libcrypt-dev libyaml-cpp-dev   # TLS, bcrypt (libxcrypt), the web configuration file
  libnl-3-dev libnl-route-3-dev libnl-genl-3-dev libibverbs-dev libibumad-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc  # the kubelet's pod-resources API
  libfreeipmi-dev       # the BMC, in the helper nwd-bmc
)
test_pkgs=(
  libgtest-dev libgmock-dev libbenchmark-dev
  prometheus            # promtool, and a real server scraping the daemon
  victoria-metrics      # the fleet test's store, with vmalert (its service is not started, see below)
  prometheus-node-exporter wrk curl  # the benchmark's baseline and load generator
  systemd               # systemd-analyze verify on the unit
  strace                # the unit's SystemCallFilter against every call made
  iproute2 clang-format
  openssl               # the TLS tests' CA and certificates (curl is above)
  debhelper dpkg-dev lintian  # the Debian package: dpkg-buildpackage, then lintian
  libfuse3-dev fuse3    # nodewatch-hangfs, the hung-mount tests' real FUSE file system
  python3               # dashboards/generate.py and dashboards/lint.py
  clang libclang-rt-14-dev  # the sanitizer build and its libFuzzer harnesses (libclang_rt.fuzzer)
  ccache                # the test command's compiler cache: a second run recompiles what changed
  lld                   # links the test executables and the sanitizer builds (CMakeLists.txt)
  openipmi freeipmi-tools  # the BMC simulator (ipmi_sim, sdrcomp); ipmi-sensors and ipmi-sel beside nodewatch
  prometheus-ipmi-exporter  # bench/bmc_cost.sh's baseline
)

want=("${build_pkgs[@]}")
if [[ "${1:-}" == "--test" ]]; then want+=("${test_pkgs[@]}"); fi

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii'; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "installing: ${missing[*]}" >&2
sudo=()
if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
# Packages such as prometheus start their service when installed where a
# service manager runs; nodewatch's tests start their own instances, so
# installs are made with service starts refused.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
  "${sudo[@]}" chmod +x "$policy"
  created_policy=1
fi
cleanup() { if ((created_policy)); then "${sudo[@]}" rm -f "$policy"; fi; }
trap cleanup EXIT
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
