#!/usr/bin/env bash
# The shipped Prometheus example (packaging/prometheus/) is valid: the
# configuration, with its installed paths pointed at this checkout, passes
# promtool check config (which also reads the rule files and the file_sd
# node list); the overrides example passes promtool check rules.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v promtool >/dev/null || { echo "promtool not found: run packaging/install-deps.sh --test" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/nodes"
cp packaging/prometheus/nodes.example.json "$tmp/nodes/"
cp packaging/prometheus/nodewatch-overrides.example.yml "$tmp/overrides.yml"
sed -e "s#/usr/share/nodewatch/alerts/#$PWD/alerts/#" \
    -e "s#/etc/prometheus/nodewatch-overrides.yml#$tmp/overrides.yml#" \
    -e "s#/etc/prometheus/nodewatch-nodes/#$tmp/nodes/#" \
    packaging/prometheus/prometheus.yml > "$tmp/prometheus.yml"
promtool check config "$tmp/prometheus.yml"
promtool check rules --lint=all --lint-fatal packaging/prometheus/nodewatch-overrides.example.yml
