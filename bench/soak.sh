#!/usr/bin/env bash
# Compressed soak: nodewatchd under far more work than a node gives it, and
# faults, for as long as asked, with what must hold checked throughout.
#
# This script lays out the end-to-end node in a scratch directory (the
# committed fixture trees of tests/fixtures merged into one sysfs and procfs
# root, the textfile inputs, the modelled kernel log; the fake NVML's eight
# GPUs when the test build has it); the soak package beside it
# (bench/soak/, Python 3's standard library only) runs the daemon with
# every collector at 100 ms, the load (50 scrapes a second), the faults at
# random times drawn from the seed (reloads valid, half-written and
# invalid; kill -9 and restart; a full state disk; a low descriptor limit;
# hostile HTTP clients; kernel log storms; a churning textfile directory),
# and an independent scraper that checks the invariants. What each fault
# and invariant is: bench/README.md, "Compressed soak".
#
# Run as root (the state disk is a tmpfs it mounts; as another user that
# fault is skipped). Traffic stays on loopback; the daemon is stopped, the
# tmpfs unmounted and the scratch directory removed on exit. Exit status 0
# without a violation, 3 with one. The test command (packaging/test.sh)
# runs it for 2 minutes.
#
# Usage: bench/soak.sh [--binary PATH] [--minutes N] [--seed N] [--report FILE.json] [--out PATH]
#                      [--reload-every S] [--faults K,K...]
#   --binary PATH      nodewatchd to run (default: build/daemon/nodewatchd)
#   --minutes N        how long (default 60)
#   --report FILE.json the report as JSON, and its summary as FILE.md
#   --out PATH         also write the summary to PATH
#   --reload-every S   a valid reload at least every S seconds (default 60)
#   --seed N           the fault schedule's seed (default random, printed)
#   --faults K,K...    only these fault kinds (default all; bench/README.md)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
binary="$root/build/daemon/nodewatchd"
minutes=60
reload_every=60
out=""
report=""
seed=""
only=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --binary) binary=$2; shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --reload-every) reload_every=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --report) report=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --faults) only=$2; shift 2 ;;
    -h|--help) sed -n '/^# Usage:/,/^#   --faults/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x $binary ]] || { echo "soak.sh: no nodewatchd at $binary (build it, or give --binary)" >&2; exit 2; }

scratch=$(mktemp -d /tmp/nodewatch-soak-XXXXXX)
cleanup() {
  # The soak stops the daemon and unmounts its state disk itself; a lazy
  # unmount here too, in case it was killed.
  mountpoint -q "$scratch/state" 2>/dev/null && umount -l "$scratch/state"
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
if [[ ! -f $fake_nvml ]]; then
  echo "soak.sh: no fake NVML at $fake_nvml (build the tests): the accelerator collector runs without NVIDIA devices" >&2
fi

[[ -f $fake_nvml ]] || fake_nvml=""

status=0
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$root/bench" python3 -m soak --binary "$binary" --scratch "$scratch" \
  --fixtures "$fixtures" --fake-nvml "$fake_nvml" --minutes "$minutes" \
  --reload-every "$reload_every" --out "$out" --report "$report" ${seed:+--seed "$seed"} \
  ${only:+--faults "$only"} &
soak=$!
# Stopped by a signal, the soak stops its daemon before this removes its
# scratch (killed with the shell alone, the daemon ran on).
trap 'kill -TERM "$soak" 2>/dev/null' TERM INT
wait "$soak" || status=$?
while kill -0 "$soak" 2>/dev/null; do wait "$soak" || status=$?; done
exit "$status"
