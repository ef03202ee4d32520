#!/usr/bin/env bash
# Runs one libFuzzer harness: first every committed crash input of it
# (tests/fuzz/regressions/<name>/, each once), then fuzzing for SECONDS from
# its seeds and those inputs. Usage:
#   run.sh BINARY NAME SECONDS WORK_DIR [SEED_FILE_OR_DIR...]
# WORK_DIR keeps the corpus the fuzzer grows (reused by the next run) and
# any crash input; a crash prints where the input is and how to keep it as
# a regression case.
set -uo pipefail
bin=$1 name=$2 seconds=$3 work=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
regressions=$here/regressions/$name
mkdir -p "$work/corpus" "$work/seeds" "$work/crashes"

shopt -s nullglob
cases=("$regressions"/*)
if ((${#cases[@]} > 0)); then
  echo "== $name: ${#cases[@]} committed regression input(s)"
  "$bin" -rss_limit_mb=2048 -timeout=10 "${cases[@]}" 2>&1 | tail -n 20
  rc=${PIPESTATUS[0]}
  if ((rc != 0)); then
    echo "FAILED: $name fails on a committed regression input (exit $rc)" >&2
    exit 1
  fi
fi

# libFuzzer takes directories as corpora; fixture trees hold symbolic
# links (sysfs's device/ and subsystem/ ones point upwards), so their
# regular files are copied into one directory instead.
dirs=("$work/corpus")
for s in "$@"; do
  if [[ -d $s || -f $s ]]; then
    while IFS= read -r -d '' f; do
      cp -f "$f" "$work/seeds/${f//\//_}"
    done < <(find "$s" -type f -size -65k -print0)
  else
    echo "no seed $s" >&2
    exit 1
  fi
done
dirs+=("$work/seeds")
if [[ -d $regressions ]]; then dirs+=("$regressions"); fi

echo "== $name: fuzzing for ${seconds}s"
log=$work/last.log
"$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="$work/crashes/" "${dirs[@]}" >"$log" 2>&1
rc=$?
grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::new_units_added|INFO: seed corpus)' "$log"
if ((rc != 0)); then
  tail -n 60 "$log"
  for f in "$work"/crashes/*; do
    echo "crash input: $f ($(stat -c %s "$f") bytes)" >&2
    echo "keep it as a regression case: cp '$f' tests/fuzz/regressions/$name/" >&2
  done
  echo "FAILED: fuzzing $name (exit $rc)" >&2
  exit 1
fi
exit 0
