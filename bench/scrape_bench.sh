#!/usr/bin/env bash
# Scrape-cost benchmark: nodewatchd against Debian's prometheus-node-exporter.
#
# What it measures, for a /metrics exposition of about 200 KiB, served plain
# and gzip-compressed, to 1 and to 16 concurrent keep-alive clients:
#   - latency p50 and p99, as seen by the load generator (wrk --latency);
#   - requests per second;
#   - CPU time of the exporter process per scrape: utime+stime from
#     /proc/PID/stat before and after the run, over the requests completed.
#     It includes everything the process did meanwhile (its own collection
#     timers, garbage collection), at the kernel's tick resolution (CLK_TCK).
#
# How:
#   1. builds nodewatchd (Release) in build-bench/, unless --binary is given;
#   2. writes a synthetic fixture in a temporary directory: proc/diskstats
#      with N NVMe whole disks and their sys/block/<dev>/ attributes (plus the
#      matching udev database entries node_exporter reads for model/serial),
#      N chosen so that nodewatchd's plain body is about TARGET_BYTES;
#   3. starts nodewatchd and prometheus-node-exporter on free loopback ports,
#      both reading that fixture (node_exporter with its diskstats, netdev,
#      netclass, hwmon, infiniband and mountstats collectors; netdev/netclass
#      see this machine's interfaces, hwmon/infiniband a small synthetic chip
#      and HCA, mountstats a copy of this machine's mountstats);
#   4. for each case (encoding x clients) runs wrk against one target, then
#      the other, after a short warm-up of each;
#   5. prints a markdown report: the table, node_exporter/nodewatch ratios,
#      and PASS/FAIL for the targets (p99 < 1 ms for nodewatch, plain, one
#      client; node_exporter uses at least 5x the CPU per scrape of nodewatch
#      in every case).
#
# Traffic stays on 127.0.0.1. Both daemons are stopped and the temporary
# directory removed on exit. Default run time is about one minute plus the
# build. Not part of the test suite; see bench/README.md.
#
# Usage: bench/scrape_bench.sh [--binary PATH] [--out PATH] [--raw DIR] [--strict]
#   --binary PATH  use this nodewatchd instead of building build-bench/
#   --out PATH     also write the report to PATH
#   --raw DIR      keep each run's wrk output and the daemons' logs in DIR
#   --strict       exit 3 when a target is missed (default: exit 0)
# Environment:
#   DURATION=5          seconds per measured wrk run
#   WARMUP=1            seconds per warm-up run (plain, then gzip) per target
#   TARGET_BYTES=204800 wanted size of nodewatchd's plain body
#   NODE_EXPORTER=/usr/bin/prometheus-node-exporter
#   WRK=wrk
set -euo pipefail

DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
TARGET_BYTES=${TARGET_BYTES:-204800}
NODE_EXPORTER=${NODE_EXPORTER:-/usr/bin/prometheus-node-exporter}
WRK=${WRK:-wrk}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
binary=""
out=""
raw=""
strict=0

usage() { sed -n '/^# Usage:/,/^#   WRK=/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "scrape_bench: $*" >&2; exit 1; }
note() { echo "scrape_bench: $*" >&2; }

while (($#)); do
  case $1 in
    --binary) (($# >= 2)) || die "--binary needs a path"; binary=$2; shift 2 ;;
    --out) (($# >= 2)) || die "--out needs a path"; out=$2; shift 2 ;;
    --raw) (($# >= 2)) || die "--raw needs a directory"; raw=$2; shift 2 ;;
    --strict) strict=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done

for v in DURATION WARMUP TARGET_BYTES; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer (got '${!v}')"
done
((DURATION <= 60)) || die "DURATION is capped at 60 seconds"
for c in "$WRK" curl ss getconf awk gzip timeout; do
  command -v "$c" >/dev/null || die "$c not found (packaging/install-deps.sh --test installs the benchmark's tools)"
done
[[ -x $NODE_EXPORTER ]] || die "$NODE_EXPORTER not found (packaging/install-deps.sh --test installs prometheus-node-exporter)"
clk_tck=$(getconf CLK_TCK)

# --- build --------------------------------------------------------------------
if [[ -z $binary ]]; then
  note "building nodewatchd (Release) in build-bench/"
  cmake -S "$root" -B "$root/build-bench" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DNODEWATCH_BUILD_TESTS=OFF >&2
  ninja -C "$root/build-bench" nodewatchd >&2
  binary=$root/build-bench/daemon/nodewatchd
fi
[[ -x $binary ]] || die "not an executable: $binary"

# --- temporary directory, daemons, cleanup -------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nodewatch-bench.XXXXXX")
fx=$tmp/fixture
daemon_pids=()

# shellcheck disable=SC2317  # called from the EXIT trap
stop_daemons() {
  local pid i
  for pid in "${daemon_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${daemon_pids[@]}"; do
    for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  daemon_pids=()
}
# shellcheck disable=SC2317  # the EXIT trap
cleanup() {
  stop_daemons
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A port in 20000-40000 that nothing listens on now. The daemon binding it is
# the real check: start_* try again with another port when the bind fails.
free_port() {
  local p i
  for ((i = 0; i < 100; i++)); do
    p=$((20000 + RANDOM % 20001))
    if [[ -z $(ss -Hltn "( sport = :$p )") ]]; then
      echo "$p"
      return 0
    fi
  done
  die "no free port found in 20000-40000"
}

# http_code URL: the status code, or 000 when nothing answered.
http_code() {
  curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1" || true
}

# wait_for URL PID: until URL answers 200 (10 s at most) while PID lives.
wait_for() {
  local url=$1 pid=$2 i
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || return 1
    [[ $(http_code "$url") == 200 ]] && return 0
    sleep 0.1
  done
  return 1
}

nw_port="" nw_pid="" ne_port="" ne_pid=""

start_nodewatch() {
  local attempt port pid
  # Built-in defaults (storage collector, 15s), but for the 16 clients that
  # all come from 127.0.0.1: the default per-address limit (8) would answer
  # half of them 503.
  printf '[server]\nmax_connections_per_client = 32\ncheck_socket = ""\n' >"$tmp/nw.toml"
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    "$binary" --config "$tmp/nw.toml" --listen "127.0.0.1:$port" \
      --sysfs "$fx/sys" --procfs "$fx/proc" --log-level warn >"$tmp/nodewatchd.log" 2>&1 &
    pid=$!
    daemon_pids+=("$pid")
    if wait_for "http://127.0.0.1:$port/-/ready" "$pid"; then
      nw_port=$port nw_pid=$pid
      return 0
    fi
    note "nodewatchd did not become ready on port $port (attempt $attempt):"
    tail -n 5 "$tmp/nodewatchd.log" >&2 || true
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  die "could not start nodewatchd"
}

start_node_exporter() {
  local attempt port pid
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    "$NODE_EXPORTER" --web.listen-address="127.0.0.1:$port" --log.level=warn \
      --collector.disable-defaults \
      --collector.diskstats --collector.netdev --collector.netclass \
      --collector.hwmon --collector.infiniband --collector.mountstats \
      --path.procfs="$fx/proc" --path.sysfs="$fx/sys" --path.udev.data="$fx/udev" \
      >"$tmp/node_exporter.log" 2>&1 &
    pid=$!
    daemon_pids+=("$pid")
    if wait_for "http://127.0.0.1:$port/metrics" "$pid"; then
      ne_port=$port ne_pid=$pid
      return 0
    fi
    note "node_exporter did not answer on port $port (attempt $attempt):"
    tail -n 5 "$tmp/node_exporter.log" >&2 || true
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  die "could not start $NODE_EXPORTER"
}

# --- fixture ----------------------------------------------------------------------
# write_block_fixture N and write_other_fixture, writing under $fx.
# shellcheck source=bench/fixtures.sh
source "$root/bench/fixtures.sh"

once_bytes() {
  "$binary" --config "$tmp/nw.toml" --once --sysfs "$fx/sys" --procfs "$fx/proc" \
    --log-level warn | wc -c
}

# --- measurement helpers -------------------------------------------------------
# cpu_ticks PID: utime+stime in clock ticks (fields 14 and 15 of /proc/PID/stat;
# the command name in field 2 may hold spaces, so split after its last ')').
cpu_ticks() {
  local stat rest f
  stat=$(<"/proc/$1/stat")
  rest=${stat##*) }
  read -r -a f <<<"$rest"
  echo $((f[11] + f[12]))
}

# body_bytes URL ENCODING: size of the body as sent (not decompressed).
body_bytes() {
  local url=$1 enc=$2 hdr=$tmp/headers body=$tmp/body
  local args=(-s --max-time 10 -D "$hdr" -o "$body")
  [[ $enc == gzip ]] && args+=(-H 'Accept-Encoding: gzip')
  curl "${args[@]}" "$url" || die "curl $url failed"
  grep -q '^HTTP/[0-9.]* 200' "$hdr" || die "$url ($enc) did not answer 200"
  if [[ $enc == gzip ]]; then
    grep -qi '^content-encoding: *gzip' "$hdr" || die "$url did not answer gzip when asked"
    gzip -t <"$body" || die "$url served an invalid gzip body"
  fi
  wc -c <"$body"
}

# wrk_run URL ENCODING CLIENTS SECONDS: runs wrk, prints its output.
wrk_run() {
  local url=$1 enc=$2 clients=$3 secs=$4 threads=1
  ((clients > 1)) && threads=2
  local args=(-t"$threads" -c"$clients" -d"${secs}s" --latency)
  [[ $enc == gzip ]] && args+=(-H 'Accept-Encoding: gzip')
  timeout $((secs + 20)) "$WRK" "${args[@]}" "$url"
}

# settle: waits (5 s at most) until both daemons are idle, sampling their CPU
# over 200 ms, so that one target's after-work (Go's background GC and
# scavenger after a load run) does not land in the other's measurement.
settle() {
  local i a b
  for ((i = 0; i < 25; i++)); do
    a=$(($(cpu_ticks "$nw_pid") + $(cpu_ticks "$ne_pid")))
    sleep 0.2
    b=$(($(cpu_ticks "$nw_pid") + $(cpu_ticks "$ne_pid")))
    ((b - a > 0)) || return 0
  done
  note "warning: the daemons did not go idle within 5 s"
}

# Reads wrk output; prints "p50_us p99_us requests rps errors".
parse_wrk() {
  awk '
    function us(s,   n) {
      n = s + 0
      if (s ~ /us$/) return n
      if (s ~ /ms$/) return n * 1000
      if (s ~ /[0-9]s$/) return n * 1000000
      if (s ~ /m$/) return n * 60000000
      return -1
    }
    /Latency Distribution/ { dist = 1; next }
    dist && $1 == "50%" { p50 = us($2) }
    dist && $1 == "99%" { p99 = us($2); dist = 0 }
    / requests in / { req = $1 }
    /^Requests\/sec:/ { rps = $2 }
    /Non-2xx or 3xx responses:/ { err += $NF }
    /Socket errors:/ {
      for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+,?$/) err += $i + 0
    }
    END {
      if (req == "" || p99 == "") exit 1
      printf "%s %s %s %s %d\n", p50, p99, req, rps, err
    }'
}

# --- run ------------------------------------------------------------------------
note "calibrating the fixture to a ${TARGET_BYTES}-byte nodewatchd body"
mkdir -p "$fx"
: >"$tmp/nw.toml"
write_other_fixture
n1=64 n2=192
write_block_fixture "$n1"; b1=$(once_bytes)
write_block_fixture "$n2"; b2=$(once_bytes)
((b2 > b1)) || die "nodewatchd's output does not grow with the number of devices ($b1, $b2)"
ndev=$(((n1 * (b2 - b1) + (TARGET_BYTES - b1) * (n2 - n1) + (b2 - b1) / 2) / (b2 - b1)))
((ndev >= 1)) || ndev=1
write_block_fixture "$ndev"
note "$ndev devices ($n1 devices: $b1 bytes, $n2 devices: $b2 bytes)"

start_nodewatch
start_node_exporter
nw_url=http://127.0.0.1:$nw_port/metrics
ne_url=http://127.0.0.1:$ne_port/metrics
note "nodewatchd pid $nw_pid on 127.0.0.1:$nw_port, node_exporter pid $ne_pid on 127.0.0.1:$ne_port"

# Both must export every fixture device.
curl -s --max-time 10 "$nw_url" >"$tmp/nw.prom"
curl -s --max-time 10 "$ne_url" >"$tmp/ne.prom"
nw_devs=$(grep -c '^nodewatch_storage_reads_completed_total{device="nvme' "$tmp/nw.prom" || true)
ne_devs=$(grep -c '^node_disk_reads_completed_total{device="nvme' "$tmp/ne.prom" || true)
((nw_devs == ndev)) || die "nodewatchd exports $nw_devs of the $ndev fixture devices"
((ne_devs == ndev)) || die "node_exporter exports $ne_devs of the $ndev fixture devices"
ne_failed=$(grep '^node_scrape_collector_success{' "$tmp/ne.prom" | awk '$NF != 1' |
  sed 's/.*collector="\([^"]*\)".*/\1/' | paste -sd, - || true)
ne_series=$(grep -vc '^#' "$tmp/ne.prom" || true)
nw_series=$(grep -vc '^#' "$tmp/nw.prom" || true)
[[ -z $ne_failed ]] || note "warning: node_exporter collectors without success: $ne_failed"

declare -A bytes
for enc in plain gzip; do
  bytes[nodewatch,$enc]=$(body_bytes "$nw_url" "$enc")
  bytes[node_exporter,$enc]=$(body_bytes "$ne_url" "$enc")
done

# CPU pressure (the share of time some runnable task waited for a CPU, last
# 10 s): high values mean other work competed with the benchmark.
cpu_pressure() {
  if [[ -r /proc/pressure/cpu ]]; then
    awk '/^some/ { sub("avg10=", "", $2); print $2 "%"; exit }' /proc/pressure/cpu
  else
    echo "n/a"
  fi
}
load_start=$(cut -d' ' -f1-3 /proc/loadavg) psi_start=$(cpu_pressure)
for t in nodewatch node_exporter; do
  if [[ $t == nodewatch ]]; then url=$nw_url; else url=$ne_url; fi
  note "warm-up: $t"
  wrk_run "$url" plain 16 "$WARMUP" >/dev/null || die "wrk warm-up against $t failed"
  wrk_run "$url" gzip 16 "$WARMUP" >/dev/null || die "wrk warm-up against $t failed"
done

declare -A p50 p99 rps cpu_us cpu_bound
cases=("plain 1" "gzip 1" "plain 16" "gzip 16")
for c in "${cases[@]}"; do
  read -r enc clients <<<"$c"
  for t in nodewatch node_exporter; do
    if [[ $t == nodewatch ]]; then url=$nw_url pid=$nw_pid; else url=$ne_url pid=$ne_pid; fi
    kill -0 "$pid" 2>/dev/null || die "$t (pid $pid) is no longer running"
    note "$t, $enc, $clients client(s), ${DURATION}s"
    settle
    before=$(cpu_ticks "$pid")
    wrk_out=$(wrk_run "$url" "$enc" "$clients" "$DURATION") || die "wrk against $t failed"
    after=$(cpu_ticks "$pid")
    printf '%s\n' "$wrk_out" >"$tmp/wrk.$t.$enc.$clients.txt"
    parsed=$(parse_wrk <<<"$wrk_out") || die "cannot parse wrk output: $wrk_out"
    read -r a b r s e <<<"$parsed"
    ((e == 0)) || die "$t: $e errors or non-2xx responses during $enc/$clients: $wrk_out"
    ((r > 0)) || die "$t: no requests completed during $enc/$clients"
    k=$t,$enc,$clients
    p50[$k]=$a p99[$k]=$b rps[$k]=$s
    ticks=$((after - before))
    # Below one tick the delta says only "less than one tick".
    if ((ticks == 0)); then ticks=1 cpu_bound[$k]="<"; else cpu_bound[$k]=""; fi
    cpu_us[$k]=$(awk -v t="$ticks" -v hz="$clk_tck" -v r="$r" 'BEGIN { printf "%.1f", t * 1e6 / hz / r }')
  done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg) psi_end=$(cpu_pressure)

# --- report -----------------------------------------------------------------------
fmt_us() {  # microseconds -> "123 µs" or "1.23 ms"
  awk -v v="$1" 'BEGIN { if (v < 1000) printf "%.0f µs", v; else printf "%.2f ms", v / 1000 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "inf" }'; }

report=$tmp/report.md
{
  echo "## Scrape cost: nodewatchd vs prometheus-node-exporter"
  echo
  echo "- machine: $(nproc) CPUs, $(uname -sr); load average $load_start at start," \
    "$load_end at end; CPU pressure (PSI some avg10) $psi_start at start, $psi_end at end"
  echo "- nodewatchd: $("$binary" --version 2>&1 | head -n 1) ($binary)"
  echo "- node_exporter: $("$NODE_EXPORTER" --version 2>&1 | head -n 1 | sed 's/ (.*//')," \
    "collectors diskstats netdev netclass hwmon infiniband mountstats"
  echo "- wrk: ${DURATION}s per run after ${WARMUP}s warm-ups; 1 client = -t1 -c1, 16 clients = -t2 -c16; keep-alive, 127.0.0.1"
  echo "- fixture: $ndev NVMe disks in diskstats/sysfs; nodewatchd $nw_series series," \
    "node_exporter $ne_series series${ne_failed:+ (collectors without success: $ne_failed)}"
  echo "- CPU: utime+stime of the exporter process over the run / requests; resolution 1/$clk_tck s per run"
  echo
  echo "| target | encoding | clients | body bytes | requests/s | p50 | p99 | CPU µs/scrape |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
  for c in "${cases[@]}"; do
    read -r enc clients <<<"$c"
    for t in nodewatch node_exporter; do
      k=$t,$enc,$clients
      printf '| %s | %s | %s | %s | %.0f | %s | %s | %s%s |\n' "$t" "$enc" "$clients" \
        "${bytes[$t,$enc]}" "${rps[$k]}" "$(fmt_us "${p50[$k]}")" "$(fmt_us "${p99[$k]}")" \
        "${cpu_bound[$k]}" "${cpu_us[$k]}"
    done
  done
  echo
  echo "| encoding | clients | CPU/scrape: node_exporter ÷ nodewatch | p99: node_exporter ÷ nodewatch |"
  echo "| --- | ---: | ---: | ---: |"
  cpu_ok=1 min_ratio=""
  for c in "${cases[@]}"; do
    read -r enc clients <<<"$c"
    nk=nodewatch,$enc,$clients ek=node_exporter,$enc,$clients
    cr=$(ratio "${cpu_us[$ek]}" "${cpu_us[$nk]}")
    prefix=""
    [[ -n ${cpu_bound[$nk]} ]] && prefix=">"
    printf '| %s | %s | %s%s× | %s× |\n' "$enc" "$clients" "$prefix" "$cr" \
      "$(ratio "${p99[$ek]}" "${p99[$nk]}")"
    if [[ -n ${cpu_bound[$ek]} ]] || awk -v r="$cr" 'BEGIN { exit !(r < 5) }'; then
      # node_exporter under one tick cannot show a 5x margin
      cpu_ok=0
    fi
    if [[ -z $min_ratio ]] || awk -v r="$cr" -v m="$min_ratio" 'BEGIN { exit !(r < m) }'; then
      min_ratio=$cr
    fi
  done
  echo
  p99_target=${p99[nodewatch,plain,1]}
  if awk -v v="$p99_target" 'BEGIN { exit !(v < 1000) }'; then p99_ok=1; else p99_ok=0; fi
  echo "Targets:"
  echo
  echo "- p99 < 1 ms, nodewatch, plain, 1 client: $( ((p99_ok)) && echo PASS || echo FAIL) ($(fmt_us "$p99_target"))"
  echo "- CPU per scrape at least 5× below node_exporter's in every case:" \
    "$( ((cpu_ok)) && echo PASS || echo FAIL) (smallest ratio ${min_ratio}×)"
} >"$report"

cat "$report"
if [[ -n $out ]]; then
  cp "$report" "$out" || die "cannot write $out"
  note "report written to $out"
fi
if [[ -n $raw ]]; then
  mkdir -p "$raw" || die "cannot create $raw"
  cp "$tmp"/wrk.*.txt "$tmp/nodewatchd.log" "$tmp/node_exporter.log" \
    "$tmp/nw.prom" "$tmp/ne.prom" "$raw/" || die "cannot write $raw"
  note "raw wrk outputs, logs and one body of each target kept in $raw"
fi
if ((strict)) && ! ((p99_ok && cpu_ok)); then
  exit 3
fi
exit 0
