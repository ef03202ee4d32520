#!/usr/bin/env bash
# README command 2: installs what is missing, builds, and runs the whole test
# suite: unit, integration and end-to-end tests (warnings are errors), the
# tests of concurrent code under ThreadSanitizer, the unit tests under
# Address- and UndefinedBehaviorSanitizer, every parser's libFuzzer harness
# for a few seconds, the packaging checks, and a 2-minute soak of the daemon
# under faults. Ends with one line "N passed, N failed, N skipped". Exit
# status 0 only when everything passed.
set -uo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc 2>/dev/null || echo 2)
started=$SECONDS
# took WHAT: how long since the last call (or the start), for the log.
took() {
  echo "-- $1 took $((SECONDS - started)) s"
  started=$SECONDS
}
packaging/install-deps.sh --test || { echo "dependency installation failed" >&2; exit 1; }
took "installing what was missing"

# Every build below (the Debian package's too) compiles through ccache, so
# a second run recompiles only what changed. The cache is keyed on paths
# relative to the tree (CCACHE_BASEDIR, and no working directory in the
# hash), so a clone in another folder hits it as well. Its own folder: the
# package build moves HOME.
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_DIR="${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nodewatch-ccache}"
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
  # -Werror does not change an object, and the package's build (which
  # leaves it out) can then take the plain build's objects. A warning the
  # cache replays still fails the build (build(), below).
  export CCACHE_IGNOREOPTIONS=-Werror
  # ccache keys an object on the locale too, and debhelper builds the
  # package under LC_ALL=C.UTF-8: the other builds run under the same.
  export LC_ALL=C.UTF-8
  ccache --zero-stats >/dev/null
fi

passed=0
failed=0
skipped=0
failures=()

# run_ctest NAME BUILD_DIR CTEST_ARGS...: runs ctest, adds its counts. As
# many tests at once as there are cores: most wait on a timer, a process
# or a socket; those that assert how long something takes are RUN_SERIAL
# (tests/CMakeLists.txt, SERIAL) and run alone.
run_ctest() {
  local name=$1 dir=$2
  shift 2
  local log
  log=$(mktemp)
  echo "== $name"
  ctest --test-dir "$dir" --output-on-failure --timeout 120 -j "$jobs" "$@" 2>&1 | tee "$log" |
    grep -E '^(\s*[0-9]+/[0-9]+ Test|.*tests passed|The following|\s+[0-9]+ - )' || true
  # What the failing tests printed (the filter above shows status lines
  # only): from each failure's line to the next test's.
  awk '/^ *[0-9]+\/[0-9]+ Test +#/ { show = ($0 ~ /\*\*\*(Failed|Timeout|Exception|Not Run)/) } /tests passed, / { show = 0 } show' "$log"
  local total fail skip
  skip=$(grep -c '(Skipped)' "$log" || true)
  skipped=$((skipped + skip))
  total=$(sed -nE 's/.* tests failed out of ([0-9]+).*/\1/p' "$log" | tail -1)
  fail=$(sed -nE 's/.* ([0-9]+) tests failed out of.*/\1/p' "$log" | tail -1)
  if [[ -z "$total" ]]; then
    echo "$name: ctest ran no test or did not finish" >&2
    failed=$((failed + 1))
    failures+=("$name")
  else
    passed=$((passed + total - fail - skip))
    failed=$((failed + fail))
    ((fail > 0)) && failures+=("$name")
  fi
  rm -f "$log"
}

# check NAME COMMAND...: one pass/fail check; exit status 77 is a skip (the
# command says why on stderr).
check() {
  local name=$1
  shift
  echo "== $name"
  local rc=0
  "$@" || rc=$?
  if ((rc == 0)); then
    passed=$((passed + 1))
  elif ((rc == 77)); then
    echo "SKIPPED: $name" >&2
    skipped=$((skipped + 1))
  else
    echo "FAILED: $name" >&2
    failed=$((failed + 1))
    failures+=("$name")
  fi
}

# build DIR CMAKE_ARGS...: configures and builds "${targets[@]}" (all when
# empty). A compiler warning fails it, one replayed from the cache too.
build() {
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja -DNODEWATCH_WERROR=ON -DNODEWATCH_BUILD_TESTS=ON "$@" >/dev/null || return 1
  local log rc=0
  log=$(mktemp)
  ninja -C "$dir" -j "$jobs" "${targets[@]}" 2>&1 | tee "$log" || rc=1
  if grep -q ': warning: ' "$log"; then
    echo "the build printed a compiler warning (above)" >&2
    rc=1
  fi
  rm -f "$log"
  return $rc
}

# debian_flags: CMake arguments that compile as the Debian package's build
# does: Debian's flags (dpkg-buildflags) with packaging/debian/rules'
# DEB_BUILD_MAINT_OPTIONS, CPPFLAGS appended to CXXFLAGS as debhelper's
# cmake build system appends them, and no build type. The plain build
# uses them, so that it tests the objects the package ships and the
# package's build (packaging/verify-deb.sh) finds them all in the compiler
# cache but version.cpp. Without dpkg-buildflags: RelWithDebInfo.
debian_flags() {
  if ! command -v dpkg-buildflags >/dev/null; then
    echo -DCMAKE_BUILD_TYPE=RelWithDebInfo
    return
  fi
  local maint
  maint=$(sed -nE 's/^export DEB_BUILD_MAINT_OPTIONS *= *//p' packaging/debian/rules)
  local cxx cpp ld
  cxx=$(DEB_BUILD_MAINT_OPTIONS=$maint dpkg-buildflags --get CXXFLAGS)
  cpp=$(DEB_BUILD_MAINT_OPTIONS=$maint dpkg-buildflags --get CPPFLAGS)
  ld=$(DEB_BUILD_MAINT_OPTIONS=$maint dpkg-buildflags --get LDFLAGS)
  printf '%s\n' -DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=$cxx${cpp:+ $cpp}" "-DCMAKE_EXE_LINKER_FLAGS=$ld"
}

echo "== build (Debian's package flags, -Werror)"
targets=()
mapfile -t plain_flags < <(debian_flags)
if ! build build "${plain_flags[@]}"; then
  echo "0 passed, 1 failed"
  exit 1
fi
took "the build"

# The sanitizer trees compile beside the tests, which mostly wait on
# timers, processes and sockets (the plain tests kept a third of the two
# cores busy): one process after the plain build, at idle priority
# (SCHED_IDLE and nice 19), so that a test's thread takes a core from a
# compiler the moment it wakes. Both are Clang's: at -O0 it compiled
# http_server.cpp under TSan in 17 s, GCC 12 in 29 s. Unoptimised, with
# line tables only (-g1): a sanitizer's report names file and line; full
# debug information took a fifth more compile time and longer links.
# The ASan tree builds the library and the fuzz harnesses (tests/fuzz)
# with libFuzzer's coverage instrumentation, so that the unit tests and
# the harnesses share its objects. Each tree's output is its own log, printed when
# the foreground gets to it.
sanitizers=$(mktemp -d)
(
  renice -n 19 -p "$BASHPID" >/dev/null 2>&1
  chrt --idle -p 0 "$BASHPID" >/dev/null 2>&1
  targets=(tests_tsan)
  build build-tsan -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
    -DNODEWATCH_SANITIZE=thread >"$sanitizers/tsan.log" 2>&1
  echo $? >"$sanitizers/tsan.rc"
  targets=(tests_unit fuzzers)
  build build-asan -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
    "-DNODEWATCH_SANITIZE=address,undefined" -DNODEWATCH_FUZZ=ON >"$sanitizers/asan.log" 2>&1
  echo $? >"$sanitizers/asan.rc"
) &
sanitizers_pid=$!
# sanitizer_build NAME TREE: waits for that tree's build, prints what it
# said when it failed; its exit status is the build's.
sanitizer_build() {
  local name=$1 tree=$2
  echo "== build ($name, begun beside the tests)"
  while [[ ! -f "$sanitizers/$tree.rc" ]] && kill -0 "$sanitizers_pid" 2>/dev/null; do
    sleep 1
  done
  local rc
  rc=$(cat "$sanitizers/$tree.rc" 2>/dev/null || echo 1)
  if ((rc != 0)); then
    grep -vE '^\[[0-9]+/[0-9]+\] ' "$sanitizers/$tree.log" | tail -60
    failed=$((failed + 1))
    failures+=("$name build")
  fi
  took "waiting for the $name build"
  return "$rc"
}

# What the tests run for real from Debian's archive: NVIDIA's NVML
# libraries (535, 550, 555; tests/integration/real_nvml_test.cpp) and
# sid's promtool 3 (the rules' tests under Prometheus 3): fetched once into
# a cache through a private apt configuration (tests/archive/fetch.sh);
# where the archive cannot be reached it says so loudly and those tests
# skip.
export NODEWATCH_ARCHIVE_CACHE=${NODEWATCH_ARCHIVE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodewatch-archive}
echo "== NVIDIA's NVML libraries and promtool 3 from Debian's archive"
tests/archive/fetch.sh "$NODEWATCH_ARCHIVE_CACHE"
took "fetching them"

run_ctest "unit, integration and end-to-end tests" build -LE benchmark
took "the tests"

if sanitizer_build ThreadSanitizer tsan; then
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    run_ctest "the tests of concurrent code (TSAN in tests/unit/CMakeLists.txt) under ThreadSanitizer" build-tsan -L unit
  took "the ThreadSanitizer tests"
fi

# The short soak: the plain build's daemon for 2 minutes under faults
# drawn at random (bench/soak.sh; bench/README.md), its invariants checked
# by a scraper of its own. It runs beside the sanitizer build and tests and
# the packaging checks, which leave it the time it waits on timers and
# sockets, and is waited for at the end; its report is build/soak/.
mkdir -p build/soak
bench/soak.sh --binary build/daemon/nodewatchd --minutes 2 --report build/soak/report.json \
  >build/soak/soak.log 2>&1 &
soak_pid=$!
# soak_result: the soak's summary, and its exit status.
soak_result() {
  local rc=0
  wait "$soak_pid" || rc=$?
  if [[ -f build/soak/report.md ]]; then
    grep -E '^# Soak|^[0-9.]+ s, seed|^Independent scraper|^Kernel log|^RSS|^No violation|^- ' \
      build/soak/report.md
  else
    tail -20 build/soak/soak.log
  fi
  return $rc
}

if sanitizer_build "AddressSanitizer, UndefinedBehaviorSanitizer, libFuzzer" asan; then
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    run_ctest "unit tests under ASan and UBSan" build-asan -L unit
  run_ctest "every parser under libFuzzer with ASan and UBSan (committed crash inputs, then a few seconds each)" \
    build-asan -L fuzz
  took "the sanitizer tests and the fuzzers"
fi
wait "$sanitizers_pid"
rm -rf "$sanitizers"

check "systemd-analyze verify and security (exposure at most 2.0) of packaging/nodewatch.service" packaging/verify-unit.sh build/daemon/nodewatchd
check "system calls of nodewatchd and its helpers within the unit's SystemCallFilter" \
  packaging/verify-syscalls.sh build/daemon/nodewatchd

check "the Debian package: dpkg-buildpackage, lintian, dpkg -i, remove, purge" packaging/verify-deb.sh
took "the packaging checks"
check "2 minutes of nodewatchd under faults, no invariant broken (bench/soak.sh, build/soak/)" soak_result
took "the rest of the soak"
if [[ -n "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]]; then
  ccache --show-stats 2>/dev/null | grep -Ei '^ *(hits|misses|cache size)' | sed 's/^/ccache: /'
fi

if ((${#failures[@]} > 0)); then
  echo "failed: ${failures[*]}" >&2
fi
echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
