#pragma once
// The metric families the nic collector emits: each declared once, here. The collector's table is
// built from these and it emits through them; whatever else reads a family (the node verdict, the
// expect file, docs/metrics.md) refers to the constant.

#include "nodewatch/metric.hpp"

namespace nodewatch::nic::families {

inline constexpr Family kInfo{"nodewatch_nic_info",
                              MetricType::kGauge,
                              "",
                              "Facts about a network interface, value 1 (driver, firmware and bus "
                              "from ethtool, empty when the driver does not say).",
                              {"interface", "driver", "firmware", "bus_info", "mac", "operstate"}};

inline constexpr Family kUp{"nodewatch_nic_up",
                            MetricType::kGauge,
                            "",
                            "1 when the interface's operational state is up (RFC 2863).",
                            {"interface"}};

inline constexpr Family kCarrier{"nodewatch_nic_carrier",
                                 MetricType::kGauge,
                                 "",
                                 "1 when the interface has carrier (IFLA_CARRIER).",
                                 {"interface"}};

inline constexpr Family kCarrierChangesTotal{"nodewatch_nic_carrier_changes_total",
                                             MetricType::kCounter,
                                             "",
                                             "Carrier changes, up and down (IFLA_CARRIER_CHANGES).",
                                             {"interface"}};

inline constexpr Family kCarrierUpChangesTotal{"nodewatch_nic_carrier_up_changes_total",
                                               MetricType::kCounter,
                                               "",
                                               "Carrier up events (kernel 4.16+).",
                                               {"interface"}};

inline constexpr Family kCarrierDownChangesTotal{"nodewatch_nic_carrier_down_changes_total",
                                                 MetricType::kCounter,
                                                 "",
                                                 "Carrier down events (kernel 4.16+).",
                                                 {"interface"}};

inline constexpr Family kSpeedBytesPerSecond{
    "nodewatch_nic_speed_bytes_per_second",
    MetricType::kGauge,
    "bytes_per_second",
    "Negotiated link speed; absent when the kernel does not know it.",
    {"interface"}};

inline constexpr Family kMtuBytes{"nodewatch_nic_mtu_bytes",
                                  MetricType::kGauge,
                                  "bytes",
                                  "Maximum transmission unit.",
                                  {"interface"}};

inline constexpr Family kReceivedPacketsTotal{"nodewatch_nic_received_packets_total",
                                              MetricType::kCounter,
                                              "",
                                              "Packets received (rtnl_link_stats64 rx_packets).",
                                              {"interface"}};

inline constexpr Family kTransmittedPacketsTotal{"nodewatch_nic_transmitted_packets_total",
                                                 MetricType::kCounter,
                                                 "",
                                                 "Packets transmitted (tx_packets).",
                                                 {"interface"}};

inline constexpr Family kReceivedBytesTotal{"nodewatch_nic_received_bytes_total",
                                            MetricType::kCounter,
                                            "bytes",
                                            "Bytes received (rx_bytes).",
                                            {"interface"}};

inline constexpr Family kTransmittedBytesTotal{"nodewatch_nic_transmitted_bytes_total",
                                               MetricType::kCounter,
                                               "bytes",
                                               "Bytes transmitted (tx_bytes).",
                                               {"interface"}};

inline constexpr Family kReceiveErrorsTotal{"nodewatch_nic_receive_errors_total",
                                            MetricType::kCounter,
                                            "",
                                            "Bad packets received (rx_errors).",
                                            {"interface"}};

inline constexpr Family kTransmitErrorsTotal{"nodewatch_nic_transmit_errors_total",
                                             MetricType::kCounter,
                                             "",
                                             "Packets that could not be transmitted (tx_errors).",
                                             {"interface"}};

inline constexpr Family kReceiveDroppedTotal{
    "nodewatch_nic_receive_dropped_total",
    MetricType::kCounter,
    "",
    "Received packets dropped by the kernel or driver, e.g. no buffer space (rx_dropped).",
    {"interface"}};

inline constexpr Family kTransmitDroppedTotal{
    "nodewatch_nic_transmit_dropped_total",
    MetricType::kCounter,
    "",
    "Packets dropped on the way to the device, e.g. link down (tx_dropped).",
    {"interface"}};

inline constexpr Family kReceivedMulticastPacketsTotal{
    "nodewatch_nic_received_multicast_packets_total",
    MetricType::kCounter,
    "",
    "Multicast packets received (multicast).",
    {"interface"}};

inline constexpr Family kCollisionsTotal{"nodewatch_nic_collisions_total",
                                         MetricType::kCounter,
                                         "",
                                         "Collisions on a half-duplex medium (collisions).",
                                         {"interface"}};

inline constexpr Family kReceiveLengthErrorsTotal{
    "nodewatch_nic_receive_length_errors_total",
    MetricType::kCounter,
    "",
    "Received frames with a wrong length (rx_length_errors).",
    {"interface"}};

inline constexpr Family kReceiveOverErrorsTotal{"nodewatch_nic_receive_over_errors_total",
                                                MetricType::kCounter,
                                                "",
                                                "Receive ring overflows (rx_over_errors).",
                                                {"interface"}};

inline constexpr Family kReceiveCrcErrorsTotal{
    "nodewatch_nic_receive_crc_errors_total",
    MetricType::kCounter,
    "",
    "Received frames with a bad CRC/FCS (rx_crc_errors).",
    {"interface"}};

inline constexpr Family kReceiveFrameErrorsTotal{
    "nodewatch_nic_receive_frame_errors_total",
    MetricType::kCounter,
    "",
    "Received frames with alignment errors (rx_frame_errors).",
    {"interface"}};

inline constexpr Family kReceiveFifoErrorsTotal{"nodewatch_nic_receive_fifo_errors_total",
                                                MetricType::kCounter,
                                                "",
                                                "Receive FIFO overruns (rx_fifo_errors).",
                                                {"interface"}};

inline constexpr Family kReceiveMissedTotal{
    "nodewatch_nic_receive_missed_total",
    MetricType::kCounter,
    "",
    "Packets the device missed for lack of host buffers (rx_missed_errors).",
    {"interface"}};

inline constexpr Family kTransmitAbortedErrorsTotal{
    "nodewatch_nic_transmit_aborted_errors_total",
    MetricType::kCounter,
    "",
    "Transmissions aborted by the device (tx_aborted_errors).",
    {"interface"}};

inline constexpr Family kTransmitCarrierErrorsTotal{
    "nodewatch_nic_transmit_carrier_errors_total",
    MetricType::kCounter,
    "",
    "Transmit errors for loss of carrier (tx_carrier_errors).",
    {"interface"}};

inline constexpr Family kTransmitFifoErrorsTotal{"nodewatch_nic_transmit_fifo_errors_total",
                                                 MetricType::kCounter,
                                                 "",
                                                 "Transmit FIFO underruns (tx_fifo_errors).",
                                                 {"interface"}};

inline constexpr Family kTransmitHeartbeatErrorsTotal{
    "nodewatch_nic_transmit_heartbeat_errors_total",
    MetricType::kCounter,
    "",
    "Transmit heartbeat (SQE test) errors (tx_heartbeat_errors).",
    {"interface"}};

inline constexpr Family kTransmitWindowErrorsTotal{
    "nodewatch_nic_transmit_window_errors_total",
    MetricType::kCounter,
    "",
    "Late collisions on transmit (tx_window_errors).",
    {"interface"}};

inline constexpr Family kReceivedCompressedPacketsTotal{
    "nodewatch_nic_received_compressed_packets_total",
    MetricType::kCounter,
    "",
    "Compressed packets received (rx_compressed).",
    {"interface"}};

inline constexpr Family kTransmittedCompressedPacketsTotal{
    "nodewatch_nic_transmitted_compressed_packets_total",
    MetricType::kCounter,
    "",
    "Compressed packets transmitted (tx_compressed).",
    {"interface"}};

inline constexpr Family kReceiveNohandlerTotal{
    "nodewatch_nic_receive_nohandler_total",
    MetricType::kCounter,
    "",
    "Received packets dropped for lack of a protocol handler (rx_nohandler, kernel 4.6+).",
    {"interface"}};

inline constexpr Family kReceiveOtherhostDroppedTotal{
    "nodewatch_nic_receive_otherhost_dropped_total",
    MetricType::kCounter,
    "",
    "Received packets dropped as addressed to another host (rx_otherhost_dropped, kernel 5.19+).",
    {"interface"}};

inline constexpr Family kQdiscBytesTotal{"nodewatch_nic_qdisc_bytes_total",
                                         MetricType::kCounter,
                                         "bytes",
                                         "Bytes sent through a queueing discipline.",
                                         {"interface", "qdisc", "handle", "parent"}};

inline constexpr Family kQdiscPacketsTotal{
    "nodewatch_nic_qdisc_packets_total",
    MetricType::kCounter,
    "",
    "Packets sent through a queueing discipline (64-bit, or 32-bit with wraps accumulated).",
    {"interface", "qdisc", "handle", "parent"}};

inline constexpr Family kQdiscDropsTotal{
    "nodewatch_nic_qdisc_drops_total",
    MetricType::kCounter,
    "",
    "Packets dropped by a queueing discipline (32-bit in the kernel, wraps accumulated).",
    {"interface", "qdisc", "handle", "parent"}};

inline constexpr Family kQdiscOverlimitsTotal{
    "nodewatch_nic_qdisc_overlimits_total",
    MetricType::kCounter,
    "",
    "Times a queueing discipline was over its limit, e.g. throttled by a shaper.",
    {"interface", "qdisc", "handle", "parent"}};

inline constexpr Family kQdiscRequeuesTotal{
    "nodewatch_nic_qdisc_requeues_total",
    MetricType::kCounter,
    "",
    "Packets a queueing discipline had to requeue (the device was busy).",
    {"interface", "qdisc", "handle", "parent"}};

inline constexpr Family kQdiscBacklogBytes{"nodewatch_nic_qdisc_backlog_bytes",
                                           MetricType::kGauge,
                                           "bytes",
                                           "Bytes queued in a queueing discipline.",
                                           {"interface", "qdisc", "handle", "parent"}};

inline constexpr Family kQdiscQueueLengthPackets{"nodewatch_nic_qdisc_queue_length_packets",
                                                 MetricType::kGauge,
                                                 "packets",
                                                 "Packets queued in a queueing discipline.",
                                                 {"interface", "qdisc", "handle", "parent"}};

inline constexpr Family kPfcPauseFramesTotal{
    "nodewatch_nic_pfc_pause_frames_total",
    MetricType::kCounter,
    "",
    "Priority flow control (802.1Qbb) pause frames per priority, from the driver (rx: the fabric "
    "pauses us; tx: we pause the fabric).",
    {"interface", "direction", "priority"}};

inline constexpr Family kPfcPauseSecondsTotal{
    "nodewatch_nic_pfc_pause_seconds_total",
    MetricType::kCounter,
    "seconds",
    "Time paused by priority flow control per priority, from the driver.",
    {"interface", "direction", "priority"}};

inline constexpr Family kPauseFramesTotal{
    "nodewatch_nic_pause_frames_total",
    MetricType::kCounter,
    "",
    "Link-level (802.3x) pause frames, from ethtool's standard statistics or the driver.",
    {"interface", "direction"}};

inline constexpr Family kPauseStormEventsTotal{
    "nodewatch_nic_pause_storm_events_total",
    MetricType::kCounter,
    "",
    "Pause storm events detected by the device (error: pause transmission was disabled).",
    {"interface", "level"}};

inline constexpr Family kDiscardsTotal{"nodewatch_nic_discards_total",
                                       MetricType::kCounter,
                                       "",
                                       "Packets the device discarded for lack of buffers or on "
                                       "transmit; priority is empty for the whole port.",
                                       {"interface", "direction", "priority"}};

inline constexpr Family kOutOfBufferTotal{
    "nodewatch_nic_out_of_buffer_total",
    MetricType::kCounter,
    "",
    "Packets dropped because a receive queue had no software buffer (mlx5 rx_out_of_buffer).",
    {"interface"}};

inline constexpr Family kPcieStalledRatio{
    "nodewatch_nic_pcie_stalled_ratio",
    MetricType::kGauge,
    "ratio",
    "Fraction of the last second in which the device had outbound PCIe requests it could not "
    "issue for want of posted credits: the host does not take what arrives fast enough (mlx5 "
    "outbound_pci_stalled_rd, _wr).",
    {"interface", "operation"}};

inline constexpr Family kPcieStalledSecondsTotal{
    "nodewatch_nic_pcie_stalled_seconds_total",
    MetricType::kCounter,
    "seconds",
    "Seconds in which the device was stalled on outbound PCIe requests more than 30% of the time "
    "(mlx5 outbound_pci_stalled_rd_events, _wr_events).",
    {"interface", "operation"}};

inline constexpr Family kPcieBufferOverflowPacketsTotal{
    "nodewatch_nic_pcie_buffer_overflow_packets_total",
    MetricType::kCounter,
    "",
    "Packets the device dropped because its PCIe buffer overflowed (mlx5 "
    "outbound_pci_buffer_overflow).",
    {"interface"}};

inline constexpr Family kPcieRecoveriesTotal{
    "nodewatch_nic_pcie_recoveries_total",
    MetricType::kCounter,
    "",
    "PCIe link recoveries for signal integrity: rx, started by framing or CRC errors the device "
    "saw; tx, started by the other side (mlx5 rx_pci_signal_integrity, tx_pci_signal_integrity).",
    {"interface", "direction"}};

inline constexpr Family kPcieCongestionEventsTotal{
    "nodewatch_nic_pcie_congestion_events_total",
    MetricType::kCounter,
    "",
    "Times the device's PCIe bandwidth crossed its high or low threshold (mlx5, Linux 6.17 on: "
    "90% and 75% by default, devlink pcie_cong_*), inbound (to host memory) or outbound: high "
    "above low means congested now.",
    {"interface", "direction", "level"}};

inline constexpr Family kPcieCongested{
    "nodewatch_nic_pcie_congested",
    MetricType::kGauge,
    "",
    "1 while the device's PCIe bandwidth is above its high threshold and has not yet fallen below "
    "its low one (its high crossings outnumber its low ones: mlx5, Linux 6.17 on), inbound or "
    "outbound; else 0.",
    {"interface", "direction"}};

inline constexpr Family kReceiveBufferAlmostFullTotal{
    "nodewatch_nic_receive_buffer_almost_full_total",
    MetricType::kCounter,
    "",
    "Times the port's receive buffer passed 85% full (mlx5 rx_buffer_passed_thres_phy).",
    {"interface"}};

inline constexpr Family kPriorityDiscardsTotal{
    "nodewatch_nic_priority_discards_total",
    MetricType::kCounter,
    "",
    "Packets the port discarded per priority, for want of a receive buffer for the host "
    "(no_buffer) or by its congestion control (congestion: WRED) (mlx5 rx_prio<p>_buf_discard, "
    "_cong_discard); a priority once it carried traffic, had PFC or counted one.",
    {"interface", "priority", "reason"}};

inline constexpr Family kEcnMarkedPacketsTotal{
    "nodewatch_nic_ecn_marked_packets_total",
    MetricType::kCounter,
    "",
    "Packets the port marked with ECN for the host's congestion, per priority (mlx5 "
    "rx_prio<p>_marked); a priority once it carried traffic, had PFC or counted one.",
    {"interface", "priority"}};

inline constexpr Family kFecCorrectedBitErrorsTotal{
    "nodewatch_nic_fec_corrected_bit_errors_total",
    MetricType::kCounter,
    "",
    "Bits the port's FEC corrected (mlx5 rx_corrected_bits_phy): over the bits the line carried, "
    "the pre-FEC bit error rate.",
    {"interface"}};

inline constexpr Family kPostFecSymbolErrorsTotal{
    "nodewatch_nic_post_fec_symbol_errors_total",
    MetricType::kCounter,
    "",
    "Symbol errors the port's FEC did not correct, or all of them with FEC off (mlx5 "
    "rx_pcs_symbol_err_phy): over the bits the line carried, the post-FEC bit error rate.",
    {"interface"}};

inline constexpr Family kLinkDownEventsTotal{
    "nodewatch_nic_link_down_events_total",
    MetricType::kCounter,
    "",
    "Times the port's physical link went down (mlx5 link_down_events_phy).",
    {"interface"}};

inline constexpr Family kModuleEventsTotal{
    "nodewatch_nic_module_events_total",
    MetricType::kCounter,
    "",
    "Events of the port's cable or transceiver module: unplug, bus_stuck (its I2C bus shorted), "
    "high_temp, bad_shorted (a shorted cable) (mlx5 module_*).",
    {"interface", "event"}};

inline constexpr Family kFecCorrectedBlocksTotal{
    "nodewatch_nic_fec_corrected_blocks_total",
    MetricType::kCounter,
    "",
    "FEC blocks with errors corrected (ethtool standard FEC statistics).",
    {"interface"}};

inline constexpr Family kFecUncorrectableBlocksTotal{
    "nodewatch_nic_fec_uncorrectable_blocks_total",
    MetricType::kCounter,
    "",
    "FEC blocks with errors that could not be corrected.",
    {"interface"}};

inline constexpr Family kDriverCountersTotal{
    "nodewatch_nic_driver_counters_total",
    MetricType::kCounter,
    "",
    "Other allow-listed driver statistics (ethtool -S), by the driver's own name.",
    {"interface", "counter"}};

inline constexpr Family kTcpRetransmittedSegmentsTotal{
    "nodewatch_nic_tcp_retransmitted_segments_total",
    MetricType::kCounter,
    "",
    "TCP segments retransmitted (Tcp RetransSegs in /proc/net/snmp).",
    {}};

inline constexpr Family kTcpTimeoutsTotal{
    "nodewatch_nic_tcp_timeouts_total",
    MetricType::kCounter,
    "",
    "TCP retransmission timeouts (TcpExt TCPTimeouts in /proc/net/netstat).",
    {}};

inline constexpr Family kTcpSynRetransmitsTotal{
    "nodewatch_nic_tcp_syn_retransmits_total",
    MetricType::kCounter,
    "",
    "TCP SYN and SYN-ACK retransmissions (TcpExt TCPSynRetrans).",
    {}};

inline constexpr Family kTcpListenOverflowsTotal{
    "nodewatch_nic_tcp_listen_overflows_total",
    MetricType::kCounter,
    "",
    "Connections dropped because a listen queue was full (TcpExt ListenOverflows).",
    {}};

inline constexpr Family kTcpListenDropsTotal{
    "nodewatch_nic_tcp_listen_drops_total",
    MetricType::kCounter,
    "",
    "Connection requests dropped by a listening socket for any reason (TcpExt ListenDrops).",
    {}};

inline constexpr Family kTcpReceiveQueueDropsTotal{
    "nodewatch_nic_tcp_receive_queue_drops_total",
    MetricType::kCounter,
    "",
    "TCP segments dropped because the socket receive buffer was full (TcpExt TCPRcvQDrop).",
    {}};

inline constexpr Family kTcpInputErrorsTotal{
    "nodewatch_nic_tcp_input_errors_total",
    MetricType::kCounter,
    "",
    "TCP segments received in error, e.g. bad checksum (Tcp InErrs).",
    {}};

inline constexpr Family kUdpReceiveBufferErrorsTotal{
    "nodewatch_nic_udp_receive_buffer_errors_total",
    MetricType::kCounter,
    "",
    "UDP datagrams dropped because the socket receive buffer was full (Udp RcvbufErrors).",
    {}};

inline constexpr Family kUdpInputErrorsTotal{
    "nodewatch_nic_udp_input_errors_total",
    MetricType::kCounter,
    "",
    "UDP datagrams received in error, including receive buffer errors (Udp InErrors).",
    {}};

inline constexpr Family kIpInputErrorsTotal{
    "nodewatch_nic_ip_input_errors_total",
    MetricType::kCounter,
    "",
    "IPv4 datagrams discarded for header or address errors (Ip InHdrErrors + InAddrErrors).",
    {}};

}  // namespace nodewatch::nic::families
