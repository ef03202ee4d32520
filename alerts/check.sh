#!/usr/bin/env bash
# Lint and unit-test the Prometheus rules. Fails on any error, on any
# promtool lint finding (--lint=all --lint-fatal) and on any output line that
# is not a promtool progress/SUCCESS line.
# PROMTOOL: the promtool to run (default: the one on PATH, bookworm's 2.42;
# the test suite runs it again with sid's 3.x, fetched by
# tests/archive/fetch.sh). The rules and their tests must hold under both.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
promtool=${PROMTOOL:-promtool}
command -v "$promtool" >/dev/null || { echo "promtool not found: $promtool" >&2; exit 2; }
"$promtool" --version 2>&1 | head -1
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
command -v python3 >/dev/null || { echo "python3 not found" >&2; exit 2; }
# The alert and recording rules are the rendering of their templates with
# thresholds.toml's defaults.
python3 alerts/render.py --check || status=1
run "$promtool" check rules --lint=all --lint-fatal alerts/*.yml
run "$promtool" test rules alerts/tests/*.yml
# Every alert's runbook_url names a section of docs/runbook.md.
for anchor in $(grep -o 'runbook_url: docs/runbook.md#.*' alerts/nodewatch-rules.yml | sed 's/.*#//' | sort -u); do
  grep -qxF "## $anchor" docs/runbook.md || { echo "check.sh: docs/runbook.md has no section '## $anchor'" >&2; status=1; }
done
# An override renders valid rules that carry it (and only what it changes).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '[NodewatchNicPacketDropsHigh]\nratio = 0.02\n' > "$tmp/site.toml"
if python3 alerts/render.py --config "$tmp/site.toml" --set 'selectors.job=job="gpu-nodes"' \
    --set NodewatchExporterDown.for=2m --set 'xid.application=[13, 43, 94]' \
    --out "$tmp/rules.yml" --recording-out "$tmp/recording.yml"; then
  run "$promtool" check rules --lint=all --lint-fatal "$tmp/rules.yml" "$tmp/recording.yml"
  for want in 'up{job="gpu-nodes"} == 0' 'for: 2m' 'ratio_rate5m > 0.02'; do
    grep -qF "$want" "$tmp/rules.yml" || { echo "check.sh: override '$want' not rendered" >&2; status=1; }
  done
  if [ "$(grep -cF 'xid!~"13|43|94"' "$tmp/recording.yml")" -ne 2 ]; then
    echo "check.sh: override xid.application not rendered in both hardware XID rules" >&2; status=1
  fi
  if [ "$(diff alerts/nodewatch-rules.yml "$tmp/rules.yml" | grep -c '^>')" -ne 7 ] ||
     [ "$(diff alerts/nodewatch-recording.yml "$tmp/recording.yml" | grep -c '^>')" -ne 3 ]; then
    echo "check.sh: the overrides changed other lines than theirs" >&2; status=1
  fi
else
  status=1
fi
# A wrong override is refused, naming the key.
if python3 alerts/render.py --set NodewatchExporterDown.for=soon >/dev/null 2>"$tmp/err" ||
   ! grep -q 'NodewatchExporterDown.for' "$tmp/err"; then
  echo "check.sh: a bad duration was not refused" >&2; status=1
fi
if python3 alerts/render.py --set 'xid.application=["13"]' >/dev/null 2>"$tmp/err" ||
   ! grep -q 'xid.application' "$tmp/err"; then
  echo "check.sh: a bad XID list was not refused" >&2; status=1
fi
if python3 alerts/render.py --set NodewatchExporterDown.bogus=1 >/dev/null 2>"$tmp/err" ||
   ! grep -q 'unknown key NodewatchExporterDown.bogus' "$tmp/err"; then
  echo "check.sh: an unknown key was not refused" >&2; status=1
fi
exit "$status"
