#pragma once
// What nodewatch knows of particular PMUs beyond what sysfs says of them:
// the machine they run on, and where a kernel's description is wrong.

#include <optional>
#include <string>
#include <string_view>

#include "nodewatch/sources/fs.hpp"

namespace nodewatch::uncore {

// The CPU as /proc/cpuinfo names its first processor (x86's vendor,
// family and model); empty on other machines or when it cannot be read.
struct Cpu {
  std::string vendor;
  int family = 0;
  int model = -1;
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

}  // namespace nodewatch::uncore
