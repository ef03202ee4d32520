#!/usr/bin/env bash
# Collection-cost benchmark: what nodewatchd's collections cost the node
# when nobody scrapes, next to what node_exporter spends on a scrape of the
# same files and next to the floor of reading those files at all.
#
# Cases, each with nodewatchd running only the collector(s) named:
#   storage      125 NVMe disks (synthetic /proc/diskstats and /sys/block),
#                storage at 1 s; node_exporter with only diskstats, scraped
#                once a second; the floor: the files a storage collection
#                reads every cycle, through held descriptors (read_floor).
#   interconnect 8 ConnectX-6 HCAs x 1 port, interconnect at 1 s with its
#                PMA counters read every collection (pma_interval 0s, as
#                node_exporter reads them on every scrape); node_exporter
#                with only infiniband, scraped once a second; the floor.
#   pcie         tests/fixtures/pcie (18 functions, AER), pcie at 1 s; the
#                floor (node_exporter has no PCIe collector).
#   empty        accelerator (no NVML library), textfile (an empty
#                directory: of the directories that hold nothing, the one
#                that costs most to look at; a missing one configured
#                would be a read error counted at every collection, not a
#                collection that finds nothing) and
#                interconnect (no devices), each alone at 100 ms, then the
#                three together (due at the same times: one wake-up for
#                three collections): the cost of a collection that finds
#                nothing, against the floor of
#                anything done every 100 ms (one wake-up from idle, alone and
#                with a hand-off to a second thread: read_floor --wakes) and
#                of a look that finds nothing (one wake-up and one failed
#                openat under /sys/class, the first thing after it);
#                and the three beside this host's other default collectors
#                (two daemons side by side, with and without them, every
#                collector at 100 ms; their difference per empty
#                collection, when the host has no class/drm or
#                class/infiniband).
#   host         every default collector at 1 s on this machine's own /proc
#                and /sys, in % of one core; node_exporter with its default
#                collectors scraped once a second, in the same units.
#
# The storage and interconnect cases give nodewatch's cost twice: its
# collections alone, as it runs when nobody scrapes it, and its whole
# process scraped once a second as node_exporter is (collections and
# scrapes: what the node pays under Prometheus), each against
# node_exporter's scrape.
#
# With --before, a second nodewatchd (an earlier build) runs each case side
# by side with the first, on the same files at the same time, and each
# table gains its figures and the ratio of the two: a before-and-after in
# one run, which the load of the machine moves alike.
#
# CPU time is every thread's run time from /proc/PID/task/*/schedstat
# (nanoseconds), the daemon's and its live helper processes' (launcher and
# file-system helpers), plus the reaped children's (from /proc/PID/stat,
# in clock ticks), over SECONDS seconds after a 3 s warm-up. The two
# daemons of a case run at the same time, each measured on its own.
# curl's own CPU is not counted.
#
# Usage: bench/collection_cost.sh [--binary PATH] [--before PATH] [--floor PATH]
#                                 [--seconds N] [--only CASE] [--out PATH]
#   --binary PATH  measure this nodewatchd (and skip the build)
#   --before PATH  measure this nodewatchd too, side by side (an earlier build)
#   --floor PATH   the read_floor program (default: build-bench/bench/read_floor)
#   --seconds N    seconds measured per case (default 20)
#   --only CASE    run one case: storage, interconnect, pcie, empty or host
#   --out PATH     also write the report to PATH
# Environment: NODE_EXPORTER=/usr/bin/prometheus-node-exporter
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NODE_EXPORTER=${NODE_EXPORTER:-/usr/bin/prometheus-node-exporter}
binary="" before="" floor="" seconds=20 only="" out=""

usage() { sed -n '/^# Usage:/,/^# Environment:/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "collection_cost: $*" >&2; exit 1; }
note() { echo "collection_cost: $*" >&2; }

while (($#)); do
  case $1 in
    --binary) (($# >= 2)) || die "--binary needs a path"; binary=$2; shift 2 ;;
    --before) (($# >= 2)) || die "--before needs a path"; before=$2; shift 2 ;;
    --floor) (($# >= 2)) || die "--floor needs a path"; floor=$2; shift 2 ;;
    --seconds) (($# >= 2)) || die "--seconds needs a number"; seconds=$2; shift 2 ;;
    --only) (($# >= 2)) || die "--only needs a case"; only=$2; shift 2 ;;
    --out) (($# >= 2)) || die "--out needs a path"; out=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
[[ $seconds =~ ^[1-9][0-9]*$ ]] || die "--seconds must be a positive integer"
case $only in "" | storage | interconnect | pcie | empty | host) ;; *) die "no case '$only'" ;; esac
for c in curl ss getconf awk; do command -v "$c" >/dev/null || die "$c not found"; done
[[ -x $NODE_EXPORTER ]] || die "$NODE_EXPORTER not found (packaging/install-deps.sh --test installs it)"

if [[ -z $binary || -z $floor ]]; then
  note "building nodewatchd and read_floor (Release) in build-bench/"
  cmake -S "$root" -B "$root/build-bench" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DNODEWATCH_BUILD_TESTS=OFF -DNODEWATCH_BUILD_BENCH=ON >&2
  ninja -C "$root/build-bench" nodewatchd read_floor >&2
  [[ -n $binary ]] || binary=$root/build-bench/daemon/nodewatchd
  [[ -n $floor ]] || floor=$root/build-bench/bench/read_floor
fi
[[ -x $binary ]] || die "not an executable: $binary"
[[ -x $floor ]] || die "not an executable: $floor"
[[ -z $before || -x $before ]] || die "not an executable: $before"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/nodewatch-cost.XXXXXX")
pids=()
# shellcheck disable=SC2317  # called from traps
stop_all() {
  local pid i
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  pids=()
}
# shellcheck disable=SC2317
cleanup() { stop_all; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  local p i
  for ((i = 0; i < 100; i++)); do
    p=$((20000 + RANDOM % 20001))
    [[ -z $(ss -Hltn "( sport = :$p )") ]] && { echo "$p"; return 0; }
  done
  die "no free port found"
}
wait_for() {
  local url=$1 pid=$2 i
  for ((i = 0; i < 150; i++)); do
    kill -0 "$pid" 2>/dev/null || return 1
    [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url" || true) == 200 ]] && return 0
    sleep 0.1
  done
  return 1
}

# shellcheck source=bench/cpu.sh
source "$root/bench/cpu.sh"
now_ns() { date +%s%N; }

# start_nodewatch NAME CONFIG SYSFS PROCFS [BINARY]: starts nodewatchd
# (BINARY, or --binary's); sets nw_pid, nw_port. With --before, also starts
# that one (NAME-before) and sets bf_pid; else bf_pid is empty.
start_nodewatch() {
  local name=$1 config=$2 sysfs=$3 procfs=$4 bin=${5:-$binary} port pid
  bf_pid=""
  if [[ -n $before && -z ${5:-} ]]; then
    start_nodewatch "$name-before" "$config" "$sysfs" "$procfs" "$before"
    bf_pid=$nw_pid
  fi
  for _ in 1 2 3; do
    port=$(free_port)
    "$bin" --config "$config" --listen "127.0.0.1:$port" --sysfs "$sysfs" --procfs "$procfs" \
      --log-level warn >"$tmp/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    if wait_for "http://127.0.0.1:$port/-/ready" "$pid"; then
      nw_pid=$pid nw_port=$port
      return 0
    fi
    tail -n 5 "$tmp/$name.log" >&2 || true
    kill -KILL "$pid" 2>/dev/null || true
  done
  die "nodewatchd did not start ($name)"
}
# start_node_exporter NAME ARGS...: sets ne_pid, ne_port.
start_node_exporter() {
  local name=$1 port pid
  shift
  for _ in 1 2 3; do
    port=$(free_port)
    "$NODE_EXPORTER" --web.listen-address="127.0.0.1:$port" --log.level=warn "$@" \
      >"$tmp/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    if wait_for "http://127.0.0.1:$port/metrics" "$pid"; then ne_pid=$pid ne_port=$port; return 0; fi
    tail -n 5 "$tmp/$name.log" >&2 || true
    kill -KILL "$pid" 2>/dev/null || true
  done
  die "node_exporter did not start ($name)"
}

# series URL PREFIX: the number of samples whose name starts with PREFIX.
series() { curl -s --max-time 10 "$1" | awk -v p="$2" 'index($0, p) == 1 { n++ } END { print n + 0 }'; }

# measure: after a 3 s warm-up, CPU of nw_pid (and bf_pid and ne_pid when
# set; ne_pid is scraped once a second with gzip, as Prometheus asks) over
# $seconds. Sets nw_cpu_ns, bf_cpu_ns, ne_cpu_ns, elapsed_ns, scrapes.
measure() {
  local t0 a0 b0 c0 deadline
  sleep 3
  t0=$(now_ns)
  a0=$(cpu_ns "$nw_pid")
  b0=0 c0=0
  [[ -n ${ne_pid:-} ]] && b0=$(cpu_ns "$ne_pid")
  [[ -n ${bf_pid:-} ]] && c0=$(cpu_ns "$bf_pid")
  scrapes=0
  deadline=$((t0 + seconds * 1000000000))
  while (($(now_ns) < deadline)); do
    if [[ -n ${ne_pid:-} ]]; then
      curl -s -o /dev/null --max-time 5 -H 'Accept-Encoding: gzip' "http://127.0.0.1:$ne_port/metrics" &&
        scrapes=$((scrapes + 1))
    fi
    if [[ -n ${scrape_nw:-} ]]; then
      curl -s -o /dev/null --max-time 5 -H 'Accept-Encoding: gzip' "http://127.0.0.1:$nw_port/metrics" || true
    fi
    sleep 1
  done
  elapsed_ns=$(($(now_ns) - t0))
  nw_cpu_ns=$(($(cpu_ns "$nw_pid") - a0))
  ne_cpu_ns=0 bf_cpu_ns=0
  [[ -n ${ne_pid:-} ]] && ne_cpu_ns=$(($(cpu_ns "$ne_pid") - b0))
  [[ -n ${bf_pid:-} ]] && bf_cpu_ns=$(($(cpu_ns "$bf_pid") - c0))
  return 0
}

report=$tmp/report.md
emit() { printf '%s\n' "$*" >>"$report"; }
us() { awk -v n="$1" -v d="$2" 'BEGIN { printf "%.1f", n / d / 1000 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
# write_config FILE INTERVAL COLLECTOR...: every collector off but those
# named, each at INTERVAL (and a timeout of INTERVAL), with the lines of
# extra[COLLECTOR] in its table; extra[top] goes before the tables.
declare -A extra=()
write_config() {
  local file=$1 interval=$2 c
  shift 2
  printf '%s\n' "${extra[top]:-}" >"$file"
  # No check socket: the daemons measured side by side would contend for
  # the default one.
  printf '[server]\ncheck_socket = ""\n' >>"$file"
  for c in accelerator pcie interconnect storage nic textfile kernel mesh; do
    printf '[collectors.%s]\n' "$c" >>"$file"
    if [[ " $* " == *" $c "* ]]; then
      printf 'enabled = true\ninterval = "%s"\ntimeout = "%s"\n%s\n' "$interval" "$interval" \
        "${extra[$c]:-}" >>"$file"
    else
      printf 'enabled = false\n' >>"$file"
    fi
  done
}

# shellcheck source=bench/fixtures.sh
source "$root/bench/fixtures.sh"

emit "# Collection cost: nodewatchd against node_exporter and the read floor"
emit ""
emit "nodewatchd: $binary ($("$binary" --version 2>/dev/null | head -n 1))"
emit "node_exporter: $("$NODE_EXPORTER" --version 2>&1 | head -n 1)"
[[ -z $before ]] || emit "before: $before ($("$before" --version 2>/dev/null | head -n 1))"
emit "$(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg) at start; $seconds s per case"
emit ""
emit "| case | nodewatch µs/collection | series | node_exporter µs/scrape | series | node_exporter ÷ nodewatch | nodewatch µs/collection, scraped too | node_exporter ÷ that | floor µs | nodewatch ÷ floor | before µs/collection | nodewatch ÷ before |"
emit "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"

run_case_device() {
  local name=$1 collector=$2 nw_prefix=$3 ne_prefix=$4 floor_list=$5 ne_args=$6
  write_config "$tmp/$name.toml" 1s "$collector"
  start_nodewatch "$name" "$tmp/$name.toml" "$fx/sys" "$fx/proc"
  ne_pid=""
  if [[ -n $ne_args ]]; then
    # shellcheck disable=SC2086  # the collector flags, split on purpose
    start_node_exporter "ne-$name" --collector.disable-defaults $ne_args \
      --path.procfs="$fx/proc" --path.sysfs="$fx/sys" --path.udev.data="$fx/udev"
  fi
  local nw_series ne_series="-" floor_ns per_nw per_ne="-" vs_ne="-" per_bf="-" collections
  nw_series=$(series "http://127.0.0.1:$nw_port/metrics" "$nw_prefix")
  [[ -n $ne_pid ]] && ne_series=$(series "http://127.0.0.1:$ne_port/metrics" "$ne_prefix")
  measure
  collections=$(awk -v e="$elapsed_ns" 'BEGIN { printf "%d", e / 1e9 + 0.5 }')
  per_nw=$(us "$nw_cpu_ns" "$collections")
  [[ -z $bf_pid ]] || per_bf=$(us "$bf_cpu_ns" "$collections")
  local per_scraped="-" vs_scraped="-"
  if [[ -n $ne_pid ]]; then
    per_ne=$(us "$ne_cpu_ns" "$scrapes")
    vs_ne=$(ratio "$per_ne" "$per_nw")
    # Both: nodewatch's collections alone (nobody scrapes it), and its
    # whole cost to the node when it is scraped as node_exporter is, once
    # a second with gzip: its collections and its scrapes of the same
    # series (the figure a whole-process measure of a scraped daemon gives).
    scrape_nw=1 measure
    collections=$(awk -v e="$elapsed_ns" 'BEGIN { printf "%d", e / 1e9 + 0.5 }')
    per_scraped=$(us "$nw_cpu_ns" "$collections")
    vs_scraped=$(ratio "$(us "$ne_cpu_ns" "$scrapes")" "$per_scraped")
  fi
  floor_ns=$("$floor" <"$floor_list" | awk '{ print $(NF - 4) }')
  emit "| $name | $per_nw | $nw_series | $per_ne | $ne_series | $vs_ne | $per_scraped | $vs_scraped | $(us "$floor_ns" 1) | $(ratio "$per_nw" "$(us "$floor_ns" 1)") | $per_bf | $(ratio "$per_nw" "$per_bf") |"
  stop_all
}

if [[ -z $only || $only == storage ]]; then
  note "storage: 125 disks"
  fx=$tmp/storage
  write_block_fixture 125
  write_other_fixture
  rm -rf "$fx/sys/class/infiniband" "$fx/sys/class/hwmon"
  {
    echo "$fx/proc/diskstats"
    echo "$fx/proc/1/mountstats"
    for ((i = 0; i < 125; i++)); do echo "$fx/sys/block/nvme${i}n1/queue/nr_requests"; done
  } >"$tmp/storage.files"
  run_case_device storage storage nodewatch_storage_ node_disk_ "$tmp/storage.files" \
    "--collector.diskstats"
fi

if [[ -z $only || $only == interconnect ]]; then
  note "interconnect: 8 HCAs"
  fx=$tmp/ib
  mkdir -p "$fx/proc" "$fx/sys"
  write_hca_fixture 8
  find "$fx/sys/class/infiniband" -path '*/ports/*' -type f \
    \( -name state -o -name phys_state -o -name rate -o -path '*counters/*' \) | sort >"$tmp/ib.files"
  extra[interconnect]='pma_interval = "0s"'
  run_case_device interconnect interconnect nodewatch_interconnect_ node_infiniband_ \
    "$tmp/ib.files" "--collector.infiniband"
  extra[interconnect]=""
fi

if [[ -z $only || $only == pcie ]]; then
  note "pcie: tests/fixtures/pcie"
  fx=$tmp/pcie
  mkdir -p "$fx/proc"
  cp -a "$root/tests/fixtures/pcie/sys" "$fx/sys"
  find "$fx/sys/bus/pci/devices/" -maxdepth 1 -mindepth 1 | while read -r d; do
    for f in power/runtime_status current_link_speed current_link_width max_link_speed \
      max_link_width aer_dev_correctable aer_dev_nonfatal aer_dev_fatal; do
      [[ -f $d/$f ]] && echo "$d/$f"
    done
  done | sort >"$tmp/pcie.files"
  run_case_device pcie pcie nodewatch_pcie_ - "$tmp/pcie.files" ""
fi

if [[ -z $only || $only == empty ]]; then
  note "empty collections"
  fx=$tmp/empty
  mkdir -p "$fx/sys" "$fx/proc" "$fx/textfile"
  # The floor of any work done every 100 ms: one wake-up from idle, alone
  # and with a hand-off to a second thread and back (read_floor --wakes).
  read -r wake_ns handoff_ns look_ns < <("$floor" --wakes $((seconds * 5)) --period-ms 100 |
    awk '{ print $1, $6, $14 }')
  emit ""
  emit "The floor at 100 ms (read_floor --wakes): one wake-up $(us "$wake_ns" 1) µs, with a hand-off $(us "$handoff_ns" 1) µs; one look that finds nothing (a failed openat under /sys/class), the first thing after a wake, $(us "$look_ns" 1) µs."
  emit ""
  # The floor of a collection that looks once and finds nothing: a wake-up
  # and one look, the least any collector does at its interval.
  wake_look_ns=$((wake_ns + look_ns))
  emit "| collection that finds nothing (100 ms interval) | µs/collection | ÷ one wake ($(us "$wake_ns" 1) µs) | ÷ wake and hand-off ($(us "$handoff_ns" 1) µs) | ÷ wake and one look ($(us "$wake_look_ns" 1) µs) | before µs/collection | ÷ before |"
  emit "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
  # empty_row LABEL NAME CONFIG COLLECTORS: measures a daemon with CONFIG,
  # whose COLLECTORS collectors are all due every 100 ms (one wake-up for
  # all of them), and emits its row, per collection.
  empty_row() {
    local label=$1 name=$2 config=$3 n=$4 collections per per_bf="-"
    start_nodewatch "$name" "$config" "$fx/sys" "$fx/proc"
    ne_pid=""
    measure
    collections=$(awk -v e="$elapsed_ns" -v k="$n" 'BEGIN { printf "%d", k * (e / 1e8) + 0.5 }')
    per=$(awk -v c="$nw_cpu_ns" -v n="$collections" 'BEGIN { printf "%d", c / n }')
    [[ -z $bf_pid ]] || per_bf=$(awk -v c="$bf_cpu_ns" -v n="$collections" 'BEGIN { printf "%d", c / n }')
    emit "| $label | $(us "$per" 1) | $(ratio "$per" "$wake_ns") | $(ratio "$per" "$handoff_ns") | $(ratio "$per" "$wake_look_ns") | $([[ $per_bf == - ]] && echo - || us "$per_bf" 1) | $(ratio "$per" "$per_bf") |"
    stop_all
  }
  extra=([top]="[nvml]
library = \"$tmp/none/libnvidia-ml.so.1\"" [textfile]="directory = \"$fx/textfile\"")
  for c in accelerator textfile interconnect; do
    write_config "$tmp/empty-$c.toml" 100ms "$c"
    empty_row "$c" "empty-$c" "$tmp/empty-$c.toml" 1
  done
  # The three in one daemon, due together as collectors at intervals that
  # divide one another are (the daemon's defaults).
  write_config "$tmp/empty-all.toml" 100ms accelerator textfile interconnect
  empty_row "the three due together, per collection" empty-all "$tmp/empty-all.toml" 3
  # The three beside this host's other default collectors, every one at
  # 100 ms: a daemon with them and one without, side by side; their
  # difference per empty collection is what the three cost beyond the
  # wake-up they share with the others. Only where the host has neither
  # class/drm nor class/infiniband (else those two find something).
  if [[ -e /sys/class/drm || -e /sys/class/infiniband ]]; then
    note "this host has /sys/class/drm or /sys/class/infiniband: no row beside the others"
  else
    write_config "$tmp/shared-with.toml" 100ms accelerator pcie interconnect storage nic textfile kernel
    write_config "$tmp/shared-without.toml" 100ms pcie storage nic kernel
    # shared_row LABEL BINARY: emits the row of BINARY's two daemons.
    shared_row() {
      local label=$1 bin=$2 saved=$before without rounds
      before=""
      start_nodewatch shared-without "$tmp/shared-without.toml" /sys /proc "$bin"
      without=$nw_pid without_port=$nw_port
      start_nodewatch shared-with "$tmp/shared-with.toml" /sys /proc "$bin"
      before=$saved
      bf_pid=$without ne_pid=""
      # Meanwhile, each collector's own time on the worker: its duration
      # gauge (collect, render, the snapshot compare; not the scheduler's
      # bookkeeping after it), sampled 5 times a second in both daemons.
      # The first collection after a wake-up finds the caches cold: the
      # accelerator (first in the catalog) where it runs, pcie in the
      # daemon without it.
      sample_durations() {
        while sleep 0.2; do
          curl -s --max-time 2 "http://127.0.0.1:$1/metrics" |
            grep '^nodewatch_collector_duration_seconds{' || true
        done
      }
      sample_durations "$nw_port" >"$tmp/durations-$bin_n" 2>/dev/null &
      sampler=$!
      sample_durations "$without_port" >"$tmp/durations-without-$bin_n" 2>/dev/null &
      sampler2=$!
      measure
      kill "$sampler" "$sampler2" 2>/dev/null || true
      wait "$sampler" "$sampler2" 2>/dev/null || true
      rounds=$(awk -v e="$elapsed_ns" 'BEGIN { printf "%d", e / 1e8 + 0.5 }')
      emit "| $label | $(us $((nw_cpu_ns - bf_cpu_ns)) $((3 * rounds))) | $(ratio $(((nw_cpu_ns - bf_cpu_ns) / (3 * rounds))) "$wake_ns") | $(ratio $(((nw_cpu_ns - bf_cpu_ns) / (3 * rounds))) "$handoff_ns") | $(ratio $(((nw_cpu_ns - bf_cpu_ns) / (3 * rounds))) "$wake_look_ns") | - | - |"
      # Mean of a collector's samples in a file, in µs ("-" when none).
      mean_of() {
        awk -v want="$1" '{ match($1, /collector="[a-z]+"/); c = substr($1, RSTART + 11, RLENGTH - 12)
                            if (c == want) { s += $2; n++ } }
                          END { if (n > 0) printf "%.1f", s / n * 1e6; else print "-" }' "$2"
      }
      local own="" sum=0 m c pcie_first pcie_after mean acc="-"
      for c in accelerator textfile interconnect; do
        m=$(mean_of "$c" "$tmp/durations-$bin_n")
        [[ $c != accelerator ]] || acc=$m
        own+="$c $m µs, "
        sum=$(awk -v a="$sum" -v b="$m" 'BEGIN { print a + b }')
      done
      mean=$(awk -v s="$sum" 'BEGIN { printf "%.1f", s / 3 }')
      own+="mean $mean"
      pcie_first=$(mean_of pcie "$tmp/durations-without-$bin_n")
      pcie_after=$(mean_of pcie "$tmp/durations-$bin_n")
      emit "| ${label%% (*}: each one's own time on the worker (duration gauge; $own µs; pcie $pcie_first µs first after the wake-up, $pcie_after µs after the accelerator; the accelerator, first after the wake-up, ÷ one look first after a wake: $([[ $acc == - ]] && echo - || ratio "$(awk -v m="$acc" 'BEGIN { printf "%d", m * 1000 }')" "$look_ns")) | $mean | $(ratio "$(awk -v m="$mean" 'BEGIN { printf "%d", m * 1000 }')" "$wake_ns") | - | - | - | - |"
      bin_n=$((bin_n + 1))
      stop_all
    }
    bin_n=0
    shared_row "each of the three beside this host's other collectors (difference of two daemons, per empty collection)" "$binary"
    [[ -z $before ]] || shared_row "the same, before" "$before"
  fi
fi

if [[ -z $only || $only == host ]]; then
  note "host: every default collector at 1 s"
  extra=()
  write_config "$tmp/host.toml" 1s accelerator pcie interconnect storage nic textfile kernel
  start_nodewatch host "$tmp/host.toml" /sys /proc
  start_node_exporter ne-host
  measure
  emit ""
  emit "| this host, every default collector at 1 s | % of one core |"
  emit "| --- | ---: |"
  emit "| nodewatch | $(awk -v c="$nw_cpu_ns" -v e="$elapsed_ns" 'BEGIN { printf "%.3f", 100 * c / e }') |"
  [[ -z $bf_pid ]] || emit "| nodewatch before | $(awk -v c="$bf_cpu_ns" -v e="$elapsed_ns" 'BEGIN { printf "%.3f", 100 * c / e }') |"
  emit "| node_exporter, default collectors, scraped once a second | $(awk -v c="$ne_cpu_ns" -v e="$elapsed_ns" 'BEGIN { printf "%.3f", 100 * c / e }') |"
  stop_all
fi

emit ""
emit "load average $(cut -d' ' -f1-3 /proc/loadavg) at end"
cat "$report"
[[ -z $out ]] || cp "$report" "$out"
