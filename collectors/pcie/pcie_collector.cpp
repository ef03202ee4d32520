#include "pcie/pcie_collector.hpp"
#include "nodewatch/unique_fd.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <map>
#include <memory>
#include <set>
#include <system_error>
#include <utility>

namespace nodewatch {
namespace pcie {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kSpeed = "nodewatch_pcie_link_speed_transfers_per_second";
constexpr std::string_view kMaxSpeed = "nodewatch_pcie_link_max_speed_transfers_per_second";
constexpr std::string_view kWidth = "nodewatch_pcie_link_width";
constexpr std::string_view kMaxWidth = "nodewatch_pcie_link_max_width";
constexpr std::string_view kDegraded = "nodewatch_pcie_link_width_degraded";
constexpr std::string_view kAerErrors = "nodewatch_pcie_aer_errors_total";
constexpr std::string_view kDeviceInfo = "nodewatch_pcie_device_info";

const MetricTable& pcie_metric_table() {
  static const MetricTable kTable = [] {
    auto desc = [](std::string_view name, MetricType type, std::string_view unit,
                   std::string_view help, std::vector<std::string> labels) {
      return MetricDesc{std::string(name), type, std::string(unit), std::string(help),
                        std::move(labels)};
    };
    std::vector<MetricDesc> descs;
    descs.push_back(desc(kSpeed, MetricType::kGauge, "transfers_per_second",
                         "Current PCIe link speed (current_link_speed; 16.0 GT/s is 16e9). "
                         "Accelerators and NICs lower it at idle, so alert on it only under load.",
                         {"device"}));
    descs.push_back(desc(kMaxSpeed, MetricType::kGauge, "transfers_per_second",
                         "Fastest PCIe link speed the function supports (max_link_speed).",
                         {"device"}));
    descs.push_back(desc(kWidth, MetricType::kGauge, "",
                         "Lanes the PCIe link trained to (current_link_width).", {"device"}));
    descs.push_back(desc(kMaxWidth, MetricType::kGauge, "",
                         "Lanes the function supports (max_link_width).", {"device"}));
    descs.push_back(desc(kDegraded, MetricType::kGauge, "",
                         "1 when the link trained narrower than both the device and its "
                         "upstream port support, else 0; accelerators and NICs only.",
                         {"device"}));
    descs.push_back(desc(kAerErrors, MetricType::kCounter, "",
                         "PCIe AER errors seen by the function, by severity and error (the "
                         "kernel's current name in snake_case), from aer_dev_*.",
                         {"device", "severity", "error"}));
    descs.push_back(desc(
        kDeviceInfo, MetricType::kGauge, "",
        "A PCI function the collector watches, value 1: kind is accelerator, "
        "network or bridge; upstream is the port above it (\"\" at a root).",
        {"device", "vendor_id", "device_id", "class", "driver", "numa_node", "kind", "upstream"}));
    return MetricTable(std::move(descs));
  }();
  return kTable;
}

// sysfs attributes are at most a page; the bound only stops a runaway read
// of something that is not a sysfs attribute.
constexpr std::size_t kMaxAttributeBytes = 64 << 10;

// Reads a whole attribute into `out`. Returns 0, or the errno of the failure.
int read_attribute(const std::string& path, std::string* out) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return errno;
  out->resize(4096);
  std::size_t used = 0;
  for (;;) {
    if (used == out->size()) {
      if (out->size() >= kMaxAttributeBytes) return EFBIG;
      out->resize(out->size() * 2);
    }
    ssize_t n = ::read(fd.get(), out->data() + used, out->size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  out->resize(used);
  return 0;
}

// How a failed read is taken.
enum class Failure {
  kAbsent,  // ENOENT: the attribute does not exist for this function
  kGone,    // ENODEV, ENXIO: kernfs refuses reads of a device being removed
  kError,   // anything else (EIO, EINVAL from a config-space read that failed)
};

Failure classify_failure(int err) {
  if (err == ENOENT) return Failure::kAbsent;
  if (err == ENODEV || err == ENXIO) return Failure::kGone;
  return Failure::kError;
}

// The basename of a symlink's target, "" when there is no such link.
std::string link_basename(const std::string& path) {
  std::array<char, 4096> buf;
  ssize_t n = ::readlink(path.c_str(), buf.data(), buf.size());
  if (n <= 0 || static_cast<std::size_t>(n) >= buf.size()) return {};
  std::string_view target(buf.data(), static_cast<std::size_t>(n));
  while (!target.empty() && target.back() == '/') target.remove_suffix(1);
  std::size_t slash = target.rfind('/');
  return std::string(slash == std::string_view::npos ? target : target.substr(slash + 1));
}

bool path_exists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

// True when `p` is `root` or below it (both canonical).
bool is_within(const fs::path& p, const fs::path& root) {
  auto [r, q] = std::mismatch(root.begin(), root.end(), p.begin(), p.end());
  (void)q;
  return r == root.end();
}

}  // namespace

ReadResult read_function(const std::string& dir, const std::string& class_text,
                         FunctionRecord* record) {
  std::string buf;
  // A required attribute: every PCI function has it, so its absence means
  // the function has gone.
  auto required = [&](const char* name, std::string* text) -> std::optional<ReadResult> {
    if (int err = read_attribute(dir + "/" + name, text); err != 0) {
      if (classify_failure(err) != Failure::kError) return ReadResult::kVanished;
      ++record->read_errors;
      return ReadResult::kFailed;
    }
    return std::nullopt;
  };
  // An optional attribute: true with `buf` filled, false when it is absent
  // or unreadable (counted); `gone` set when the function went away.
  bool gone = false;
  auto read_optional = [&](const std::string& name) -> bool {
    int err = read_attribute(dir + "/" + name, &buf);
    if (err == 0) return true;
    Failure f = classify_failure(err);
    if (f == Failure::kGone) gone = true;
    if (f == Failure::kError) ++record->read_errors;
    return false;
  };

  std::string text = class_text;
  if (text.empty()) {
    if (auto r = required("class", &text)) return *r;
  }
  if (!parse_pci_class(text)) {
    ++record->parse_errors;
    return ReadResult::kFailed;
  }
  record->class_id = std::string(trim(text));

  if (auto r = required("vendor", &text)) return *r;
  std::optional<std::string> vendor = parse_pci_id(text);
  if (auto r = required("device", &text)) return *r;
  std::optional<std::string> device = parse_pci_id(text);
  if (!vendor || !device) {
    ++record->parse_errors;
    return ReadResult::kFailed;
  }
  record->vendor_id = std::move(*vendor);
  record->device_id = std::move(*device);
  record->driver = link_basename(dir + "/driver");

  if (read_optional("numa_node")) {
    if (std::optional<std::string> node = parse_numa_node(buf)) {
      record->numa_node = std::move(*node);
    } else {
      ++record->parse_errors;
    }
  }

  // Reading the link attributes of a runtime-suspended function would wake
  // it (see the header); power/ is absent without CONFIG_PM.
  record->runtime_suspended = read_optional("power/runtime_status") && trim(buf) == "suspended";
  if (!record->runtime_suspended) {
    auto speed = [&](const char* name, std::optional<double>* out) {
      if (!read_optional(name)) return;
      LinkSpeed s = parse_link_speed(buf);
      if (s.reading == Reading::kValue) *out = s.transfers_per_second;
      if (s.reading == Reading::kMalformed) ++record->parse_errors;
    };
    auto width = [&](const char* name, std::optional<unsigned>* out) {
      if (!read_optional(name)) return;
      LinkWidth w = parse_link_width(buf);
      if (w.reading == Reading::kValue) *out = w.lanes;
      if (w.reading == Reading::kMalformed) ++record->parse_errors;
    };
    speed("current_link_speed", &record->speed);
    speed("max_link_speed", &record->max_speed);
    width("current_link_width", &record->width);
    width("max_link_width", &record->max_width);
  }

  for (std::size_t i = 0; i < kAerFiles.size(); ++i) {
    if (!read_optional(std::string(kAerFiles[i]))) continue;
    record->aer[i] = parse_aer_stats(buf);
    if (!record->aer[i]) ++record->parse_errors;
  }

  // An attribute that went missing half-way through may have been a device
  // removed under us rather than an attribute this function lacks.
  if (gone || !path_exists(dir + "/vendor")) return ReadResult::kVanished;
  return ReadResult::kOk;
}

PcieCollector::PcieCollector(Roots roots)
    : roots_(std::move(roots)), devices_dir_(roots_.sysfs / "bus" / "pci" / "devices") {}

const MetricTable& PcieCollector::metrics() const {
  return pcie_metric_table();
}

std::vector<std::string> PcieCollector::list_functions() const {
  std::vector<std::string> out;
  std::error_code ec;
  fs::directory_iterator it(devices_dir_, ec);
  if (ec == std::errc::no_such_file_or_directory) return out;  // no PCI on this node
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().native();
    if (is_bdf(name)) out.push_back(std::move(name));
  }
  if (ec) {
    throw CollectError("read_error", "cannot list " + devices_dir_.native() + ": " + ec.message());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void PcieCollector::collect(const CollectContext& ctx, MetricSink& out) {
  collect_functions(list_functions(), ctx, out);
}

void PcieCollector::collect_functions(const std::vector<std::string>& bdfs,
                                      const CollectContext& ctx, MetricSink& out) {
  struct Node {
    std::string dir;  // the real directory
    std::string class_text;
    DeviceKind kind = DeviceKind::kBridge;
    bool selected = false;
    std::string upstream;  // BDF of the port above, "" at a root
    FunctionRecord record;
    bool ok = false;
  };
  std::map<std::string, Node, std::less<>> nodes;  // by BDF, so output is sorted

  std::error_code ec;
  fs::path root = fs::canonical(roots_.sysfs, ec);
  if (ec) return;  // the root went away after the listing

  // 1. Select by class, and find each selected function's ports.
  std::string class_text;
  std::set<std::string, std::less<>> bad_class;  // counted here, not again in step 2
  for (const std::string& bdf : bdfs) {
    if (ctx.should_stop()) return;
    fs::path link = devices_dir_ / bdf;
    fs::path real = fs::canonical(link, ec);
    if (ec) {
      // A dangling link: the function went away after the listing.
      if (ec != std::errc::no_such_file_or_directory) out.error("read_error");
      continue;
    }
    if (!is_within(real, root)) {
      // Real sysfs links are relative; one that leads out of the root is not
      // followed, so that nothing outside the configured root is read.
      out.error("read_error");
      continue;
    }
    if (int err = read_attribute((real / "class").native(), &class_text); err != 0) {
      if (classify_failure(err) == Failure::kError) out.error("read_error");
      continue;
    }
    std::optional<std::uint32_t> pci_class = parse_pci_class(class_text);
    if (!pci_class) {
      out.error("parse_error");
      bad_class.insert(bdf);
      continue;
    }
    std::optional<DeviceKind> kind = classify(*pci_class);
    if (!kind) continue;
    // A virtual function shares its physical function's link; exporting
    // every VF of an SR-IOV NIC would only multiply series. (Inside a VM a
    // passed-through VF has no physfn link and is exported.)
    if (!link_basename((real / "physfn").native()).empty()) continue;
    auto [it, inserted] = nodes.try_emplace(bdf);
    Node* node = &it->second;
    node->dir = real.native();
    node->class_text = class_text;
    node->kind = *kind;
    node->selected = true;
    if (!inserted) continue;  // already met as a port: its ports are known
    for (fs::path up = real.parent_path(); is_bdf(up.filename().native()) && is_within(up, root);
         up = up.parent_path()) {
      node->upstream = up.filename().native();
      auto [port, added] = nodes.try_emplace(node->upstream);
      if (!added) break;  // the rest of the path was walked from another device
      port->second.dir = up.native();
      node = &port->second;
    }
  }

  // 2. Read every function, selected devices and ports alike.
  for (auto& [bdf, node] : nodes) {
    if (ctx.should_stop()) return;
    if (bad_class.contains(bdf)) continue;
    ReadResult r = read_function(node.dir, node.class_text, &node.record);
    if (r == ReadResult::kVanished) continue;
    if (node.record.parse_errors > 0) out.error("parse_error", node.record.parse_errors);
    if (node.record.read_errors > 0) out.error("read_error", node.record.read_errors);
    node.ok = r == ReadResult::kOk;
  }

  // 3. Emit.
  for (const auto& [bdf, node] : nodes) {
    if (!node.ok) continue;
    const FunctionRecord& rec = node.record;
    const std::string_view device = bdf;
    if (rec.speed) out.add(kSpeed, {device}, *rec.speed);
    if (rec.max_speed) out.add(kMaxSpeed, {device}, *rec.max_speed);
    if (rec.width) out.add(kWidth, {device}, static_cast<double>(*rec.width));
    if (rec.max_width) out.add(kMaxWidth, {device}, static_cast<double>(*rec.max_width));
    // A function's link status describes the link to the port above it
    // when it faces upstream: an endpoint, or a switch's upstream port.
    // Those sit at an odd depth below the root port (root port 0, switch
    // upstream port 1, switch downstream port 2, endpoint 3); a downstream
    // port's status describes the link below it, which the function under
    // it reports already. So a switch uplink that trained narrow is flagged
    // on the switch's upstream port, even when every link below is x16.
    std::size_t depth = 0;
    for (auto it = nodes.find(node.upstream); it != nodes.end() && depth < 64;
         it = nodes.find(it->second.upstream))
      ++depth;
    bool faces_upstream = depth % 2 == 1;  // depth: how many watched ports are above it
    if ((node.selected || faces_upstream) && !node.upstream.empty()) {
      auto up = nodes.find(node.upstream);
      if (up != nodes.end() && up->second.ok) {
        std::optional<bool> degraded =
            link_width_degraded(rec.width, rec.max_width, up->second.record.max_width);
        if (degraded) out.add(kDegraded, {device}, *degraded ? 1.0 : 0.0);
      }
    }
    for (std::size_t i = 0; i < kAerFiles.size(); ++i) {
      if (!rec.aer[i]) continue;
      for (const AerCount& c : *rec.aer[i]) {
        out.add(kAerErrors, {device, kAerSeverities[i], c.error}, static_cast<double>(c.count));
      }
    }
    out.add(kDeviceInfo,
            {device, rec.vendor_id, rec.device_id, rec.class_id, rec.driver, rec.numa_node,
             kind_name(node.kind), node.upstream},
            1.0);
  }
}

}  // namespace pcie

const CollectorSpec& pcie_collector_spec() {
  static const CollectorSpec kSpec = [] {
    CollectorSpec spec;
    spec.name = "pcie";
    spec.description =
        "PCIe link speed, width and AER errors of accelerators, NICs and their upstream ports, "
        "from sysfs";
    spec.enabled_by_default = true;
    // sysfs reads of cached attributes and of config space: they do not
    // block on a hung device the way a storage probe can.
    spec.own_thread = false;
    // Link state changes rarely, and reading it can runtime-resume a device
    // (see pcie_collector.hpp): not more often than this by default.
    spec.default_interval = std::chrono::seconds(30);
    spec.default_timeout = std::chrono::seconds(10);
    // No options: spec.read_options stays empty, so any key besides enabled,
    // interval and timeout is reported as unknown.
    spec.metrics = pcie::pcie_metric_table;
    spec.create = [](const CollectorEnv& env) -> std::unique_ptr<Collector> {
      return std::make_unique<pcie::PcieCollector>(env.roots);
    };
    return spec;
  }();
  return kSpec;
}

}  // namespace nodewatch
