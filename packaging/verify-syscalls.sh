#!/usr/bin/env bash
# Checks that every system call nodewatchd, its helper launcher and its
# helper processes make is allowed by the unit's SystemCallFilter=
# (packaging/nodewatch.service): runs the binary under strace -f with a
# storage probe and a textfile directory on temporary directories (so the
# launcher forks helpers and they make every probe operation), scrapes it,
# reloads it, stops it, and compares the system calls seen with the set
# that systemd-analyze expands the filter to. A call outside it would fail
# with EPERM under systemd (SystemCallErrorNumber=EPERM).
# Usage: packaging/verify-syscalls.sh path/to/nodewatchd
# Exit 0: all allowed; 1: some are not (listed); 77: cannot check here
# (no strace, or ptrace refused), said on stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "${1:?usage: verify-syscalls.sh path/to/nodewatchd}")
skip() { echo "SKIPPED: system-call check: $*" >&2; exit 77; }
command -v strace >/dev/null || skip "strace is not installed"
command -v systemd-analyze >/dev/null || skip "systemd-analyze is not installed"
strace -f -qq -o /dev/null true 2>/dev/null || skip "strace cannot trace here (ptrace refused)"

# Every SystemCallFilter= line: an allow list, then "~" lines that take
# groups out of it again (as systemd combines them).
filter=$(sed -nE 's/^SystemCallFilter=([^~].*)$/\1/p' "$here/nodewatch.service")
denied_groups=$(sed -nE 's/^SystemCallFilter=~(.*)$/\1/p' "$here/nodewatch.service")
[[ -n "$filter" ]] || { echo "no SystemCallFilter= in nodewatch.service" >&2; exit 1; }
# The uncore collector is traced where the kernel has an msr PMU (x86), with
# what its drop-in (uncore.conf) adds to the filter.
uncore=0
if [[ -e /sys/bus/event_source/devices/msr/events/tsc ]]; then
  uncore=1
  filter+=" $(sed -nE 's/^SystemCallFilter=([^~].*)$/\1/p' "$here/uncore.conf")"
fi

tmp=$(mktemp -d)
pid=""
cleanup() {
  if [[ -n "$pid" ]]; then
    # The daemon under strace first: killing strace alone would leave it running.
    pkill -KILL -P "$pid" -x nodewatchd 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
  fi
  [[ -n "${kubelet:-}" ]] && kill -TERM "$kubelet" 2>/dev/null && wait "$kubelet" 2>/dev/null || true
  [[ -n "${sim:-}" ]] && kill -KILL "$sim" 2>/dev/null && wait "$sim" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# The allowed set: each group of the filter expanded, recursively.
expand() {
  systemd-analyze syscall-filter --no-pager "$1" | tail -n +2 | sed 's/^ *//' |
    grep -vE '^(#|$)' | while read -r s; do
      if [[ $s == @* ]]; then expand "$s"; else echo "$s"; fi
    done
}
for group in $filter; do
  if [[ $group == @* ]]; then expand "$group"; else echo "$group"; fi
done | sort -u >"$tmp/allowed.all"
for group in $denied_groups; do expand "$group"; done | sort -u >"$tmp/denied.groups"
comm -23 "$tmp/allowed.all" "$tmp/denied.groups" >"$tmp/allowed"
[[ -s "$tmp/allowed" ]] || { echo "systemd-analyze expanded $filter to nothing" >&2; exit 1; }

mkdir -p "$tmp/probe" "$tmp/textfile"
echo 'verify_syscalls 1' >"$tmp/textfile/a.prom"
cat >"$tmp/nodewatch.toml" <<EOF
[server]
check_socket = "$tmp/run/check.sock"
[collectors.storage]
interval = "1s"
timeout = "900ms"
[[collectors.storage.probe]]
path = "$tmp/probe"
interval = "1s"
timeout = "500ms"
[collectors.textfile]
directory = "$tmp/textfile"
interval = "1s"
timeout = "900ms"
# The host's own kernel log (read, never written), its state kept here.
[collectors.kernel]
state_file = "$tmp/kernel-log.state"
interval = "1s"
timeout = "900ms"
EOF
# The uncore collector on the kernel's msr PMU (x86), where there is one.
if ((uncore)); then
  cat >>"$tmp/nodewatch.toml" <<EOF
[collectors.uncore]
enabled = true
events = ["msr/tsc/"]
interval = "1s"
EOF
  what_uncore=", the uncore collector on msr/tsc/ with uncore.conf's filter"
fi
# The accelerator collector with the fake NVML and a fake kubelet, where
# the build tree has them.
build=$(cd "$(dirname "$bin")/.." && pwd)
fake_nvml="$build/tests/fakes/fake_nvml/full/libnvidia-ml.so.1"
fake_kubelet="$build/tests/fakes/fake_kubelet/nodewatch-fake-kubelet"
kubelet=""
jobs=0
if [[ -f "$fake_nvml" && -x "$fake_kubelet" ]]; then
  "$fake_kubelet" "$tmp/kubelet.sock" \
    "GPU-00000000-0000-4000-8000-000000000006=verify/syscalls-0/main" &
  kubelet=$!
  for _ in $(seq 1 50); do [[ -S "$tmp/kubelet.sock" ]] && break; sleep 0.1; done
  cat >>"$tmp/nodewatch.toml" <<EOF
[nvml]
library = "$fake_nvml"
[collectors.accelerator]
interval = "1s"
timeout = "900ms"
pod_resources_socket = "$tmp/kubelet.sock"
EOF
  export FAKE_NVML_SCENARIO="$here/../tests/fixtures/nvml/e2e_node.scenario"
  jobs=1
fi
# The bmc collector's helper (nwd-bmc, FreeIPMI) against OpenIPMI's
# simulator, where it is installed (tests/fixtures/bmc).
bmc=0
if command -v ipmi_sim >/dev/null && command -v sdrcomp >/dev/null && [[ -x "$(dirname "$bin")/nwd-bmc" ]]; then
  sim_port=$((40000 + RANDOM % 20000))
  "$here/../tests/fixtures/bmc/make-sim.sh" "$tmp/sim" "$sim_port"
  ipmi_sim -c "$tmp/sim/lan.conf" -f "$tmp/sim/node.emu" -s "$tmp/sim/state" -n -p \
    >"$tmp/sim.log" 2>&1 &
  sim=$!
  cat >>"$tmp/nodewatch.toml" <<EOF
[collectors.bmc]
host = "127.0.0.1:$sim_port"
protocol = "lanplus"
username = "nodewatch"
password_file = "$tmp/sim/password"
state_directory = "$tmp/bmc"
# Under strace the helper's start is slow: FreeIPMI reads its two
# interpretation files a byte at a time (120,000 calls).
interval = "30s"
timeout = "30s"
EOF
  bmc=1
fi
port=$((20000 + RANDOM % 20000))
strace -f -qq -o "$tmp/trace" "$bin" --config "$tmp/nodewatch.toml" \
  --listen "127.0.0.1:$port" --log-level warn 2>"$tmp/log" &
pid=$!
ok=0
for _ in $(seq 1 100); do
  if grep -q '^nodewatch_storage_probe_success{.*operation="read"} 1' \
    <<<"$(curl -fsS "http://127.0.0.1:$port/metrics" 2>/dev/null)"; then
    ok=1
    break
  fi
  sleep 0.1
done
if ((ok == 0)); then
  echo "nodewatchd under strace did not serve a successful probe:" >&2
  cat "$tmp/log" >&2
  exit 1
fi
# Read whole before it is searched: under pipefail, grep -q leaving at the
# first match made curl fail writing the rest, and the check with it.
served=$(curl -fsS "http://127.0.0.1:$port/metrics")
grep -q '^verify_syscalls 1' <<<"$served" ||
  { echo "the textfile input was not served" >&2; exit 1; }
# The check socket: made, served (the peer's credentials read), removed.
verdict=$(curl -sS --unix-socket "$tmp/run/check.sock" "http://localhost/-/node-health?format=line" || true)
[[ "$verdict" =~ ^(healthy|unhealthy|unknown) ]] ||
  { echo "the check socket gave no verdict: $verdict" >&2; cat "$tmp/log" >&2; exit 1; }
if ((jobs)); then
  ok=0
  for _ in $(seq 1 50); do
    # (The body read whole first: grep -q would stop reading it early.)
    body=$(curl -fsS "http://127.0.0.1:$port/metrics" 2>/dev/null || true)
    if grep -q '^nodewatch_accelerator_job_info{.*namespace="verify",pod="syscalls-0"' <<<"$body"; then
      ok=1
      break
    fi
    sleep 0.1
  done
  ((ok)) || { echo "the fake kubelet's pod was not served:" >&2; cat "$tmp/log" >&2; exit 1; }
fi
if ((bmc)); then
  ok=0
  for _ in $(seq 1 300); do
    body=$(curl -fsS "http://127.0.0.1:$port/metrics" 2>/dev/null || true)
    if grep -q '^nodewatch_bmc_up 1' <<<"$body"; then ok=1; break; fi
    sleep 0.1
  done
  ((ok)) || { echo "the BMC simulator was not read:" >&2; cat "$tmp/log" >&2; exit 1; }
fi
daemon=$(pgrep -P "$pid" -x nodewatchd || true)
[[ -n "$daemon" ]] || { echo "no nodewatchd under strace" >&2; exit 1; }
kill -HUP "$daemon"
sleep 2
kill -TERM "$daemon"
wait "$pid" || { echo "nodewatchd exited with status $?" >&2; exit 1; }
pid=""

# "PID name(args..." lines; resumed and exit lines carry no new name.
awk '{ s = $2; sub(/\(.*/, "", s); if (s ~ /^[a-z_0-9]+$/) print s }' "$tmp/trace" |
  sort -u >"$tmp/used"
helpers=$(grep -c 'PR_SET_NAME, "nwd-fs-helper"' "$tmp/trace" || true)
((helpers > 0)) || { echo "no helper process was started under strace" >&2; exit 1; }
denied=$(comm -23 "$tmp/used" "$tmp/allowed")
if [[ -n "$denied" ]]; then
  echo "system calls outside SystemCallFilter=$filter:" >&2
  echo "$denied" >&2
  exit 1
fi
what="$helpers helper processes traced"
((jobs)) && what+=", the accelerator collector with the fake NVML, and the pod-resources client against a fake kubelet"
((bmc)) && what+=", the bmc collector's nwd-bmc against OpenIPMI's simulator"
what+="${what_uncore:-}"
echo "system calls: $(wc -l <"$tmp/used") distinct, all in SystemCallFilter=$filter${denied_groups:+ less $denied_groups} ($what)"
