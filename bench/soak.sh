#!/usr/bin/env bash
# Compressed soak: nodewatchd under far more work than a node gives it, for
# as long as asked, watching for growth.
#
# What runs:
#   - nodewatchd over the end-to-end node (the committed fixture trees of
#     tests/fixtures merged into one sysfs and procfs root, the textfile
#     inputs, the modelled kernel log, and the fake NVML's eight GPUs when
#     the test build has it), every collector at a 100 ms interval (the nic
#     collector over this machine's interfaces), and a storage probe on a
#     scratch directory;
#   - 50 scrapes a second over keep-alive connections, in turn plain, gzip
#     and filtered (?collect[]=storage&collect[]=pcie);
#   - a reload (SIGHUP) a minute (--reload-every), every other one
#     changing the probe's interval so that the storage collector is
#     rebuilt.
# What it reports, every 30 s: RSS (KiB), open descriptors and threads of
# the daemon, scrapes done and failed; at the end, each one's least-squares
# slope per hour over the run, and FAIL when RSS grows by more than 1 MiB an
# hour, or descriptors by more than 2, or threads at all (a reload's own
# thread aside), or a scrape failed.
#
# Traffic stays on 127.0.0.1; the daemon is stopped and the scratch
# directory removed on exit. Not part of the test suite (bench/README.md).
#
# Usage: bench/soak.sh [--binary PATH] [--minutes N] [--reload-every S] [--out PATH]
#   --binary PATH     nodewatchd to run (default: build/daemon/nodewatchd)
#   --minutes N       how long (default 60)
#   --reload-every S  seconds between reloads (default 60; a few seconds
#                     tells growth per reload from growth per scrape)
#   --out PATH        also write the report to PATH
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
binary="$root/build/daemon/nodewatchd"
minutes=60
reload_every=60
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --binary) binary=$2; shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --reload-every) reload_every=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '/^# Usage:/,/^#   --out/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x $binary ]] || { echo "soak.sh: no nodewatchd at $binary (build it, or give --binary)" >&2; exit 2; }

scratch=$(mktemp -d /tmp/nodewatch-soak-XXXXXX)
daemon_pid=""
cleanup() {
  if [[ -n $daemon_pid ]]; then kill -TERM "$daemon_pid" 2>/dev/null || true; wait "$daemon_pid" 2>/dev/null || true; fi
  rm -rf "$scratch"
}
trap cleanup EXIT

fixtures="$root/tests/fixtures"
mkdir -p "$scratch/node/sys" "$scratch/node/proc" "$scratch/node/textfile" "$scratch/probe"
for tree in storage pcie amdgpu interconnect edac kernel jobs; do
  for r in sys proc; do
    [[ -d $fixtures/$tree/$r ]] && cp -an "$fixtures/$tree/$r/." "$scratch/node/$r/"
  done
done
cp "$fixtures"/textfile/*.prom "$scratch/node/textfile/"

fake_nvml="$root/build/tests/fakes/fake_nvml/full/libnvidia-ml.so.1"
nvml_section=""
if [[ -f $fake_nvml ]]; then
  nvml_section=$'[nvml]\nlibrary = "'"$fake_nvml"$'"\n'
  export FAKE_NVML_SCENARIO="$fixtures/nvml/e2e_node.scenario"
else
  echo "soak.sh: no fake NVML at $fake_nvml (build the tests): the accelerator collector runs without NVIDIA devices" >&2
fi

write_config() {  # $1: the probe's interval
  cat > "$scratch/nodewatch.toml" <<CONF
${nvml_section}
[collectors.accelerator]
interval = "100ms"
timeout = "100ms"
pod_resources_socket = ""
[collectors.pcie]
interval = "100ms"
timeout = "100ms"
[collectors.interconnect]
interval = "100ms"
timeout = "100ms"
[collectors.storage]
interval = "100ms"
timeout = "100ms"
[[collectors.storage.probe]]
path = "$scratch/probe"
interval = "$1"
timeout = "1s"
[collectors.nic]
interval = "100ms"
timeout = "100ms"
[collectors.textfile]
interval = "100ms"
timeout = "100ms"
directory = "$scratch/node/textfile"
[collectors.kernel]
interval = "100ms"
timeout = "100ms"
kmsg_path = "$fixtures/kernel/kmsg-node.txt"
state_file = "$scratch/kernel-log.state"
CONF
}
write_config 1s

"$binary" --config "$scratch/nodewatch.toml" --listen 127.0.0.1:0 \
  --sysfs "$scratch/node/sys" --procfs "$scratch/node/proc" 2> "$scratch/daemon.log" &
daemon_pid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$scratch/daemon.log" | head -1)
  [[ -n $port ]] && break
  sleep 0.1
done
[[ -n $port ]] || { echo "soak.sh: the daemon did not start:" >&2; cat "$scratch/daemon.log" >&2; exit 1; }
echo "soak.sh: nodewatchd pid $daemon_pid on 127.0.0.1:$port for $minutes min" >&2

SOAK_PID=$daemon_pid SOAK_PORT=$port SOAK_MINUTES=$minutes SOAK_RELOAD_EVERY=$reload_every SOAK_CONFIG_DIR="$scratch" \
python3 - "$out" <<'PYEOF'
import http.client, os, signal, sys, time

pid = int(os.environ["SOAK_PID"]); port = int(os.environ["SOAK_PORT"])
seconds = float(os.environ["SOAK_MINUTES"]) * 60
reload_every = float(os.environ["SOAK_RELOAD_EVERY"])
cfg = os.path.join(os.environ["SOAK_CONFIG_DIR"], "nodewatch.toml")
out_path = sys.argv[1]

def stats():
    rss = threads = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"): rss = int(line.split()[1])
            if line.startswith("Threads:"): threads = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd")), threads

targets = [("/metrics", {}), ("/metrics", {"Accept-Encoding": "gzip"}),
           ("/metrics?collect[]=storage&collect[]=pcie", {})]
conn = None
done = failed = 0
def scrape(i):
    global conn, done, failed
    path, headers = targets[i % 3]
    for attempt in range(2):
        try:
            if conn is None: conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", path, headers=headers)
            r = conn.getresponse(); r.read()
            if r.status == 200: done += 1
            else: failed += 1
            return
        except (OSError, http.client.HTTPException):
            conn = None  # a closed keep-alive connection: once more on a new one
    failed += 1

lines = []
def report(s):
    print(s, flush=True); lines.append(s)

report("| minute | RSS KiB | fds | threads | scrapes | failed |")
report("| ---: | ---: | ---: | ---: | ---: | ---: |")
samples = []
t0 = time.monotonic(); next_sample = t0 + 30; next_reload = t0 + reload_every; reloads = 0; i = 0
def sample(now):
    rss, fds, thr = stats(); m = (now - t0) / 60
    samples.append((m, rss, fds, thr))
    report(f"| {m:.1f} | {rss} | {fds} | {thr} | {done} | {failed} |")
time.sleep(2)  # the first rounds of collection
sample(time.monotonic())
while True:
    now = time.monotonic()
    if now - t0 >= seconds: break
    scrape(i); i += 1
    if now >= next_reload:
        reloads += 1
        text = open(cfg).read()
        text = text.replace('interval = "1s"\ntimeout = "1s"', 'interval = "2s"\ntimeout = "1s"') if reloads % 2 else \
               text.replace('interval = "2s"\ntimeout = "1s"', 'interval = "1s"\ntimeout = "1s"')
        open(cfg, "w").write(text)
        os.kill(pid, signal.SIGHUP); next_reload += reload_every
    if now >= next_sample:
        sample(now); next_sample += 30
    time.sleep(max(0, t0 + i * 0.02 - time.monotonic()))  # 50 a second
sample(time.monotonic())

def slope(xs, ys):  # per hour, xs in minutes
    n = len(xs); mx = sum(xs) / n; my = sum(ys) / n
    d = sum((x - mx) ** 2 for x in xs)
    return 0.0 if d == 0 else 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / d
# The first minute is warm-up (allocator arenas, first connections).
steady = [s for s in samples if s[0] >= 1] or samples
xs = [s[0] for s in steady]
rss_s, fd_s, thr_s = (slope(xs, [s[k] for s in steady]) for k in (1, 2, 3))
report("")
report(f"{reloads} reloads, {done} scrapes, {failed} failed")
report(f"slope per hour after the first minute: RSS {rss_s:+.0f} KiB, fds {fd_s:+.2f}, threads {thr_s:+.2f}")
# Threads: a reload's thread lives while it reads the file, so a sample may
# see it; growth is the least count of the last five samples above that of
# the first five.
thr = [s[3] for s in steady]
ok = failed == 0 and rss_s <= 1024 and max(s[2] for s in steady) - min(s[2] for s in steady) <= 2 and \
     min(thr[-5:]) <= min(thr[:5])
report("PASS" if ok else "FAIL")
if out_path: open(out_path, "w").write("\n".join(lines) + "\n")
sys.exit(0 if ok else 3)
PYEOF
