#include "storage/storage_collector.hpp"
#include "common/unique_fd.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <span>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "nodewatch/config.hpp"

namespace nodewatch {
namespace storage {
namespace {

// How a raw diskstats statistic becomes a value in base units.
enum class Conversion { kNone, kSectorsToBytes, kMillisToSeconds };

// One row per exported diskstats statistic: the metric is declared here and
// nowhere else; both the MetricTable and the emission loop are built from it.
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

const MetricTable& storage_metric_table() {
  static const MetricTable kTable = [] {
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
    return MetricTable(std::move(descs));
  }();
  return kTable;
}

double convert(std::uint64_t value, Conversion c) {
  auto v = static_cast<double>(value);
  switch (c) {
    case Conversion::kSectorsToBytes: return v * static_cast<double>(kSectorBytes);
    case Conversion::kMillisToSeconds: return v / 1000.0;
    case Conversion::kNone: break;
  }
  return v;
}

// Cached sysfs facts are read again after this many collects (5 minutes at
// the default 15s): a udev rule may rewrite queue/rotational just after the
// device appears, and re-reading every collect costs file opens per device
// (node_exporter issue #3282: thousands of devices, scrapes 10x slower).
constexpr std::uint64_t kInfoRefreshCycles = 20;

// A /proc/diskstats larger than this is not a real one (about 150 bytes a line).
constexpr std::size_t kMaxDiskstatsBytes = std::size_t{64} << 20;
constexpr std::size_t kInitialBufferBytes = 16 << 10;

// Bounds the regular expressions from the configuration: libstdc++ compiles
// and matches recursively, so a huge pattern could exhaust the stack.
constexpr std::size_t kMaxRegexLength = 1024;

std::string errno_message(int err) {
  return std::generic_category().message(err);
}

// One open+read+close into the caller's buffer: sysfs hands an attribute
// over in a single read. Returns nullopt when the file cannot be read.
std::optional<std::string_view> read_small_file(const std::string& path, std::span<char> buf) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return std::nullopt;
  ssize_t n = 0;
  do {
    n = ::read(fd.get(), buf.data(), buf.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return std::nullopt;
  return std::string_view(buf.data(), static_cast<std::size_t>(n));
}

std::string read_label(const std::string& path) {
  std::array<char, 256> buf;
  std::optional<std::string_view> raw = read_small_file(path, buf);
  return raw ? attribute_label(*raw) : std::string();
}

std::optional<std::uint64_t> read_uint(const std::string& path) {
  std::array<char, 32> buf;
  std::optional<std::string_view> raw = read_small_file(path, buf);
  return raw ? parse_attribute_uint(*raw) : std::nullopt;
}

std::optional<std::regex> compile(const std::string& pattern) {
  if (pattern.empty()) return std::nullopt;
  return std::regex(pattern, std::regex::ECMAScript);
}

std::string read_regex(OptionReader& r, std::string_view key, const std::string& def) {
  std::string value = r.get_string(key, def);
  if (value.size() > kMaxRegexLength) {
    r.error(key,
            "regular expression is longer than " + std::to_string(kMaxRegexLength) + " characters");
    return def;
  }
  try {
    compile(value);
  } catch (const std::regex_error& e) {
    r.error(key, "invalid regular expression \"" + value + "\": " + e.what());
    return def;
  }
  return value;
}

}  // namespace

StorageOptions read_storage_options(OptionReader& r) {
  StorageOptions out;
  out.devices_include = read_regex(r, "devices_include", out.devices_include);
  out.devices_exclude = read_regex(r, "devices_exclude", out.devices_exclude);
  return out;
}

StorageCollector::StorageCollector(Roots roots, StorageOptions options)
    : roots_(std::move(roots)),
      diskstats_path_((roots_.procfs / "diskstats").native()),
      include_(compile(options.devices_include)),
      exclude_(compile(options.devices_exclude)) {}

const MetricTable& StorageCollector::metrics() const {
  return storage_metric_table();
}

bool StorageCollector::is_selected(std::string_view name) const {
  if (include_ && !std::regex_search(name.begin(), name.end(), *include_)) return false;
  if (exclude_ && std::regex_search(name.begin(), name.end(), *exclude_)) return false;
  return true;
}

void StorageCollector::read_diskstats() {
  UniqueFd fd(::open(diskstats_path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    int err = errno;
    throw CollectError("read_error", "cannot open " + diskstats_path_ + ": " + errno_message(err));
  }
  buffer_.resize(std::max(buffer_.capacity(), kInitialBufferBytes));
  std::size_t used = 0;
  for (;;) {
    if (used == buffer_.size()) {
      if (buffer_.size() >= kMaxDiskstatsBytes) {
        throw CollectError("read_error", diskstats_path_ + " is larger than " +
                                             std::to_string(kMaxDiskstatsBytes) + " bytes");
      }
      buffer_.resize(buffer_.size() * 2);
    }
    ssize_t n = ::read(fd.get(), buffer_.data() + used, buffer_.size() - used);
    if (n < 0) {
      int err = errno;
      if (err == EINTR) continue;
      throw CollectError("read_error",
                         "cannot read " + diskstats_path_ + ": " + errno_message(err));
    }
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  buffer_.resize(used);
}

StorageCollector::DeviceInfo StorageCollector::read_info(const std::string& sysfs_dir) {
  DeviceInfo info;
  if (sysfs_dir.empty()) return info;
  // SCSI/SATA and NVMe (device/ is the controller) have device/model; dm, md,
  // loop and virtio-blk do not.
  info.model = read_label(sysfs_dir + "/device/model");
  // The NVMe controller has device/serial, virtio-blk has serial; SCSI/SATA
  // disks have no serial attribute, so their VPD page 0x83 identifier
  // (device/wwid) stands in, then the NVMe namespace's wwid.
  for (std::string_view relative : {"/device/serial", "/serial", "/device/wwid", "/wwid"}) {
    info.serial = read_label(sysfs_dir + std::string(relative));
    if (!info.serial.empty()) break;
  }
  info.rotational = read_label(sysfs_dir + "/queue/rotational");
  info.logical_block_size = read_uint(sysfs_dir + "/queue/logical_block_size");
  return info;
}

void StorageCollector::emit(const DiskStatsLine& line, DeviceState& state, MetricSink& out) {
  const std::string_view device = line.name;
  for (const StatMetric& m : kStatMetrics) {
    if (!line.has(m.stat)) continue;
    std::uint64_t raw = line.stats[m.stat];
    std::uint64_t value = m.type == MetricType::kCounter ? state.counters[m.stat].update(raw) : raw;
    out.add(m.name, {device}, convert(value, m.conversion));
  }
  const DeviceInfo& info = state.info;
  out.add(kDeviceInfo, {device, info.model, info.serial, info.rotational}, 1.0);
  if (!state.sysfs_dir.empty()) {
    // nr_requests is a tunable (udev rules and operators change it), so it is
    // read on every collect rather than cached.
    if (std::optional<std::uint64_t> depth = read_uint(state.sysfs_dir + "/queue/nr_requests")) {
      out.add(kQueueDepth, {device}, static_cast<double>(*depth));
    }
  }
  if (info.logical_block_size) {
    out.add(kLogicalBlockSize, {device}, static_cast<double>(*info.logical_block_size));
  }
}

void StorageCollector::collect(const CollectContext& ctx, MetricSink& out) {
  read_diskstats();
  ++cycle_;
  bool complete = true;
  std::string_view text = buffer_;
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
    auto it = devices_.find(line->name);
    if (it != devices_.end() && it->second.last_seen == cycle_) {
      out.error("duplicate_device");
      continue;
    }
    if (it == devices_.end() || it->second.major != line->major ||
        it->second.minor != line->minor) {
      // A new device, or the name now belongs to another device (removed and
      // created again with a new minor): its counters start afresh.
      DeviceState fresh;
      fresh.major = line->major;
      fresh.minor = line->minor;
      fresh.selected = is_selected(line->name);
      std::string dir_name = sysfs_block_name(line->name);
      if (fresh.selected && !dir_name.empty()) {
        fresh.sysfs_dir = (roots_.sysfs / "block" / dir_name).native();
      }
      if (it == devices_.end()) {
        it = devices_.emplace(std::string(line->name), std::move(fresh)).first;
      } else {
        it->second = std::move(fresh);
      }
    }
    DeviceState& state = it->second;
    state.last_seen = cycle_;
    if (!state.selected) continue;
    if (state.info_read == 0 || cycle_ - state.info_read >= kInfoRefreshCycles) {
      state.info = read_info(state.sysfs_dir);
      state.info_read = cycle_;
    }
    emit(*line, state, out);
  }
  // After an interrupted pass the unseen devices may still exist: keep them.
  if (complete) {
    std::erase_if(devices_, [this](const auto& entry) { return entry.second.last_seen != cycle_; });
  }
}

}  // namespace storage

const CollectorSpec& storage_collector_spec() {
  static const CollectorSpec kSpec = [] {
    CollectorSpec spec;
    spec.name = "storage";
    spec.description =
        "Block-device I/O counters from /proc/diskstats, with device facts from sysfs";
    spec.enabled_by_default = true;
    // Reads of a wedged device's sysfs attributes can block in the kernel.
    spec.own_thread = true;
    spec.default_interval = std::chrono::seconds(15);
    spec.default_timeout = std::chrono::seconds(10);
    spec.options = [](OptionReader& r) { storage::read_storage_options(r); };
    spec.create = [](const CollectorEnv& env) -> std::unique_ptr<Collector> {
      return std::make_unique<storage::StorageCollector>(
          env.roots, reread_options(env, "storage", storage::read_storage_options));
    };
    return spec;
  }();
  return kSpec;
}

}  // namespace nodewatch
