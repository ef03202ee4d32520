#pragma once
// The metric families the interconnect collector emits for InfiniBand and RoCE ports and for
// NVLink links: each declared once, here. The collector's table is built from these and it emits
// through them; whatever else reads a family (the node verdict, the expect file, docs/metrics.md)
// refers to the constant.

#include "nodewatch/metric.hpp"

namespace nodewatch::interconnect::families {

inline constexpr Family kVerbsLibraryInfo{
    "nodewatch_interconnect_verbs_library_info",
    MetricType::kGauge,
    "",
    "The RDMA core library (libibverbs) loaded to follow the ports' events, value 1, where "
    "/dev/infiniband exists: rdma-core's version, from the library's file name "
    "(libibverbs.so.1.14.44.0 is rdma-core 44.0).",
    {"version"}};

inline constexpr Family kPortInfo{
    "nodewatch_interconnect_port_info",
    MetricType::kGauge,
    "",
    "An InfiniBand or RoCE port, value 1: link_layer InfiniBand or Ethernet, netdev the RoCE "
    "network device, and the device's GUID, firmware, board and type.",
    {"device", "port", "link_layer", "netdev", "node_guid", "firmware", "board_id", "hca_type"}};

inline constexpr Family kPortState{
    "nodewatch_interconnect_port_state",
    MetricType::kGauge,
    "",
    "Logical port state: 1 down, 2 init, 3 armed, 4 active, 5 active defer.",
    {"device", "port"}};

inline constexpr Family kPortPhysicalState{
    "nodewatch_interconnect_port_physical_state",
    MetricType::kGauge,
    "",
    "Physical port state: 2 polling, 3 disabled, 4 training, 5 LinkUp, 6 link error recovery.",
    {"device", "port"}};

inline constexpr Family kPortRateBytesPerSecond{
    "nodewatch_interconnect_port_rate_bytes_per_second",
    MetricType::kGauge,
    "bytes_per_second",
    "Data rate the port trained to, width times lane speed (ports/N/rate).",
    {"device", "port"}};

inline constexpr Family kPortWidth{"nodewatch_interconnect_port_width",
                                   MetricType::kGauge,
                                   "",
                                   "Lanes the port trained to (the 4X of ports/N/rate); fewer than "
                                   "the cable's lanes is a degraded link.",
                                   {"device", "port"}};

inline constexpr Family kPortStateChangesTotal{
    "nodewatch_interconnect_port_state_changes_total",
    MetricType::kCounter,
    "",
    "Port state transitions (PORT_ACTIVE and PORT_ERR events from libibverbs) since the daemon "
    "opened the device; absent without /dev/infiniband.",
    {"device", "port"}};

inline constexpr Family kPortTransmittedBytesTotal{
    "nodewatch_interconnect_port_transmitted_bytes_total",
    MetricType::kCounter,
    "bytes",
    "Data bytes sent by the port, from the PMA counter port_xmit_data (4-byte words, times 4); on "
    "mlx5 RoCE ports RDMA traffic only.",
    {"device", "port"}};

inline constexpr Family kPortReceivedBytesTotal{
    "nodewatch_interconnect_port_received_bytes_total",
    MetricType::kCounter,
    "bytes",
    "Data bytes received by the port, from the PMA counter port_rcv_data (4-byte words, times 4); "
    "on mlx5 RoCE ports RDMA traffic only.",
    {"device", "port"}};

inline constexpr Family kPortTransmittedPacketsTotal{
    "nodewatch_interconnect_port_transmitted_packets_total",
    MetricType::kCounter,
    "",
    "Packets sent by the port (PMA port_xmit_packets).",
    {"device", "port"}};

inline constexpr Family kPortReceivedPacketsTotal{
    "nodewatch_interconnect_port_received_packets_total",
    MetricType::kCounter,
    "",
    "Packets received by the port (PMA port_rcv_packets).",
    {"device", "port"}};

inline constexpr Family kPortSymbolErrorsTotal{
    "nodewatch_interconnect_port_symbol_errors_total",
    MetricType::kCounter,
    "",
    "Minor link errors on any lane (PMA symbol_error, 16 bits, saturates).",
    {"device", "port"}};

inline constexpr Family kPortLinkDownedTotal{
    "nodewatch_interconnect_port_link_downed_total",
    MetricType::kCounter,
    "",
    "Times link error recovery failed and the link went down (PMA link_downed, 8 bits, saturates).",
    {"device", "port"}};

inline constexpr Family kPortLinkErrorRecoveryTotal{
    "nodewatch_interconnect_port_link_error_recovery_total",
    MetricType::kCounter,
    "",
    "Times link error recovery succeeded (PMA link_error_recovery, 8 bits, saturates).",
    {"device", "port"}};

inline constexpr Family kPortReceiveErrorsTotal{
    "nodewatch_interconnect_port_receive_errors_total",
    MetricType::kCounter,
    "",
    "Received packets with an error, e.g. a bad CRC (PMA port_rcv_errors).",
    {"device", "port"}};

inline constexpr Family kPortReceiveRemotePhysicalErrorsTotal{
    "nodewatch_interconnect_port_receive_remote_physical_errors_total",
    MetricType::kCounter,
    "",
    "Received packets marked bad elsewhere in the fabric (PMA port_rcv_remote_physical_errors).",
    {"device", "port"}};

inline constexpr Family kPortTransmitDiscardsTotal{
    "nodewatch_interconnect_port_transmit_discards_total",
    MetricType::kCounter,
    "",
    "Outbound packets discarded because the port was down or congested (PMA port_xmit_discards).",
    {"device", "port"}};

inline constexpr Family kPortTransmitWaitTotal{
    "nodewatch_interconnect_port_transmit_wait_total",
    MetricType::kCounter,
    "",
    "Ticks during which the port had data to send but no credits (PMA port_xmit_wait).",
    {"device", "port"}};

inline constexpr Family kPortLocalLinkIntegrityErrorsTotal{
    "nodewatch_interconnect_port_local_link_integrity_errors_total",
    MetricType::kCounter,
    "",
    "Times local physical errors exceeded their threshold (PMA local_link_integrity_errors).",
    {"device", "port"}};

inline constexpr Family kPortExcessiveBufferOverrunErrorsTotal{
    "nodewatch_interconnect_port_excessive_buffer_overrun_errors_total",
    MetricType::kCounter,
    "",
    "Input buffer overruns, a flow-control fault (PMA excessive_buffer_overrun_errors).",
    {"device", "port"}};

inline constexpr Family kPortVl15DroppedTotal{
    "nodewatch_interconnect_port_vl15_dropped_total",
    MetricType::kCounter,
    "",
    "Management (VL15) packets dropped for lack of buffers (PMA VL15_dropped).",
    {"device", "port"}};

inline constexpr Family kPortPmaTotal{
    "nodewatch_interconnect_port_pma_total",
    MetricType::kCounter,
    "",
    "Other PMA counters of the port (counters/ and counters_ext/), by file name: unicast and "
    "multicast packets, constraint and switch relay errors.",
    {"device", "port", "counter"}};

inline constexpr Family kRoceEcnMarkedPacketsTotal{
    "nodewatch_interconnect_roce_ecn_marked_packets_total",
    MetricType::kCounter,
    "",
    "RoCEv2 packets received with ECN congestion marks (hw_counters np_ecn_marked_roce_packets).",
    {"device", "port"}};

inline constexpr Family kRoceCnpSentTotal{
    "nodewatch_interconnect_roce_cnp_sent_total",
    MetricType::kCounter,
    "",
    "Congestion notification packets sent by the notification point (hw_counters np_cnp_sent).",
    {"device", "port"}};

inline constexpr Family kRoceCnpHandledTotal{
    "nodewatch_interconnect_roce_cnp_handled_total",
    MetricType::kCounter,
    "",
    "Congestion notification packets handled by the reaction point (hw_counters rp_cnp_handled).",
    {"device", "port"}};

inline constexpr Family kRoceCnpIgnoredTotal{
    "nodewatch_interconnect_roce_cnp_ignored_total",
    MetricType::kCounter,
    "",
    "Congestion notification packets received and ignored; should stay 0 with DCQCN on "
    "(hw_counters rp_cnp_ignored).",
    {"device", "port"}};

inline constexpr Family kRoceOutOfBufferTotal{
    "nodewatch_interconnect_roce_out_of_buffer_total",
    MetricType::kCounter,
    "",
    "Packets dropped for lack of a posted receive buffer (hw_counters out_of_buffer).",
    {"device", "port"}};

inline constexpr Family kRoceOutOfSequenceTotal{
    "nodewatch_interconnect_roce_out_of_sequence_total",
    MetricType::kCounter,
    "",
    "Packets received with an out-of-sequence PSN (hw_counters out_of_sequence).",
    {"device", "port"}};

inline constexpr Family kRocePacketSequenceErrorsTotal{
    "nodewatch_interconnect_roce_packet_sequence_errors_total",
    MetricType::kCounter,
    "",
    "NAK sequence-error packets received (hw_counters packet_seq_err).",
    {"device", "port"}};

inline constexpr Family kRoceLocalAckTimeoutsTotal{
    "nodewatch_interconnect_roce_local_ack_timeouts_total",
    MetricType::kCounter,
    "",
    "Times a QP's ACK timer expired, a sign of a lossy fabric (hw_counters local_ack_timeout_err).",
    {"device", "port"}};

inline constexpr Family kRoceRetransmitsTotal{
    "nodewatch_interconnect_roce_retransmits_total",
    MetricType::kCounter,
    "",
    "Adaptive retransmissions (hw_counters roce_adp_retrans).",
    {"device", "port"}};

inline constexpr Family kHwCountersTotal{"nodewatch_interconnect_hw_counters_total",
                                         MetricType::kCounter,
                                         "",
                                         "Driver hw_counters without a curated name, by counter; "
                                         "port 0 is the device-level hw_counters.",
                                         {"device", "port", "counter"}};

// NVLink (nvlink_metrics.hpp): named for what they measure, not with the collector's
// prefix; the collector's table declares the prefixes as borrowed.
inline constexpr Family kNvlinkUp{
    "nodewatch_nvlink_up",
    MetricType::kGauge,
    "",
    "1 if the NVLink link is active, 0 if the driver reports it inactive.",
    {"accelerator", "uuid", "link"}};

inline constexpr Family kNvlinkSpeedBytesPerSecond{
    "nodewatch_nvlink_speed_bytes_per_second",
    MetricType::kGauge,
    "bytes_per_second",
    "Speed of the NVLink link, per direction, as the driver reports it.",
    {"accelerator", "uuid", "link"}};

inline constexpr Family kNvlinkTransmittedBytesTotal{
    "nodewatch_nvlink_transmitted_bytes_total",
    MetricType::kCounter,
    "bytes",
    "Data bytes sent over the NVLink link (NVLink5 byte counter, else the data throughput counter "
    "in KiB).",
    {"accelerator", "uuid", "link"}};

inline constexpr Family kNvlinkReceivedBytesTotal{"nodewatch_nvlink_received_bytes_total",
                                                  MetricType::kCounter,
                                                  "bytes",
                                                  "Data bytes received over the NVLink link.",
                                                  {"accelerator", "uuid", "link"}};

inline constexpr Family kNvlinkErrorsTotal{
    "nodewatch_nvlink_errors_total",
    MetricType::kCounter,
    "",
    "NVLink errors of the accelerator's links together, by type: crc_flit, crc_data, replay, "
    "recovery, ecc (up to Hopper); symbol, effective, recovery, recovery_failed and the receive "
    "and transmit errors (NVLink5); link_down (the PRM counter, NVML 13.1 on).",
    {"accelerator", "uuid", "type"}};

inline constexpr Family kNvlinkLinkErrorsTotal{
    "nodewatch_nvlink_link_errors_total",
    MetricType::kCounter,
    "",
    "NVLink errors per link and type, as nodewatch_nvlink_errors_total; only with "
    "collectors.interconnect.nvlink_link_errors.",
    {"accelerator", "uuid", "link", "type"}};

// NVLink5 link quality (Blackwell on): per accelerator (its worst link, or
// its links' sum), and per link only with nvlink_link_errors.
inline constexpr Family kNvlinkBitErrorRate{
    "nodewatch_nvlink_bit_error_rate",
    MetricType::kGauge,
    "",
    "Highest bit error rate of the accelerator's active NVLink links, by kind: effective (after "
    "FEC), "
    "symbol (before FEC), raw (NVML 13.2 on); NVLink5, as the driver computes it.",
    {"accelerator", "uuid", "kind"}};

inline constexpr Family kNvlinkLinkBitErrorRate{
    "nodewatch_nvlink_link_bit_error_rate",
    MetricType::kGauge,
    "",
    "Bit error rate per NVLink link and kind, as nodewatch_nvlink_bit_error_rate; only with "
    "collectors.interconnect.nvlink_link_errors.",
    {"accelerator", "uuid", "link", "kind"}};

inline constexpr Family kNvlinkFecCodewordsTotal{
    "nodewatch_nvlink_fec_codewords_total",
    MetricType::kCounter,
    "",
    "Codewords received over the accelerator's NVLink links by FEC history bin, the number of "
    "symbol errors the FEC corrected in them (0-15; NVML 12.8 on).",
    {"accelerator", "uuid", "bin"}};

inline constexpr Family kNvlinkLinkFecCodewordsTotal{
    "nodewatch_nvlink_link_fec_codewords_total",
    MetricType::kCounter,
    "",
    "Codewords per NVLink link and FEC history bin, as nodewatch_nvlink_fec_codewords_total; only "
    "with collectors.interconnect.nvlink_link_errors.",
    {"accelerator", "uuid", "link", "bin"}};

inline constexpr Family kNvlinkPlrTotal{
    "nodewatch_nvlink_plr_total",
    MetricType::kCounter,
    "",
    "Physical-layer retransmission (PLR) counts of the accelerator's NVLink links together, by "
    "counter: xmit_blocks, xmit_retry_blocks (NVML 13.2's fields); rcv_codes, rcv_code_errors, "
    "rcv_uncorrectable_codes, xmit_codes, xmit_retry_codes, xmit_retry_events, sync_events (the "
    "PRM counters, NVML 13.1 on).",
    {"accelerator", "uuid", "counter"}};

inline constexpr Family kNvlinkLinkPlrTotal{
    "nodewatch_nvlink_link_plr_total",
    MetricType::kCounter,
    "",
    "PLR counts per NVLink link and counter, as nodewatch_nvlink_plr_total; only with "
    "collectors.interconnect.nvlink_link_errors.",
    {"accelerator", "uuid", "link", "counter"}};

inline constexpr Family kNvlinkTransmitWaitTicksTotal{
    "nodewatch_nvlink_transmit_wait_ticks_total",
    MetricType::kCounter,
    "",
    "Ticks in which the accelerator's NVLink ports had data to send and sent none "
    "(PORT_XMIT_WAIT, NVML 13.1 on), its links together: NVLink's congestion signal. The tick's "
    "length is the hardware's and not published.",
    {"accelerator", "uuid"}};

inline constexpr Family kNvlinkLinkTransmitWaitTicksTotal{
    "nodewatch_nvlink_link_transmit_wait_ticks_total",
    MetricType::kCounter,
    "",
    "PORT_XMIT_WAIT ticks per NVLink link, as nodewatch_nvlink_transmit_wait_ticks_total; only "
    "with collectors.interconnect.nvlink_link_errors.",
    {"accelerator", "uuid", "link"}};

inline constexpr Family kNvlinkDataRateBytesPerSecond{
    "nodewatch_nvlink_data_rate_bytes_per_second",
    MetricType::kGauge,
    "bytes_per_second",
    "Data rate of the NVLink link left for transactions after the FEC overhead, per direction "
    "(NVML 13.3 on).",
    {"accelerator", "uuid", "link"}};

inline constexpr Family kNvlinkP2pOk{
    "nodewatch_accelerator_nvlink_p2p_ok",
    MetricType::kGauge,
    "",
    "1 if peer-to-peer over NVLink works between the accelerator and the peer (the other "
    "accelerator's index), as the driver says (nvmlDeviceGetP2PStatus), else 0; accelerators with "
    "NVLink links only.",
    {"accelerator", "uuid", "peer"}};

inline constexpr Family kNvlinkLinks{"nodewatch_accelerator_nvlink_links",
                                     MetricType::kGauge,
                                     "",
                                     "NVLink links the driver reports for the accelerator.",
                                     {"accelerator", "uuid"}};

inline constexpr Family kNvlinkLinksActive{
    "nodewatch_accelerator_nvlink_links_active",
    MetricType::kGauge,
    "",
    "NVLink links of the accelerator that are active; compare with the expected count.",
    {"accelerator", "uuid"}};

}  // namespace nodewatch::interconnect::families
