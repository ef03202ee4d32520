#include "storage/block_devices.hpp"

#include <array>
#include <string_view>
#include <system_error>
#include <utility>

#include "nodewatch/text.hpp"
#include "storage/storage_metrics.hpp"
#include "storage/units.hpp"

namespace nodewatch::storage {
namespace {

// One row per exported diskstats statistic: the metric is declared here and
// nowhere else; both the declarations and the emission loop are built from it.
struct StatMetric {
  DiskStat stat;
  Conversion conversion;
  const Family& family;
};

constexpr std::array<StatMetric, kDiskStatCount> kStatMetrics = {{
    {kReadsCompleted, Conversion::kNone, families::kReadsCompletedTotal},
    {kReadsMerged, Conversion::kNone, families::kReadsMergedTotal},
    {kSectorsRead, Conversion::kSectorsToBytes, families::kReadBytesTotal},
    {kReadTimeMs, Conversion::kMillisToSeconds, families::kReadTimeSecondsTotal},
    {kWritesCompleted, Conversion::kNone, families::kWritesCompletedTotal},
    {kWritesMerged, Conversion::kNone, families::kWritesMergedTotal},
    {kSectorsWritten, Conversion::kSectorsToBytes, families::kWrittenBytesTotal},
    {kWriteTimeMs, Conversion::kMillisToSeconds, families::kWriteTimeSecondsTotal},
    {kIoInProgress, Conversion::kNone, families::kIoInProgress},
    {kIoTimeMs, Conversion::kMillisToSeconds, families::kIoTimeSecondsTotal},
    {kIoWeightedTimeMs, Conversion::kMillisToSeconds, families::kIoTimeWeightedSecondsTotal},
    {kDiscardsCompleted, Conversion::kNone, families::kDiscardsCompletedTotal},
    {kDiscardsMerged, Conversion::kNone, families::kDiscardsMergedTotal},
    {kSectorsDiscarded, Conversion::kSectorsToBytes, families::kDiscardedBytesTotal},
    {kDiscardTimeMs, Conversion::kMillisToSeconds, families::kDiscardTimeSecondsTotal},
    {kFlushesCompleted, Conversion::kNone, families::kFlushesCompletedTotal},
    {kFlushTimeMs, Conversion::kMillisToSeconds, families::kFlushTimeSecondsTotal},
}};

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
  for (const StatMetric& m : kStatMetrics) descs.push_back(describe(m.family));
  descs.push_back(describe(families::kDeviceInfo));
  descs.push_back(describe(families::kQueueDepth));
  descs.push_back(describe(families::kLogicalBlockSizeBytes));
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
      if (m.family.type == MetricType::kCounter) {
        // "sda 8:0 c": one letter per statistic after the device's prefix.
        key_.assign(dev.counter_key).push_back(static_cast<char>('a' + m.stat));
        value = counters_->update(key_, value);
      }
      out.add(m.family, {name}, convert(value, m.conversion));
    }
    const Facts& f = dev.facts;
    out.add(families::kDeviceInfo, {name, f.model, f.serial, f.rotational}, 1.0);
    if (depth) out.add(families::kQueueDepth, {name}, static_cast<double>(*depth));
    if (f.logical_block_size) {
      out.add(families::kLogicalBlockSizeBytes, {name}, static_cast<double>(*f.logical_block_size));
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
