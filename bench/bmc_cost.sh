#!/usr/bin/env bash
# BMC cost benchmark: what a collection of the bmc collector costs the node
# (nodewatchd and its helper nwd-bmc, every process of the tree), next to a
# scrape of prometheus-community's ipmi_exporter (Debian's
# prometheus-ipmi-exporter, which forks FreeIPMI's ipmimonitoring, bmc-info
# and ipmi-sel for each scrape), against the same BMC in the same run:
# OpenIPMI's simulator serving tests/fixtures/bmc over IPMI 1.5 on the
# loopback (five sensors, a SEL).
#
# nodewatchd runs the bmc collector alone, every second; ipmi_exporter is
# scraped once a second with the collectors that read what nodewatch reads
# (ipmi: the sensors; bmc: the BMC's identity; sel: the SEL's fill). The
# simulator's CPU is the BMC's, counted for neither. CPU time: bench/cpu.sh
# (every thread of the tree, and the children it reaped), over SECONDS
# seconds after a 3 s warm-up.
#
# Usage: bench/bmc_cost.sh [--binary PATH] [--seconds N] [--out PATH]
#   --binary PATH  measure this nodewatchd (nwd-bmc beside it; skips the build)
#   --seconds N    seconds measured (default 20)
#   --out PATH     also write the report to PATH
# Environment: IPMI_EXPORTER=/usr/bin/prometheus-ipmi-exporter
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IPMI_EXPORTER=${IPMI_EXPORTER:-/usr/bin/prometheus-ipmi-exporter}
binary="" seconds=20 out=""

usage() { sed -n '/^# Usage:/,/^# Environment:/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "bmc_cost: $*" >&2; exit 1; }

while (($#)); do
  case $1 in
    --binary) (($# >= 2)) || die "--binary needs a path"; binary=$2; shift 2 ;;
    --seconds) (($# >= 2)) || die "--seconds needs a number"; seconds=$2; shift 2 ;;
    --out) (($# >= 2)) || die "--out needs a path"; out=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
[[ $seconds =~ ^[1-9][0-9]*$ ]] || die "--seconds must be a positive integer"
for c in curl ss getconf awk ipmi_sim sdrcomp; do
  command -v "$c" >/dev/null || die "$c not found (packaging/install-deps.sh --test installs it)"
done
[[ -x $IPMI_EXPORTER ]] || die "$IPMI_EXPORTER not found (packaging/install-deps.sh --test installs it)"

if [[ -z $binary ]]; then
  echo "bmc_cost: building nodewatchd and nwd-bmc (Release) in build-bench/" >&2
  cmake -S "$root" -B "$root/build-bench" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DNODEWATCH_BUILD_TESTS=OFF -DNODEWATCH_BUILD_BENCH=ON >&2
  ninja -C "$root/build-bench" nodewatchd nwd-bmc >&2
  binary=$root/build-bench/daemon/nodewatchd
fi
[[ -x $binary ]] || die "not an executable: $binary"
[[ -x $(dirname "$binary")/nwd-bmc ]] || die "no nwd-bmc beside $binary"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/nodewatch-bmc-cost.XXXXXX")
pids=()
# shellcheck disable=SC2317  # called from traps
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck source=bench/cpu.sh
source "$root/bench/cpu.sh"
free_port() {
  local p i
  for ((i = 0; i < 100; i++)); do
    p=$((20000 + RANDOM % 20001))
    [[ -z $(ss -Hltun "( sport = :$p )") ]] && { echo "$p"; return 0; }
  done
  die "no free port found"
}
now_ns() { date +%s%N; }
# get URL PATTERN: waits (up to 15 s) until URL answers with a line
# matching PATTERN.
get() {
  local i
  for ((i = 0; i < 150; i++)); do
    curl -s --max-time 5 "$1" 2>/dev/null | grep -q "$2" && return 0
    sleep 0.1
  done
  return 1
}

# The BMC.
sim_port=$(free_port)
"$root/tests/fixtures/bmc/make-sim.sh" "$tmp/sim" "$sim_port"
ipmi_sim -c "$tmp/sim/lan.conf" -f "$tmp/sim/node.emu" -s "$tmp/sim/state" -n -p \
  >"$tmp/sim.log" 2>&1 &
pids+=($!)
user=nodewatch password_file=$tmp/sim/password

# nodewatchd: the bmc collector alone, every second.
nw_port=$(free_port)
{
  printf '[server]\ncheck_socket = ""\n'
  for c in accelerator pcie interconnect storage nic textfile kernel mesh uncore imex; do
    printf '[collectors.%s]\nenabled = false\n' "$c"
  done
  printf '[collectors.bmc]\ninterval = "1s"\ntimeout = "1s"\nhost = "127.0.0.1:%s"\n' "$sim_port"
  printf 'protocol = "lan"\nusername = "%s"\npassword_file = "%s"\nstate_directory = "%s"\n' \
    "$user" "$password_file" "$tmp/state"
} >"$tmp/nodewatch.toml"
"$binary" --config "$tmp/nodewatch.toml" --listen "127.0.0.1:$nw_port" --log-level warn \
  >"$tmp/nodewatch.log" 2>&1 &
nw_pid=$!
pids+=("$nw_pid")

# ipmi_exporter: the same BMC as a remote target.
ie_port=$(free_port)
cat >"$tmp/ipmi_exporter.yml" <<EOF
modules:
  default:
    user: "$user"
    pass: "$(cat "$password_file")"
    driver: "LAN"
    privilege: "user"
    timeout: 10000
    collectors: [ipmi, bmc, sel]
EOF
"$IPMI_EXPORTER" --config.file="$tmp/ipmi_exporter.yml" --web.listen-address="127.0.0.1:$ie_port" \
  --log.level=warn >"$tmp/ipmi_exporter.log" 2>&1 &
ie_pid=$!
pids+=("$ie_pid")
ie_url="http://127.0.0.1:$ie_port/ipmi?target=127.0.0.1:$sim_port&module=default"

get "http://127.0.0.1:$nw_port/metrics" '^nodewatch_bmc_fan_speed_rpm{sensor="FAN1"} 5000' ||
  die "nodewatchd does not read the simulator: $(tail -n 5 "$tmp/nodewatch.log")"
get "$ie_url" '^ipmi_fan_speed_rpm{.*name="FAN1".*} 5000' ||
  die "ipmi_exporter does not read the simulator: $(tail -n 5 "$tmp/ipmi_exporter.log")"

sleep 3
t0=$(now_ns)
a0=$(cpu_ns "$nw_pid")
b0=$(cpu_ns "$ie_pid")
scrapes=0
deadline=$((t0 + seconds * 1000000000))
while (($(now_ns) < deadline)); do
  curl -s -o /dev/null --max-time 10 "$ie_url" && scrapes=$((scrapes + 1))
  sleep 1
done
elapsed_ns=$(($(now_ns) - t0))
nw_ns=$(($(cpu_ns "$nw_pid") - a0))
ie_ns=$(($(cpu_ns "$ie_pid") - b0))
collections=$(awk -v e="$elapsed_ns" 'BEGIN { printf "%d", e / 1e9 + 0.5 }')
nw_series=$(curl -s "http://127.0.0.1:$nw_port/metrics" | grep -c '^nodewatch_bmc_' || true)
ie_series=$(curl -s "$ie_url" | grep -c '^ipmi_' || true)

per() { awk -v n="$1" -v d="$2" 'BEGIN { printf "%.0f", n / d / 1000 }'; }
per_nw=$(per "$nw_ns" "$collections")
per_ie=$(per "$ie_ns" "$scrapes")
report=$tmp/report.md
{
  echo "# BMC cost: nodewatch's bmc collector against ipmi_exporter"
  echo ""
  echo "nodewatchd: $binary ($("$binary" --version 2>/dev/null | head -n 1))"
  echo "ipmi_exporter: $("$IPMI_EXPORTER" --version 2>&1 | head -n 1)"
  echo "BMC: OpenIPMI's ipmi_sim ($(dpkg-query -W -f='${Version}' openipmi 2>/dev/null || echo '?')), tests/fixtures/bmc, IPMI 1.5 on the loopback"
  echo "$(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg); $seconds s measured"
  echo ""
  echo "| exporter | CPU µs per collection | collections | series | ipmi_exporter ÷ nodewatch |"
  echo "| --- | ---: | ---: | ---: | ---: |"
  echo "| nodewatchd + nwd-bmc | $per_nw | $collections | $nw_series | $(awk -v a="$per_ie" -v b="$per_nw" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "-" }') |"
  echo "| ipmi_exporter (ipmi, bmc, sel) | $per_ie | $scrapes | $ie_series | 1 |"
} >"$report"
cat "$report"
[[ -z $out ]] || cp "$report" "$out"
