#!/usr/bin/env bash
# Lint and unit-test the Prometheus rules. Fails on any error, on any
# promtool lint finding (--lint=all --lint-fatal) and on any output line that
# is not a promtool progress/SUCCESS line.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
command -v promtool >/dev/null || { echo "promtool not found" >&2; exit 2; }
status=0
run() {
  local out rc
  out=$("$@" 2>&1); rc=$?
  printf '%s\n' "$out"
  if [ "$rc" -ne 0 ]; then echo "check.sh: '$*' exited $rc" >&2; status=1; fi
  if printf '%s\n' "$out" | grep -vE '^(Checking |Unit Testing: |  SUCCESS|\s*$)' | grep -q .; then
    echo "check.sh: unexpected output from '$*'" >&2; status=1
  fi
}
run promtool check rules --lint=all --lint-fatal alerts/*.yml
run promtool test rules alerts/tests/*.yml
exit "$status"
