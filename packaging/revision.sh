#!/usr/bin/env bash
# The revision a build of this tree reports: the checkout's commit, its
# first 12 hexadecimal digits, or "unknown" outside a git checkout.
# CMakeLists.txt (unless NODEWATCH_REVISION is set), packaging/build-deb.sh
# and packaging/verify-deb.sh ask it.
cd "$(dirname "$0")/.." && git rev-parse --short=12 HEAD 2>/dev/null || echo unknown
