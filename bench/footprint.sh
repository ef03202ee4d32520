#!/usr/bin/env bash
# Footprint benchmark: what nodewatchd holds on a node, beside
# node_exporter in the same run.
#
# Cases, each started fresh, scraped once, then measured after 2 s:
#   nodewatch, defaults     the shipped configuration (packaging/nodewatch.toml
#                           defaults), the check socket and kernel-log state
#                           in a temporary directory
#   nodewatch, all on       the same with every collector that is off by
#                           default turned on (mesh without peers, uncore)
#   node_exporter           Debian's, its default collectors
# Figures, from /proc: resident memory (anonymous and file-backed, kB),
# the shared libraries mapped (distinct .so files) and their mapped regions,
# threads, and the time from exec to the first answer of /-/ready
# (nodewatchd) or /metrics (node_exporter). nodewatchd's helper launcher
# (a fork, nwd-launcher) is counted on a line of its own.
#
# The binary is built as packaged: packaging/build-release.sh
# (RelWithDebInfo), then stripped (strip --strip-unneeded, as dh_strip does).
#
# Usage: bench/footprint.sh [--binary PATH] [--out PATH]
#   --binary PATH  measure this nodewatchd (stripped as is; skip the build)
#   --out PATH     also write the report to PATH
# Environment: NODE_EXPORTER=/usr/bin/prometheus-node-exporter
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
binary=""
out=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --binary) binary=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: bench/footprint.sh [--binary PATH] [--out PATH]" >&2; exit 2 ;;
  esac
done
node_exporter=${NODE_EXPORTER:-/usr/bin/prometheus-node-exporter}

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

if [[ -z $binary ]]; then
  "$root/packaging/build-release.sh" >/dev/null
  strip --strip-unneeded -o "$tmp/nodewatchd" "$root/build-release/daemon/nodewatchd"
  binary=$tmp/nodewatchd
fi

now_ms() { date +%s%3N; }
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# Polls URL until it answers 200 (at most 10 s); prints the milliseconds
# since $1.
wait_ready() {
  local start=$1 url=$2
  for _ in $(seq 2000); do
    if curl -fs -o /dev/null "$url"; then
      echo $(($(now_ms) - start))
      return 0
    fi
    sleep 0.005
  done
  echo "no answer from $url" >&2
  return 1
}
# "rss_kB anon_kB file_kB libraries regions threads" of a pid.
measure() {
  local pid=$1
  local rss anon file threads libs regions
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
  anon=$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status")
  file=$(awk '/^RssFile:/ {print $2}' "/proc/$pid/status")
  threads=$(awk '/^Threads:/ {print $2}' "/proc/$pid/status")
  libs=$(awk '$6 ~ /\.so/ {print $6}' "/proc/$pid/maps" | sort -u | wc -l)
  regions=$(awk '$6 ~ /\.so/' "/proc/$pid/maps" | wc -l)
  echo "$rss $anon $file $libs $regions $threads"
}
row() {
  local name=$1 ms=$2 rss anon file libs regions threads
  read -r rss anon file libs regions threads <<<"$3"
  printf '| %s | %.1f | %.1f | %.1f | %s | %s | %s | %s |\n' "$name" \
    "$(bc -l <<<"$rss/1024")" "$(bc -l <<<"$anon/1024")" "$(bc -l <<<"$file/1024")" \
    "$libs" "$regions" "$threads" "$ms"
}

# One nodewatchd with `extra` appended to its configuration.
run_nodewatch() {
  local name=$1 extra=$2 port start ms pid launcher
  mkdir -p "$tmp/$name"
  cat >"$tmp/$name/nodewatch.toml" <<EOF
[server]
check_socket = "$tmp/$name/check.sock"
[collectors.kernel]
state_file = "$tmp/$name/kernel.state"
$extra
EOF
  port=$(free_port)
  start=$(now_ms)
  "$binary" --config "$tmp/$name/nodewatch.toml" --listen "127.0.0.1:$port" \
    >"$tmp/$name/log" 2>&1 </dev/null &
  pid=$!
  pids+=("$pid")
  ms=$(wait_ready "$start" "http://127.0.0.1:$port/-/ready")
  curl -fs -o /dev/null "http://127.0.0.1:$port/metrics"
  sleep 2
  row "nodewatchd, $name" "$ms" "$(measure "$pid")"
  launcher=$(pgrep -P "$pid" -x nwd-launcher | head -1 || true)
  [[ -n $launcher ]] && row "  its helper launcher" "" "$(measure "$launcher")"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

run_node_exporter() {
  local port start ms pid
  port=$(free_port)
  start=$(now_ms)
  "$node_exporter" --web.listen-address="127.0.0.1:$port" >"$tmp/node_exporter.log" 2>&1 </dev/null &
  pid=$!
  pids+=("$pid")
  ms=$(wait_ready "$start" "http://127.0.0.1:$port/metrics")
  sleep 2
  row "node_exporter $("$node_exporter" --version 2>&1 | awk 'NR==1 {print $3}'), defaults" "$ms" \
    "$(measure "$pid")"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

{
  echo "footprint on $(uname -r), $(nproc) CPUs; $(date -u +%FT%TZ)"
  echo
  echo "| process | RSS MiB | anonymous MiB | file-backed MiB | shared libraries | library regions | threads | start to ready ms |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  run_nodewatch "defaults" ""
  run_nodewatch "all on" $'[collectors.mesh]\nenabled = true\n[collectors.uncore]\nenabled = true'
  if [[ -x $node_exporter ]]; then
    run_node_exporter
  else
    echo "| node_exporter | not installed ($node_exporter) | | | | | | |"
  fi
} | tee "${out:-/dev/null}"
