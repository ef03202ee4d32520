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
#include "storage/storage_metrics.hpp"
#include "storage/units.hpp"

namespace nodewatch::storage {
namespace {

// Per mount and operation, from the per-op lines of mountstats.
struct NfsOpMetric {
  std::uint64_t NfsOpStats::*field;
  Conversion conversion;
  const Family& family;
};

constexpr std::array<NfsOpMetric, 8> kNfsOpMetrics = {{
    {&NfsOpStats::operations, Conversion::kNone, families::kNfsOperationsTotal},
    {&NfsOpStats::transmissions, Conversion::kNone, families::kNfsTransmissionsTotal},
    {&NfsOpStats::major_timeouts, Conversion::kNone, families::kNfsMajorTimeoutsTotal},
    {&NfsOpStats::sent_bytes, Conversion::kNone, families::kNfsSentBytesTotal},
    {&NfsOpStats::received_bytes, Conversion::kNone, families::kNfsReceivedBytesTotal},
    {&NfsOpStats::queue_ms, Conversion::kMillisToSeconds, families::kNfsQueueSecondsTotal},
    {&NfsOpStats::rtt_ms, Conversion::kMillisToSeconds, families::kNfsRttSecondsTotal},
    {&NfsOpStats::execute_ms, Conversion::kMillisToSeconds, families::kNfsExecuteSecondsTotal},
}};

struct NfsTransportMetric {
  std::uint64_t NfsTransport::*field;
  const Family& family;
};
constexpr std::array<NfsTransportMetric, 4> kNfsTransportMetrics = {{
    {&NfsTransport::sends, families::kNfsTransportSendsTotal},
    {&NfsTransport::receives, families::kNfsTransportReceivesTotal},
    {&NfsTransport::bad_xids, families::kNfsTransportBadXidsTotal},
    {&NfsTransport::connects, families::kNfsTransportConnectsTotal},
}};

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
  for (const NfsOpMetric& m : kNfsOpMetrics) descs.push_back(describe(m.family));
  descs.push_back(describe(families::kNfsErrorsTotal));
  descs.push_back(describe(families::kNfsTransportRetransmitsTotal));
  for (const NfsTransportMetric& m : kNfsTransportMetrics) descs.push_back(describe(m.family));
  descs.push_back(describe(families::kNfsMountInfo));
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
    out.add(families::kNfsMountInfo,
            {mountpoint, export_name, text::label_value(m.server),
             text::label_value(m.transport.protocol), text::label_value(m.version)},
            1.0);
    std::uint64_t retransmits = 0;
    for (const NfsOpStats& op : m.ops) {
      if (op.transmissions > op.operations) retransmits += op.transmissions - op.operations;
      if (!std::binary_search(operations_.begin(), operations_.end(), op.name)) continue;
      if (!is_valid_utf8(op.name)) continue;
      for (const NfsOpMetric& metric : kNfsOpMetrics) {
        out.add(metric.family, {mountpoint, export_name, op.name},
                convert(op.*metric.field, metric.conversion));
      }
      if (op.has_errors) {
        out.add(families::kNfsErrorsTotal, {mountpoint, export_name, op.name},
                static_cast<double>(op.errors));
      }
    }
    out.add(families::kNfsTransportRetransmitsTotal, {mountpoint, export_name},
            static_cast<double>(retransmits));
    const std::string& protocol = m.transport.protocol;
    if (protocol == "tcp" || protocol == "rdma" || protocol == "udp") {
      for (const NfsTransportMetric& metric : kNfsTransportMetrics) {
        if (protocol == "udp" && metric.field == &NfsTransport::connects) continue;
        out.add(metric.family, {mountpoint, export_name},
                static_cast<double>(m.transport.*metric.field));
      }
    }
  }
}

}  // namespace nodewatch::storage
