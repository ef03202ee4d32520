#include "storage/block_devices.hpp"

#include <array>
#include <string_view>
#include <system_error>
#include <utility>

#include "nodewatch/text.hpp"
#include "storage/units.hpp"

namespace nodewatch::storage {
namespace {

// One row per exported diskstats statistic: the metric is declared here and
// nowhere else; both the declarations and the emission loop are built from it.
struct StatMetric {
  DiskStat stat;
  Conversion conversion;
  MetricType type;
  std::string_view name;
  std::string_view unit;
  std::string_view help;
};

constexpr std::array<StatMetric, kDiskStatCount> kStatMetrics = {{
    {kReadsCompleted, Conversion::kNone, MetricType::kCounter,
     "nodewatch_storage_reads_completed_total", "",
     "Reads completed successfully (diskstats field 1)."},
    {kReadsMerged, Conversion::kNone, MetricType::kCounter, "nodewatch_storage_reads_merged_total",
     "", "Reads merged with an adjacent read before reaching the device (field 2)."},
    {kSectorsRead, Conversion::kSectorsToBytes, MetricType::kCounter,
     "nodewatch_storage_read_bytes_total", "bytes",
     "Bytes read successfully (field 3, 512-byte sectors)."},
    {kReadTimeMs, Conversion::kMillisToSeconds, MetricType::kCounter,
     "nodewatch_storage_read_time_seconds_total", "seconds",
     "Time spent by all reads (field 4); over the rate of reads completed, its rate is the "
     "average read latency."},
    {kWritesCompleted, Conversion::kNone, MetricType::kCounter,
     "nodewatch_storage_writes_completed_total", "",
     "Writes completed successfully (diskstats field 5)."},
    {kWritesMerged, Conversion::kNone, MetricType::kCounter,
     "nodewatch_storage_writes_merged_total", "",
     "Writes merged with an adjacent write before reaching the device (field 6)."},
    {kSectorsWritten, Conversion::kSectorsToBytes, MetricType::kCounter,
     "nodewatch_storage_written_bytes_total", "bytes",
     "Bytes written successfully (field 7, 512-byte sectors)."},
    {kWriteTimeMs, Conversion::kMillisToSeconds, MetricType::kCounter,
     "nodewatch_storage_write_time_seconds_total", "seconds",
     "Time spent by all writes (field 8); over the rate of writes completed, its rate is the "
     "average write latency."},
    {kIoInProgress, Conversion::kNone, MetricType::kGauge, "nodewatch_storage_io_in_progress", "",
     "I/Os issued to the device and not yet completed (field 9)."},
    {kIoTimeMs, Conversion::kMillisToSeconds, MetricType::kCounter,
     "nodewatch_storage_io_time_seconds_total", "seconds",
     "Time with at least one I/O in progress (field 10); its rate is the device utilisation."},
    {kIoWeightedTimeMs, Conversion::kMillisToSeconds, MetricType::kCounter,
     "nodewatch_storage_io_time_weighted_seconds_total", "seconds",
     "I/O time weighted by the I/Os in progress (field 11); its rate is the average queue "
     "length."},
    {kDiscardsCompleted, Conversion::kNone, MetricType::kCounter,
     "nodewatch_storage_discards_completed_total", "",
     "Discards completed successfully (field 12, kernel 4.18+)."},
    {kDiscardsMerged, Conversion::kNone, MetricType::kCounter,
     "nodewatch_storage_discards_merged_total", "",
     "Discards merged with an adjacent discard (field 13, kernel 4.18+)."},
    {kSectorsDiscarded, Conversion::kSectorsToBytes, MetricType::kCounter,
     "nodewatch_storage_discarded_bytes_total", "bytes",
     "Bytes discarded successfully (field 14, 512-byte sectors, kernel 4.18+)."},
    {kDiscardTimeMs, Conversion::kMillisToSeconds, MetricType::kCounter,
     "nodewatch_storage_discard_time_seconds_total", "seconds",
     "Time spent by all discards (field 15, kernel 4.18+)."},
    {kFlushesCompleted, Conversion::kNone, MetricType::kCounter,
     "nodewatch_storage_flushes_completed_total", "",
     "Flush requests completed by the device (field 16, kernel 5.5+; 0 on partitions)."},
    {kFlushTimeMs, Conversion::kMillisToSeconds, MetricType::kCounter,
     "nodewatch_storage_flush_time_seconds_total", "seconds",
     "Time spent by all flush requests (field 17, kernel 5.5+)."},
}};

constexpr std::string_view kDeviceInfo = "nodewatch_storage_device_info";
constexpr std::string_view kQueueDepth = "nodewatch_storage_queue_depth";
constexpr std::string_view kLogicalBlockSize = "nodewatch_storage_logical_block_size_bytes";

constexpr std::string_view kDiskstats = "diskstats";

// The serial, first found of: the NVMe controller's device/serial (device/
// is the controller), virtio-blk's serial; SCSI/SATA disks have no serial
// attribute, so their VPD page 0x83 identifier (device/wwid) stands in, then
// the NVMe namespace's wwid. (dm, md, loop and virtio-blk have no
// device/model either.)
constexpr std::array<std::string_view, 4> kSerialAttributes = {"device/serial", "serial",
                                                               "device/wwid", "wwid"};

std::string describe(int err) {
  return sources::errno_name(err) + " (" + std::generic_category().message(err) + ")";
}

}  // namespace

BlockDevices::BlockDevices(const Roots& roots, const sources::NameFilterSpec& filter,
                           std::shared_ptr<sources::WrapCounters> counters, std::size_t max_held)
    : sys_(roots.sys()),
      diskstats_(roots.proc(), max_held),
      attributes_(roots.sys(), max_held),
      filter_(filter),
      counters_(counters ? std::move(counters) : std::make_shared<sources::WrapCounters>()) {}

std::vector<MetricDesc> BlockDevices::metric_descs() {
  std::vector<MetricDesc> descs;
  for (const StatMetric& m : kStatMetrics) {
    descs.push_back(MetricDesc{
        std::string(m.name), m.type, std::string(m.unit), std::string(m.help), {"device"}});
  }
  descs.push_back(MetricDesc{std::string(kDeviceInfo),
                             MetricType::kGauge,
                             "",
                             "Facts about a block device from sysfs, value 1; a label is empty "
                             "when sysfs does not have it.",
                             {"device", "model", "serial", "rotational"}});
  descs.push_back(MetricDesc{std::string(kQueueDepth),
                             MetricType::kGauge,
                             "",
                             "Requests the block layer may queue for the device "
                             "(queue/nr_requests).",
                             {"device"}});
  descs.push_back(MetricDesc{std::string(kLogicalBlockSize),
                             MetricType::kGauge,
                             "bytes",
                             "Smallest unit the device can address (queue/logical_block_size).",
                             {"device"}});
  return descs;
}

sources::Status BlockDevices::read_attribute(std::string_view name, const Device& dev,
                                             std::string_view rel, std::string* value,
                                             MetricSink& out) {
  std::string path = dev.dir;
  path.push_back('/');
  path.append(rel);
  sources::Read r = sys_.read(path);
  if (r.ok()) {
    *value = std::string(r.value());
  } else if (r.failed()) {
    out.error("read_error", name, r.error_name() + " reading " + std::string(rel));
    devices_.invalidate(name);  // read the facts again next time
  }
  return r.status;
}

BlockDevices::Sysfs BlockDevices::read_facts(std::string_view name, Device& dev, MetricSink& out) {
  dev.facts = Facts{};
  if (dev.dir.empty()) return Sysfs::kOk;
  Facts f;
  std::string raw;
  auto read = [&](std::string_view rel) {
    raw.clear();
    return read_attribute(name, dev, rel, &raw, out);
  };
  using sources::Status;
  if (read("device/model") == Status::kGone) return Sysfs::kGone;
  f.model = text::label_value(raw);
  for (std::string_view rel : kSerialAttributes) {
    Status s = read(rel);
    if (s == Status::kGone) return Sysfs::kGone;
    f.serial = text::label_value(raw);
    // One that failed ends the search: the next one would give the device
    // another serial label until this one answers again.
    if (!f.serial.empty() || s == Status::kError) break;
  }
  if (read("queue/rotational") == Status::kGone) return Sysfs::kGone;
  f.rotational = text::label_value(raw);
  Status s = read("queue/logical_block_size");
  if (s == Status::kGone) return Sysfs::kGone;
  if (s == Status::kOk) {
    f.logical_block_size = parse_attribute_uint(raw);
    if (!f.logical_block_size) {
      out.error("parse_error", name,
                "queue/logical_block_size: \"" + text::label_value(raw) + "\"");
    }
  }
  dev.facts = std::move(f);
  return Sysfs::kOk;
}

void BlockDevices::collect(const CollectContext& ctx, MetricSink& out) {
  diskstats_.begin_cycle();
  sources::Read stats = diskstats_.read(std::string(kDiskstats), kMaxProcFileBytes);
  diskstats_.end_cycle();
  if (!stats.ok()) {
    throw CollectError("read_error", "cannot read " + diskstats_.root().full(kDiskstats) + ": " +
                                         describe(stats.err));
  }
  ++cycle_;
  devices_.begin_cycle();
  counters_->begin_cycle();
  attributes_.begin_cycle();
  bool complete = true;
  std::string_view text = stats.text;
  while (!text.empty()) {
    std::string_view raw_line = next_line(text);
    if (is_blank(raw_line)) continue;
    if (ctx.should_stop()) {
      complete = false;
      break;
    }
    std::optional<DiskStatsLine> line = parse_diskstats_line(raw_line);
    if (!line || !is_valid_utf8(line->name)) {
      out.error("parse_error");
      continue;
    }
    const std::string_view name = line->name;
    auto seen = devices_.see(name);
    Device& dev = seen.entry;
    if (dev.known && dev.cycle == cycle_) {
      out.error("duplicate_device", name);
      continue;
    }
    bool refresh = seen.refresh;
    if (!dev.known || dev.major != line->major || dev.minor != line->minor) {
      // A new device, or the name now belongs to another device (removed and
      // created again with a new minor): its counters start afresh.
      dev = Device{};
      dev.known = true;
      dev.major = line->major;
      dev.minor = line->minor;
      dev.selected = filter_.matches(name);
      std::string dir = sysfs_block_name(name);
      if (!dir.empty()) dev.dir = "block/" + dir;
      dev.counter_key.assign(name).append(" ");
      dev.counter_key.append(std::to_string(dev.major)).append(":");
      dev.counter_key.append(std::to_string(dev.minor)).append(" ");
      refresh = true;
    }
    dev.cycle = cycle_;
    if (!dev.selected) continue;
    if (refresh && read_facts(name, dev, out) == Sysfs::kGone) {
      devices_.forget(name);  // went away under the read
      continue;
    }
    std::optional<std::uint64_t> depth;
    if (!dev.dir.empty()) {
      sources::Read q = attributes_.read(dev.dir + "/queue/nr_requests");
      if (q.status == sources::Status::kGone) {
        devices_.forget(name);
        continue;
      }
      if (q.ok()) {
        depth = parse_attribute_uint(q.text);
        if (!depth) {
          out.error("parse_error", name,
                    "queue/nr_requests: \"" + text::label_value(q.value()) + "\"");
        }
      } else if (q.failed()) {
        out.error("read_error", name, q.error_name() + " reading queue/nr_requests");
      }
    }
    for (const StatMetric& m : kStatMetrics) {
      if (!line->has(m.stat)) continue;
      std::uint64_t value = line->stats[m.stat];
      if (m.type == MetricType::kCounter) {
        // "sda 8:0 c": one letter per statistic after the device's prefix.
        key_.assign(dev.counter_key).push_back(static_cast<char>('a' + m.stat));
        value = counters_->update(key_, value);
      }
      out.add(m.name, {name}, convert(value, m.conversion));
    }
    const Facts& f = dev.facts;
    out.add(kDeviceInfo, {name, f.model, f.serial, f.rotational}, 1.0);
    if (depth) out.add(kQueueDepth, {name}, static_cast<double>(*depth));
    if (f.logical_block_size) {
      out.add(kLogicalBlockSize, {name}, static_cast<double>(*f.logical_block_size));
    }
  }
  // After an interrupted pass the unseen devices may still exist: keep them,
  // their counters and their descriptors.
  if (complete) {
    devices_.end_cycle();
    counters_->end_cycle();
    attributes_.end_cycle();
  }
}

}  // namespace nodewatch::storage
