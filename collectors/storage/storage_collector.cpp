#include "storage/storage_collector.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <filesystem>
#include <set>
#include <system_error>
#include <utility>

#include "nodewatch/options.hpp"

namespace nodewatch {
namespace storage {
namespace {

// How long the configuration waits for its probe paths' stat()s
// (path_check.hpp): one budget for all of them, so that N paths on a hung
// mount cost one wait, not N (a restart during a hang must serve at once);
// a path checked once the budget is spent still gets the floor, ample for
// a stat that answers (a helper's round trip is about 0.3 ms).
constexpr std::chrono::seconds kPathCheckLimit{1};
constexpr std::chrono::milliseconds kPathCheckFloor{100};

std::string errno_message(int err) {
  return std::generic_category().message(err);
}

std::optional<ProbeConfig> read_probe(OptionReader& p, DirectoryCheck* check,
                                      std::chrono::steady_clock::time_point check_until,
                                      const std::vector<ProbeConfig>& earlier) {
  using std::chrono::milliseconds;
  ProbeConfig c;
  bool ok = true;
  c.path = p.get_string("path", "",
                        {"absolute directory to probe, one probe per path; must exist (checked "
                         "by a helper process for at most 1 s: a path that does not answer is "
                         "accepted and reported stuck)",
                         "none: required"});
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
  } else if (check != nullptr) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        check_until - std::chrono::steady_clock::now());
    std::optional<int> err = check->check(c.path, std::max(left, kPathCheckFloor));
    if (err && *err == ENOTDIR) {
      p.error("path", who + "path is not a directory");
      ok = false;
    } else if (err && *err != 0) {
      p.error("path", who + "path cannot be used: " + errno_message(*err));
      ok = false;
    }
  }
  std::vector<std::string> names =
      p.get_string_array("operations", {"stat", "write", "fsync", "read"},
                         "the operations timed, each once per cycle, of stat, write, fsync, read");
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
                              milliseconds(24LL * 3600 * 1000), "time between probe cycles");
  c.timeout = p.get_duration(
      "timeout", milliseconds(5000), milliseconds(10), milliseconds(24LL * 3600 * 1000),
      "an operation not returned by then counts ETIMEDOUT and its helper is abandoned; the path "
      "is reported stuck while the kernel holds that helper; at most interval");
  if (c.timeout > c.interval) {
    p.error("timeout", who + "timeout " + format_duration(c.timeout) + " is longer than interval " +
                           format_duration(c.interval));
    ok = false;
  }
  std::string size_text =
      p.get_string("size", "4KiB", "bytes written and read per cycle (B, KiB, MiB; at most 1MiB)");
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

StorageOptions read_storage_options(OptionReader& r, DirectoryCheck* check) {
  StorageOptions out;
  out.devices = sources::read_name_filter(r, "block device", "devices_include", "devices_exclude",
                                          "", std::string(kDefaultDevicesExclude));
  std::string mountstats =
      r.get_string("mountstats", out.mountstats,
                   "NFS statistics file, relative to the procfs root; \"1/mountstats\" in a "
                   "container sharing the host's PID namespace");
  std::filesystem::path rel(mountstats);
  bool escapes = std::any_of(rel.begin(), rel.end(), [](const auto& part) { return part == ".."; });
  if (mountstats.empty() || rel.is_absolute() || escapes) {
    r.error("mountstats",
            "must be a path relative to the procfs root, such as "
            "\"self/mountstats\" or \"1/mountstats\"");
  } else {
    out.mountstats = mountstats;
  }
  // NFS has about 70 operations (v3 and v4.2 together).
  out.nfs_operations = r.get_string_array(
      "nfs_operations", out.nfs_operations,
      "NFS operations exported per mount (names as in mountstats); bounds the series count",
      kMaxNfsOperations);
  const auto check_until = std::chrono::steady_clock::now() + kPathCheckLimit;
  r.for_each_table(
      "probe", "an active latency probe of a directory, on a helper process of its own",
      [&](OptionReader& p, std::size_t) {
        if (std::optional<ProbeConfig> c = read_probe(p, check, check_until, out.probes)) {
          out.probes.push_back(std::move(*c));
        }
      },
      kMaxProbes);
  return out;
}

StorageServices StorageServices::of(const CollectorEnv& env) {
  StorageServices s;
  s.counters = env.service<sources::WrapCounters>(
      "storage", [] { return std::make_shared<sources::WrapCounters>(); });
  s.probes =
      env.service<ProbeRegistry>("storage", [] { return std::make_shared<ProbeRegistry>(); });
  return s;
}

const MetricTable& storage_metric_table() {
  static const MetricTable kTable = [] {
    std::vector<MetricDesc> descs;
    // One list per part, concatenated (the exposition follows this order).
    for (auto part :
         {&BlockDevices::metric_descs, &NfsMounts::metric_descs, &ProbeSet::metric_descs}) {
      for (MetricDesc& d : part()) descs.push_back(std::move(d));
    }
    return MetricTable(std::move(descs));
  }();
  return kTable;
}

namespace {

std::string host_name(std::string hostname) {
  if (hostname.empty()) {
    std::array<char, 256> buf{};
    if (::gethostname(buf.data(), buf.size() - 1) == 0) hostname = buf.data();
  }
  return hostname;
}

}  // namespace

StorageCollector::StorageCollector(Roots roots, StorageOptions options, std::string hostname,
                                   StorageServices services, std::size_t max_held)
    : block_(roots, options.devices, std::move(services.counters), max_held),
      nfs_(roots, std::move(options.mountstats), std::move(options.nfs_operations), max_held),
      probes_(std::move(services.probes), options.probes,
              probe_file_name(host_name(std::move(hostname)))) {}

const MetricTable& StorageCollector::metrics() const {
  return storage_metric_table();
}

void StorageCollector::collect(const CollectContext& ctx, MetricSink& out) {
  block_.collect(ctx, out);
  if (!ctx.should_stop()) nfs_.collect(ctx, out);
  probes_.collect(out);
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
    spec.default_interval = std::chrono::seconds(15);
    spec.default_timeout = std::chrono::seconds(10);
    // The catalog entry owns the probe paths' check: it runs at
    // configuration time, and remembers the stat() calls still blocked on a
    // hung mount for as long as the catalog lives.
    spec.read_options = typed_options<storage::StorageOptions>(
        [check = std::make_shared<storage::DirectoryCheck>()](OptionReader& r) {
          return storage::read_storage_options(r, check.get());
        });
    spec.metrics = storage::storage_metric_table;
    spec.create = [](const CollectorEnv& env) -> std::unique_ptr<Collector> {
      return std::make_unique<storage::StorageCollector>(
          env.roots, env.options_as<storage::StorageOptions>(), std::string(),
          storage::StorageServices::of(env));
    };
    return spec;
  }();
  return kSpec;
}

}  // namespace nodewatch
