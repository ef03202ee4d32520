#!/usr/bin/env bash
# Checks what nodewatch exports for the NVIDIA GPUs of this machine against
# nvidia-smi: reads `nvidia-smi -q -x`, runs `nodewatchd --once` (the
# accelerator and pcie collectors only, on the real libnvidia-ml.so.1), reads
# `nvidia-smi -q -x` again, and compares every value that both print, per GPU
# (matched by UUID), with the tolerances tests/hardware/nvidia_compare.py
# prints. See tests/hardware/README.md.
#
# Usage: tests/hardware/nvidia-check.sh [options]
#   --nodewatchd PATH   check this nodewatchd (nothing is built)
#   --build-dir DIR     check DIR/daemon/nodewatchd, an existing build (nothing is built)
#   --install-deps      run packaging/install-deps.sh before building (it
#                       installs missing Debian packages, with sudo)
#   --nvml-library LIB  the NVML nodewatchd loads ([nvml] library), by name or
#                       path; default libnvidia-ml.so.1
#   --nvidia-smi PATH   default: nvidia-smi from PATH
#   --sysfs DIR         sysfs root for nodewatchd (default /sys)
#   --timeout SECONDS   limit for each nvidia-smi and nodewatchd run (default 60)
#   --keep DIR          write the raw outputs to DIR and keep them
#   --json FILE         also write the pairs and the summary as JSON
#   --host-link-load N  then copy N GiB to GPU 0 and back with PyTorch and
#                       check that its host-link byte counters grow by that
#                       within 5 % (tests/hardware/host_link_load.py)
# Without --nodewatchd or --build-dir, nodewatchd is built in build-release/
# with packaging/build-release.sh.
#
# Exit status: 0 when every comparable value agrees, 1 when one does not (or
# nodewatchd failed), 2 when the check cannot run (no nvidia-smi, no GPU, no
# nodewatchd).
#
# Safe on a production node: nvidia-smi is only asked to query (-q -x), and
# nodewatchd --once opens no port, only reads NVML and sysfs, and exits;
# neither changes any GPU setting, neither needs root, and each runs under
# `timeout`.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd) || exit 2

nodewatchd=""
build_dir=""
install_deps=0
nvml_library="libnvidia-ml.so.1"
nvidia_smi="nvidia-smi"
sysfs=""
limit=60
keep=""
json=""
host_link_gib=""

usage() { awk '/^# Usage:/ { p = 1 } p && /^#$/ { exit } p { sub(/^# ?/, ""); print }' "$0"; }
cannot_run() { echo "nvidia-check: cannot run: $*" >&2; exit 2; }

while (($# > 0)); do
  case "$1" in --install-deps | -h | --help) ;; *) (($# >= 2)) || cannot_run "$1 needs a value" ;; esac
  case "$1" in
    --nodewatchd) nodewatchd=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --install-deps) install_deps=1; shift ;;
    --nvml-library) nvml_library=$2; shift 2 ;;
    --nvidia-smi) nvidia_smi=$2; shift 2 ;;
    --sysfs) sysfs=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    --host-link-load) host_link_gib=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; cannot_run "unknown argument '$1'" ;;
  esac
done
if ! [[ $limit =~ ^[0-9]+$ ]] || ((limit == 0)); then cannot_run "--timeout takes whole seconds"; fi
if [[ -n $host_link_gib ]] && { ! [[ $host_link_gib =~ ^[0-9]+$ ]] || ((host_link_gib == 0)); }; then
  cannot_run "--host-link-load takes whole GiB"
fi
# Paths given relative to where the check was started (it runs in the
# repository); a library or program given by name stays a name.
absolute() { case $1 in "" | /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
path_or_name() { case $1 in */*) absolute "$1" ;; *) echo "$1" ;; esac; }
nodewatchd=$(absolute "$nodewatchd")
build_dir=$(absolute "$build_dir")
sysfs=$(absolute "$sysfs")
keep=$(absolute "$keep")
json=$(absolute "$json")
nvml_library=$(path_or_name "$nvml_library")
nvidia_smi=$(path_or_name "$nvidia_smi")
cd "$repo" || exit 2
[[ $nvml_library != *"'"* ]] || cannot_run "--nvml-library cannot contain a single quote"
command -v python3 >/dev/null || cannot_run "python3 not found"
command -v timeout >/dev/null || cannot_run "timeout (coreutils) not found"
command -v "$nvidia_smi" >/dev/null || cannot_run "$nvidia_smi not found (no NVIDIA driver here?)"

if [[ -n $keep ]]; then
  work=$keep
  mkdir -p "$work" || cannot_run "cannot create $work"
else
  work=$(mktemp -d) || cannot_run "no temporary directory"
  trap 'rm -rf "$work"' EXIT
fi

now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f} s')" "$1" "$2"; }

# read_smi NAME: nvidia-smi -q -x into $work/NAME.xml; exits 2 if it fails.
read_smi() {
  local rc=0
  timeout --kill-after=5 "$limit" "$nvidia_smi" -q -x >"$work/$1.xml" 2>"$work/$1.err" || rc=$?
  if ((rc != 0)); then
    cat "$work/$1.xml" "$work/$1.err" >&2
    ((rc == 124 || rc == 137)) && cannot_run "nvidia-smi -q -x did not finish within ${limit} s"
    cannot_run "nvidia-smi -q -x failed (exit status $rc)"
  fi
  grep -q '<gpu[ >]' "$work/$1.xml" || cannot_run "nvidia-smi lists no GPU"
}

# Before building: is there anything to compare with?
read_smi probe

if [[ -n $nodewatchd ]]; then
  :
elif [[ -n $build_dir ]]; then
  nodewatchd=$build_dir/daemon/nodewatchd
else
  if ((install_deps)); then
    packaging/install-deps.sh || cannot_run "packaging/install-deps.sh failed"
  fi
  echo "== building nodewatchd (packaging/build-release.sh)"
  packaging/build-release.sh ||
    cannot_run "the build failed; install the dependencies (packaging/install-deps.sh, or --install-deps) or give --nodewatchd"
  nodewatchd=build-release/daemon/nodewatchd
fi
[[ -x $nodewatchd ]] || cannot_run "$nodewatchd is not an executable"

# Only the collectors whose values nvidia-smi also prints; one collection
# with room for a slow nvmlInit (a driver without persistence mode).
cat >"$work/nodewatch.toml" <<EOF
# Written by tests/hardware/nvidia-check.sh.
[log]
level = "warn"

[nvml]
library = '$nvml_library'

[collectors.accelerator]
interval = "1m"
timeout = "1m"

[collectors.pcie]
interval = "1m"
timeout = "1m"

# Its NVLink part (fields, PRM counters), to see that the real driver
# answers nothing nodewatch does not expect (nvidia_compare.py fails on
# any nvml_error or nvml_field_type); no verbs.
[collectors.interconnect]
interval = "1m"
timeout = "1m"
verbs = false

[collectors.storage]
enabled = false

[collectors.nic]
enabled = false

[collectors.textfile]
enabled = false

[collectors.kernel]
enabled = false
EOF

run_args=(--config "$work/nodewatch.toml" --once)
[[ -n $sysfs ]] && run_args+=(--sysfs "$sysfs")

echo "== $("$nodewatchd" --version 2>/dev/null || echo "$nodewatchd"), NVML '$nvml_library', $nvidia_smi"
t0=$(now)
read_smi before
t1=$(now)
rc=0
timeout --kill-after=5 "$limit" "$nodewatchd" "${run_args[@]}" >"$work/nodewatch.prom" 2>"$work/nodewatchd.log" || rc=$?
t2=$(now)
read_smi after
t3=$(now)
echo "== nvidia-smi (before) $(elapsed "$t0" "$t1"), nodewatchd --once $(elapsed "$t1" "$t2"), nvidia-smi (after) $(elapsed "$t2" "$t3")"
if [[ -s $work/nodewatchd.log ]]; then
  echo "== nodewatchd's log"
  cat "$work/nodewatchd.log"
fi
if ((rc != 0)); then
  if ((rc == 124 || rc == 137)); then
    echo "nvidia-check: FAILED: nodewatchd --once did not finish within ${limit} s" >&2
  else
    echo "nvidia-check: FAILED: nodewatchd --once exited with status $rc" >&2
  fi
  exit 1
fi

compare_args=(--nodewatch "$work/nodewatch.prom" --smi "$work/before.xml" --smi "$work/after.xml")
[[ -n $json ]] && compare_args+=(--json "$json")
echo
python3 tests/hardware/nvidia_compare.py "${compare_args[@]}"
status=$?
if [[ -n $host_link_gib ]]; then
  echo
  load_args=(--nodewatchd "$nodewatchd" --nvml-library "$nvml_library" --gib "$host_link_gib")
  [[ -n $json ]] && load_args+=(--json "${json%.json}.host-link.json")
  load_rc=0
  python3 tests/hardware/host_link_load.py "${load_args[@]}" || load_rc=$?
  if ((load_rc == 1)); then
    status=1
  elif ((load_rc != 0)); then
    echo "nvidia-check: the host-link load step could not run (exit status $load_rc)" >&2
  fi
fi
[[ -n $keep ]] && echo "raw outputs in $keep"
exit "$status"
