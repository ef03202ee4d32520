#pragma once
// The AMD backend: amdgpu's sysfs and hwmon files, found through
// <sysfs>/class/drm/card<N>/device. No library, no ioctl: every value is one
// small file read, so a hung GPU can at worst block that read (and the
// scheduler hands the other collectors to another thread after its stall
// budget).
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
//   energy       gpu_metrics energy_accumulator          2^-16 J -> J (v1_1..v1_9, see
//                                                        amdgpu_parse.hpp)
// pcie_bw is never opened: the kernel sleeps one second in its read.
//
// Processes (DeviceSample::processes, for job attribution), from amdkfd's
// sysfs (formats in amdgpu_parse.hpp), read once per collection after the
// cards, with plain reads (PIDs come and go):
//   class/kfd/kfd/proc/<pid>/vram_<gpu_id>   bytes of VRAM the process holds
//                                            on that GPU (Linux 5.8+)
//   class/kfd/kfd/topology/nodes/<n>/        gpu_id and properties: which
//                                            card a gpu_id is
// A gpu_id is a card when its node's drm_render_minor leads through
// class/drm/renderD<minor>/device to that card's PCI function; else (the
// render node of an MI300 partition belongs to a platform device) when its
// domain and location_id name the card's function, or its bus and only that
// card is on it. Several nodes of one card (partitions) are that card, and
// a process's memory on them adds up.
// KFD gives a process a vram_<gpu_id> file for every GPU its device cgroup
// lets it open (kfd_init_apertures), whether it uses it or not: a process
// is on a GPU when it holds VRAM there (more than 0 bytes), so that a job
// confined by ROCR_VISIBLE_DEVICES alone is not reported on every GPU. A
// process that has opened a GPU and not allocated yet is seen from the
// collection after it does. DeviceProcess::pid is the host PID; no memory
// but VRAM, no MIG instance.
// No class/kfd/kfd/proc (no amdkfd, a kernel without it): processes stay
// empty (not known), not an error. With it, every card's processes are a
// list, perhaps empty.
//
// Sources (nodewatch/sources): every read goes through the sysfs FsRoot
// (tests inject errnos through Roots::faults). What a card is (vendor,
// driver, the PCI function its device link leads to, unique_id,
// product_name, serial_number, which hwmon files exist, the temp and freq
// labels) is read with plain reads when the card appears and every
// kCardFactsRefreshCycles collections after (a DeviceTable by card name);
// a fact that failed is read again on the next collection. The values
// (busy, memory, RAS, gpu_metrics, temperatures, power, clocks) are read
// every collection through held descriptors (HeldFiles).
//
// Failure contract (per value, per card):
//  - a file the driver does not create (ENOENT), or one that answers EPERM,
//    EACCES, ENODATA, EOPNOTSUPP or EBUSY (runtime-suspended, in reset, not
//    supported by the firmware; amdgpu::is_unavailable_errno): the value is
//    left empty, no error;
//  - any other failed read (EIO, ...): empty, and "read_error" in `errors`;
//  - a value that does not parse: empty, and "parse_error";
//  - a gpu_metrics table that is not understood (a version or size not
//    known here, a malformed v1_9; amdgpu::parse_gpu_metrics): no energy,
//    and "gpu_metrics_layout"; one shorter than its header says (or than a
//    header): no energy, and "gpu_metrics_truncated", a read that did not
//    deliver the table rather than a table nodewatch does not know;
//  - a card whose device goes away while it is read (ENODEV, ENXIO, or its
//    files vanish): the card is not reported, and its facts and held
//    descriptors are dropped;
//  - no class/drm, no AMD card: no devices, not an error;
//  - KFD: a process directory that goes away while it is read (its listing
//    or a file of it absent or gone) is skipped whole, not counted; a
//    vram_<gpu_id> file that does not parse is "kfd_parse" (on that card),
//    one that cannot be read "read_error"; a gpu_id that is no card here
//    is "kfd_unknown_gpu", once per gpu_id per collection; topology files
//    that do not parse are "kfd_parse", and more than kMaxKfdProcesses
//    process directories "kfd_limit" (those past it, in name order, are not
//    read). These, and any other failure not of one card, are counted with
//    the first card (index 0) as subject. A collection cancelled while the
//    processes are read leaves every card's processes empty (not known).
// Each failure is a DeviceError (backend.hpp) with what failed as its
// detail; the collector reports it with the device as its subject.

#include <cstddef>
#include <cstdint>

#include "accelerator/backend.hpp"

namespace nodewatch::accelerator {

// A card's facts are read again after this many collections (see above).
inline constexpr std::uint64_t kCardFactsRefreshCycles = 20;

// At most this many KFD process directories are read per collection (see
// above).
inline constexpr std::size_t kMaxKfdProcesses = 4096;

}  // namespace nodewatch::accelerator
