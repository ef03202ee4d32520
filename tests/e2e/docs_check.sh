#!/usr/bin/env bash
# docs_check.sh NODEWATCHD [configuration]: the references generated from
# the code are current, and the hand-written docs name only families the
# code declares.
#  - docs/metrics.md is what `nodewatchd --list-metrics --format markdown`
#    prints (regenerate it with that command when a declaration changes);
#  - every `nodewatch_...` in backticks in README.md and docs/*.md is a
#    declared family, a histogram's series of one (_bucket, _sum, _count),
#    or a prefix (ending in _) of one: a renamed or removed family fails
#    here instead of leaving the docs behind.
# With `configuration`, only: docs/configuration.md is what
# `nodewatchd --list-options --format markdown` prints (regenerate it with
# that command when a key, its default, range or description changes).
set -euo pipefail
nodewatchd=$1
cd "$(dirname "$0")/../.."
if [[ ${2:-} == configuration ]]; then
  if ! "$nodewatchd" --list-options --format markdown | diff -u docs/configuration.md -; then
    echo "docs/configuration.md is not current: $nodewatchd --list-options --format markdown > docs/configuration.md" >&2
    exit 1
  fi
  exit 0
fi
status=0
if ! "$nodewatchd" --list-metrics --format markdown | diff -u docs/metrics.md -; then
  echo "docs/metrics.md is not current: $nodewatchd --list-metrics --format markdown > docs/metrics.md" >&2
  status=1
fi
declared=$("$nodewatchd" --list-metrics | cut -d' ' -f1)
while IFS=: read -r file name; do
  name=${name//\`/}
  base=$name
  for suffix in _bucket _sum _count; do base=${base%"$suffix"}; done
  if grep -qxF -e "$name" -e "$base" <<<"$declared"; then continue; fi
  if [[ $name == *_ ]] && grep -q "^$name" <<<"$declared"; then continue; fi
  echo "$file names $name, which no collector or the daemon declares" >&2
  status=1
done < <(grep -oE '`nodewatch_[a-z0-9_]+`' README.md docs/*.md | grep -v '^docs/metrics.md:' | sort -u)
exit $status
