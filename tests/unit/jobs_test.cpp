// Job attribution's pure parts: cgroup paths as Slurm and Kubernetes write
// them (collectors/accelerator/jobs.hpp), and the join of a device's
// processes with the kubelet's pod-resources assignments.
//
// The paths are the layouts of Slurm's cgroup/v2 and cgroup/v1 plugins
// (slurmstepd.scope/job_<id>/step_<step>/user/task_<n>,
// slurm/uid_<uid>/job_<id>/step_<step>/task_<n>) and of the kubelet's two
// cgroup drivers with containerd, CRI-O and cri-dockerd scope names.

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "accelerator/dra.hpp"
#include "accelerator/jobs.hpp"

namespace nodewatch::accelerator {
namespace {

using Kind = JobOwner::Kind;

JobOwner slurm(std::string job, std::string step) {
  return {Kind::kSlurm, std::move(job), std::move(step), ""};
}
JobOwner pod(std::string uid, std::string container) {
  return {Kind::kKubernetes, std::move(uid), "", std::move(container)};
}

constexpr const char* kUid = "3f2b8c1e-6d4a-4e7b-9a0c-1d2e3f4a5b6c";
constexpr const char* kUidSystemd = "3f2b8c1e_6d4a_4e7b_9a0c_1d2e3f4a5b6c";
constexpr const char* kCid = "5a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f";

TEST(JobsCgroup, SlurmCgroupV2Steps) {
  EXPECT_EQ(
      job_owner_from_cgroup_path("/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0"),
      slurm("4242", "0"));
  EXPECT_EQ(
      job_owner_from_cgroup_path("/system.slice/slurmstepd.scope/job_7/step_batch/user/task_0"),
      slurm("7", "batch"));
  EXPECT_EQ(job_owner_from_cgroup_path("/system.slice/slurmstepd.scope/job_7/step_extern/user"),
            slurm("7", "extern"));
  EXPECT_EQ(
      job_owner_from_cgroup_path("/system.slice/slurmstepd.scope/job_7/step_interactive/user"),
      slurm("7", "interactive"));
  // Several slurmd per node: the scope is named after the node.
  EXPECT_EQ(
      job_owner_from_cgroup_path("/system.slice/gpu07_slurmstepd.scope/job_9/step_12/user/task_3"),
      slurm("9", "12"));
  // Slurm 26.05 names the job's directory by its SLUID.
  EXPECT_EQ(job_owner_from_cgroup_path(
                "/system.slice/slurmstepd.scope/sEKNKTV3WPV500/step_0/user/task_0"),
            slurm("sEKNKTV3WPV500", "0"));
  EXPECT_EQ(job_owner_from_cgroup_path("/system.slice/slurmstepd.scope/sEKNKTV3WPV5I0/step_0"),
            std::nullopt)
      << "I is not in Crockford's alphabet";
  EXPECT_EQ(job_owner_from_cgroup_path("/slurm/uid_0/sEKNKTV3WPV500/step_0"), std::nullopt)
      << "cgroup v1 still writes job_<id>";
  // The job's own cgroup, in no step.
  EXPECT_EQ(job_owner_from_cgroup_path("/system.slice/slurmstepd.scope/job_9"), slurm("9", ""));
  // slurmstepd's own cgroup is not a job.
  EXPECT_EQ(job_owner_from_cgroup_path("/system.slice/slurmstepd.scope/system"), std::nullopt);
}

TEST(JobsCgroup, SlurmCgroupV1) {
  EXPECT_EQ(job_owner_from_cgroup_path("/slurm/uid_1000/job_31337/step_0/task_1"),
            slurm("31337", "0"));
  EXPECT_EQ(job_owner_from_cgroup_path("/slurm_gpu07/uid_0/job_5/step_batch/task_0"),
            slurm("5", "batch"));
  // A step name this code does not know stays out of the label.
  EXPECT_EQ(job_owner_from_cgroup_path("/slurm/uid_1000/job_5/step_weird"), slurm("5", ""));
  EXPECT_EQ(job_owner_from_cgroup_path("/slurm/uid_1000/job_x5/step_0"), std::nullopt);
  EXPECT_EQ(job_owner_from_cgroup_path("/slurm/uid_1000"), std::nullopt);
  // "job_" without Slurm above it is not a Slurm job.
  EXPECT_EQ(job_owner_from_cgroup_path("/user.slice/job_5/step_0"), std::nullopt);
}

TEST(JobsCgroup, KubernetesSystemdDriver) {
  const std::string burstable =
      std::string("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod") + kUidSystemd +
      ".slice/cri-containerd-" + kCid + ".scope";
  EXPECT_EQ(job_owner_from_cgroup_path(burstable), pod(kUid, kCid));
  const std::string guaranteed =
      std::string("/kubepods.slice/kubepods-pod") + kUidSystemd + ".slice/crio-" + kCid + ".scope";
  EXPECT_EQ(job_owner_from_cgroup_path(guaranteed), pod(kUid, kCid));
  const std::string conmon =
      std::string("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod") +
      kUidSystemd + ".slice/crio-conmon-" + kCid + ".scope";
  EXPECT_EQ(job_owner_from_cgroup_path(conmon), pod(kUid, kCid));
  const std::string docker = std::string("/kubepods.slice/kubepods-pod") + kUidSystemd +
                             ".slice/docker-" + kCid + ".scope";
  EXPECT_EQ(job_owner_from_cgroup_path(docker), pod(kUid, kCid));
  // The pod's own cgroup (a pause process): the pod, no container.
  EXPECT_EQ(job_owner_from_cgroup_path(std::string("/kubepods.slice/kubepods-pod") + kUidSystemd +
                                       ".slice"),
            pod(kUid, ""));
  // Under a kubelet --cgroup-root and in a nested hierarchy.
  EXPECT_EQ(job_owner_from_cgroup_path(
                "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
                "kubelet-kubepods-burstable-pod" +
                std::string(kUidSystemd) + ".slice/cri-containerd-" + kCid + ".scope"),
            pod(kUid, kCid));
  // A slice of another kind holding "-pod" is not a pod.
  EXPECT_EQ(
      job_owner_from_cgroup_path(std::string("/system.slice/app-pod") + kUidSystemd + ".slice"),
      std::nullopt);
}

TEST(JobsCgroup, KubernetesCgroupfsDriver) {
  EXPECT_EQ(job_owner_from_cgroup_path(std::string("/kubepods/burstable/pod") + kUid + "/" + kCid),
            pod(kUid, kCid));
  EXPECT_EQ(job_owner_from_cgroup_path(std::string("/kubepods/pod") + kUid + "/" + kCid),
            pod(kUid, kCid));
  EXPECT_EQ(
      job_owner_from_cgroup_path(std::string("/kubepods/besteffort/pod") + kUid + "/crio-" + kCid),
      pod(kUid, kCid));
  // A static pod's UID is the kubelet's 32-digit hash.
  EXPECT_EQ(job_owner_from_cgroup_path(
                std::string("/kubepods/podaf2b8c1e6d4a4e7b9a0c1d2e3f4a5b6c/") + kCid),
            pod("af2b8c1e6d4a4e7b9a0c1d2e3f4a5b6c", kCid));
  // Upper case is read as lower.
  EXPECT_EQ(job_owner_from_cgroup_path("/kubepods/pod3F2B8C1E-6D4A-4E7B-9A0C-1D2E3F4A5B6C"),
            pod(kUid, ""));
  // Not a UID, or no kubepods above: not a pod.
  EXPECT_EQ(job_owner_from_cgroup_path("/kubepods/burstable/podnot-a-uid/abc"), std::nullopt);
  EXPECT_EQ(job_owner_from_cgroup_path(std::string("/system.slice/pod") + kUid), std::nullopt);
  // A container id that is not hex is left empty, the pod is still known.
  EXPECT_EQ(job_owner_from_cgroup_path(std::string("/kubepods/pod") + kUid + "/sandbox"),
            pod(kUid, ""));
}

TEST(JobsCgroup, ProcCgroupPrefersTheUnifiedLine) {
  // A hybrid host: v1 hierarchies and the unified one. The v2 line comes
  // last in the file but is read first.
  const std::string hybrid =
      "12:freezer:/slurm/uid_1000/job_11/step_0/task_0\n"
      "11:memory:/slurm/uid_1000/job_11/step_0/task_0\n"
      "0::/system.slice/slurmstepd.scope/job_12/step_1/user/task_0\n";
  EXPECT_EQ(job_owner_from_proc_cgroup(hybrid), slurm("12", "1"));
  // cgroup v1 only: the first hierarchy that names a job.
  const std::string v1 =
      "9:cpuset:/\n"
      "5:devices:/slurm/uid_1000/job_11/step_batch/task_0\n"
      "4:memory:/slurm/uid_1000/job_11/step_batch\n";
  EXPECT_EQ(job_owner_from_proc_cgroup(v1), slurm("11", "batch"));
  // No job anywhere, an empty file, garbage: no job.
  EXPECT_EQ(job_owner_from_proc_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n"),
            JobOwner{});
  EXPECT_EQ(job_owner_from_proc_cgroup(""), JobOwner{});
  EXPECT_EQ(job_owner_from_proc_cgroup(std::string("\0\0\xff:::\n::", 9)), JobOwner{});
  // A path holding ':' is read whole.
  EXPECT_EQ(job_owner_from_proc_cgroup("0::/odd:name/slurmstepd.scope/job_3/step_0\n"),
            slurm("3", "0"));
}

TEST(JobsDeviceIds, NormalisedAsDevicesAreMatched) {
  EXPECT_EQ(normalize_device_id("GPU-8ab3c1d2-0000-1111-2222-333344445555"),
            "GPU-8ab3c1d2-0000-1111-2222-333344445555");
  EXPECT_EQ(normalize_device_id("GPU-8ab3c1d2-0000-1111-2222-333344445555::3"),
            "GPU-8ab3c1d2-0000-1111-2222-333344445555");
  EXPECT_EQ(normalize_device_id("MIG-0e2f6c1a-aaaa-bbbb-cccc-ddddeeeeffff"),
            "MIG-0e2f6c1a-aaaa-bbbb-cccc-ddddeeeeffff");
  EXPECT_EQ(normalize_device_id("0000:C1:00.0"), "0000:c1:00.0");
  EXPECT_EQ(normalize_device_id("3"), "3");
}

DeviceProcess proc(unsigned pid, std::optional<double> mem, std::optional<unsigned> gi = {}) {
  return {pid, mem, gi};
}

TEST(JobsDevice, SlurmStepsAreJobsWithMemorySummed) {
  const std::vector<DeviceProcess> ps = {proc(10, 100), proc(11, 50), proc(12, 7), proc(13, {})};
  const std::vector<std::optional<JobOwner>> owners = {slurm("42", "0"), slurm("42", "0"),
                                                       slurm("42", "1"), JobOwner{}};
  const DeviceJobs d = device_jobs_from(ps, owners, {}, 8);
  ASSERT_EQ(d.jobs.size(), 3u);
  EXPECT_EQ(d.omitted, 0u);
  EXPECT_EQ(d.jobs[0].scheduler, "slurm");
  EXPECT_EQ(d.jobs[0].job_id, "42");
  EXPECT_EQ(d.jobs[0].step, "0");
  EXPECT_EQ(d.jobs[0].memory_used_bytes, 150);
  EXPECT_EQ(d.jobs[1].step, "1");
  EXPECT_EQ(d.jobs[1].memory_used_bytes, 7);
  // A process in no job, whose memory the driver did not give: last.
  EXPECT_EQ(d.jobs[2].scheduler, "none");
  EXPECT_EQ(d.jobs[2].memory_used_bytes, std::nullopt);
}

TEST(JobsDevice, AnUnreadableCgroupIsUnknown) {
  const DeviceJobs d = device_jobs_from({proc(10, 5)}, {std::nullopt}, {}, 8);
  ASSERT_EQ(d.jobs.size(), 1u);
  EXPECT_EQ(d.jobs[0].scheduler, "unknown");
  EXPECT_EQ(d.jobs[0].memory_used_bytes, 5);
}

TEST(JobsDevice, OnePodOnTheDeviceJoinsItsProcessesWithItsNames) {
  const std::vector<DeviceProcess> ps = {proc(10, 100), proc(11, 20)};
  const std::vector<std::optional<JobOwner>> owners = {pod(kUid, kCid), std::nullopt};
  const DeviceJobs d =
      device_jobs_from(ps, owners, {{"train", "llama-worker-3", "trainer", {}}}, 8);
  ASSERT_EQ(d.jobs.size(), 1u);
  const DeviceJob& j = d.jobs[0];
  EXPECT_EQ(j.scheduler, "kubernetes");
  EXPECT_EQ(j.job_id, kUid);
  EXPECT_EQ(j.namespace_name, "train");
  EXPECT_EQ(j.pod, "llama-worker-3");
  EXPECT_EQ(j.container, "trainer");
  // The pod's process and the one whose cgroup is hidden: the device is the pod's.
  EXPECT_EQ(j.memory_used_bytes, 120);
}

TEST(JobsDevice, PodResourcesAloneNamesThePod) {
  // Processes not visible from this PID namespace: names, no UID.
  const DeviceJobs d = device_jobs_from({proc(10, 64)}, {std::nullopt}, {{"ns", "p", "c", {}}}, 8);
  ASSERT_EQ(d.jobs.size(), 1u);
  EXPECT_EQ(d.jobs[0].job_id, "ns/p");
  EXPECT_EQ(d.jobs[0].pod, "p");
  EXPECT_EQ(d.jobs[0].memory_used_bytes, 64);
  // No process at all: the assignment still says whose the device is.
  const DeviceJobs idle = device_jobs_from({}, {}, {{"ns", "p", "c", {}}}, 8);
  ASSERT_EQ(idle.jobs.size(), 1u);
  EXPECT_EQ(idle.jobs[0].memory_used_bytes, std::nullopt);
}

TEST(JobsDevice, SharedDeviceIsNotGuessed) {
  // Time-slicing: two pods were given the GPU; two pod UIDs run on it. No
  // name is put on a UID it may not belong to.
  const std::string other = "00000000-1111-2222-3333-444455556666";
  const DeviceJobs d =
      device_jobs_from({proc(10, 10), proc(11, 30)}, {pod(kUid, ""), pod(other, "")},
                       {{"a", "pa", "c", {}}, {"b", "pb", "c", {}}}, 8);
  ASSERT_EQ(d.jobs.size(), 4u);
  EXPECT_EQ(d.jobs[0].job_id, other);
  EXPECT_EQ(d.jobs[0].pod, "");
  EXPECT_EQ(d.jobs[0].memory_used_bytes, 30);
  EXPECT_EQ(d.jobs[1].job_id, kUid);
  EXPECT_EQ(d.jobs[2].pod, "pa");
  EXPECT_EQ(d.jobs[2].job_id, "a/pa");
  EXPECT_EQ(d.jobs[3].pod, "pb");
}

TEST(JobsDevice, MigInstancesAreJoinedEachOnItsOwn) {
  const std::vector<DeviceProcess> ps = {proc(10, 5, 1), proc(11, 9, 2)};
  const std::string other = "00000000-1111-2222-3333-444455556666";
  const DeviceJobs d = device_jobs_from(ps, {pod(kUid, ""), pod(other, "")},
                                        {{"a", "pa", "c", 1u}, {"b", "pb", "c", 2u}}, 8);
  ASSERT_EQ(d.jobs.size(), 2u);
  EXPECT_EQ(d.jobs[0].gpu_instance, "2");
  EXPECT_EQ(d.jobs[0].job_id, other);
  EXPECT_EQ(d.jobs[0].pod, "pb");
  EXPECT_EQ(d.jobs[1].gpu_instance, "1");
  EXPECT_EQ(d.jobs[1].job_id, kUid);
  EXPECT_EQ(d.jobs[1].pod, "pa");
}

TEST(JobsDevice, BoundedLargestFirst) {
  std::vector<DeviceProcess> ps;
  std::vector<std::optional<JobOwner>> owners;
  for (unsigned i = 0; i < 20; ++i) {
    ps.push_back(proc(100 + i, double(i)));
    owners.push_back(slurm(std::to_string(1000 + i), "0"));
  }
  const DeviceJobs d = device_jobs_from(ps, owners, {}, 8);
  ASSERT_EQ(d.jobs.size(), 8u);
  EXPECT_EQ(d.omitted, 12u);
  EXPECT_EQ(d.jobs.front().job_id, "1019");
  EXPECT_EQ(d.jobs.back().job_id, "1012");
  EXPECT_EQ(device_jobs_from(ps, owners, {}, 0).omitted, 20u);
}

// The DRA drivers' device names (dra.hpp, with the versions they come from).
TEST(Dra, NvidiaAndAmdDeviceNamesNameTheirGpus) {
  using dra::GpuRef;
  EXPECT_EQ(dra::gpu_of("gpu.nvidia.com", "gpu-3"), (GpuRef{"nvidia", 3, false}));
  EXPECT_EQ(dra::gpu_of("gpu.nvidia.com", "gpu-0-mig-19-0-1"), (GpuRef{"nvidia", 0, true}));
  EXPECT_EQ(dra::gpu_of("gpu.nvidia.com", "gpu-7-mig-1g10gb-19-6"), (GpuRef{"nvidia", 7, true}));
  EXPECT_EQ(dra::gpu_of("gpu.amd.com", "gpu-2-130"), (GpuRef{"amd", 2, false}));
  // Not GPUs nodewatch reads, or not names of these forms.
  EXPECT_FALSE(dra::gpu_of("gpu.nvidia.com", "gpu-vfio-1"));
  EXPECT_FALSE(dra::gpu_of("compute-domain.nvidia.com", "channel-0"));
  EXPECT_FALSE(dra::gpu_of("gpu.nvidia.com", "gpu-"));
  EXPECT_FALSE(dra::gpu_of("gpu.nvidia.com", "gpu-1-"));
  EXPECT_FALSE(dra::gpu_of("gpu.nvidia.com", "gpu-99999999"));
  EXPECT_FALSE(dra::gpu_of("gpu.amd.com", "gpu-2"));
  EXPECT_FALSE(dra::gpu_of("gpu.amd.com", "gpu-2-x"));
  EXPECT_FALSE(dra::gpu_of("gpu.example.com", "gpu-0"));
}

TEST(Dra, CdiNamesOfOldKubeletsGiveTheDriverAndDevice) {
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(dra::from_cdi_name("k8s.gpu.nvidia.com/device=gpu-0"), (P{"gpu.nvidia.com", "gpu-0"}));
  EXPECT_EQ(
      dra::from_cdi_name("k8s.gpu.nvidia.com/claim=0f6a4c1e-93a4-4c55-8d2b-0e2a7b5c9d11-gpu-2"),
      (P{"gpu.nvidia.com", "gpu-2"}));
  EXPECT_EQ(
      dra::from_cdi_name("k8s.gpu.amd.com/gpu=0f6a4c1e-93a4-4c55-8d2b-0e2a7b5c9d11-gpu-1-129"),
      (P{"gpu.amd.com", "gpu-1-129"}));
  EXPECT_FALSE(dra::from_cdi_name("k8s.gpu.amd.com/gpu=common"));
  EXPECT_FALSE(dra::from_cdi_name("nvidia.com/gpu=0"));  // the device plugin's CDI, not DRA's
  EXPECT_FALSE(dra::from_cdi_name("k8s.gpu.nvidia.com/device"));
  EXPECT_FALSE(dra::from_cdi_name(""));
}

TEST(Dra, TheDriversInformationFileGivesTheDeviceMinor) {
  // /proc/driver/nvidia/gpus/0000:18:00.0/information, driver 550.
  EXPECT_EQ(dra::nvidia_device_minor("Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\n"
                                     "Bus Location: \t 0000:18:00.0\nDevice Minor: \t 5\n"
                                     "GPU Excluded:\t No\n"),
            5u);
  EXPECT_FALSE(dra::nvidia_device_minor("Model: x\nDevice Minor: \t \n"));
  EXPECT_FALSE(dra::nvidia_device_minor("Device Minor: -1\n"));
  EXPECT_FALSE(dra::nvidia_device_minor(""));
}

// A claim shared by two pods: each named, the memory neither's.
TEST(Jobs, ASharedClaimNamesEveryPodAndGuessesNoMemory) {
  std::vector<DeviceProcess> ps = {{100, 4096.0, std::nullopt}};
  std::vector<std::optional<JobOwner>> owners = {std::nullopt};
  std::vector<PodAssignment> as = {{"infer", "a", "triton", std::nullopt, "shared"},
                                   {"infer", "b", "triton", std::nullopt, "shared"}};
  const DeviceJobs j = device_jobs_from(ps, owners, as, 8);
  ASSERT_EQ(j.jobs.size(), 3u);
  EXPECT_EQ(j.jobs[0].scheduler, "unknown");
  EXPECT_EQ(j.jobs[0].memory_used_bytes, 4096.0);
  EXPECT_EQ(j.jobs[1].pod, "a");
  EXPECT_EQ(j.jobs[1].claim, "shared");
  EXPECT_FALSE(j.jobs[1].memory_used_bytes);
  EXPECT_EQ(j.jobs[2].pod, "b");
  EXPECT_EQ(j.jobs[2].claim, "shared");
}

}  // namespace
}  // namespace nodewatch::accelerator
