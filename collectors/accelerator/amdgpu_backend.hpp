#pragma once
// The AMD backend: amdgpu's sysfs and hwmon files, found through
// <sysfs>/class/drm/card<N>/device. No library, no ioctl: every value is one
// small file read, so a hung GPU can at worst block that read (the collector
// runs on a thread of its own).
//
// Devices: every class/drm/card<N> (not renderD<N>, not the connectors
// card<N>-<type>-<n>) whose device/vendor is 0x1002 and which is bound to
// amdgpu (device/driver -> .../amdgpu; where there is no driver link, the
// device must have amdgpu's gpu_busy_percent or mem_info_vram_total). `index`
// is the ordinal among those cards by card number.
//
// What is read, with units (amdgpu_pm.c DOC blocks, hwmon sysfs ABI):
//   identity     device/unique_id ("%016llx") -> uuid "amd-<unique_id>", else
//                "amd-<PCI bus id>"; product_name -> model, else "AMD 0x<device>";
//                serial_number; <sysfs>/module/amdgpu/version (DKMS builds only)
//   utilization  gpu_busy_percent, mem_busy_percent      integer %  -> 0..1
//   memory       mem_info_vram_used, mem_info_vram_total bytes
//   hwmon        temp<N>_input, temp<N>_crit             millidegrees C -> C
//                  sensors by temp<N>_label: edge, junction, mem -> memory;
//                  slowdown threshold = junction's crit, else edge's
//                power1_input, else power1_average       microwatts -> W
//                power1_cap                              microwatts -> W
//                freq1_input (sclk), freq2_input (mclk)  Hz -> clock "graphics", "memory"
//   PCIe         pcie_replay_count                       count
//   ECC          ras/umc_err_count "ue: N" / "ce: N"     count (since driver load)
//   energy       gpu_metrics energy_accumulator          2^-16 J -> J (see amdgpu_parse.hpp)
// pcie_bw is never opened: the kernel sleeps one second in its read.
//
// Failure contract (per value, per card):
//  - a file the driver does not create (ENOENT), or one that answers EPERM,
//    EACCES, ENODATA, EOPNOTSUPP or EBUSY (runtime-suspended, in reset, not
//    supported by the firmware): the value is left empty, no error;
//  - any other failed read (EIO, ...): empty, and "read_error" in `errors`;
//  - a value that does not parse, an unknown or truncated gpu_metrics layout:
//    empty, and "parse_error";
//  - a card whose device goes away while it is read (ENODEV, or its files
//    vanish): the card is not reported;
//  - no class/drm, no AMD card: no devices, not an error.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "accelerator/backend.hpp"

namespace nodewatch::accelerator {

// Reads the whole of one sysfs file (at most `max_bytes`) into `out`.
// Returns 0, or the errno of the open() or read() that failed.
using SysfsReader =
    std::function<int(const std::string& path, std::size_t max_bytes, std::string& out)>;

// The reader that make_amdgpu_backend(roots) uses: open, read to the end, close.
int read_sysfs_file(const std::string& path, std::size_t max_bytes, std::string& out);

// make_amdgpu_backend(roots) with every attribute read through `reader`, so
// that tests can inject the errno values a fixture tree cannot produce.
// Directory listings and symlinks are still read from the file system.
std::unique_ptr<Backend> make_amdgpu_backend(const Roots& roots, SysfsReader reader);

}  // namespace nodewatch::accelerator
