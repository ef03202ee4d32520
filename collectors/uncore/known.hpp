#pragma once
// What nodewatch knows of particular PMUs beyond what sysfs says of them:
// the machine they run on, and where a kernel's description is wrong.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nodewatch/sources/fs.hpp"

namespace nodewatch::uncore {

// The CPU as /proc/cpuinfo names its first processor: x86's vendor,
// family and model; Arm's implementer and part ("CPU implementer : 0x41",
// "CPU part : 0xd4f" on Grace's Neoverse V2). Empty or -1 where it says
// nothing or cannot be read.
struct Cpu {
  std::string vendor;
  int family = 0;
  int model = -1;
  int arm_implementer = -1;
  int arm_part = -1;
};
Cpu read_cpu(const sources::FsRoot& proc);

// A scale the kernel gets wrong, and by how much to multiply it.
struct Correction {
  double factor = 1;
  std::string why;
};

// Intel's IIO free-running bandwidth counters (uncore_iio_free_running_N,
// bw_in_port*, bw_out_port*) count 32 bytes on Ice Lake server (models 106,
// 108), Snow Ridge (134), Sapphire Rapids (143) and Emerald Rapids (207,
// SPR's tables), but kernels before v6.15 scale them as 4 bytes
// (3.814697266e-6 MiB): fixed by 32c7f1150225 (ICX), 96a720db59ab (SNR)
// and 506f981ab40f (SPR), also in the 6.14 stable series. Judged by the
// scale a kernel gives, not by its version (distributions backport):
// 3.814697266e-6 on one of those models is corrected by 8. Skylake
// server's counters do count 4 bytes. nullopt: nothing to correct.
std::optional<Correction> scale_correction(std::string_view pmu, std::string_view alias,
                                           double sysfs_scale, const Cpu& cpu);

// One event the collector counts by itself for the host-link families
// (collectors.uncore.host_links): traffic between the CPU and the devices
// it hosts, by link, port and direction as the accelerator's own
// host-link family has them (rx: to the device, tx: from it).
struct HostLinkEvent {
  std::string pmu;    // the PMU's whole name
  std::string terms;  // as a request names it: "rd_bytes_loc,port=0x1"
  std::string link;   // "c2c" or "pcie"
  std::string direction;
  // What one count is worth where sysfs gives the event no unit (the
  // NVIDIA PMUs); an event with a byte .unit is taken as sysfs scales it.
  double bytes_per_count = 1;
  // The port label: for the whole PMU (per_die false), or, when the PMU's
  // counters are one per die (Intel IIO: one stack on each die, read from
  // the die's CPU in cpumask), for each die by its place in cpumask;
  // nullopt: that die's count is not a link anyone reads (no root port).
  bool per_die = false;
  std::string port;
  struct Die {
    std::optional<std::string> port;
    std::string root_port;  // the PCI address of the port's root port, "" unknown
  };
  std::vector<Die> dies;
};

// The host-link events of the PMUs in `pmus` (the names in
// <sysfs>/bus/event_source/devices) that the tables in known.cpp know,
// each present in the PMU's events/ (an event a kernel removed is left
// out): NVIDIA Grace (Tegra241: NVLink-C2C0/C2C1 per port, SCF's GPU
// memory traffic, PCIe), NVIDIA Vera (Tegra410: UCF's CPU-to-GPU-memory
// traffic, PCIe per root complex), Intel IIO free-running bandwidth per
// stack and port (Skylake, Ice Lake, Snow Ridge, Sapphire, Emerald and
// Granite Rapids). docs/collectors.md says which kernel each holds for.
std::vector<HostLinkEvent> host_link_events(const sources::FsRoot& sys,
                                            const std::vector<std::string>& pmus, const Cpu& cpu);

// A PCI function whose traffic a host-link series counts: the series of
// (pmu, die, port), "" die or port naming the whole PMU.
struct HostLinkDevice {
  std::string pmu;
  std::string die;
  std::string port;
  std::string device;  // its PCI address
  bool operator==(const HostLinkDevice&) const = default;
};

// The functions below each link of `events`: on Intel, those below the
// root port of an IIO stack's port (the stack's root bus from
// uncore_iio_<k>/die<d>, the port's root port at a device number the
// platform fixes); on Grace, the NVIDIA GPUs on the NUMA node of a C2C
// PMU. Bridges and virtual functions are left out. Others: none known.
std::vector<HostLinkDevice> host_link_devices(const sources::FsRoot& sys,
                                              const std::vector<HostLinkEvent>& events,
                                              const Cpu& cpu);

}  // namespace nodewatch::uncore
