#!/usr/bin/env bash
# Builds nodewatchd (RelWithDebInfo, without the tests) in build-release/, a
# build directory of its own so that it never reconfigures the test build.
# The dependencies must be installed (packaging/install-deps.sh). Used by
# packaging/run.sh and tests/hardware/nvidia-check.sh; the binary is
# build-release/daemon/nodewatchd.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNODEWATCH_BUILD_TESTS=OFF >/dev/null
ninja -C build-release nodewatchd
