#pragma once
// Dynamic Resource Allocation: which GPU a device of a ResourceClaim is.
// The kubelet's pod-resources API names a claim's devices by their DRA
// driver and their name in the driver's pool (pod_resources.hpp); the
// drivers name GPUs after numbers the node knows. Pure functions; the
// accelerator collector reads the numbers (docs/jobs.md).
//
// NVIDIA's driver (gpu.nvidia.com, NVIDIA/k8s-dra-driver-gpu v25.3.0 on):
//   "gpu-<minor>", a whole GPU, <minor> the N of /dev/nvidiaN (the
//     driver's "Device Minor", /proc/driver/nvidia/gpus/<PCI>/information;
//     the NVML index only in the v25.3.0 release candidates);
//   "gpu-<minor>-mig-<profile id>-<start>-<size>" (v25.3, v25.8) and
//   "gpu-<minor>-mig-<profile name>-<profile id>-<start>" (v25.12 on), a MIG
//     device of that GPU, named by its placement, which NVML tells only a
//     privileged process: it is attributed to the GPU, its instance unknown;
//   "gpu-vfio-<n>" (v25.12 on), a GPU given whole to a virtual machine:
//     not one nodewatch reads, and not matched.
// Its compute-domain.nvidia.com devices ("channel-<n>", "daemon-<n>") are
// IMEX channels, not GPUs.
// AMD's driver (gpu.amd.com, ROCm/k8s-gpu-dra-driver): "gpu-<card>-<render>",
//   a GPU or a partition, the N of /dev/dri/cardN and of renderDN.
//
// Kubelets 1.27-1.30 give only the CDI device names of a claim's devices;
// the drivers' names are in them ("k8s.gpu.nvidia.com/device=gpu-0",
// "k8s.gpu.nvidia.com/claim=<claim UID>-gpu-0", "k8s.gpu.amd.com/gpu=<claim
// UID>-gpu-0-128").

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace nodewatch::accelerator::dra {

inline constexpr std::string_view kNvidiaDriver = "gpu.nvidia.com";
inline constexpr std::string_view kAmdDriver = "gpu.amd.com";

// A claimed device as a GPU of this node.
struct GpuRef {
  std::string vendor;  // "nvidia", "amd": DeviceSample::vendor
  unsigned minor = 0;  // NVIDIA: /dev/nvidiaN; AMD: /dev/dri/cardN
  bool mig = false;    // NVIDIA: a MIG device of the GPU
  bool operator==(const GpuRef&) const = default;
};

// The GPU a device of `driver` named `device` is; nullopt for a device of
// another driver, one that is not a GPU, or a name of another form.
std::optional<GpuRef> gpu_of(std::string_view driver, std::string_view device);

// The (driver, device name) in a CDI device name; nullopt for a CDI name of
// another vendor, or one that names no device (AMD's "…/gpu=common").
std::optional<std::pair<std::string, std::string>> from_cdi_name(std::string_view cdi);

// The "Device Minor:" of /proc/driver/nvidia/gpus/<PCI>/information.
std::optional<unsigned> nvidia_device_minor(std::string_view information);

}  // namespace nodewatch::accelerator::dra
