#include "storage/nfs_mounts.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <set>
#include <string_view>
#include <utility>

#include "nodewatch/text.hpp"
#include "storage/block_devices.hpp"
#include "storage/mountstats.hpp"
#include "storage/units.hpp"

namespace nodewatch::storage {
namespace {

// Per mount and operation, from the per-op lines of mountstats.
struct NfsOpMetric {
  std::uint64_t NfsOpStats::*field;
  Conversion conversion;
  std::string_view name;
  std::string_view unit;
  std::string_view help;
};

constexpr std::array<NfsOpMetric, 8> kNfsOpMetrics = {{
    {&NfsOpStats::operations, Conversion::kNone, "nodewatch_storage_nfs_operations_total", "",
     "NFS operations of this type completed by the client (mountstats per-op field 1)."},
    {&NfsOpStats::transmissions, Conversion::kNone, "nodewatch_storage_nfs_transmissions_total", "",
     "RPC transmissions of this operation, retransmissions included (field 2)."},
    {&NfsOpStats::major_timeouts, Conversion::kNone, "nodewatch_storage_nfs_major_timeouts_total",
     "",
     "Major timeouts of this operation: the server did not answer within retrans tries (field 3)."},
    {&NfsOpStats::sent_bytes, Conversion::kNone, "nodewatch_storage_nfs_sent_bytes_total", "bytes",
     "Bytes sent for this operation, RPC headers included (field 4)."},
    {&NfsOpStats::received_bytes, Conversion::kNone, "nodewatch_storage_nfs_received_bytes_total",
     "bytes", "Bytes received for this operation, RPC headers included (field 5)."},
    {&NfsOpStats::queue_ms, Conversion::kMillisToSeconds,
     "nodewatch_storage_nfs_queue_seconds_total", "seconds",
     "Time requests of this operation waited in the client before transmission (field 6)."},
    {&NfsOpStats::rtt_ms, Conversion::kMillisToSeconds, "nodewatch_storage_nfs_rtt_seconds_total",
     "seconds",
     "Round-trip time from transmission to reply (field 7); over the rate of operations, its "
     "rate is the average server latency."},
    {&NfsOpStats::execute_ms, Conversion::kMillisToSeconds,
     "nodewatch_storage_nfs_execute_seconds_total", "seconds",
     "Time from the request's creation to its completion, queueing included (field 8)."},
}};
constexpr std::string_view kNfsErrors = "nodewatch_storage_nfs_errors_total";

struct NfsTransportMetric {
  std::uint64_t NfsTransport::*field;
  std::string_view name;
  std::string_view help;
};
constexpr std::string_view kNfsRetransmits = "nodewatch_storage_nfs_transport_retransmits_total";
constexpr std::array<NfsTransportMetric, 4> kNfsTransportMetrics = {{
    {&NfsTransport::sends, "nodewatch_storage_nfs_transport_sends_total",
     "RPC requests sent on the mount's transport (mountstats xprt sends)."},
    {&NfsTransport::receives, "nodewatch_storage_nfs_transport_receives_total",
     "RPC replies received on the mount's transport (xprt recvs)."},
    {&NfsTransport::bad_xids, "nodewatch_storage_nfs_transport_bad_xids_total",
     "Replies that matched no outstanding request (xprt bad_xids)."},
    {&NfsTransport::connects, "nodewatch_storage_nfs_transport_connects_total",
     "Connections made by the mount's transport (xprt connect_count; absent for udp)."},
}};
constexpr std::string_view kNfsMountInfo = "nodewatch_storage_nfs_mount_info";

}  // namespace

NfsMounts::NfsMounts(const Roots& roots, std::string mountstats,
                     std::vector<std::string> operations, std::size_t max_held)
    : files_(roots.proc(), max_held),
      mountstats_(std::move(mountstats)),
      operations_(std::move(operations)),
      mounts_(
          (roots.procfs / std::filesystem::path(mountstats_).parent_path() / "mountinfo").string()),
      watch_(roots.faults == nullptr) {  // injected faults: every collection reads
  std::sort(operations_.begin(), operations_.end());
}

std::vector<MetricDesc> NfsMounts::metric_descs() {
  std::vector<MetricDesc> descs;
  const std::vector<std::string> op_labels = {"mountpoint", "export", "op"};
  for (const NfsOpMetric& m : kNfsOpMetrics) {
    descs.push_back(MetricDesc{std::string(m.name), MetricType::kCounter, std::string(m.unit),
                               std::string(m.help), op_labels});
  }
  descs.push_back(MetricDesc{std::string(kNfsErrors), MetricType::kCounter, "",
                             "Operations of this type that ended in an error (per-op field 9, "
                             "Linux 5.3+; absent on older kernels).",
                             op_labels});
  const std::vector<std::string> mount_labels = {"mountpoint", "export"};
  descs.push_back(MetricDesc{std::string(kNfsRetransmits), MetricType::kCounter, "",
                             "RPC retransmissions on the mount: transmissions minus operations, "
                             "summed over every operation type.",
                             mount_labels});
  for (const NfsTransportMetric& m : kNfsTransportMetrics) {
    descs.push_back(MetricDesc{std::string(m.name), MetricType::kCounter, "", std::string(m.help),
                               mount_labels});
  }
  descs.push_back(MetricDesc{std::string(kNfsMountInfo),
                             MetricType::kGauge,
                             "",
                             "An NFS mount seen in mountstats, value 1; version from opts vers=, "
                             "protocol from the xprt line.",
                             {"mountpoint", "export", "server", "protocol", "version"}});
  return descs;
}

void NfsMounts::collect(const CollectContext&, MetricSink& out) {
  // Asked before the read: a mount made while it runs shows next time.
  const bool changed = !watch_ || mounts_.changed();
  if (none_ && !changed) return;  // no NFS mount then, none now
  none_ = false;
  files_.begin_cycle();
  sources::Read r = files_.read(mountstats_, kMaxProcFileBytes);
  files_.end_cycle();
  ++reads_;
  if (r.failed()) out.error("mountstats_read_error", mountstats_, r.error_name());
  if (!r.ok()) return;
  MountstatsResult parsed = parse_mountstats(r.text);
  if (parsed.malformed > 0) out.error("mountstats_parse_error", parsed.malformed);
  if (parsed.skipped_op_lines > 0) out.error("mountstats_short_op_line", parsed.skipped_op_lines);
  none_ = parsed.mounts.empty() && parsed.malformed == 0 && parsed.skipped_op_lines == 0;
  // A path mounted over shadows the earlier mount: keep the last one.
  std::set<std::string, std::less<>> seen;
  for (auto it = parsed.mounts.rbegin(); it != parsed.mounts.rend(); ++it) {
    const NfsMount& m = *it;
    std::string mountpoint = text::label_value(m.mountpoint);
    std::string export_name = text::label_value(m.export_name);
    if (!seen.insert(mountpoint).second) continue;
    out.add(kNfsMountInfo,
            {mountpoint, export_name, text::label_value(m.server),
             text::label_value(m.transport.protocol), text::label_value(m.version)},
            1.0);
    std::uint64_t retransmits = 0;
    for (const NfsOpStats& op : m.ops) {
      if (op.transmissions > op.operations) retransmits += op.transmissions - op.operations;
      if (!std::binary_search(operations_.begin(), operations_.end(), op.name)) continue;
      if (!is_valid_utf8(op.name)) continue;
      for (const NfsOpMetric& metric : kNfsOpMetrics) {
        out.add(metric.name, {mountpoint, export_name, op.name},
                convert(op.*metric.field, metric.conversion));
      }
      if (op.has_errors) {
        out.add(kNfsErrors, {mountpoint, export_name, op.name}, static_cast<double>(op.errors));
      }
    }
    out.add(kNfsRetransmits, {mountpoint, export_name}, static_cast<double>(retransmits));
    const std::string& protocol = m.transport.protocol;
    if (protocol == "tcp" || protocol == "rdma" || protocol == "udp") {
      for (const NfsTransportMetric& metric : kNfsTransportMetrics) {
        if (protocol == "udp" && metric.field == &NfsTransport::connects) continue;
        out.add(metric.name, {mountpoint, export_name},
                static_cast<double>(m.transport.*metric.field));
      }
    }
  }
}

}  // namespace nodewatch::storage
