#pragma once
// Which job is on which accelerator: a process's cgroup read as a Slurm job
// or a Kubernetes pod, and the processes and pod-resources assignments of
// one device turned into its jobs. Pure functions; the accelerator collector
// reads /proc/PID/cgroup and asks the pod-resources watcher
// (pod_resources.hpp), and calls these.
//
// Cgroup paths understood (any prefix before them: a cgroup namespace, a
// kubelet --cgroup-root, a nested systemd; the first matching component
// wins):
//   Slurm, cgroup v2: .../slurmstepd.scope/job_<id>/step_<step>/user/task_<n>
//     (also <nodename>_slurmstepd.scope with several slurmd per node);
//     from Slurm 26.05 the job's directory is its SLUID by default
//     (sEKNKTV3WPV500; job_<id> again with CgroupJobIdPaths=yes), and the
//     SLUID is then the job_id;
//   Slurm, cgroup v1: .../slurm/uid_<uid>/job_<id>/step_<step>/task_<n>
//     (also slurm_<nodename>);
//     <step> is a number or batch, extern, interactive; a process in the
//     job but in no step (the job's own cgroup) has step "".
//   Kubernetes, systemd driver:
//     .../kubepods[-<qos>]-pod<uid, '_' for '-'>.slice/<runtime>-<id>.scope
//   Kubernetes, cgroupfs driver: .../kubepods/[<qos>/]pod<uid>/<id>
//     <runtime> is cri-containerd, crio, crio-conmon or docker; <id> the
//     container id (hex); <uid> the pod UID (36 characters with dashes, or
//     32 hex digits for a static pod's).
// Anything else is no job ("none"): a process the node runs outside any
// scheduler (a leftover of an ended job keeps its job's cgroup only while
// the cgroup exists).

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nodewatch::accelerator {

// Who a process belongs to.
struct JobOwner {
  enum class Kind { kNone, kSlurm, kKubernetes };
  Kind kind = Kind::kNone;
  std::string job_id;        // Slurm: the job id (or SLUID); Kubernetes: the pod UID (with dashes)
  std::string step;          // Slurm only
  std::string container_id;  // Kubernetes only
  bool operator==(const JobOwner&) const = default;
};

// One cgroup path; nullopt when it names no job.
std::optional<JobOwner> job_owner_from_cgroup_path(std::string_view path);

// The content of /proc/PID/cgroup ("0::/path" for cgroup v2, and
// "N:controllers:/path" for each v1 hierarchy): the v2 line first, then
// each v1 line in order; the first path that names a job. kNone when none
// does.
JobOwner job_owner_from_proc_cgroup(std::string_view content);

// One compute process on a device, as the driver reports it.
struct DeviceProcess {
  unsigned pid = 0;
  std::optional<double> memory_used_bytes;  // empty: the driver does not say
  std::optional<unsigned> gpu_instance;     // MIG: its GPU instance
  bool operator==(const DeviceProcess&) const = default;
};

// One container that the kubelet's pod-resources API says was given a
// device (or one of its MIG instances).
struct PodAssignment {
  std::string namespace_name;
  std::string pod;
  std::string container;
  std::optional<unsigned> gpu_instance;
  std::string claim{};  // the ResourceClaim it came through (in the pod's namespace); "" for none
  bool operator==(const PodAssignment&) const = default;
};

// One job on one device: the labels of nodewatch_accelerator_job_info.
struct DeviceJob {
  std::string scheduler;  // "slurm", "kubernetes", "none", "unknown"
  std::string job_id;
  std::string step;
  std::string namespace_name;
  std::string pod;
  std::string container;
  std::string gpu_instance;  // "" without MIG
  std::string claim;         // Kubernetes: the ResourceClaim that gave the device; "" for none
  // The memory of its processes on the device, summed; empty when no
  // process of it said.
  std::optional<double> memory_used_bytes;
  bool operator==(const DeviceJob&) const = default;
};

// One ResourceClaim's device on a GPU, and how many pods use it through
// the claim (more than one: a shared claim).
struct DeviceClaim {
  std::string namespace_name;
  std::string claim;
  std::string driver;
  std::string device;
  std::size_t pods = 0;
  bool operator==(const DeviceClaim&) const = default;
};

struct DeviceJobs {
  std::vector<DeviceJob> jobs;  // at most max_jobs, largest memory first
  std::size_t omitted = 0;      // jobs beyond max_jobs
};

// The jobs of one device. `owner_of(i)` is the owner of processes[i], or
// nullopt when its cgroup could not be read (the process ended, or is
// hidden from this PID namespace): such a process is "unknown".
//
// Joining the two sources, per device and GPU instance: when pod-resources
// gives exactly one pod there (by a device plugin or a claim) and the processes name at most one
// pod UID, the pod's containers carry that UID as job_id and the memory of the pod's and the
// unknown processes (the device is that pod's alone). Else each side is a job of its own: a pod UID
// from the cgroups without names, and each assigned container with its names. A pod whose UID no
// process gave has "<namespace>/<pod>" as its job_id. (pod-resources gives no UID, so the join
// trusts the assignment: a process of another pod that uses the device without having been given
// it, a privileged pod's, would be named after the pod that was given it.) A claim shared by
// several pods gives each its own job, named, and the memory to none of them: which process is
// whose is not guessed.
//
// Jobs are ordered by memory (largest first; none said last), then by
// labels; those beyond `max_jobs` are counted in `omitted`.
template <class OwnerOf>
DeviceJobs device_jobs(const std::vector<DeviceProcess>& processes, OwnerOf&& owner_of,
                       const std::vector<PodAssignment>& assignments, std::size_t max_jobs);

// The non-template core: owners given in the same order as `processes`.
DeviceJobs device_jobs_from(const std::vector<DeviceProcess>& processes,
                            const std::vector<std::optional<JobOwner>>& owners,
                            const std::vector<PodAssignment>& assignments, std::size_t max_jobs);

template <class OwnerOf>
DeviceJobs device_jobs(const std::vector<DeviceProcess>& processes, OwnerOf&& owner_of,
                       const std::vector<PodAssignment>& assignments, std::size_t max_jobs) {
  std::vector<std::optional<JobOwner>> owners;
  owners.reserve(processes.size());
  for (std::size_t i = 0; i < processes.size(); ++i) owners.push_back(owner_of(i));
  return device_jobs_from(processes, owners, assignments, max_jobs);
}

// A pod-resources device id in the form devices are matched by: NVIDIA's
// device plugin writes a GPU UUID ("GPU-...") or a MIG device UUID
// ("MIG-..."), with a time-slicing replica suffix ("::3") that is dropped
// here; AMD's writes the PCI address, returned in lower case. Anything
// else is returned as it is (it then matches no device).
std::string normalize_device_id(std::string_view id);

}  // namespace nodewatch::accelerator
