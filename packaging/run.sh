#!/usr/bin/env bash
# README command 1: installs what is missing, builds nodewatchd, and runs it
# in the foreground on this machine with the default configuration
# (packaging/nodewatch.toml). Extra arguments go to nodewatchd, e.g.
#   packaging/run.sh --listen 127.0.0.1:9842 --log-level debug
set -euo pipefail
cd "$(dirname "$0")/.."
packaging/install-deps.sh
packaging/build-release.sh
port=9842
echo
echo "nodewatchd is starting; scrape it at http://$(hostname):${port}/metrics (or http://localhost:${port}/metrics)."
echo "Landing page: http://localhost:${port}/  Stop with Ctrl-C."
echo
exec build-release/daemon/nodewatchd --config packaging/nodewatch.toml "$@"
