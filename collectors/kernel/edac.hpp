#pragma once
// Host memory errors from the kernel's EDAC subsystem, in sysfs
// (Documentation/admin-guide/ras.rst; drivers/edac/edac_mc_sysfs.c):
//
//   devices/system/edac/mc/mcN/            one memory controller
//     ce_count, ue_count                   corrected, uncorrected errors
//     ce_noinfo_count, ue_noinfo_count     those the driver could not place
//     mc_name                              e.g. "Intel_10nm Socket#0 IMC#1"
//     dimmN/ or rankN/                     one populated module (rankN where
//       dimm_ce_count, dimm_ue_count       the driver has a chip-select layer,
//       dimm_label                         as amd64_edac; N is a slot index,
//                                          with gaps)
//
// The legacy csrowN/ directories (CONFIG_EDAC_LEGACY_SYSFS) repeat the
// same counts: never read. Counts are the driver's (u32), reset by
// reset_counters or a driver reload: a decrease is a reset, which rate()
// in Prometheus takes as one. Labels are writable (rasdaemon sets them), so
// a module is named by its controller and slot, its label kept as a fact.
// Layouts of the fixtures: tests/fixtures/edac/README.md.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nodewatch/sources/fs.hpp"

namespace nodewatch::kernel {

// A count that could not be read or parsed is nullopt: left out, never a 0
// that would read as a counter reset.
struct EdacModule {
  std::string slot;   // "dimm2", "rank5"
  std::string label;  // dimm_label, trimmed; may be ""
  std::optional<std::uint64_t> corrected;
  std::optional<std::uint64_t> uncorrected;
};

struct EdacController {
  std::string name;     // "mc0"
  std::string mc_name;  // the driver's name for it
  std::optional<std::uint64_t> corrected;
  std::optional<std::uint64_t> uncorrected;
  std::optional<std::uint64_t> corrected_noinfo;  // errors the driver could not place
  std::optional<std::uint64_t> uncorrected_noinfo;
  std::vector<EdacModule> modules;
};

struct EdacRead {
  std::vector<EdacController> controllers;  // in mcN order
  // (subject, why) for each attribute that could not be read or parsed:
  // that value is left out, the rest is read.
  std::vector<std::pair<std::string, std::string>> errors;
};

// Reads every controller under <sys>/devices/system/edac/mc; none (and no
// error) where EDAC is not loaded.
EdacRead read_edac(const sources::FsRoot& sys);

}  // namespace nodewatch::kernel
