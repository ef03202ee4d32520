#include "accelerator/amdgpu_backend.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
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

 private:
  enum class FactsResult { kOk, kNotAmd, kGone };
  FactsResult read_facts(const std::string& card, CardFacts& facts);
  void read_hwmon_facts(CardFacts& facts, CardReader& r);
  bool is_amdgpu_card(const std::string& card, bool* unsure);
  std::optional<DeviceSample> read_card(const CardFacts& facts, unsigned index);
  void read_hwmon(const CardFacts& facts, CardReader& r, DeviceSample& d);

  sources::FsRoot sys_;
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
  std::size_t slash = facts.device.rfind('/');
  facts.pci_bus_id = facts.device.substr(slash == std::string::npos ? 0 : slash + 1);
  std::transform(facts.pci_bus_id.begin(), facts.pci_bus_id.end(), facts.pci_bus_id.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
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
      out.push_back(std::move(*d));
    } else {
      cards_.forget(name);
    }
  }
  if (complete) {
    cards_.end_cycle();
    held_.end_cycle();
  }
  return out;
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
