#include "accelerator/amdgpu_backend.hpp"
#include "nodewatch/unique_fd.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "accelerator/amdgpu_parse.hpp"

namespace nodewatch::accelerator {
namespace {

namespace fs = std::filesystem;
using amdgpu::ReadFailure;

// Text attributes are at most a page; gpu_metrics is a binary table of at most
// PAGE_SIZE - 1 bytes (the v1_x layouts known here are 96 to 2208 bytes).
constexpr std::size_t kTextMax = 4096;
constexpr std::size_t kBinaryMax = 16384;

// hwmon units: millidegrees Celsius, microwatts.
constexpr double kMilliPerUnit = 1e3;
constexpr double kMicroPerUnit = 1e6;

constexpr const char* kReadError = "read_error";
constexpr const char* kParseError = "parse_error";

// The names in a directory, or none when it cannot be listed.
std::set<std::string, std::less<>> list_names(const fs::path& dir) {
  std::set<std::string, std::less<>> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.insert(it->path().filename().string());
  }
  return names;
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

// Reads the attributes of one card's PCI device directory, recording partial
// failures in the sample and noticing when the device goes away.
class CardReader {
 public:
  CardReader(const SysfsReader& reader, DeviceSample& sample) : reader_(reader), sample_(sample) {}

  bool gone() const { return gone_; }

  // The contents of `path`, or nullopt (see the failure contract).
  std::optional<std::string> read(const std::string& path, std::size_t max_bytes = kTextMax) {
    if (gone_) return std::nullopt;
    std::string out;
    int err = reader_(path, max_bytes, out);
    if (err == 0) return out;
    switch (amdgpu::classify_read_errno(err)) {
      case ReadFailure::kAbsent:
      case ReadFailure::kUnavailable: break;
      case ReadFailure::kGone: gone_ = true; break;
      case ReadFailure::kError: sample_.errors.emplace_back(kReadError); break;
    }
    return std::nullopt;
  }

  // `path` read and given to `parse`; a value that does not parse is a parse_error.
  template <typename Parse>
  auto parsed(const std::string& path, Parse parse) -> decltype(parse(std::string_view())) {
    std::optional<std::string> text = read(path);
    if (!text) return std::nullopt;
    auto value = parse(std::string_view(*text));
    if (!value) sample_.errors.emplace_back(kParseError);
    return value;
  }

  // A decimal attribute in base units: the raw value over `divisor` (1e6 for
  // microwatts; dividing keeps 612000000 uW exactly 612 W).
  std::optional<double> number(const std::string& path, double divisor = 1.0) {
    std::optional<std::uint64_t> v = parsed(path, amdgpu::parse_u64);
    if (!v) return std::nullopt;
    return static_cast<double>(*v) / divisor;
  }

  std::optional<double> signed_number(const std::string& path, double divisor) {
    std::optional<std::int64_t> v = parsed(path, amdgpu::parse_i64);
    if (!v) return std::nullopt;
    return static_cast<double>(*v) / divisor;
  }

  // A label-like attribute ("AMD Instinct MI210\n"), "" when unreadable.
  std::string label(const std::string& path) {
    std::optional<std::string> text = read(path);
    return text ? amdgpu::label_value(*text) : std::string();
  }

  void error(const char* reason) { sample_.errors.emplace_back(reason); }

 private:
  const SysfsReader& reader_;
  DeviceSample& sample_;
  bool gone_ = false;
};

class AmdgpuBackend final : public Backend {
 public:
  AmdgpuBackend(Roots roots, SysfsReader reader)
      : roots_(std::move(roots)), reader_(std::move(reader)) {}

  std::string_view name() const override { return "amdgpu"; }
  std::vector<DeviceSample> sample(const CollectContext& ctx) override;

 private:
  struct Card {
    unsigned number = 0;
    fs::path dir;  // <sysfs>/class/drm/card<N>
  };

  std::vector<Card> amd_cards() const;
  bool is_amdgpu_card(const Card& card) const;
  std::optional<DeviceSample> read_card(const Card& card, unsigned index,
                                        const std::string& driver_version) const;
  void read_hwmon(const fs::path& device_dir, CardReader& r, DeviceSample& d) const;

  Roots roots_;
  SysfsReader reader_;
};

bool AmdgpuBackend::is_amdgpu_card(const Card& card) const {
  const fs::path device = card.dir / "device";
  std::string text;
  // No vendor file: not a PCI device (simpledrm, a virtual card), or gone.
  if (reader_((device / "vendor").string(), kTextMax, text) != 0) return false;
  if (amdgpu::parse_pci_id(text) != amdgpu::kAmdVendorId) return false;
  std::error_code ec;
  fs::path driver = fs::read_symlink(device / "driver", ec);
  if (!ec) return driver.filename() == "amdgpu";  // radeon drives older AMD GPUs
  return fs::exists(device / "gpu_busy_percent", ec) ||
         fs::exists(device / "mem_info_vram_total", ec);
}

std::vector<AmdgpuBackend::Card> AmdgpuBackend::amd_cards() const {
  std::vector<Card> cards;
  const fs::path drm = roots_.sysfs / "class" / "drm";
  for (const std::string& name : list_names(drm)) {
    if (std::optional<unsigned> n = amdgpu::parse_card_number(name)) {
      cards.push_back(Card{*n, drm / name});
    }
  }
  std::sort(cards.begin(), cards.end(),
            [](const Card& a, const Card& b) { return a.number < b.number; });
  std::erase_if(cards, [this](const Card& c) { return !is_amdgpu_card(c); });
  return cards;
}

std::vector<DeviceSample> AmdgpuBackend::sample(const CollectContext& ctx) {
  std::vector<DeviceSample> out;
  std::vector<Card> cards = amd_cards();
  if (cards.empty()) return out;
  // Only DKMS (ROCm) builds of amdgpu set a module version; the in-tree
  // driver is versioned by the kernel.
  std::string driver_version;
  std::string text;
  if (reader_((roots_.sysfs / "module" / "amdgpu" / "version").string(), kTextMax, text) == 0) {
    driver_version = amdgpu::label_value(text);
  }
  for (unsigned i = 0; i < cards.size(); ++i) {
    if (ctx.should_stop()) break;
    if (std::optional<DeviceSample> d = read_card(cards[i], i, driver_version)) {
      out.push_back(std::move(*d));
    }
  }
  return out;
}

std::optional<DeviceSample> AmdgpuBackend::read_card(const Card& card, unsigned index,
                                                     const std::string& driver_version) const {
  DeviceSample d;
  d.index = index;
  d.vendor = "amd";
  d.driver_version = driver_version;
  CardReader r(reader_, d);

  std::error_code ec;
  // class/drm/card<N>/device -> ../../../0000:c1:00.0: the PCI function.
  const fs::path device = fs::canonical(card.dir / "device", ec);
  if (ec) return std::nullopt;
  d.pci_bus_id = device.filename().string();
  std::transform(d.pci_bus_id.begin(), d.pci_bus_id.end(), d.pci_bus_id.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::string dir = device.string() + "/";

  std::string unique_id = r.label(dir + "unique_id");
  d.uuid = "amd-" + (unique_id.empty() ? d.pci_bus_id : unique_id);
  d.model = r.label(dir + "product_name");
  if (d.model.empty()) {
    // No FRU EEPROM (or not readable by this kernel): name the device id.
    std::optional<std::string> id_text = r.read(dir + "device");
    std::optional<std::uint32_t> id = id_text ? amdgpu::parse_pci_id(*id_text) : std::nullopt;
    if (id) {
      std::array<char, 16> buf{};
      std::snprintf(buf.data(), buf.size(), "0x%04x", *id);
      d.model = std::string("AMD ") + buf.data();
    } else {
      d.model = "AMD";
    }
  }
  d.serial = r.label(dir + "serial_number");

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

  if (std::optional<std::string> bytes = r.read(dir + "gpu_metrics", kBinaryMax)) {
    amdgpu::GpuMetrics m = amdgpu::parse_gpu_metrics(*bytes);
    if (m.status == amdgpu::GpuMetricsStatus::kOk) {
      d.energy_joules = m.energy_joules;
    } else if (m.status == amdgpu::GpuMetricsStatus::kTruncated) {
      r.error(kParseError);
    }
    // A layout newer than this code (v1_8+, APU tables) is not an error: the
    // table is fine, we just cannot read it, and counting it every cycle
    // would look like a fault. Energy stays absent.
  }

  read_hwmon(device, r, d);

  // A card unplugged while it was read answers ENODEV, or its directory is
  // gone by now: report nothing rather than a half-read device.
  if (r.gone() || !fs::exists(device / "vendor", ec)) return std::nullopt;
  return d;
}

void AmdgpuBackend::read_hwmon(const fs::path& device_dir, CardReader& r, DeviceSample& d) const {
  // device/hwmon/hwmon<M>: amdgpu registers one hwmon device per GPU.
  std::optional<unsigned> lowest;
  std::string hwmon_name;
  for (const std::string& name : list_names(device_dir / "hwmon")) {
    std::optional<unsigned> n = hwmon_number(name);
    if (n && (!lowest || *n < *lowest)) {
      lowest = n;
      hwmon_name = name;
    }
  }
  if (!lowest) return;
  const fs::path hwmon = device_dir / "hwmon" / hwmon_name;
  const std::string dir = hwmon.string() + "/";
  // The driver creates only the attributes the ASIC supports (GC 9.4.3 has no
  // temp1, "edge"): list them once rather than probe for each.
  const auto names = list_names(hwmon);
  auto has = [&](const std::string& name) { return names.count(name) != 0; };

  std::map<std::string, double> crit;  // sensor -> threshold (C)
  for (const std::string& name : names) {
    std::optional<unsigned> channel = temp_input_channel(name);
    if (!channel) continue;
    const std::string prefix = dir + "temp" + std::to_string(*channel);
    std::string label;
    if (has("temp" + std::to_string(*channel) + "_label")) {
      std::optional<std::string> text = r.read(prefix + "_label");
      if (!text) continue;  // a channel whose label cannot be read cannot be named
      label = *text;
    }
    std::optional<std::string> sensor = amdgpu::temperature_sensor(label, *channel);
    if (!sensor) continue;
    if (std::optional<double> c = r.signed_number(prefix + "_input", kMilliPerUnit)) {
      d.temperature_celsius.emplace(*sensor, *c);
    }
    if (has("temp" + std::to_string(*channel) + "_crit")) {
      if (std::optional<double> c = r.signed_number(prefix + "_crit", kMilliPerUnit)) {
        crit.emplace(*sensor, *c);
      }
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

  for (unsigned channel : {1u, 2u}) {
    const std::string base = "freq" + std::to_string(channel);
    if (!has(base + "_input")) continue;
    std::string clock = channel == 1 ? "graphics" : "memory";
    if (has(base + "_label")) {
      std::optional<std::string> text = r.read(dir + base + "_label");
      if (!text) continue;
      std::string_view label = amdgpu::trim(*text);
      if (label == "sclk") {
        clock = "graphics";
      } else if (label == "mclk") {
        clock = "memory";
      } else {
        continue;  // a clock domain this backend does not know
      }
    }
    if (std::optional<double> hz = r.number(dir + base + "_input")) {
      d.clock_hertz.emplace(clock, *hz);
    }
  }
}

}  // namespace

int read_sysfs_file(const std::string& path, std::size_t max_bytes, std::string& out) {
  out.clear();
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return errno;
  out.resize(max_bytes);
  std::size_t used = 0;
  while (used < max_bytes) {
    ssize_t n = ::read(fd.get(), out.data() + used, max_bytes - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      out.clear();
      return err;
    }
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  out.resize(used);
  return 0;
}

std::unique_ptr<Backend> make_amdgpu_backend(const Roots& roots, SysfsReader reader) {
  return std::make_unique<AmdgpuBackend>(roots, std::move(reader));
}

std::unique_ptr<Backend> make_amdgpu_backend(const Roots& roots) {
  return make_amdgpu_backend(roots, read_sysfs_file);
}

}  // namespace nodewatch::accelerator
