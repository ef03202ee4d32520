#include "uncore/known.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include "nodewatch/text.hpp"
#include "pcie/pcie_parse.hpp"
#include "uncore/pmu.hpp"

namespace nodewatch::uncore {
namespace {

// "model\t\t: 106" -> "106".
std::string_view field(std::string_view line, std::string_view name) {
  if (!line.starts_with(name)) return {};
  const std::size_t colon = line.find(':');
  if (colon == std::string_view::npos) return {};
  if (text::trim(line.substr(0, colon)) != name) return {};
  return text::trim(line.substr(colon + 1));
}

int number(std::string_view s, int base = 10) {
  if (base == 16 && s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
  int v = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  return ec == std::errc() && end == s.data() + s.size() ? v : -1;
}

// family 6 models whose IIO bandwidth counters count 32 bytes.
constexpr int k32ByteModels[] = {106, 108, 134, 143, 207};
constexpr double kFourBytesInMib = 3.814697266e-6;

}  // namespace

Cpu read_cpu(const sources::FsRoot& proc) {
  Cpu cpu;
  // The first processor's block is all that is needed, and the whole file
  // grows with the CPUs (some 1.5 KB each): its first 64 KiB.
  std::string head(64 * 1024, '\0');
  const int fd = ::open(proc.full("cpuinfo").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return cpu;
  std::size_t got = 0;
  while (got < head.size()) {
    const ssize_t n = ::read(fd, head.data() + got, head.size() - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  head.resize(got);
  std::string_view text = head;
  // The first processor's block: up to its blank line.
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    if (line.empty()) break;
    if (std::string_view v = field(line, "vendor_id"); !v.empty()) cpu.vendor = std::string(v);
    if (std::string_view v = field(line, "cpu family"); !v.empty()) cpu.family = number(v);
    if (std::string_view v = field(line, "model"); !v.empty()) cpu.model = number(v);
    if (std::string_view v = field(line, "CPU implementer"); !v.empty())
      cpu.arm_implementer = number(v, 16);
    if (std::string_view v = field(line, "CPU part"); !v.empty()) cpu.arm_part = number(v, 16);
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return cpu;
}

std::optional<Correction> scale_correction(std::string_view pmu, std::string_view alias,
                                           double sysfs_scale, const Cpu& cpu) {
  if (!pmu.starts_with("uncore_iio_free_running")) return std::nullopt;
  if (!alias.starts_with("bw_in_port") && !alias.starts_with("bw_out_port")) return std::nullopt;
  if (cpu.vendor != "GenuineIntel" || cpu.family != 6) return std::nullopt;
  if (std::find(std::begin(k32ByteModels), std::end(k32ByteModels), cpu.model) ==
      std::end(k32ByteModels))
    return std::nullopt;
  if (std::fabs(sysfs_scale - kFourBytesInMib) > 1e-15) return std::nullopt;
  return Correction{8,
                    "the kernel scales this model's IIO bandwidth counters as 4 bytes a count; "
                    "they count 32 (fixed in Linux 6.15): corrected"};
}

namespace {

bool has_event(const sources::FsRoot& sys, std::string_view pmu, std::string_view alias) {
  return sys.read(pmu_path(pmu, "events/" + std::string(alias))).ok();
}

bool has_format(const sources::FsRoot& sys, std::string_view pmu, std::string_view term) {
  return sys.read(pmu_path(pmu, "format/" + std::string(term))).ok();
}

// Grace's cores: Arm Neoverse V2 (implementer 0x41, part 0xd4f). Its
// uncore PMU names are also taken, with other event codes, by Vera's on
// kernels older than the Tegra410 support (7.1): the tables are Grace's
// only on Grace.
bool is_grace(const Cpu& cpu) {
  return cpu.arm_implementer == 0x41 && cpu.arm_part == 0xd4f;
}

bool is_intel(const Cpu& cpu) {
  return cpu.vendor == "GenuineIntel" && cpu.family == 6;
}

// Family-6 models whose IIO bw_out counters count no fixed size: Sapphire
// Rapids (143), Emerald Rapids (207), Granite Rapids (173, 174), Sierra
// Forest (175). The kernel removed them (506f981ab40f); older kernels
// still list them, and they are left out here.
constexpr int kNoBwOutModels[] = {143, 207, 173, 174, 175};

// The device number of port 0's root port on an IIO stack's root bus,
// from Intel PCM's pcm-iio (the kernel documents none): Skylake server
// (85) 0, Ice Lake server (106, 108) 2. Other models: -1, not known.
int root_port_base(const Cpu& cpu) {
  if (!is_intel(cpu)) return -1;
  if (cpu.model == 85) return 0;
  if (cpu.model == 106 || cpu.model == 108) return 2;
  return -1;
}

void add(std::vector<HostLinkEvent>& out, const sources::FsRoot& sys, const std::string& pmu,
         std::string_view alias, std::string_view filter, std::string_view link,
         std::string_view direction, double bytes_per_count, std::string_view port) {
  if (!has_event(sys, pmu, alias)) return;
  HostLinkEvent e;
  e.pmu = pmu;
  e.terms = std::string(alias);
  if (!filter.empty()) e.terms += "," + std::string(filter);
  e.link = link;
  e.direction = direction;
  e.bytes_per_count = bytes_per_count;
  e.port = port;
  out.push_back(std::move(e));
}

// NVIDIA's memory-controller-fabric events (Grace's C2C0, C2C1 and PCIe
// PMUs): reads of the CPU's memory (local or the other socket's) bring
// data to the device, writes take it from the device. Byte counts: the
// kernel gives no unit, and these are counted as one byte each (their
// names; the kernel's documentation says no more).
void add_mcf(std::vector<HostLinkEvent>& out, const sources::FsRoot& sys, const std::string& pmu,
             std::string_view filter, std::string_view link, std::string_view port) {
  add(out, sys, pmu, "rd_bytes_loc", filter, link, "rx", 1, port);
  add(out, sys, pmu, "rd_bytes_rem", filter, link, "rx", 1, port);
  add(out, sys, pmu, "wr_bytes_loc", filter, link, "tx", 1, port);
  add(out, sys, pmu, "wr_bytes_rem", filter, link, "tx", 1, port);
}

void grace(std::vector<HostLinkEvent>& out, const sources::FsRoot& sys, const std::string& pmu) {
  if (pmu.starts_with("nvidia_nvlink_c2c0_pmu_") || pmu.starts_with("nvidia_nvlink_c2c1_pmu_")) {
    // From 6.14 a port filter: one bit per C2C port (GB200: a GPU on
    // each; GH200: one GPU on both). Before, both ports together.
    if (has_format(sys, pmu, "port")) {
      add_mcf(out, sys, pmu, "port=0x1", "c2c", "0");
      add_mcf(out, sys, pmu, "port=0x2", "c2c", "1");
    } else {
      add_mcf(out, sys, pmu, "", "c2c", "");
    }
  } else if (pmu.starts_with("nvidia_scf_pmu_")) {
    // The CPU's own reads and writes of GPU memory, which the C2C PMUs
    // (traffic the GPU starts) do not see: gmem_rd_data counts 32-byte
    // beats, gmem_wr_total_bytes bytes.
    add(out, sys, pmu, "gmem_rd_data", "", "c2c", "tx", 32, "");
    add(out, sys, pmu, "gmem_wr_total_bytes", "", "c2c", "rx", 1, "");
  } else if (pmu.starts_with("nvidia_pcie_pmu_") && pmu.find("_rc_") == std::string::npos) {
    // Every root port: before 6.14 a counter with no root_port given
    // counted nothing.
    if (has_format(sys, pmu, "root_port")) add_mcf(out, sys, pmu, "root_port=0x3ff", "pcie", "");
  }
}

void vera(std::vector<HostLinkEvent>& out, const sources::FsRoot& sys, const std::string& pmu) {
  if (pmu.starts_with("nvidia_ucf_pmu_")) {
    // The CPU's reads and writes of GPU memory. What the GPU starts into
    // the CPU's memory is not told apart from PCIe devices' there (one
    // "non-CPU" source): the GPU's own C2C counters carry it.
    if (!has_format(sys, pmu, "src_loc_cpu") || !has_format(sys, pmu, "dst_loc_gmem")) return;
    add(out, sys, pmu, "mem_bytes_rd", "src_loc_cpu=1,dst_loc_gmem=1", "c2c", "tx", 1, "");
    add(out, sys, pmu, "mem_bytes_wr", "src_loc_cpu=1,dst_loc_gmem=1", "c2c", "rx", 1, "");
  } else if (pmu.starts_with("nvidia_pcie_pmu_") && pmu.find("_rc_") != std::string::npos) {
    // One PMU per root complex, every root port and destination by default.
    add(out, sys, pmu, "rd_bytes", "", "pcie", "rx", 1, "");
    add(out, sys, pmu, "wr_bytes", "", "pcie", "tx", 1, "");
  }
}

// Intel's IIO free-running bandwidth counters: bw_in_portN, the device's
// writes and read completions into the host (tx); bw_out_portN, the
// host's data to it (rx). One counter set per stack on each die, read on
// the die's CPU in cpumask.
void intel_iio(std::vector<HostLinkEvent>& out, const sources::FsRoot& sys, const std::string& pmu,
               const Cpu& cpu) {
  constexpr std::string_view kPrefix = "uncore_iio_free_running_";
  if (!is_intel(cpu) || !pmu.starts_with(kPrefix)) return;
  std::string error;
  const std::optional<Pmu> desc = read_pmu(sys, pmu, &error);
  if (!desc) return;
  // The stack's root bus on each die: uncore_iio_<k>/die<d> ("0000:17"),
  // Skylake server from 5.9, Ice Lake server and Snow Ridge from 5.14;
  // none on Sapphire Rapids and later, whose stacks are then read whole.
  const std::string stack = "uncore_iio_" + pmu.substr(kPrefix.size());
  std::vector<std::optional<std::string>> buses(desc->cpus.size());
  bool mapped = false;
  for (std::size_t d = 0; d < buses.size(); ++d) {
    const sources::Read bus = sys.read(pmu_path(stack, "die" + std::to_string(d)));
    if (!bus.ok()) continue;
    buses[d] = std::string(text::trim(bus.value()));
    mapped = true;
  }
  const int base = root_port_base(cpu);
  const bool no_out = std::find(std::begin(kNoBwOutModels), std::end(kNoBwOutModels), cpu.model) !=
                      std::end(kNoBwOutModels);
  for (int port = 0; port < 16; ++port) {
    for (const char* kind : {"bw_in_port", "bw_out_port"}) {
      const bool in = kind[3] == 'i';
      if (!in && no_out) continue;
      const std::string alias = kind + std::to_string(port);
      if (!has_event(sys, pmu, alias)) continue;
      HostLinkEvent e;
      e.pmu = pmu;
      e.terms = alias;
      e.link = "pcie";
      e.direction = in ? "tx" : "rx";
      e.per_die = true;
      for (std::size_t d = 0; d < buses.size(); ++d) {
        HostLinkEvent::Die die;
        if (!mapped) {
          die.port = "";  // the stack whole
        } else if (buses[d] && base >= 0) {
          // The port's root port, where there is one: a bridge at the
          // platform's device number on the stack's root bus.
          char bdf[32];
          std::snprintf(bdf, sizeof bdf, "%s:%02x.0", buses[d]->c_str(), base + port);
          const sources::Read cls = sys.read(std::string("bus/pci/devices/") + bdf + "/class");
          const std::optional<std::uint32_t> c =
              cls.ok() ? pcie::parse_pci_class(cls.value()) : std::nullopt;
          if (c && (*c >> 8) == 0x0604) {
            die.port = std::to_string(port);
            die.root_port = bdf;
          }
        } else if (buses[d]) {
          die.port = std::to_string(port);
        }
        e.dies.push_back(std::move(die));
      }
      out.push_back(std::move(e));
    }
  }
}

// "nvidia_nvlink_c2c0_pmu_1" -> "1": the NUMA node the kernel names it by.
std::string_view name_index(std::string_view pmu) {
  const std::size_t at = pmu.rfind('_');
  return at == std::string_view::npos ? std::string_view{} : pmu.substr(at + 1);
}

}  // namespace

std::vector<HostLinkEvent> host_link_events(const sources::FsRoot& sys,
                                            const std::vector<std::string>& pmus, const Cpu& cpu) {
  std::vector<HostLinkEvent> out;
  for (const std::string& pmu : pmus) {
    if (is_grace(cpu)) grace(out, sys, pmu);
    vera(out, sys, pmu);
    intel_iio(out, sys, pmu, cpu);
  }
  return out;
}

std::vector<HostLinkDevice> host_link_devices(const sources::FsRoot& sys,
                                              const std::vector<HostLinkEvent>& events,
                                              const Cpu& cpu) {
  // What to look for: root ports (Intel), NUMA nodes (Grace).
  std::map<std::string, std::vector<HostLinkDevice>> below;  // root port -> series
  std::map<std::string, std::vector<std::string>> on_node;   // node -> PMUs
  for (const HostLinkEvent& e : events) {
    for (std::size_t d = 0; d < e.dies.size(); ++d) {
      if (e.dies[d].root_port.empty()) continue;
      below[e.dies[d].root_port].push_back({e.pmu, std::to_string(d), *e.dies[d].port, {}});
    }
    if (is_grace(cpu) && e.link == "c2c") on_node[std::string(name_index(e.pmu))].push_back(e.pmu);
  }
  std::vector<HostLinkDevice> out;
  if (below.empty() && on_node.empty()) return out;
  const sources::Listing pci = sys.list("bus/pci/devices");
  for (const std::string& bdf : pci.names) {
    const std::string dir = "bus/pci/devices/" + bdf;
    const sources::Read cls = sys.read(dir + "/class");
    const std::optional<std::uint32_t> c =
        cls.ok() ? pcie::parse_pci_class(cls.value()) : std::nullopt;
    if (!c || (*c >> 8) == 0x0604 || sys.readlink(dir + "/physfn").ok()) continue;
    if (!below.empty()) {
      const sources::Read real = sys.resolve(dir);
      if (real.ok()) {
        for (const auto& [port, series] : below) {
          if (real.value().find("/" + port + "/") == std::string_view::npos) continue;
          for (HostLinkDevice s : series) {
            s.device = bdf;
            out.push_back(std::move(s));
          }
        }
      }
    }
    if (!on_node.empty() && (*c >> 16) == 0x03) {
      const sources::Read vendor = sys.read(dir + "/vendor");
      const sources::Read node = sys.read(dir + "/numa_node");
      if (!vendor.ok() || text::trim(vendor.value()) != "0x10de" || !node.ok()) continue;
      auto it = on_node.find(std::string(text::trim(node.value())));
      if (it == on_node.end()) continue;
      for (const std::string& pmu : it->second) out.push_back({pmu, "", "", bdf});
    }
  }
  std::sort(out.begin(), out.end(), [](const HostLinkDevice& a, const HostLinkDevice& b) {
    return std::tie(a.pmu, a.die, a.port, a.device) < std::tie(b.pmu, b.die, b.port, b.device);
  });
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace nodewatch::uncore
