#include "pcie/pcie_collector.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "pcie/pcie_metrics.hpp"

namespace nodewatch {
namespace pcie {
namespace {

using sources::Read;
using sources::Status;

constexpr std::string_view kDevicesDir = "bus/pci/devices";

const MetricTable& pcie_metric_table() {
  static const MetricTable kTable(
      {describe(families::kLinkSpeedTransfersPerSecond),
       describe(families::kLinkMaxSpeedTransfersPerSecond), describe(families::kLinkWidth),
       describe(families::kLinkMaxWidth), describe(families::kLinkWidthDegraded),
       describe(families::kAerErrorsTotal), describe(families::kAerDetailErrorsTotal),
       describe(families::kDeviceInfo)});
  return kTable;
}

// "../../../bus/pci/drivers/nvidia" -> "nvidia".
std::string basename_of(std::string_view path) {
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  std::size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// "devices/pci0000:00/0000:00:01.0" -> "devices/pci0000:00"; "" at the top.
std::string parent_of(std::string_view dir) {
  std::size_t slash = dir.rfind('/');
  return slash == std::string_view::npos ? std::string() : std::string(dir.substr(0, slash));
}

// "EIO reading current_link_speed".
std::string reading(const Read& r, std::string_view name) {
  return r.error_name() + " reading " + std::string(name);
}

std::string malformed(std::string_view name) {
  return "malformed " + std::string(name);
}

}  // namespace

ReadResult read_identity(const sources::FsRoot& root, const std::string& dir,
                         FunctionIdentity* identity, std::vector<Problem>* problems) {
  // Every PCI function has `vendor` and `device`: their absence means the
  // function has gone.
  auto required = [&](std::string_view name, std::string* text) -> std::optional<ReadResult> {
    Read r = root.read(dir + "/" + std::string(name));
    if (r.ok()) {
      *text = std::move(r.text);
      return std::nullopt;
    }
    if (!r.failed()) return ReadResult::kGone;
    problems->push_back({"read_error", reading(r, name)});
    return ReadResult::kError;
  };
  std::string vendor_text;
  std::string device_text;
  if (auto r = required("vendor", &vendor_text)) return *r;
  if (auto r = required("device", &device_text)) return *r;
  std::optional<std::string> vendor = parse_pci_id(vendor_text);
  std::optional<std::string> device = parse_pci_id(device_text);
  if (!vendor || !device) {
    problems->push_back({"parse_error", malformed(vendor ? "device" : "vendor")});
    return ReadResult::kError;
  }
  identity->vendor_id = std::move(*vendor);
  identity->device_id = std::move(*device);
  // No driver bound: no link, and the label is "".
  Read driver = root.readlink(dir + "/driver");
  identity->driver = driver.ok() ? basename_of(driver.text) : std::string();
  if (driver.failed()) problems->push_back({"read_error", reading(driver, "driver")});
  identity->numa_node.clear();
  Read numa = root.read(dir + "/numa_node");
  if (numa.status == Status::kGone) return ReadResult::kGone;
  if (numa.failed()) problems->push_back({"read_error", reading(numa, "numa_node")});
  if (numa.ok()) {
    if (std::optional<std::string> node = parse_numa_node(numa.text)) {
      identity->numa_node = std::move(*node);
    } else {
      problems->push_back({"parse_error", malformed("numa_node")});
    }
  }
  return ReadResult::kOk;
}

const AerParses::Parse& AerParses::of(const std::string& path, const std::string& text) {
  Entry& e = entries_[path];
  if (e.cycle == 0 || e.text != text) {
    e.text = text;
    e.parse.counts = parse_aer_stats(text, &e.parse.total);
    if (!e.parse.counts) e.parse.total.reset();
  }
  e.cycle = cycle_ + 1;  // never 0 once parsed
  return e.parse;
}

void AerParses::end_cycle() {
  std::erase_if(entries_, [&](const auto& kv) { return kv.second.cycle != cycle_ + 1; });
}

ReadResult read_link_state(sources::HeldFiles& files, const std::string& dir,
                           FunctionRecord* record, AerParses* aer, AttributeMemory* memory) {
  // An attribute this function may lack: true with `text` filled; false
  // when it is absent or unreadable (a problem), or the function went away.
  bool gone = false;
  bool absent = false;
  std::string text;
  int index = -1;  // of the attribute, in AttributeMemory's order
  auto read_optional = [&](std::string_view name) -> bool {
    const auto bit = static_cast<std::uint16_t>(1u << ++index);
    if (gone) return false;
    if (memory != nullptr && (memory->lacked & bit) != 0) return false;
    Read r = files.read(dir + "/" + std::string(name));
    if (memory != nullptr) {
      if (r.status == Status::kAbsent && (memory->present & bit) == 0) memory->lacked |= bit;
      if (r.status != Status::kAbsent) memory->present |= bit;
    }
    switch (r.status) {
      case Status::kOk: text = std::move(r.text); return true;
      case Status::kAbsent: absent = true; break;
      case Status::kGone: gone = true; break;
      case Status::kError: record->problems.push_back({"read_error", reading(r, name)}); break;
    }
    return false;
  };

  // Reading the link attributes of a runtime-suspended function would wake
  // it (see the header); power/ is absent without CONFIG_PM.
  record->runtime_suspended = read_optional("power/runtime_status") && trim(text) == "suspended";
  if (record->runtime_suspended) {
    index += 4;  // the link attributes, not read
  } else {
    auto speed = [&](std::string_view name, std::optional<double>* out) {
      if (!read_optional(name)) return;
      LinkSpeed s = parse_link_speed(text);
      if (s.reading == Reading::kValue) *out = s.transfers_per_second;
      if (s.reading == Reading::kMalformed)
        record->problems.push_back({"parse_error", malformed(name)});
    };
    auto width = [&](std::string_view name, std::optional<unsigned>* out) {
      if (!read_optional(name)) return;
      LinkWidth w = parse_link_width(text);
      if (w.reading == Reading::kValue) *out = w.lanes;
      if (w.reading == Reading::kMalformed)
        record->problems.push_back({"parse_error", malformed(name)});
    };
    speed("current_link_speed", &record->speed);
    speed("max_link_speed", &record->max_speed);
    width("current_link_width", &record->width);
    width("max_link_width", &record->max_width);
  }

  for (std::size_t i = 0; i < kAerFiles.size(); ++i) {
    if (!read_optional(kAerFiles[i])) continue;
    if (aer != nullptr) {
      const AerParses::Parse& p = aer->of(dir + "/" + std::string(kAerFiles[i]), text);
      record->aer[i] = p.counts;
      record->aer_total[i] = p.total;
    } else {
      record->aer[i] = parse_aer_stats(text, &record->aer_total[i]);
    }
    if (!record->aer[i]) record->problems.push_back({"parse_error", malformed(kAerFiles[i])});
  }

  if (gone) return ReadResult::kGone;
  // An attribute that went missing may have been a device removed under us
  // rather than an attribute this function lacks.
  if (absent) {
    Read vendor = files.root().read(dir + "/vendor");
    if (vendor.status == Status::kAbsent || vendor.status == Status::kGone)
      return ReadResult::kGone;
  }
  return ReadResult::kOk;
}

ReadResult read_function(sources::HeldFiles& files, const std::string& dir,
                         FunctionRecord* record) {
  Read cls = files.root().read(dir + "/class");
  if (cls.status == Status::kAbsent || cls.status == Status::kGone) return ReadResult::kGone;
  if (cls.failed()) {
    record->problems.push_back({"read_error", reading(cls, "class")});
    return ReadResult::kError;
  }
  if (!parse_pci_class(cls.text)) {
    record->problems.push_back({"parse_error", malformed("class")});
    return ReadResult::kError;
  }
  record->class_id = std::string(trim(cls.text));
  ReadResult r = read_identity(files.root(), dir, &record->identity, &record->problems);
  if (r != ReadResult::kOk) return r;
  return read_link_state(files, dir, record);
}

PcieCollector::PcieCollector(Roots roots, PcieOptions options, std::size_t max_held)
    : options_(options), sys_(roots.sys()), held_(sys_, max_held), facts_(kFactsRefreshCycles) {}

const MetricTable& PcieCollector::metrics() const {
  return pcie_metric_table();
}

std::vector<std::string> PcieCollector::list_functions() const {
  sources::Listing l = sys_.list(kDevicesDir);
  // ENOENT: no PCI on this node. ENOTDIR (something else in its place) is
  // not that.
  if (!l.ok() && l.err == ENOENT) return {};
  if (!l.ok()) {
    throw CollectError("read_error",
                       "cannot list " + sys_.full(kDevicesDir) + ": " + sources::errno_name(l.err));
  }
  std::vector<std::string> out;
  for (std::string& name : l.names) {
    if (is_bdf(name)) out.push_back(std::move(name));
  }
  return out;
}

void PcieCollector::collect(const CollectContext& ctx, MetricSink& out) {
  collect_functions(list_functions(), ctx, out);
}

// Reads (when due) the facts step 1 needs of `bdf`: its real directory
// (facts.dir set by the caller for a port met on a walk), class and
// physfn. Counts what failed, with the function as the subject.
PcieCollector::FactsResult PcieCollector::read_class_facts(const std::string& bdf, Facts& facts,
                                                           MetricSink& out) {
  if (facts.class_read) return facts.pci_class ? FactsResult::kOk : FactsResult::kError;
  if (facts.listed) {
    const std::string link = std::string(kDevicesDir) + "/" + bdf;
    Read real = sys_.resolve(link);
    if (real.ok()) {
      facts.dir = std::move(real.text);
    } else if (real.err == EINVAL) {
      facts.dir = link;  // a plain directory (a copy of sysfs): no ports above it
    } else if (!real.failed()) {
      return FactsResult::kGone;  // a dangling link: gone after the listing
    } else {
      // Real sysfs links are relative; one that leads out of the root is
      // not followed, so that nothing outside the configured root is read.
      out.error("read_error", bdf,
                real.err == EXDEV ? link + " leads out of the sysfs root" : reading(real, link));
      return FactsResult::kError;
    }
  }
  Read cls = sys_.read(facts.dir + "/class");
  if (cls.status == Status::kAbsent || cls.status == Status::kGone) return FactsResult::kGone;
  if (cls.failed()) {
    out.error("read_error", bdf, reading(cls, "class"));
    return FactsResult::kError;
  }
  facts.class_text = std::string(trim(cls.text));
  facts.pci_class = parse_pci_class(cls.text);
  if (!facts.pci_class) {
    out.error("parse_error", bdf, malformed("class"));
    return FactsResult::kError;
  }
  facts.virtual_function = sys_.readlink(facts.dir + "/physfn").ok();
  facts.class_read = true;
  return FactsResult::kOk;
}

// A function met in one collection: a selected device or a port above one.
struct PcieCollector::Node {
  std::string dir;  // the real directory
  DeviceKind kind = DeviceKind::kBridge;
  bool selected = false;
  std::string upstream;  // BDF of the port above, "" at a root
  FunctionRecord record;
  bool ok = false;
};

struct PcieCollector::Cycle {
  std::map<std::string, Node, std::less<>> nodes;  // by BDF, so output is sorted
  // Functions whose class could not be had: counted once, not again in step 2.
  std::set<std::string, std::less<>> failed;

  // How many watched ports are above `node`.
  std::size_t depth(const Node& node) const {
    std::size_t depth = 0;
    for (auto it = nodes.find(node.upstream); it != nodes.end() && depth < 64;
         it = nodes.find(it->second.upstream))
      ++depth;
    return depth;
  }
};

// The facts of `bdf`, read when new or due; nullptr when it vanished or
// its class could not be had (counted, and read again next time).
PcieCollector::Facts* PcieCollector::facts_of(const std::string& bdf, bool listed,
                                              const std::string& dir, Cycle& cycle,
                                              MetricSink& out) {
  auto seen = facts_.see(bdf);
  Facts& f = seen.entry;
  if (seen.refresh) f = Facts{};
  if (!f.class_read) {
    f.listed = listed;
    if (!listed) f.dir = dir;
  }
  switch (read_class_facts(bdf, f, out)) {
    case FactsResult::kOk: return &f;
    case FactsResult::kGone: facts_.forget(bdf); return nullptr;
    case FactsResult::kError:
      facts_.invalidate(bdf);
      cycle.failed.insert(bdf);
      return nullptr;
  }
  return nullptr;
}

// 1. Selects by class, and finds each selected function's ports.
bool PcieCollector::select_functions(const std::vector<std::string>& bdfs,
                                     const CollectContext& ctx, Cycle& cycle, MetricSink& out) {
  for (const std::string& bdf : bdfs) {
    if (ctx.should_stop()) return false;
    const Facts* f = facts_of(bdf, true, {}, cycle, out);
    if (f == nullptr) continue;
    std::optional<DeviceKind> kind = classify(*f->pci_class);
    if (!kind) continue;
    // A virtual function shares its physical function's link; exporting
    // every VF of an SR-IOV NIC would only multiply series. (Inside a VM a
    // passed-through VF has no physfn link and is exported.)
    if (f->virtual_function) continue;
    auto [it, inserted] = cycle.nodes.try_emplace(bdf);
    Node* node = &it->second;
    node->dir = f->dir;
    node->kind = *kind;
    node->selected = true;
    if (!inserted) continue;  // already met as a port: its ports are known
    for (std::string up = parent_of(f->dir); is_bdf(basename_of(up)); up = parent_of(up)) {
      node->upstream = basename_of(up);
      auto [port, added] = cycle.nodes.try_emplace(node->upstream);
      if (!added) break;  // the rest of the path was walked from another device
      port->second.dir = up;
      node = &port->second;
    }
  }
  return true;
}

// 2. Reads every function, selected devices and ports alike.
bool PcieCollector::read_functions(const std::vector<std::string>& bdfs, const CollectContext& ctx,
                                   Cycle& cycle, MetricSink& out) {
  const std::set<std::string_view, std::less<>> listed(bdfs.begin(), bdfs.end());
  for (auto& [bdf, node] : cycle.nodes) {
    if (ctx.should_stop()) return false;
    if (cycle.failed.contains(bdf)) continue;
    // A port that is not listed itself (it always is in real sysfs) is read
    // through the directory its walk found.
    Facts* f = node.selected ? facts_.find(bdf)
                             : facts_of(bdf, listed.contains(bdf), node.dir, cycle, out);
    if (f != nullptr) read_node(bdf, node, *f, out);
  }
  return true;
}

// Reads one function's identity (when not yet known) and link state into
// node.record; node.ok when it is to be emitted.
void PcieCollector::read_node(const std::string& bdf, Node& node, Facts& f, MetricSink& out) {
  if (!f.identity_read) {
    ReadResult r = read_identity(sys_, node.dir, &f.identity, &node.record.problems);
    if (r == ReadResult::kGone) {
      facts_.forget(bdf);
      return;
    }
    if (r == ReadResult::kError) {
      for (const Problem& p : node.record.problems) out.error(p.reason, bdf, p.detail);
      facts_.invalidate(bdf);
      return;
    }
    // A fact that failed is read again next time, so that it is counted
    // while it lasts.
    if (!node.record.problems.empty()) facts_.invalidate(bdf);
    f.identity_read = true;
  }
  node.record.class_id = f.class_text;
  node.record.identity = f.identity;
  ReadResult r = read_link_state(held_, node.dir, &node.record, &aer_, &f.attributes);
  if (r == ReadResult::kGone) {
    facts_.forget(bdf);
    return;
  }
  for (const Problem& p : node.record.problems) out.error(p.reason, bdf, p.detail);
  node.ok = r == ReadResult::kOk;
}

// 3. Emits one function that was read.
void PcieCollector::emit_node(const std::string& bdf, const Node& node, const Cycle& cycle,
                              MetricSink& out) const {
  const FunctionRecord& rec = node.record;
  const std::string_view device = bdf;
  if (rec.speed) out.add(families::kLinkSpeedTransfersPerSecond, {device}, *rec.speed);
  if (rec.max_speed) out.add(families::kLinkMaxSpeedTransfersPerSecond, {device}, *rec.max_speed);
  if (rec.width) out.add(families::kLinkWidth, {device}, static_cast<double>(*rec.width));
  if (rec.max_width)
    out.add(families::kLinkMaxWidth, {device}, static_cast<double>(*rec.max_width));
  // A function's link status describes the link to the port above it
  // when it faces upstream: an endpoint, or a switch's upstream port.
  // Those sit at an odd depth below the root port (root port 0, switch
  // upstream port 1, switch downstream port 2, endpoint 3); a downstream
  // port's status describes the link below it, which the function under
  // it reports already. So a switch uplink that trained narrow is flagged
  // on the switch's upstream port, even when every link below is x16.
  bool faces_upstream = cycle.depth(node) % 2 == 1;
  if ((node.selected || faces_upstream) && !node.upstream.empty()) {
    auto up = cycle.nodes.find(node.upstream);
    if (up != cycle.nodes.end() && up->second.ok) {
      std::optional<bool> degraded =
          link_width_degraded(rec.width, rec.max_width, up->second.record.max_width);
      if (degraded) out.add(families::kLinkWidthDegraded, {device}, *degraded ? 1.0 : 0.0);
    }
  }
  for (std::size_t i = 0; i < kAerFiles.size(); ++i) {
    if (!rec.aer[i]) continue;
    out.add(families::kAerErrorsTotal, {device, kAerSeverities[i]},
            static_cast<double>(aer_severity_total(*rec.aer[i], rec.aer_total[i])));
    if (!options_.aer_detail) continue;
    for (const AerCount& c : *rec.aer[i]) {
      out.add(families::kAerDetailErrorsTotal, {device, kAerSeverities[i], c.error},
              static_cast<double>(c.count));
    }
  }
  out.add(families::kDeviceInfo,
          {device, rec.identity.vendor_id, rec.identity.device_id, rec.class_id,
           rec.identity.driver, rec.identity.numa_node, kind_name(node.kind), node.upstream},
          1.0);
}

void PcieCollector::collect_functions(const std::vector<std::string>& bdfs,
                                      const CollectContext& ctx, MetricSink& out) {
  Cycle cycle;
  facts_.begin_cycle();
  held_.begin_cycle();
  aer_.begin_cycle();
  if (!select_functions(bdfs, ctx, cycle, out)) return;
  if (!read_functions(bdfs, ctx, cycle, out)) return;
  facts_.end_cycle();
  held_.end_cycle();
  aer_.end_cycle();
  for (const auto& [bdf, node] : cycle.nodes) {
    if (node.ok) emit_node(bdf, node, cycle, out);
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
    // Link state changes rarely, and reading it can runtime-resume a device
    // (see pcie_collector.hpp): not more often than this by default.
    spec.default_interval = std::chrono::seconds(30);
    spec.default_timeout = std::chrono::seconds(10);
    spec.read_options = typed_options<pcie::PcieOptions>([](OptionReader& r) {
      pcie::PcieOptions o;
      o.aer_detail =
          r.get_bool("aer_detail", o.aer_detail,
                     "also export every AER error bit per function and severity "
                     "(`nodewatch_pcie_aer_detail_errors_total`, ~44 series per function); the "
                     "per-severity totals are always exported");
      return o;
    });
    spec.metrics = pcie::pcie_metric_table;
    spec.create = [](const CollectorEnv& env) -> std::unique_ptr<Collector> {
      return std::make_unique<pcie::PcieCollector>(env.roots, env.options_as<pcie::PcieOptions>());
    };
    return spec;
  }();
  return kSpec;
}

}  // namespace nodewatch
