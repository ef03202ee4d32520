#!/usr/bin/env bash
# Fuzzes nodewatch's parsers for as long as asked: every libFuzzer harness
# of tests/fuzz (or those named), one after another, each for SECONDS,
# from its seeds, its committed regression inputs and the corpus earlier
# runs grew (kept in the build tree). A crash input is left in the build
# tree, and the script says where and how to commit it as a regression
# case (tests/fuzz/regressions/<name>/), which the test suite then runs.
#
# Usage: bench/fuzz.sh [--seconds N] [--build DIR] [--jobs N] [NAME...]
#   --seconds N  per harness (default 300)
#   --build DIR  the Clang sanitizer tree (default build-asan, configured
#                and built here if needed, as packaging/test.sh does)
#   --jobs N     harnesses run at once (default: the number of CPUs)
#   NAME...      harnesses to run (default: all; see tests/fuzz/CMakeLists.txt)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=300
build="$root/build-asan"
jobs=$(nproc 2>/dev/null || echo 2)
names=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '/^# Usage:/,/^#   NAME/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown argument $1" >&2; exit 2 ;;
    *) names+=("$1"); shift ;;
  esac
done

cd "$root"
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DNODEWATCH_SANITIZE=address,undefined -DNODEWATCH_FUZZ=ON -DNODEWATCH_BUILD_TESTS=ON >/dev/null
ninja -C "$build" fuzzers >/dev/null

if ((${#names[@]} == 0)); then
  mapfile -t names < <(sed -nE 's/^nodewatch_add_fuzzer\(([a-z_]+).*/\1/p' tests/fuzz/CMakeLists.txt)
fi
regex="^fuzz\\.($(IFS='|'; echo "${names[*]}"))\$"
echo "fuzzing ${#names[@]} harness(es) for ${seconds}s each, $jobs at a time" >&2
# The tests' own command, with the time asked for instead of the suite's
# (put back afterwards).
previous=$(sed -n 's/^NODEWATCH_FUZZ_SECONDS:STRING=//p' "$build/CMakeCache.txt")
cmake -S . -B "$build" -DNODEWATCH_FUZZ_SECONDS="$seconds" >/dev/null
rc=0
ctest --test-dir "$build" -R "$regex" -j "$jobs" --timeout $((seconds + 300)) --output-on-failure || rc=$?
cmake -S . -B "$build" -DNODEWATCH_FUZZ_SECONDS="${previous:-4}" >/dev/null
exit $rc
