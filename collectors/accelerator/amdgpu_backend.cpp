#include "accelerator/amdgpu_backend.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "accelerator/amdgpu_parse.hpp"
#include "nodewatch/sources/device_table.hpp"
#include "nodewatch/sources/fs.hpp"

namespace nodewatch::accelerator {
namespace {

using sources::Read;
using sources::Status;

// hwmon units: millidegrees Celsius, microwatts.
constexpr double kMilliPerUnit = 1e3;
constexpr double kMicroPerUnit = 1e6;

constexpr const char* kReadError = "read_error";
constexpr const char* kParseError = "parse_error";
// A value that parses but cannot be (a temperature below absolute zero).
constexpr const char* kOutOfRange = "out_of_range";
// hwmon's millidegree temperatures a sensor can report: above absolute
// zero, below what any silicon survives.
constexpr double kMinCelsius = -273.15;
constexpr double kMaxCelsius = 1000.0;
// A gpu_metrics table this backend does not understand (an unknown version
// or size, a malformed v1_9), and one shorter than its header says: see
// amdgpu_backend.hpp.
constexpr const char* kGpuMetricsLayout = "gpu_metrics_layout";
constexpr const char* kGpuMetricsTruncated = "gpu_metrics_truncated";
// KFD's process list (see amdgpu_backend.hpp): a file that does not parse,
// a gpu_id that names no card here, more process directories than are read.
constexpr const char* kKfdParse = "kfd_parse";
constexpr const char* kKfdUnknownGpu = "kfd_unknown_gpu";
constexpr const char* kKfdLimit = "kfd_limit";
constexpr const char* kKfdProc = "class/kfd/kfd/proc";
constexpr const char* kKfdNodes = "class/kfd/kfd/topology/nodes";

// The last component of a PCI function's directory, lower case: its bus id
// ("devices/pci0000:c0/0000:c0:01.1/0000:C1:00.0" -> "0000:c1:00.0").
std::string pci_bus_id_of(std::string_view device_dir) {
  std::size_t slash = device_dir.rfind('/');
  std::string id(device_dir.substr(slash == std::string_view::npos ? 0 : slash + 1));
  std::transform(id.begin(), id.end(), id.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return id;
}

// "hwmon3" -> 3.
std::optional<unsigned> hwmon_number(std::string_view name) {
  constexpr std::string_view kPrefix = "hwmon";
  if (name.size() <= kPrefix.size() || name.substr(0, kPrefix.size()) != kPrefix) {
    return std::nullopt;
  }
  unsigned n = 0;
  for (char c : name.substr(kPrefix.size())) {
    if (c < '0' || c > '9' || n > 100000) return std::nullopt;
    n = n * 10 + static_cast<unsigned>(c - '0');
  }
  return n;
}

// "temp2_input" -> 2.
std::optional<unsigned> temp_input_channel(std::string_view name) {
  constexpr std::string_view kPrefix = "temp";
  constexpr std::string_view kSuffix = "_input";
  if (name.size() <= kPrefix.size() + kSuffix.size() || name.substr(0, kPrefix.size()) != kPrefix ||
      name.substr(name.size() - kSuffix.size()) != kSuffix) {
    return std::nullopt;
  }
  std::string_view digits =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  unsigned n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9' || n > 1000) return std::nullopt;
    n = n * 10 + static_cast<unsigned>(c - '0');
  }
  return n;
}

// What a card is, read now and then (see the header).
struct CardFacts {
  bool amd = false;     // a PCI device of AMD's bound to amdgpu
  bool failed = false;  // a fact could not be read: read them again next time
  std::string device;   // the PCI function's directory, below the sysfs root
  std::string pci_bus_id;
  std::string uuid;
  std::string model;
  std::string serial;
  std::string vbios;
  std::string hwmon;  // device/hwmon/hwmon<M>, "" when none
  std::set<std::string, std::less<>> hwmon_names;
  // temp<N>_input channel -> sensor ("junction"), for the channels that can be named.
  std::map<unsigned, std::string> temperatures;
  // freq<N>_input channel -> clock ("graphics", "memory").
  std::map<unsigned, std::string> clocks;
  std::vector<DeviceError> errors;  // counted with each sample while `failed`
};

// Reads one card's files, recording partial failures in `errors` and
// noticing when the device goes away.
class CardReader {
 public:
  CardReader(sources::HeldFiles& held, std::vector<DeviceError>& errors)
      : held_(held), errors_(errors) {}

  bool gone() const { return gone_; }
  // Some file answered ENOENT: the card may have gone (a real removal
  // makes the remaining reads fail so), or lack that file.
  bool absent_seen() const { return absent_; }
  // A listing of the card's answered ENODEV.
  void gone_now() { gone_ = true; }

  // The contents of `rel` through a held descriptor (`held`), or one plain
  // read; nullopt with the failure recorded (see the failure contract).
  std::optional<std::string> read(const std::string& rel, bool held = true) {
    if (gone_) return std::nullopt;
    Read r = held ? held_.read(rel) : held_.root().read(rel);
    switch (r.status) {
      case Status::kOk: return std::move(r.text);
      case Status::kAbsent: absent_ = true; break;
      case Status::kGone: gone_ = true; break;
      case Status::kError:
        if (!amdgpu::is_unavailable_errno(r.err))
          errors_.emplace_back(kReadError, r.error_name() + " reading " + rel);
        break;
    }
    return std::nullopt;
  }

  // `rel` read and given to `parse`; a value that does not parse is a parse_error.
  template <typename Parse>
  auto parsed(const std::string& rel, Parse parse) -> decltype(parse(std::string_view())) {
    std::optional<std::string> text = read(rel);
    if (!text) return std::nullopt;
    auto value = parse(std::string_view(*text));
    if (!value) errors_.emplace_back(kParseError, "cannot parse " + rel);
    return value;
  }

  // A decimal attribute in base units: the raw value over `divisor` (1e6 for
  // microwatts; dividing keeps 612000000 uW exactly 612 W).
  std::optional<double> number(const std::string& rel, double divisor = 1.0) {
    std::optional<std::uint64_t> v = parsed(rel, amdgpu::parse_u64);
    if (!v) return std::nullopt;
    return static_cast<double>(*v) / divisor;
  }

  std::optional<double> signed_number(const std::string& rel, double divisor) {
    std::optional<std::int64_t> v = parsed(rel, amdgpu::parse_i64);
    if (!v) return std::nullopt;
    return static_cast<double>(*v) / divisor;
  }

  // A label-like fact ("AMD Instinct MI210\n"), "" when unreadable.
  std::string label(const std::string& rel) {
    std::optional<std::string> text = read(rel, false);
    return text ? amdgpu::label_value(*text) : std::string();
  }

  void error(const char* reason, std::string detail) {
    errors_.emplace_back(reason, std::move(detail));
  }

 private:
  sources::HeldFiles& held_;
  std::vector<DeviceError>& errors_;
  bool gone_ = false;
  bool absent_ = false;
};

class AmdgpuBackend final : public Backend {
 public:
  explicit AmdgpuBackend(const Roots& roots)
      : sys_(roots.sys()), held_(sys_), cards_(kCardFactsRefreshCycles) {}

  std::string_view name() const override { return "amdgpu"; }
  std::vector<DeviceSample> sample(const CollectContext& ctx) override;
  // Said where an AMD GPU is on the bus or amdgpu showed one, and from
  // then on for the backend's life (the series do not vanish when a
  // collection finds fewer cards): up when amdgpu holds every one on the
  // bus.
  DriverState driver_state() override {
    DriverState d;
    d.vendor = "amd";
    d.states = kAmdStates;
    const std::vector<PciFunction>& gpus = gpus_.read(sys_);
    d.devices = static_cast<int>(std::max(gpus.size(), cards_found_));
    known_ = known_ || d.devices > 0;
    d.known = known_;
    d.up = std::all_of(gpus.begin(), gpus.end(),
                       [](const PciFunction& f) { return f.driver == "amdgpu"; });
    d.state = d.up ? kAmdStates[0] : kAmdStates[1];
    if (!known_) return d;  // no AMD GPU: no look at the module
    if (std::optional<std::string> v = module_version(sys_, "amdgpu")) module_ = std::move(*v);
    d.module_version = module_;
    return d;
  }

 private:
  enum class FactsResult { kOk, kNotAmd, kGone };
  FactsResult read_facts(const std::string& card, CardFacts& facts);
  void read_hwmon_facts(CardFacts& facts, CardReader& r);
  bool is_amdgpu_card(const std::string& card, bool* unsure);
  std::optional<DeviceSample> read_card(const CardFacts& facts, unsigned index);
  void read_hwmon(const CardFacts& facts, CardReader& r, DeviceSample& d);
  void read_kfd_processes(const CollectContext& ctx, std::vector<DeviceSample>& devices);
  std::map<std::uint32_t, std::size_t> kfd_gpus(const std::vector<DeviceSample>& devices,
                                                std::vector<DeviceError>& errors);
  std::optional<std::size_t> kfd_node_device(
      const amdgpu::KfdNodeLocation& loc,
      const std::map<std::string, std::size_t, std::less<>>& by_bus);

  sources::FsRoot sys_;
  PciFunctions gpus_{"0x1002"};
  std::size_t cards_found_ = 0;  // by the last sample(): amdgpu's cards answer
  bool known_ = false;
  std::string module_;  // amdgpu's version as last read
  sources::HeldFiles held_;
  sources::DeviceTable<CardFacts> cards_;
  std::string driver_version_;
  std::uint64_t version_age_ = kCardFactsRefreshCycles;  // collections since it was read
};

bool AmdgpuBackend::is_amdgpu_card(const std::string& card, bool* unsure) {
  const std::string device = "class/drm/" + card + "/device";
  // No vendor file: not a PCI device (simpledrm, a virtual card), or gone.
  // One that cannot be read is asked again next time.
  Read vendor = sys_.read(device + "/vendor");
  *unsure = vendor.failed();
  if (!vendor.ok() || amdgpu::parse_pci_id(vendor.text) != amdgpu::kAmdVendorId) return false;
  Read driver = sys_.readlink(device + "/driver");
  if (driver.ok()) {
    std::string_view target = driver.text;
    std::size_t slash = target.rfind('/');
    return target.substr(slash == std::string_view::npos ? 0 : slash + 1) ==
           "amdgpu";  // radeon drives older AMD GPUs
  }
  // No driver link (a container's copy of sysfs): amdgpu's own files decide.
  return sys_.read(device + "/gpu_busy_percent").status != Status::kAbsent ||
         sys_.read(device + "/mem_info_vram_total").status != Status::kAbsent;
}

// "class/drm/card2" -> "devices/pci0000:00/0000:00:01.1/0000:05:00.0/drm/card2"; a
// directory that is not a link stays as it is.
std::optional<std::string> resolve_dir(const sources::FsRoot& root, const std::string& rel) {
  Read r = root.resolve(rel);
  if (r.ok()) return std::move(r.text);
  if (r.err == EINVAL) return rel;
  return std::nullopt;
}

AmdgpuBackend::FactsResult AmdgpuBackend::read_facts(const std::string& card, CardFacts& facts) {
  facts = CardFacts{};
  if (!is_amdgpu_card(card, &facts.failed)) return FactsResult::kNotAmd;
  facts.amd = true;
  // class/drm/card<N> -> .../0000:c1:00.0/drm/card<N>, whose device link
  // leads back up to the PCI function.
  std::optional<std::string> card_dir = resolve_dir(sys_, "class/drm/" + card);
  std::optional<std::string> device =
      card_dir ? resolve_dir(sys_, *card_dir + "/device") : std::nullopt;
  if (!device) return FactsResult::kGone;
  facts.device = std::move(*device);
  facts.pci_bus_id = pci_bus_id_of(facts.device);
  const std::string dir = facts.device + "/";

  CardReader r(held_, facts.errors);
  std::string unique_id = r.label(dir + "unique_id");
  facts.uuid = "amd-" + (unique_id.empty() ? facts.pci_bus_id : unique_id);
  facts.model = r.label(dir + "product_name");
  if (facts.model.empty()) {
    // No FRU EEPROM (or not readable by this kernel): name the device id.
    std::optional<std::string> id_text = r.read(dir + "device", false);
    std::optional<std::uint32_t> id = id_text ? amdgpu::parse_pci_id(*id_text) : std::nullopt;
    if (id) {
      std::array<char, 16> buf{};
      std::snprintf(buf.data(), buf.size(), "0x%04x", *id);
      facts.model = std::string("AMD ") + buf.data();
    } else {
      facts.model = "AMD";
    }
  }
  facts.serial = r.label(dir + "serial_number");
  facts.vbios = r.label(dir + "vbios_version");
  read_hwmon_facts(facts, r);
  if (r.gone()) return FactsResult::kGone;
  if (!facts.errors.empty()) facts.failed = true;
  return FactsResult::kOk;
}

void AmdgpuBackend::read_hwmon_facts(CardFacts& facts, CardReader& r) {
  // device/hwmon/hwmon<M>: amdgpu registers one hwmon device per GPU.
  std::optional<unsigned> lowest;
  sources::Listing hwmons = sys_.list(facts.device + "/hwmon");
  if (hwmons.status == Status::kGone) r.gone_now();
  for (const std::string& name : hwmons.names) {
    std::optional<unsigned> n = hwmon_number(name);
    if (n && (!lowest || *n < *lowest)) {
      lowest = n;
      facts.hwmon = facts.device + "/hwmon/" + name;
    }
  }
  if (!lowest) return;
  // The driver creates only the attributes the ASIC supports (GC 9.4.3 has no
  // temp1, "edge"): list them once rather than probe for each.
  sources::Listing names = sys_.list(facts.hwmon);
  if (names.status == Status::kGone) r.gone_now();
  if (names.status == Status::kError) facts.failed = true;  // listed again next time
  facts.hwmon_names.insert(names.names.begin(), names.names.end());
  auto has = [&](const std::string& name) { return facts.hwmon_names.count(name) != 0; };
  const std::string dir = facts.hwmon + "/";

  for (const std::string& name : facts.hwmon_names) {
    std::optional<unsigned> channel = temp_input_channel(name);
    if (!channel) continue;
    const std::string label_file = "temp" + std::to_string(*channel) + "_label";
    std::string label;
    if (has(label_file)) {
      std::optional<std::string> text = r.read(dir + label_file, false);
      if (!text) {
        // A channel whose label cannot be read cannot be named: not now,
        // and the label is asked again next time.
        facts.failed = true;
        continue;
      }
      label = *text;
    }
    if (std::optional<std::string> sensor = amdgpu::temperature_sensor(label, *channel))
      facts.temperatures.emplace(*channel, *sensor);
  }

  for (unsigned channel : {1u, 2u}) {
    const std::string base = "freq" + std::to_string(channel);
    if (!has(base + "_input")) continue;
    std::string clock = channel == 1 ? "graphics" : "memory";
    if (has(base + "_label")) {
      std::optional<std::string> text = r.read(dir + base + "_label", false);
      if (!text) {
        facts.failed = true;
        continue;
      }
      std::string_view label = amdgpu::trim(*text);
      if (label == "sclk") {
        clock = "graphics";
      } else if (label == "mclk") {
        clock = "memory";
      } else {
        continue;  // a clock domain this backend does not know
      }
    }
    facts.clocks.emplace(channel, clock);
  }
}

std::vector<DeviceSample> AmdgpuBackend::sample(const CollectContext& ctx) {
  std::vector<DeviceSample> out;
  std::vector<std::pair<unsigned, std::string>> cards;  // by card number: card2 before card10
  for (const std::string& name : sys_.list("class/drm").names) {
    if (std::optional<unsigned> n = amdgpu::parse_card_number(name)) cards.emplace_back(*n, name);
  }
  std::sort(cards.begin(), cards.end());
  cards_.begin_cycle();
  held_.begin_cycle();
  ++version_age_;
  unsigned index = 0;
  bool complete = true;
  for (const auto& [number, name] : cards) {
    if (ctx.should_stop()) {
      complete = false;
      break;
    }
    auto [facts, refresh] = cards_.see(name);
    // Facts that failed are read again, so that the failure is counted
    // while it lasts.
    if (refresh || facts.failed) {
      if (read_facts(name, facts) == FactsResult::kGone) {
        if (facts.amd) ++index;  // an AMD card's place, as below
        cards_.forget(name);
        continue;
      }
    }
    if (!facts.amd) continue;
    if (version_age_ >= kCardFactsRefreshCycles) {
      // Only DKMS (ROCm) builds of amdgpu set a module version; the in-tree
      // driver is versioned by the kernel.
      Read version = sys_.read("module/amdgpu/version");
      driver_version_ = version.ok() ? amdgpu::label_value(version.text) : std::string();
      version_age_ = 0;
    }
    // The ordinal among AMD cards: a card skipped below keeps its place.
    if (std::optional<DeviceSample> d = read_card(facts, index++)) {
      d->drm_card = number;
      out.push_back(std::move(*d));
    } else {
      cards_.forget(name);
    }
  }
  if (complete) {
    cards_.end_cycle();
    held_.end_cycle();
    if (!out.empty()) read_kfd_processes(ctx, out);
  }
  cards_found_ = out.size();
  return out;
}

void AmdgpuBackend::read_kfd_processes(const CollectContext& ctx,
                                       std::vector<DeviceSample>& devices) {
  // What concerns no one device is counted with the first.
  std::vector<DeviceError>& general = devices.front().errors;
  const std::string proc = kKfdProc;
  sources::Listing pids = sys_.list(proc);
  if (pids.status == Status::kError) {
    general.emplace_back(kReadError, sources::errno_name(pids.err) + " listing " + proc);
  }
  if (!pids.ok()) return;  // no KFD: the processes are not known
  for (DeviceSample& d : devices) d.processes.emplace();
  if (pids.names.empty()) return;  // nothing on any GPU: the topology is not needed
  const std::map<std::uint32_t, std::size_t> gpus = kfd_gpus(devices, general);
  if (gpus.empty()) {
    // No GPU's gpu_id could be read from the topology: whose the
    // processes are is not known, which is not "no process" (counted by
    // kfd_gpus).
    for (DeviceSample& d : devices) d.processes.reset();
    return;
  }

  std::vector<std::map<unsigned, double>> memory(devices.size());  // per device: pid -> bytes
  std::map<std::uint32_t, std::size_t> unknown;                    // gpu_id -> processes
  std::size_t seen = 0;
  for (const std::string& name : pids.names) {
    std::optional<unsigned> pid = amdgpu::parse_kfd_pid(name);
    if (!pid || ++seen > kMaxKfdProcesses) continue;
    if (ctx.should_stop()) {
      // A list cut short would say "no process" of the GPUs not reached.
      for (DeviceSample& d : devices) d.processes.reset();
      return;
    }
    const std::string dir = proc + "/" + name;
    sources::Listing files = sys_.list(dir);
    if (files.status == Status::kError) {
      general.emplace_back(kReadError, sources::errno_name(files.err) + " listing " + dir);
    }
    if (!files.ok()) continue;  // the process ended since the listing
    // Kept until the whole directory was read: a process that ends on the
    // way leaves nothing, not half of its GPUs.
    std::vector<std::pair<std::size_t, double>> found;
    std::vector<std::pair<std::size_t, DeviceError>> problems;
    std::set<std::uint32_t> unknown_here;
    bool ended = false;
    for (const std::string& file : files.names) {
      std::optional<std::uint32_t> gpu = amdgpu::parse_kfd_vram_gpu_id(file);
      if (!gpu) continue;
      auto it = gpus.find(*gpu);
      if (it == gpus.end()) {
        unknown_here.insert(*gpu);
        continue;
      }
      const std::string rel = dir + "/" + file;
      Read r = sys_.read(rel);
      if (r.status == Status::kAbsent || r.status == Status::kGone) {
        ended = true;
        break;
      }
      if (r.failed()) {
        problems.emplace_back(it->second,
                              DeviceError(kReadError, r.error_name() + " reading " + rel));
        continue;
      }
      std::optional<std::uint64_t> bytes = amdgpu::parse_u64(r.text);
      if (!bytes) {
        problems.emplace_back(it->second, DeviceError(kKfdParse, "cannot parse " + rel));
        continue;
      }
      // Every GPU the process may open has a file, 0 on those it does not use.
      if (*bytes > 0) found.emplace_back(it->second, static_cast<double>(*bytes));
    }
    if (ended) continue;
    for (auto& [i, e] : problems) devices[i].errors.push_back(std::move(e));
    for (std::uint32_t gpu : unknown_here) ++unknown[gpu];
    // Two partitions of one card are one device: their memory adds up.
    for (const auto& [i, bytes] : found) memory[i][*pid] += bytes;
  }

  for (std::size_t i = 0; i < devices.size(); ++i) {
    for (const auto& [pid, bytes] : memory[i])
      devices[i].processes->push_back(DeviceProcess{pid, bytes, std::nullopt});
  }
  for (const auto& [gpu, n] : unknown) {
    general.emplace_back(kKfdUnknownGpu, "gpu_id " + std::to_string(gpu) + " in " + proc + " (" +
                                             std::to_string(n) +
                                             " processes) is no amdgpu card in the KFD topology");
  }
  if (seen > kMaxKfdProcesses) {
    general.emplace_back(kKfdLimit, std::to_string(seen) + " process directories in " + proc +
                                        ", the first " + std::to_string(kMaxKfdProcesses) +
                                        " read");
  }
}

std::map<std::uint32_t, std::size_t> AmdgpuBackend::kfd_gpus(
    const std::vector<DeviceSample>& devices, std::vector<DeviceError>& errors) {
  std::map<std::string, std::size_t, std::less<>> by_bus;
  for (std::size_t i = 0; i < devices.size(); ++i) by_bus.emplace(devices[i].pci_bus_id, i);
  std::map<std::uint32_t, std::size_t> out;
  const std::string nodes_dir = kKfdNodes;
  sources::Listing nodes = sys_.list(nodes_dir);
  if (nodes.status == Status::kError) {
    errors.emplace_back(kReadError, sources::errno_name(nodes.err) + " listing " + nodes_dir);
  }
  // A node's file that cannot be read or parsed; absent: the node went away.
  auto read = [&](const std::string& rel) -> std::optional<std::string> {
    Read r = sys_.read(rel);
    if (r.failed()) errors.emplace_back(kReadError, r.error_name() + " reading " + rel);
    if (!r.ok()) return std::nullopt;
    return std::move(r.text);
  };
  for (const std::string& node : nodes.names) {
    const std::string dir = nodes_dir + "/" + node + "/";
    std::optional<std::string> id_text = read(dir + "gpu_id");
    if (!id_text) continue;
    std::optional<std::uint64_t> id = amdgpu::parse_u64(*id_text);
    if (!id || *id > std::numeric_limits<std::uint32_t>::max()) {
      errors.emplace_back(kKfdParse, "cannot parse " + dir + "gpu_id");
      continue;
    }
    if (*id == 0) continue;  // a CPU node
    std::optional<std::string> props = read(dir + "properties");
    if (!props) continue;
    std::optional<amdgpu::KfdNodeLocation> loc = amdgpu::parse_kfd_node_properties(*props);
    if (!loc) {
      errors.emplace_back(kKfdParse, "cannot parse " + dir + "properties");
      continue;
    }
    if (std::optional<std::size_t> i = kfd_node_device(*loc, by_bus))
      out.emplace(static_cast<std::uint32_t>(*id), *i);
  }
  return out;
}

std::optional<std::size_t> AmdgpuBackend::kfd_node_device(
    const amdgpu::KfdNodeLocation& loc,
    const std::map<std::string, std::size_t, std::less<>>& by_bus) {
  // The render node first: it leads to the PCI function as the card does.
  if (loc.drm_render_minor && *loc.drm_render_minor > 0) {
    std::optional<std::string> node =
        resolve_dir(sys_, "class/drm/renderD" + std::to_string(*loc.drm_render_minor));
    std::optional<std::string> device = node ? resolve_dir(sys_, *node + "/device") : std::nullopt;
    if (device) {
      if (auto it = by_bus.find(pci_bus_id_of(*device)); it != by_bus.end()) return it->second;
    }
  }
  // Then the PCI address: the render node of a partition of a partitioned
  // MI300 (past the first) belongs to a platform device (amdgpu_xcp.<n>),
  // and its location_id may carry the partition in the low bits, so the
  // exact function, else the one card on that bus.
  if (!loc.domain || !loc.location_id) return std::nullopt;
  const std::string bus_id = amdgpu::kfd_pci_bus_id(*loc.domain, *loc.location_id);
  if (auto it = by_bus.find(bus_id); it != by_bus.end()) return it->second;
  const std::string_view bus = std::string_view(bus_id).substr(0, bus_id.rfind(':') + 1);
  std::optional<std::size_t> only;
  for (const auto& [id, i] : by_bus) {
    if (std::string_view(id).substr(0, bus.size()) != bus) continue;
    if (only) return std::nullopt;  // two cards on one bus: which is unknown
    only = i;
  }
  return only;
}

std::optional<DeviceSample> AmdgpuBackend::read_card(const CardFacts& facts, unsigned index) {
  DeviceSample d;
  d.index = index;
  d.vendor = "amd";
  d.driver_version = driver_version_;
  d.pci_bus_id = facts.pci_bus_id;
  d.uuid = facts.uuid;
  d.model = facts.model;
  d.serial = facts.serial;
  d.vbios = facts.vbios;
  d.errors = facts.errors;
  CardReader r(held_, d.errors);
  const std::string dir = facts.device + "/";

  d.utilization_ratio = r.parsed(dir + "gpu_busy_percent", amdgpu::parse_busy_ratio);
  d.memory_utilization_ratio = r.parsed(dir + "mem_busy_percent", amdgpu::parse_busy_ratio);
  d.memory_used_bytes = r.number(dir + "mem_info_vram_used");
  d.memory_total_bytes = r.number(dir + "mem_info_vram_total");
  d.pcie_replays = r.number(dir + "pcie_replay_count");

  if (std::optional<amdgpu::RasCounts> ras =
          r.parsed(dir + "ras/umc_err_count", amdgpu::parse_ras_err_count)) {
    if (ras->corrected) d.ecc_corrected = static_cast<double>(*ras->corrected);
    if (ras->uncorrected) d.ecc_uncorrected = static_cast<double>(*ras->uncorrected);
  }

  if (std::optional<std::string> bytes = r.read(dir + "gpu_metrics")) {
    amdgpu::GpuMetrics m = amdgpu::parse_gpu_metrics(*bytes);
    switch (m.status) {
      case amdgpu::GpuMetricsStatus::kOk: d.energy_joules = m.energy_joules; break;
      case amdgpu::GpuMetricsStatus::kTruncated:
        r.error(kGpuMetricsTruncated, "gpu_metrics " + m.problem);
        break;
      case amdgpu::GpuMetricsStatus::kUnknownLayout:
      case amdgpu::GpuMetricsStatus::kMalformed:
        // Counted every collection while it lasts (the scheduler logs the
        // device when it starts and when it stops): the energy counter is
        // missing, and the table needs a newer nodewatch, not a retry.
        r.error(kGpuMetricsLayout, "gpu_metrics " + m.problem);
        break;
    }
  }

  read_hwmon(facts, r, d);

  // A card unplugged while it was read answers ENODEV, or its directory is
  // gone by now: report nothing rather than a half-read device.
  if (r.gone()) return std::nullopt;
  if (r.absent_seen()) {
    Read vendor = sys_.read(dir + "vendor");
    if (vendor.status == Status::kAbsent || vendor.status == Status::kGone) return std::nullopt;
  }
  return d;
}

void AmdgpuBackend::read_hwmon(const CardFacts& facts, CardReader& r, DeviceSample& d) {
  if (facts.hwmon.empty()) return;
  const std::string dir = facts.hwmon + "/";
  auto has = [&](const std::string& name) { return facts.hwmon_names.count(name) != 0; };

  std::map<std::string, double> crit;  // sensor -> threshold (C)
  auto celsius = [&](const std::string& rel) -> std::optional<double> {
    std::optional<double> c = r.signed_number(rel, kMilliPerUnit);
    if (c && (*c < kMinCelsius || *c > kMaxCelsius)) {
      r.error(kOutOfRange, rel + " reads " + std::to_string(*c) + " C");
      return std::nullopt;
    }
    return c;
  };
  for (const auto& [channel, sensor] : facts.temperatures) {
    const std::string prefix = "temp" + std::to_string(channel);
    if (std::optional<double> c = celsius(dir + prefix + "_input"))
      d.temperature_celsius.emplace(sensor, *c);
    if (has(prefix + "_crit")) {
      if (std::optional<double> c = celsius(dir + prefix + "_crit")) crit.emplace(sensor, *c);
    }
  }
  // amdgpu's "crit" is where the SMU starts to throttle (the hardware shuts
  // down at "emergency"): the junction's, else the edge's on older boards.
  for (const char* sensor : {"junction", "edge"}) {
    if (auto it = crit.find(sensor); it != crit.end()) {
      d.temperature_slowdown_celsius = it->second;
      break;
    }
  }

  // power1_input is the instantaneous socket power (MI300); boards whose SMU
  // only averages (MI200) have power1_average.
  if (has("power1_input")) d.power_watts = r.number(dir + "power1_input", kMicroPerUnit);
  if (!d.power_watts && has("power1_average")) {
    d.power_watts = r.number(dir + "power1_average", kMicroPerUnit);
  }
  if (has("power1_cap")) d.power_limit_watts = r.number(dir + "power1_cap", kMicroPerUnit);

  for (const auto& [channel, clock] : facts.clocks) {
    if (std::optional<double> hz = r.number(dir + "freq" + std::to_string(channel) + "_input")) {
      d.clock_hertz.emplace(clock, *hz);
    }
  }
}

}  // namespace

std::unique_ptr<Backend> make_amdgpu_backend(const Roots& roots) {
  return std::make_unique<AmdgpuBackend>(roots);
}

}  // namespace nodewatch::accelerator
