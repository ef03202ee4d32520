#!/usr/bin/env bash
# alerts/check.sh under sid's promtool 3.x from the cache of
# tests/archive/fetch.sh (NODEWATCH_ARCHIVE_CACHE, else
# ~/.cache/nodewatch-archive). Exit 77 (skipped) where it is not there.
set -uo pipefail
cache=${NODEWATCH_ARCHIVE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodewatch-archive}
version=$(cat "$cache/promtool/sid.version" 2>/dev/null)
promtool="$cache/promtool/$version/promtool"
if [[ -z $version || ! -x $promtool ]]; then
  echo "skipped: no promtool 3 in $cache/promtool ($(cat "$cache/status" 2>/dev/null || echo "tests/archive/fetch.sh not run"))"
  exit 77
fi
if ! "$promtool" --version 2>&1 | grep -qE 'version 3\.'; then
  echo "skipped: $promtool is not a promtool 3: $("$promtool" --version 2>&1 | head -1)"
  exit 77
fi
PROMTOOL=$promtool exec bash "$(dirname "$0")/../../alerts/check.sh"
