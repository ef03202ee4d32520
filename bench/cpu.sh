# shellcheck shell=bash
# Sourced by the cost benchmarks: the CPU time of a process tree.

clk_tck=$(getconf CLK_TCK)

# cpu_ns PID: run time of every thread (ns) of PID and of every process
# below it (nodewatchd's helper launcher and its file-system helpers live
# as long as the daemon: their CPU is the daemon's cost), plus what each
# of them reaped (exited helpers).
cpu_ns() {
  local pid=$1 sum=0 t stat rest f p
  local -a tree
  # The process tree under PID, from every process's parent (field 4 of
  # /proc/N/stat; the comm field before it may hold spaces, not ')').
  mapfile -t tree < <(for st in /proc/[0-9]*/stat; do
    s=$(<"$st") 2>/dev/null || continue
    r=${s##*) }
    echo "${st//[!0-9]/} ${r#* }"
  done | awk -v root="$pid" '{ parent[$1] = $2 }
    END { for (p in parent) { q = p; while (q != "" && q != root && q in parent && q != 1) q = parent[q]; if (q == root) print p } }')
  for p in "${tree[@]}"; do
    for t in /proc/"$p"/task/*/schedstat; do
      read -r f _ <"$t" 2>/dev/null && sum=$((sum + f))
    done
    stat=$(<"/proc/$p/stat") 2>/dev/null || continue
    rest=${stat##*) }
    read -r -a f <<<"$rest"
    sum=$((sum + (f[13] + f[14]) * 1000000000 / clk_tck))
  done
  echo "$sum"
}
