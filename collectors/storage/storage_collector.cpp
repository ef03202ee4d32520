#include "storage/storage_collector.hpp"
#include "nodewatch/unique_fd.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "nodewatch/options.hpp"
#include "storage/mountstats.hpp"

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

constexpr std::string_view kProbeDuration = "nodewatch_storage_probe_duration_seconds";
constexpr std::string_view kProbeSuccess = "nodewatch_storage_probe_success";
constexpr std::string_view kProbeErrors = "nodewatch_storage_probe_errors_total";
constexpr std::string_view kProbeStuck = "nodewatch_storage_probe_stuck";
constexpr std::string_view kProbeLastSuccess =
    "nodewatch_storage_probe_last_success_timestamp_seconds";

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
    descs.push_back(MetricDesc{std::string(kProbeDuration),
                               MetricType::kHistogram,
                               "seconds",
                               "Duration of the probe's file-system operations on the path.",
                               {"path", "operation"},
                               probe_buckets()});
    descs.push_back(MetricDesc{std::string(kProbeSuccess),
                               MetricType::kGauge,
                               "",
                               "1 when the last operation of this kind succeeded within the "
                               "probe's timeout, else 0.",
                               {"path", "operation"}});
    descs.push_back(MetricDesc{std::string(kProbeErrors),
                               MetricType::kCounter,
                               "",
                               "Failed probe operations by errno name (ETIMEDOUT: it returned "
                               "after the probe's timeout).",
                               {"path", "operation", "errno"}});
    descs.push_back(MetricDesc{std::string(kProbeStuck),
                               MetricType::kGauge,
                               "",
                               "1 while a probe operation has been blocked in the file system "
                               "longer than its timeout.",
                               {"path"}});
    descs.push_back(MetricDesc{std::string(kProbeLastSuccess),
                               MetricType::kGauge,
                               "seconds",
                               "Unix time of the last successful probe operation of this kind.",
                               {"path", "operation"}});
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

std::optional<std::size_t> parse_size(std::string_view text) {
  std::size_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr == text.data()) return std::nullopt;
  std::string_view unit(ptr, static_cast<std::size_t>(end - ptr));
  std::size_t factor = 0;
  if (unit.empty() || unit == "B") {
    factor = 1;
  } else if (unit == "KiB") {
    factor = std::size_t{1} << 10;
  } else if (unit == "MiB") {
    factor = std::size_t{1} << 20;
  } else {
    return std::nullopt;
  }
  if (value > (std::size_t{1} << 40)) return std::nullopt;
  return value * factor;
}

namespace {

// stat() on a helper thread, given at most `limit`: a path on a hung mount
// must not hang the configuration check. Returns the errno (0 when it is a
// directory, ENOTDIR when it is something else), or nullopt when the call
// did not return in time (the helper thread is left to finish on its own).
// A check still blocked from an earlier load is waited on again, never
// started twice: reloads during a hang do not pile up blocked threads.
std::optional<int> check_directory(const std::string& path, std::chrono::milliseconds limit) {
  static std::mutex mu;
  static std::map<std::string, std::shared_future<int>> in_flight;
  std::shared_future<int> done;
  {
    std::lock_guard lock(mu);
    auto it = in_flight.find(path);
    if (it != in_flight.end() &&
        it->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      done = it->second;
    } else {
      auto result = std::make_shared<std::promise<int>>();
      done = result->get_future().share();
      in_flight[path] = done;
      try {
        std::thread([path, result] {
          struct stat st {};
          int err = ::stat(path.c_str(), &st) == 0 ? (S_ISDIR(st.st_mode) ? 0 : ENOTDIR) : errno;
          result->set_value(err);
        }).detach();
      } catch (const std::system_error&) {
        in_flight.erase(path);
        return std::nullopt;  // no thread to spare: treated as not answering
      }
    }
  }
  if (done.wait_for(limit) != std::future_status::ready) return std::nullopt;
  return done.get();
}

std::optional<ProbeConfig> read_probe(OptionReader& p, bool check_paths,
                                      const std::vector<ProbeConfig>& earlier) {
  using std::chrono::milliseconds;
  ProbeConfig c;
  bool ok = true;
  c.path = p.get_string("path", "");
  std::string who = "probe \"" + c.path + "\": ";
  if (c.path.empty()) {
    p.error("path", "probe: path is required");
    ok = false;
  } else if (c.path.front() != '/') {
    p.error("path", who + "path must be absolute");
    ok = false;
  } else if (std::any_of(earlier.begin(), earlier.end(),
                         [&](const ProbeConfig& e) { return e.path == c.path; })) {
    p.error("path", who + "path is probed twice");
    ok = false;
  } else if (check_paths) {
    std::optional<int> err = check_directory(c.path, std::chrono::seconds(1));
    if (err && *err == ENOTDIR) {
      p.error("path", who + "path is not a directory");
      ok = false;
    } else if (err && *err != 0) {
      p.error("path", who + "path cannot be used: " + errno_message(*err));
      ok = false;
    }
  }
  std::vector<std::string> names =
      p.get_string_array("operations", {"stat", "write", "fsync", "read"});
  std::set<ProbeOp> ops;
  for (const std::string& name : names) {
    std::optional<ProbeOp> op = parse_probe_op(name);
    if (!op) {
      p.error("operations",
              who + "unknown operation \"" + name + "\" (known: stat, write, fsync, read)");
      ok = false;
    } else {
      ops.insert(*op);
    }
  }
  if (ops.empty() && ok) {
    p.error("operations", who + "no operation to probe");
    ok = false;
  }
  c.operations.assign(ops.begin(), ops.end());  // the enum's order is the cycle's order
  c.interval = p.get_duration("interval", milliseconds(10000), milliseconds(100),
                              milliseconds(24LL * 3600 * 1000));
  c.timeout = p.get_duration("timeout", milliseconds(5000), milliseconds(10),
                             milliseconds(24LL * 3600 * 1000));
  if (c.timeout > c.interval) {
    p.error("timeout", who + "timeout " + format_duration(c.timeout) + " is longer than interval " +
                           format_duration(c.interval));
    ok = false;
  }
  std::string size_text = p.get_string("size", "4KiB");
  std::optional<std::size_t> size = parse_size(size_text);
  if (!size || *size == 0) {
    p.error("size", who + "size \"" + size_text + "\" is not a size such as \"4KiB\"");
    ok = false;
  } else if (*size > kMaxProbeSize) {
    p.error("size", who + "size " + size_text + " is over the maximum of 1MiB");
    ok = false;
  } else {
    c.size = *size;
  }
  if (!ok) return std::nullopt;
  return c;
}

}  // namespace

StorageOptions read_storage_options(OptionReader& r, bool check_paths) {
  StorageOptions out;
  out.devices_include = read_regex(r, "devices_include", out.devices_include);
  out.devices_exclude = read_regex(r, "devices_exclude", out.devices_exclude);
  std::string mountstats = r.get_string("mountstats", out.mountstats);
  std::filesystem::path rel(mountstats);
  bool escapes = std::any_of(rel.begin(), rel.end(), [](const auto& part) { return part == ".."; });
  if (mountstats.empty() || rel.is_absolute() || escapes) {
    r.error("mountstats",
            "must be a path relative to the procfs root, such as "
            "\"self/mountstats\" or \"1/mountstats\"");
  } else {
    out.mountstats = mountstats;
  }
  out.nfs_operations = r.get_string_array("nfs_operations", out.nfs_operations);
  r.for_each_table("probe", [&](OptionReader& p, std::size_t) {
    if (std::optional<ProbeConfig> c = read_probe(p, check_paths, out.probes)) {
      out.probes.push_back(std::move(*c));
    }
  });
  return out;
}

StorageCollector::StorageCollector(Roots roots, StorageOptions options, std::string hostname)
    : roots_(std::move(roots)),
      diskstats_path_((roots_.procfs / "diskstats").native()),
      include_(compile(options.devices_include)),
      exclude_(compile(options.devices_exclude)),
      mountstats_path_((roots_.procfs / options.mountstats).native()),
      nfs_operations_(std::move(options.nfs_operations)) {
  std::sort(nfs_operations_.begin(), nfs_operations_.end());
  if (hostname.empty()) {
    std::array<char, 256> buf{};
    if (::gethostname(buf.data(), buf.size() - 1) == 0) hostname = buf.data();
  }
  std::string file_name = probe_file_name(hostname);
  for (ProbeConfig& c : options.probes) {
    probes_.push_back(std::make_unique<Probe>(std::move(c), file_name));
  }
}

StorageCollector::~StorageCollector() {
  // Stop every probe first, then give them one shared grace period.
  for (auto& p : probes_) p->request_stop();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  for (auto& p : probes_) p->finish(deadline);
}

void StorageCollector::collect_nfs(MetricSink& out) {
  UniqueFd fd(::open(mountstats_path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    // No such file: no procfs entry for that process (or a fixture without
    // NFS); there is nothing to report.
    if (errno != ENOENT) out.error("mountstats_read_error");
    return;
  }
  mountstats_buffer_.resize(std::max(mountstats_buffer_.capacity(), kInitialBufferBytes));
  std::size_t used = 0;
  for (;;) {
    if (used == mountstats_buffer_.size()) {
      if (mountstats_buffer_.size() >= kMaxDiskstatsBytes) {
        out.error("mountstats_read_error");
        return;
      }
      mountstats_buffer_.resize(mountstats_buffer_.size() * 2);
    }
    ssize_t n =
        ::read(fd.get(), mountstats_buffer_.data() + used, mountstats_buffer_.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      out.error("mountstats_read_error");
      return;
    }
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  mountstats_buffer_.resize(used);
  MountstatsResult parsed = parse_mountstats(mountstats_buffer_);
  if (parsed.malformed > 0) out.error("mountstats_parse_error", parsed.malformed);
  if (parsed.skipped_op_lines > 0) out.error("mountstats_short_op_line", parsed.skipped_op_lines);
  // A path mounted over shadows the earlier mount: keep the last one.
  std::set<std::string, std::less<>> seen;
  for (auto it = parsed.mounts.rbegin(); it != parsed.mounts.rend(); ++it) {
    const NfsMount& m = *it;
    std::string mountpoint = attribute_label(m.mountpoint);
    std::string export_name = attribute_label(m.export_name);
    if (!seen.insert(mountpoint).second) continue;
    out.add(kNfsMountInfo,
            {mountpoint, export_name, attribute_label(m.server),
             attribute_label(m.transport.protocol), attribute_label(m.version)},
            1.0);
    std::uint64_t retransmits = 0;
    for (const NfsOpStats& op : m.ops) {
      if (op.transmissions > op.operations) retransmits += op.transmissions - op.operations;
      if (!std::binary_search(nfs_operations_.begin(), nfs_operations_.end(), op.name)) continue;
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

void StorageCollector::collect_probes(MetricSink& out) {
  for (const auto& probe : probes_) {
    const std::string& path = probe->config().path;
    ProbeSnapshot snap = probe->snapshot();
    out.add(kProbeStuck, {path}, snap.stuck ? 1.0 : 0.0);
    for (std::size_t i = 0; i < kProbeOpCount; ++i) {
      const ProbeOpState& s = snap.ops[i];
      std::string_view op = probe_op_name(static_cast<ProbeOp>(i));
      for (const auto& [err, count] : s.errors) {
        out.add(kProbeErrors, {path, op, err}, static_cast<double>(count));
      }
      if (!s.histogram) continue;  // "create": errors only
      out.add_histogram(kProbeDuration, {path, op}, *s.histogram);
      if (!s.observed) continue;
      out.add(kProbeSuccess, {path, op}, s.success ? 1.0 : 0.0);
      if (s.last_success_unix > 0) out.add(kProbeLastSuccess, {path, op}, s.last_success_unix);
    }
  }
}

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
  if (!ctx.should_stop()) collect_nfs(out);
  collect_probes(out);
}

}  // namespace storage

const CollectorSpec& storage_collector_spec() {
  static const CollectorSpec kSpec = [] {
    CollectorSpec spec;
    spec.name = "storage";
    spec.description =
        "Block-device I/O counters from /proc/diskstats with device facts from sysfs, NFS "
        "client operations from mountstats, and active latency probes of configured paths";
    spec.enabled_by_default = true;
    // Reads of a wedged device's sysfs attributes can block in the kernel.
    spec.own_thread = true;
    spec.default_interval = std::chrono::seconds(15);
    spec.default_timeout = std::chrono::seconds(10);
    spec.read_options = typed_options<storage::StorageOptions>(
        [](OptionReader& r) { return storage::read_storage_options(r, /*check_paths=*/true); });
    spec.metrics = storage::storage_metric_table;
    spec.create = [](const CollectorEnv& env) -> std::unique_ptr<Collector> {
      return std::make_unique<storage::StorageCollector>(env.roots,
                                                         env.options_as<storage::StorageOptions>());
    };
    return spec;
  }();
  return kSpec;
}

}  // namespace nodewatch
