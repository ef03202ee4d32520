# shellcheck shell=bash disable=SC2154  # $fx is the caller's
# Synthetic fixture trees for the benchmarks (sourced by scrape_bench.sh and
# collection_cost.sh). Each function writes under $fx, which the caller sets.
# The device models: NVMe whole disks as Linux >= 5.5 shows them in
# /proc/diskstats and /sys/block (a Samsung PM1733-class drive); an
# NVIDIA ConnectX-6 (mlx5, HDR) HCA as the mlx5 driver shows it under
# /sys/class/infiniband; a coretemp hwmon chip.

# write_block_fixture N: proc/diskstats with N NVMe whole disks (kernel >= 5.5
# format: major, minor, name and 17 statistics), their sys/block/<dev>/
# attributes, and the udev database entries node_exporter reads for model and
# serial. Each statistic of device i lies in a plausible range, spread by a
# multiplicative hash so that devices differ.
write_block_fixture() {
  local n=$1 i dev d dirs=()
  rm -rf "$fx/sys/block" "$fx/udev"
  mkdir -p "$fx/proc" "$fx/udev"
  awk -v n="$n" '
    function v(i, k, lo, span) { return lo + ((i + 1) * 2654435761 + k * 40503 + i * k * 97) % span }
    BEGIN {
      for (i = 0; i < n; i++) {
        printf "%4d %7d nvme%dn1", 259, i, i
        printf " %d %d %d %d", v(i, 1, 1e7, 9e7), v(i, 2, 1e3, 9e5), v(i, 3, 1e9, 9e9), v(i, 4, 1e6, 9e7)
        printf " %d %d %d %d", v(i, 5, 1e7, 9e7), v(i, 6, 1e5, 9e6), v(i, 7, 1e9, 9e9), v(i, 8, 1e6, 9e8)
        printf " %d %d %d", v(i, 9, 0, 64), v(i, 10, 1e6, 9e7), v(i, 11, 1e7, 9e8)
        printf " %d %d %d %d", v(i, 12, 1e4, 9e5), 0, v(i, 14, 1e6, 9e8), v(i, 15, 1e3, 9e4)
        printf " %d %d\n", v(i, 16, 1e5, 9e6), v(i, 17, 1e4, 9e5)
      }
    }' >"$fx/proc/diskstats"
  for ((i = 0; i < n; i++)); do
    dirs+=("$fx/sys/block/nvme${i}n1/device" "$fx/sys/block/nvme${i}n1/queue")
  done
  ((n == 0)) || mkdir -p "${dirs[@]}"
  for ((i = 0; i < n; i++)); do
    dev=nvme${i}n1
    d=$fx/sys/block/$dev
    # sysfs pads the NVMe model to 40 characters
    printf '%-40s\n' "SAMSUNG MZWLR3T8HBLS-00007" >"$d/device/model"
    printf 'S6EXNE0R%06d      \n' "$i" >"$d/device/serial"
    echo 0 >"$d/queue/rotational"
    echo 1023 >"$d/queue/nr_requests"
    echo 512 >"$d/queue/logical_block_size"
    # What udev would have stored; node_exporter reads it on every scrape.
    printf 'E:ID_MODEL=SAMSUNG_MZWLR3T8HBLS-00007\nE:ID_SERIAL_SHORT=S6EXNE0R%06d\nE:ID_REVISION=MPK7525Q\nE:ID_WWN=eui.36344830%08d\nE:ID_PATH=pci-0000:%02x:00.0-nvme-1\n' \
      "$i" "$i" $((i % 256)) >"$fx/udev/b259:$i"
  done
}

# The rest of what node_exporter's collectors read.
write_other_fixture() {
  local h ib c k=0
  mkdir -p "$fx/proc/1/net" "$fx/sys/class"
  # procfs' Self() resolves <procfs>/self to a PID directory.
  ln -sfn 1 "$fx/proc/self"
  cp /proc/self/mountstats "$fx/proc/1/mountstats"
  cp /proc/self/mountinfo "$fx/proc/1/mountinfo"
  mkdir -p "$fx/proc/net"
  cp /proc/net/dev "$fx/proc/net/dev"
  # netclass: this machine's interfaces (the kernel resolves the relative
  # links under /sys/class/net against the real /sys).
  ln -sfn /sys/class/net "$fx/sys/class/net"
  # hwmon: one CPU temperature chip with 4 sensors.
  h=$fx/sys/class/hwmon/hwmon0
  mkdir -p "$h"
  echo coretemp >"$h/name"
  for k in 1 2 3 4; do
    echo $((40000 + k * 1000)) >"$h/temp${k}_input"
    echo "Core $((k - 1))" >"$h/temp${k}_label"
    echo 100000 >"$h/temp${k}_crit"
    echo 0 >"$h/temp${k}_crit_alarm"
  done
  # infiniband: one HDR HCA, one port, the standard port counters.
  ib=$fx/sys/class/infiniband/mlx5_0
  mkdir -p "$ib/ports/1/counters"
  echo MT_0000000223 >"$ib/board_id"
  echo 28.39.1002 >"$ib/fw_ver"
  echo MT4123 >"$ib/hca_type"
  echo "4: ACTIVE" >"$ib/ports/1/state"
  echo "5: LinkUp" >"$ib/ports/1/phys_state"
  echo "200 Gb/sec (4X HDR)" >"$ib/ports/1/rate"
  k=0
  for c in excessive_buffer_overrun_errors link_downed link_error_recovery \
    local_link_integrity_errors multicast_rcv_packets multicast_xmit_packets \
    port_rcv_constraint_errors port_rcv_data port_rcv_discards port_rcv_errors \
    port_rcv_packets port_rcv_remote_physical_errors port_rcv_switch_relay_errors \
    port_xmit_constraint_errors port_xmit_data port_xmit_discards port_xmit_packets \
    port_xmit_wait symbol_error unicast_rcv_packets unicast_xmit_packets VL15_dropped; do
    k=$((k + 1))
    echo $(((k * 2654435761) % 4000000000)) >"$ib/ports/1/counters/$c"
  done
}

# write_hca_fixture N: N ConnectX-6 Dx HCAs (mlx5_<i>), one RoCE port each,
# under $fx/sys/class/infiniband: identity, port state and rate, the 21 PMA
# counters of counters/ and 32 hw_counters, as the mlx5 driver of Linux 6.x
# lays them out.
write_hca_fixture() {
  local n=$1 i c v d p
  local pma=(excessive_buffer_overrun_errors link_downed link_error_recovery
    local_link_integrity_errors multicast_rcv_packets multicast_xmit_packets
    port_rcv_constraint_errors port_rcv_data port_rcv_errors port_rcv_packets
    port_rcv_remote_physical_errors port_rcv_switch_relay_errors
    port_xmit_constraint_errors port_xmit_data port_xmit_discards port_xmit_packets
    port_xmit_wait symbol_error unicast_rcv_packets unicast_xmit_packets VL15_dropped)
  local hw=(duplicate_request implied_nak_seq_err lifespan local_ack_timeout_err
    np_cnp_sent np_ecn_marked_roce_packets out_of_buffer out_of_sequence packet_seq_err
    req_cqe_error req_cqe_flush_error req_remote_access_errors req_remote_invalid_request
    req_rnr_retries_exceeded req_transport_retries_exceeded resp_cqe_error
    resp_cqe_flush_error resp_local_length_error resp_remote_access_errors
    rnr_nak_retry_err roce_adp_retrans roce_adp_retrans_to roce_slow_restart
    roce_slow_restart_cnps roce_slow_restart_trans rp_cnp_handled rp_cnp_ignored
    rx_atomic_requests rx_dct_connect rx_icrc_encapsulated rx_read_requests rx_write_requests)
  for ((i = 0; i < n; i++)); do
    d=$fx/sys/class/infiniband/mlx5_$i
    p=$d/ports/1
    mkdir -p "$p/counters" "$p/hw_counters" "$p/gid_attrs/ndevs"
    echo 22.39.1002 >"$d/fw_ver"
    echo MT_0000000359 >"$d/board_id"
    echo MT4125 >"$d/hca_type"
    echo "0c42:a103:0065:4a1$i" >"$d/node_guid"
    echo "4: ACTIVE" >"$p/state"
    echo "5: LinkUp" >"$p/phys_state"
    echo "200 Gb/sec (4X HDR)" >"$p/rate"
    echo Ethernet >"$p/link_layer"
    echo "ens${i}f0np0" >"$p/gid_attrs/ndevs/0"
    v=$((1000 + i))
    for c in "${pma[@]}"; do v=$((v + 7919)); echo "$v" >"$p/counters/$c"; done
    for c in "${hw[@]}"; do v=$((v + 104729)); echo "$v" >"$p/hw_counters/$c"; done
  done
}
