#pragma once
// The metric families the storage collector emits: each declared once, here. The collector's table
// is built from these and it emits through them; whatever else reads a family (the node verdict,
// the expect file, docs/metrics.md) refers to the constant.

#include "nodewatch/metric.hpp"

namespace nodewatch::storage::families {

inline constexpr Family kReadsCompletedTotal{"nodewatch_storage_reads_completed_total",
                                             MetricType::kCounter,
                                             "",
                                             "Reads completed successfully (diskstats field 1).",
                                             {"device"}};

inline constexpr Family kReadsMergedTotal{
    "nodewatch_storage_reads_merged_total",
    MetricType::kCounter,
    "",
    "Reads merged with an adjacent read before reaching the device (field 2).",
    {"device"}};

inline constexpr Family kReadBytesTotal{"nodewatch_storage_read_bytes_total",
                                        MetricType::kCounter,
                                        "bytes",
                                        "Bytes read successfully (field 3, 512-byte sectors).",
                                        {"device"}};

inline constexpr Family kReadTimeSecondsTotal{
    "nodewatch_storage_read_time_seconds_total",
    MetricType::kCounter,
    "seconds",
    "Time spent by all reads (field 4); over the rate of reads completed, its rate is the average "
    "read latency.",
    {"device"}};

inline constexpr Family kWritesCompletedTotal{"nodewatch_storage_writes_completed_total",
                                              MetricType::kCounter,
                                              "",
                                              "Writes completed successfully (diskstats field 5).",
                                              {"device"}};

inline constexpr Family kWritesMergedTotal{
    "nodewatch_storage_writes_merged_total",
    MetricType::kCounter,
    "",
    "Writes merged with an adjacent write before reaching the device (field 6).",
    {"device"}};

inline constexpr Family kWrittenBytesTotal{
    "nodewatch_storage_written_bytes_total",
    MetricType::kCounter,
    "bytes",
    "Bytes written successfully (field 7, 512-byte sectors).",
    {"device"}};

inline constexpr Family kWriteTimeSecondsTotal{
    "nodewatch_storage_write_time_seconds_total",
    MetricType::kCounter,
    "seconds",
    "Time spent by all writes (field 8); over the rate of writes completed, its rate is the "
    "average write latency.",
    {"device"}};

inline constexpr Family kIoInProgress{"nodewatch_storage_io_in_progress",
                                      MetricType::kGauge,
                                      "",
                                      "I/Os issued to the device and not yet completed (field 9).",
                                      {"device"}};

inline constexpr Family kIoTimeSecondsTotal{
    "nodewatch_storage_io_time_seconds_total",
    MetricType::kCounter,
    "seconds",
    "Time with at least one I/O in progress (field 10); its rate is the device utilisation.",
    {"device"}};

inline constexpr Family kIoTimeWeightedSecondsTotal{
    "nodewatch_storage_io_time_weighted_seconds_total",
    MetricType::kCounter,
    "seconds",
    "I/O time weighted by the I/Os in progress (field 11); its rate is the average queue length.",
    {"device"}};

inline constexpr Family kDiscardsCompletedTotal{
    "nodewatch_storage_discards_completed_total",
    MetricType::kCounter,
    "",
    "Discards completed successfully (field 12, kernel 4.18+).",
    {"device"}};

inline constexpr Family kDiscardsMergedTotal{
    "nodewatch_storage_discards_merged_total",
    MetricType::kCounter,
    "",
    "Discards merged with an adjacent discard (field 13, kernel 4.18+).",
    {"device"}};

inline constexpr Family kDiscardedBytesTotal{
    "nodewatch_storage_discarded_bytes_total",
    MetricType::kCounter,
    "bytes",
    "Bytes discarded successfully (field 14, 512-byte sectors, kernel 4.18+).",
    {"device"}};

inline constexpr Family kDiscardTimeSecondsTotal{
    "nodewatch_storage_discard_time_seconds_total",
    MetricType::kCounter,
    "seconds",
    "Time spent by all discards (field 15, kernel 4.18+).",
    {"device"}};

inline constexpr Family kFlushesCompletedTotal{
    "nodewatch_storage_flushes_completed_total",
    MetricType::kCounter,
    "",
    "Flush requests completed by the device (field 16, kernel 5.5+; 0 on partitions).",
    {"device"}};

inline constexpr Family kFlushTimeSecondsTotal{
    "nodewatch_storage_flush_time_seconds_total",
    MetricType::kCounter,
    "seconds",
    "Time spent by all flush requests (field 17, kernel 5.5+).",
    {"device"}};

inline constexpr Family kDeviceInfo{
    "nodewatch_storage_device_info",
    MetricType::kGauge,
    "",
    "Facts about a block device from sysfs, value 1; a label is empty when sysfs does not have it.",
    {"device", "model", "serial", "rotational"}};

inline constexpr Family kQueueDepth{
    "nodewatch_storage_queue_depth",
    MetricType::kGauge,
    "",
    "Requests the block layer may queue for the device (queue/nr_requests).",
    {"device"}};

inline constexpr Family kLogicalBlockSizeBytes{
    "nodewatch_storage_logical_block_size_bytes",
    MetricType::kGauge,
    "bytes",
    "Smallest unit the device can address (queue/logical_block_size).",
    {"device"}};

inline constexpr Family kNfsOperationsTotal{
    "nodewatch_storage_nfs_operations_total",
    MetricType::kCounter,
    "",
    "NFS operations of this type completed by the client (mountstats per-op field 1).",
    {"mountpoint", "export", "op"}};

inline constexpr Family kNfsTransmissionsTotal{
    "nodewatch_storage_nfs_transmissions_total",
    MetricType::kCounter,
    "",
    "RPC transmissions of this operation, retransmissions included (field 2).",
    {"mountpoint", "export", "op"}};

inline constexpr Family kNfsMajorTimeoutsTotal{
    "nodewatch_storage_nfs_major_timeouts_total",
    MetricType::kCounter,
    "",
    "Major timeouts of this operation: the server did not answer within retrans tries (field 3).",
    {"mountpoint", "export", "op"}};

inline constexpr Family kNfsSentBytesTotal{
    "nodewatch_storage_nfs_sent_bytes_total",
    MetricType::kCounter,
    "bytes",
    "Bytes sent for this operation, RPC headers included (field 4).",
    {"mountpoint", "export", "op"}};

inline constexpr Family kNfsReceivedBytesTotal{
    "nodewatch_storage_nfs_received_bytes_total",
    MetricType::kCounter,
    "bytes",
    "Bytes received for this operation, RPC headers included (field 5).",
    {"mountpoint", "export", "op"}};

inline constexpr Family kNfsQueueSecondsTotal{
    "nodewatch_storage_nfs_queue_seconds_total",
    MetricType::kCounter,
    "seconds",
    "Time requests of this operation waited in the client before transmission (field 6).",
    {"mountpoint", "export", "op"}};

inline constexpr Family kNfsRttSecondsTotal{
    "nodewatch_storage_nfs_rtt_seconds_total",
    MetricType::kCounter,
    "seconds",
    "Round-trip time from transmission to reply (field 7); over the rate of operations, its rate "
    "is the average server latency.",
    {"mountpoint", "export", "op"}};

inline constexpr Family kNfsExecuteSecondsTotal{
    "nodewatch_storage_nfs_execute_seconds_total",
    MetricType::kCounter,
    "seconds",
    "Time from the request's creation to its completion, queueing included (field 8).",
    {"mountpoint", "export", "op"}};

inline constexpr Family kNfsErrorsTotal{"nodewatch_storage_nfs_errors_total",
                                        MetricType::kCounter,
                                        "",
                                        "Operations of this type that ended in an error (per-op "
                                        "field 9, Linux 5.3+; absent on older kernels).",
                                        {"mountpoint", "export", "op"}};

inline constexpr Family kNfsTransportRetransmitsTotal{
    "nodewatch_storage_nfs_transport_retransmits_total",
    MetricType::kCounter,
    "",
    "RPC retransmissions on the mount: transmissions minus operations, summed over every operation "
    "type.",
    {"mountpoint", "export"}};

inline constexpr Family kNfsTransportSendsTotal{
    "nodewatch_storage_nfs_transport_sends_total",
    MetricType::kCounter,
    "",
    "RPC requests sent on the mount's transport (mountstats xprt sends).",
    {"mountpoint", "export"}};

inline constexpr Family kNfsTransportReceivesTotal{
    "nodewatch_storage_nfs_transport_receives_total",
    MetricType::kCounter,
    "",
    "RPC replies received on the mount's transport (xprt recvs).",
    {"mountpoint", "export"}};

inline constexpr Family kNfsTransportBadXidsTotal{
    "nodewatch_storage_nfs_transport_bad_xids_total",
    MetricType::kCounter,
    "",
    "Replies that matched no outstanding request (xprt bad_xids).",
    {"mountpoint", "export"}};

inline constexpr Family kNfsTransportConnectsTotal{
    "nodewatch_storage_nfs_transport_connects_total",
    MetricType::kCounter,
    "",
    "Connections made by the mount's transport (xprt connect_count; absent for udp).",
    {"mountpoint", "export"}};

inline constexpr Family kNfsMountInfo{"nodewatch_storage_nfs_mount_info",
                                      MetricType::kGauge,
                                      "",
                                      "An NFS mount seen in mountstats, value 1; version from opts "
                                      "vers=, protocol from the xprt line.",
                                      {"mountpoint", "export", "server", "protocol", "version"}};

inline constexpr Family kProbeDurationSeconds{
    "nodewatch_storage_probe_duration_seconds",
    MetricType::kHistogram,
    "seconds",
    "Duration of the probe's file-system operations on the path.",
    {"path", "operation"}};

inline constexpr Family kProbeSuccess{
    "nodewatch_storage_probe_success",
    MetricType::kGauge,
    "",
    "1 when the last operation of this kind succeeded within the probe's timeout, else 0.",
    {"path", "operation"}};

inline constexpr Family kProbeErrorsTotal{
    "nodewatch_storage_probe_errors_total",
    MetricType::kCounter,
    "",
    "Failed probe operations by errno name (ETIMEDOUT: it returned after the probe's timeout).",
    {"path", "operation", "errno"}};

inline constexpr Family kProbeStuck{
    "nodewatch_storage_probe_stuck",
    MetricType::kGauge,
    "",
    "1 while a probe operation has been blocked in the file system longer than its timeout.",
    {"path"}};

inline constexpr Family kProbeLastSuccessTimestampSeconds{
    "nodewatch_storage_probe_last_success_timestamp_seconds",
    MetricType::kGauge,
    "seconds",
    "Unix time of the last successful probe operation of this kind.",
    {"path", "operation"}};

inline constexpr Family kProbeAbandonedHelpers{
    "nodewatch_storage_probe_abandoned_helpers",
    MetricType::kGauge,
    "",
    "Probe helper processes abandoned after their timeout that are still alive: held by the kernel "
    "in a call on a hung mount (state D).",
    {}};

}  // namespace nodewatch::storage::families
