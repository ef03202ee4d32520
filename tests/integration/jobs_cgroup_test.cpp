// Which job is on which accelerator, end to end through the real kernel:
// the test starts processes, puts them in cgroups it creates with the
// layouts Slurm (cgroup v2 and v1) and the kubelet (systemd and cgroupfs
// drivers) make, has the fake libnvidia-ml.so.1 report those PIDs on its
// GPUs, serves the pod-resources API from a real gRPC server on a unix
// socket, and reads the accelerator collector's job series.
//
// Needs root and a writable cgroup hierarchy (CI runs as root): skipped,
// with the reason, where either is missing.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "accelerator/accelerator_collector.hpp"
#include "accelerator/backend.hpp"
#include "accelerator/nvml/nvml_service.hpp"
#include "support/collector_test.hpp"
#include "support/daemon_process.hpp"
#include "support/fake_nvml.hpp"
#include "support/fake_pod_resources.hpp"
#include "support/paths.hpp"

namespace nodewatch::accelerator {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nodewatch::testing::CollectOnce;
using nodewatch::testing::ErrorCount;
using nodewatch::testing::Value;
constexpr auto Has = nodewatch::testing::HasSeries;

constexpr const char* kUid = "3f2b8c1e-6d4a-4e7b-9a0c-1d2e3f4a5b6c";
constexpr const char* kUidSystemd = "3f2b8c1e_6d4a_4e7b_9a0c_1d2e3f4a5b6c";
constexpr const char* kUid2 = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
constexpr const char* kCid = "5a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f";

std::string uuid(unsigned i) {
  char b[64];
  std::snprintf(b, sizeof b, "GPU-00000000-0000-4000-8000-0000000000%02u", i);
  return b;
}

// A mount point of the cgroup file system: "cgroup2", or a v1 hierarchy
// with `controller` among its options.
std::optional<fs::path> cgroup_mount(const std::string& type, const std::string& controller = "") {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream w(line);
    std::vector<std::string> f;
    for (std::string t; w >> t;) f.push_back(t);
    // ... mount-point(4) ... "-" fstype source super-options
    auto dash = std::find(f.begin(), f.end(), "-");
    if (dash == f.end() || dash + 3 >= f.end() || f.size() < 5) continue;
    if (*(dash + 1) != type) continue;
    if (!controller.empty() &&
        ("," + *(dash + 3) + ",").find("," + controller + ",") == std::string::npos)
      continue;
    return fs::path(f[4]);
  }
  return std::nullopt;
}

// A process that sleeps until killed, in the cgroup `dir` (created).
class Sleeper {
 public:
  Sleeper() {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::pause();
      ::_exit(0);
    }
  }
  ~Sleeper() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  bool join(const fs::path& dir) const {
    std::error_code ec;
    fs::create_directories(dir, ec);
    std::ofstream out(dir / "cgroup.procs");
    out << pid_ << "\n";
    out.flush();
    return out.good();
  }

 private:
  pid_t pid_ = -1;
};

// The cgroups a test made, removed deepest first once their processes are gone.
class Cgroups {
 public:
  explicit Cgroups(fs::path root) : root_(std::move(root)) {}
  ~Cgroups() {
    std::vector<fs::path> dirs;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(root_, ec);
         it != fs::recursive_directory_iterator(); ++it)
      if (it->is_directory(ec)) dirs.push_back(it->path());
    std::sort(dirs.begin(), dirs.end(), [](const fs::path& a, const fs::path& b) {
      return a.string().size() > b.string().size();
    });
    for (const auto& d : dirs) ::rmdir(d.c_str());
    ::rmdir(root_.c_str());
  }
  const fs::path& root() const { return root_; }

 private:
  fs::path root_;
};

std::optional<fs::path> writable_root(const std::optional<fs::path>& mount, std::string* why) {
  if (::geteuid() != 0) {
    *why = "needs root to create cgroups (CI runs as root)";
    return std::nullopt;
  }
  if (!mount) {
    *why = "no such cgroup hierarchy is mounted here";
    return std::nullopt;
  }
  fs::path root = *mount / ("nodewatch-jobs-test-" + std::to_string(::getpid()));
  std::error_code ec;
  if (!fs::create_directory(root, ec) || ec) {
    *why = "cannot create a cgroup under " + mount->string() + ": " + ec.message();
    return std::nullopt;
  }
  return root;
}

// A PID no process can have: above the kernel's pid_max.
unsigned no_such_pid(unsigned k = 0) {
  unsigned max = 4194304;
  std::ifstream("/proc/sys/kernel/pid_max") >> max;
  return max + 1 + k;
}

// Whether this test process itself runs in a job's cgroup (a CI runner in
// a pod or a Slurm job): its children would then be that job's, not "none".
bool in_a_job(std::string* why) {
  std::ifstream in("/proc/self/cgroup");
  std::stringstream text;
  text << in.rdbuf();
  const JobOwner o = job_owner_from_proc_cgroup(text.str());
  if (o.kind == JobOwner::Kind::kNone) return false;
  *why = "this test runs inside a job's cgroup (" + o.job_id + "), so its children are not in none";
  return true;
}

struct Node {
  explicit Node(const std::string& scenario, std::shared_ptr<PodResourcesWatcher> pr = nullptr,
                std::size_t max_jobs = 8) {
    setenv("FAKE_NVML_SCENARIO", scenario.c_str(), 1);
    std::vector<std::unique_ptr<Backend>> backends;
    backends.push_back(make_nvml_backend(std::make_shared<NvmlService>(FAKE_NVML_LIBRARY)));
    JobSources jobs;
    jobs.proc = sources::FsRoot("/proc");
    jobs.max_jobs_per_device = max_jobs;
    jobs.pod_resources = std::move(pr);
    collector = std::make_unique<AcceleratorCollector>(std::move(backends), std::move(jobs));
  }
  MetricSink Collect() {
    MetricSink sink(accelerator_metric_table());
    CollectOnce(*collector, sink, 10s);
    return sink;
  }
  std::unique_ptr<AcceleratorCollector> collector;
};

std::vector<std::string> job(unsigned dev, std::string scheduler, std::string job_id,
                             std::string step, std::string ns = "", std::string pod = "",
                             std::string container = "", std::string gi = "",
                             std::string claim = "") {
  return {std::to_string(dev), uuid(dev),       std::move(scheduler), std::move(job_id),
          std::move(step),     std::move(ns),   std::move(pod),       std::move(container),
          std::move(gi),       std::move(claim)};
}
std::vector<std::string> mem(unsigned dev, std::string job_id) {
  return {std::to_string(dev), uuid(dev), std::move(job_id)};
}

TEST(JobsCgroup, SlurmAndKubernetesOnCgroupV2WithPodResources) {
  std::string why;
  const auto root = writable_root(cgroup_mount("cgroup2"), &why);
  if (!root) GTEST_SKIP() << "cgroup v2 job attribution not tested: " << why;
  Cgroups cg(*root);
  Sleeper slurm_a, slurm_b, slurm_extern, kube_systemd, kube_cgroupfs, outside;
  const fs::path scope = *root / "system.slice" / "slurmstepd.scope";
  ASSERT_TRUE(slurm_a.join(scope / "job_4242" / "step_0" / "user" / "task_0"));
  ASSERT_TRUE(slurm_b.join(scope / "job_4242" / "step_0" / "user" / "task_1"));
  ASSERT_TRUE(slurm_extern.join(scope / "job_4243" / "step_extern" / "user"));
  ASSERT_TRUE(kube_systemd.join(*root / "kubepods.slice" / "kubepods-burstable.slice" /
                                ("kubepods-burstable-pod" + std::string(kUidSystemd) + ".slice") /
                                ("cri-containerd-" + std::string(kCid) + ".scope")));
  ASSERT_TRUE(
      kube_cgroupfs.join(*root / "kubepods" / "besteffort" / ("pod" + std::string(kUid2)) / kCid));
  ASSERT_TRUE(outside.join(*root / "user.slice"));

  testing::TempDir dir;
  const std::string socket = (dir.path() / "kubelet.sock").string();
  testing::FakePodResourcesServer kubelet(socket);
  // GPU 2 is the systemd-driver pod's alone; GPU 3 was given to a pod whose
  // processes run elsewhere in the cgroup tree (the cgroupfs one): its
  // names and the cgroup's UID join, since only one pod holds the device.
  kubelet.Set({{"train", "llama-worker-0", "trainer", "nvidia.com/gpu", uuid(2)},
               {"batch", "etl-5", "main", "nvidia.com/gpu", uuid(3) + "::0"},
               {"idle", "reserved-0", "waiter", "nvidia.com/gpu", uuid(5)}});
  ASSERT_TRUE(kubelet.Start());
  PodResourcesWatcher::Options o;
  o.socket = socket;
  o.timeout = 2s;
  o.helper = nodewatch::testing::kPodResourcesHelper;
  auto watcher = std::make_shared<PodResourcesWatcher>(o);

  testing::TempDir scenario_dir;
  std::ostringstream s;
  s << "devices 6\n"
    << "processes 0 " << slurm_a.pid() << ":1024 " << slurm_b.pid() << ":2048\n"
    << "processes 1 " << slurm_extern.pid() << ":- " << outside.pid() << ":16\n"
    << "processes 2 " << kube_systemd.pid() << ":40960\n"
    << "processes 3 " << kube_cgroupfs.pid()
    << ":512\n"
    // A PID that is no process: its owner cannot be read.
    << "processes 4 " << no_such_pid() << ":8\n";
  const auto scenario = scenario_dir.write("jobs.scenario", s.str());
  Node node(scenario.string(), watcher);
  const MetricSink m = node.Collect();

  // Slurm: both tasks of step 0 are one job, their memory summed.
  EXPECT_EQ(Value(m, "nodewatch_accelerator_job_info", job(0, "slurm", "4242", "0")), 1);
  EXPECT_EQ(Value(m, "nodewatch_accelerator_process_memory_used_bytes", mem(0, "4242")),
            3072.0 * (1 << 20));
  EXPECT_EQ(Value(m, "nodewatch_accelerator_processes", {"0", uuid(0)}), 2);
  // The extern step, whose memory the driver did not give, and a process in no job.
  EXPECT_EQ(Value(m, "nodewatch_accelerator_job_info", job(1, "slurm", "4243", "extern")), 1);
  EXPECT_FALSE(Has(m, "nodewatch_accelerator_process_memory_used_bytes", mem(1, "4243")));
  EXPECT_EQ(Value(m, "nodewatch_accelerator_job_info", job(1, "none", "", "")), 1);
  EXPECT_EQ(Value(m, "nodewatch_accelerator_process_memory_used_bytes", mem(1, "")),
            16.0 * (1 << 20));
  // Kubernetes, systemd driver, named by pod-resources.
  EXPECT_EQ(Value(m, "nodewatch_accelerator_job_info",
                  job(2, "kubernetes", kUid, "", "train", "llama-worker-0", "trainer")),
            1);
  EXPECT_EQ(Value(m, "nodewatch_accelerator_process_memory_used_bytes", mem(2, kUid)),
            40.0 * (1 << 30));
  // Kubernetes, cgroupfs driver; the time-slicing replica suffix is read.
  EXPECT_EQ(Value(m, "nodewatch_accelerator_job_info",
                  job(3, "kubernetes", kUid2, "", "batch", "etl-5", "main")),
            1);
  // A process that is gone: unknown, not an error.
  EXPECT_EQ(Value(m, "nodewatch_accelerator_job_info", job(4, "unknown", "", "")), 1);
  EXPECT_EQ(ErrorCount(m, "cgroup_read"), 0u);
  // An idle device given to a pod: the pod, no memory.
  EXPECT_EQ(Value(m, "nodewatch_accelerator_job_info",
                  job(5, "kubernetes", "idle/reserved-0", "", "idle", "reserved-0", "waiter")),
            1);
  EXPECT_EQ(Value(m, "nodewatch_accelerator_pod_resources_up", {}), 1);
  EXPECT_EQ(Value(m, "nodewatch_accelerator_processes", {"5", uuid(5)}), 0);

  // The kubelet goes away: no error (its socket is gone), the names stay a while.
  kubelet.Stop();
  const MetricSink later = node.Collect();
  EXPECT_FALSE(Has(later, "nodewatch_accelerator_pod_resources_up", {}));
  EXPECT_EQ(ErrorCount(later, "pod_resources"), 0u);
  EXPECT_EQ(Value(later, "nodewatch_accelerator_job_info",
                  job(2, "kubernetes", kUid, "", "train", "llama-worker-0", "trainer")),
            1);
}

TEST(JobsCgroup, ProcessesHiddenFromProcAreFoundInTheCgroupTree) {
  // The unit's ProtectProc=invisible hides other users' processes from the
  // daemon's /proc: here a /proc root with no process in it. Their cgroups
  // are then found by their cgroup.procs files under /sys/fs/cgroup.
  std::string why;
  const auto mount = cgroup_mount("cgroup2");
  const auto root = writable_root(mount, &why);
  if (!root) GTEST_SKIP() << "the cgroup-tree fallback not tested: " << why;
  if (mount->string().rfind("/sys/fs/cgroup", 0) != 0)
    GTEST_SKIP() << "cgroup v2 is mounted at " << mount->string() << ", not under /sys/fs/cgroup";
  Cgroups cg(*root);
  Sleeper slurm, kube, plain;
  ASSERT_TRUE(slurm.join(*root / "system.slice" / "slurmstepd.scope" / "job_515" / "step_2" /
                         "user" / "task_0"));
  ASSERT_TRUE(
      kube.join(*root / "kubepods.slice" / ("kubepods-pod" + std::string(kUidSystemd) + ".slice") /
                ("crio-" + std::string(kCid) + ".scope")));
  ASSERT_TRUE(plain.join(*root / "user.slice"));
  testing::TempDir empty_proc;
  testing::TempDir scenario_dir;
  std::ostringstream s;
  s << "devices 2\nprocesses 0 " << slurm.pid() << ":100 " << plain.pid() << ":1\nprocesses 1 "
    << kube.pid() << ":200\n";
  const auto scenario = scenario_dir.write("hidden.scenario", s.str());
  setenv("FAKE_NVML_SCENARIO", scenario.c_str(), 1);
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_nvml_backend(std::make_shared<NvmlService>(FAKE_NVML_LIBRARY)));
  JobSources jobs;
  jobs.proc = sources::FsRoot(empty_proc.path());
  jobs.sys = sources::FsRoot("/sys");
  AcceleratorCollector c(std::move(backends), std::move(jobs));
  MetricSink m(accelerator_metric_table());
  CollectOnce(c, m, 10s);
  EXPECT_EQ(Value(m, "nodewatch_accelerator_job_info", job(0, "slurm", "515", "2")), 1);
  EXPECT_EQ(Value(m, "nodewatch_accelerator_process_memory_used_bytes", mem(0, "515")),
            100.0 * (1 << 20));
  EXPECT_EQ(Value(m, "nodewatch_accelerator_job_info", job(1, "kubernetes", kUid, "")), 1);
  // A hidden process in no job's cgroup cannot be told from one that is
  // gone: unknown.
  EXPECT_EQ(Value(m, "nodewatch_accelerator_job_info", job(0, "unknown", "", "")), 1);
  EXPECT_EQ(ErrorCount(m, "cgroup_scan"), 0u);
}

TEST(JobsCgroup, SlurmOnCgroupV1) {
  std::string why;
  const auto root = writable_root(cgroup_mount("cgroup", "pids"), &why);
  if (!root) GTEST_SKIP() << "cgroup v1 job attribution not tested: " << why;
  Cgroups cg(*root);
  Sleeper task;
  ASSERT_TRUE(task.join(*root / "slurm" / "uid_1000" / "job_31337" / "step_batch" / "task_0"));
  testing::TempDir scenario_dir;
  const auto scenario = scenario_dir.write(
      "v1.scenario", "devices 1\nprocesses 0 " + std::to_string(task.pid()) + ":100\n");
  Node node(scenario.string());
  const MetricSink m = node.Collect();
  EXPECT_EQ(Value(m, "nodewatch_accelerator_job_info", job(0, "slurm", "31337", "batch")), 1);
  EXPECT_EQ(Value(m, "nodewatch_accelerator_process_memory_used_bytes", mem(0, "31337")),
            100.0 * (1 << 20));
}

TEST(JobsCgroup, MigInstancesThroughTheirOwnHandles) {
  // No cgroup needed: the processes are this test's children in its own
  // cgroup (no job), on two GPU instances; pod-resources names the MIG devices.
  std::string why;
  if (in_a_job(&why)) GTEST_SKIP() << why;
  Sleeper a, b;
  testing::TempDir dir;
  const std::string socket = (dir.path() / "kubelet.sock").string();
  testing::FakePodResourcesServer kubelet(socket);
  // MIG device UUIDs of the fake: MIG-...-00000000DDSS (device DD, slot SS).
  kubelet.Set({{"infer", "server-0", "triton", "nvidia.com/mig-1g.10gb",
                "MIG-00000000-0000-4000-9000-000000000001"}});
  ASSERT_TRUE(kubelet.Start());
  PodResourcesWatcher::Options o;
  o.socket = socket;
  o.helper = nodewatch::testing::kPodResourcesHelper;
  auto watcher = std::make_shared<PodResourcesWatcher>(o);
  testing::TempDir scenario_dir;
  std::ostringstream s;
  s << "devices 1\nmig 0 3 5\nprocesses 0 " << a.pid() << ":10@3 " << b.pid() << ":20@5\n";
  const auto scenario = scenario_dir.write("mig.scenario", s.str());
  Node node(scenario.string(), watcher);
  const MetricSink m = node.Collect();
  // Each GPU instance's process is in no job (the test's own cgroup); the
  // pod-resources pod holds instance 5 (slot 1) and is a job of its own
  // there: a process in no pod is never counted as the pod's.
  EXPECT_EQ(Value(m, "nodewatch_accelerator_job_info", job(0, "none", "", "", "", "", "", "5")), 1);
  EXPECT_EQ(Value(m, "nodewatch_accelerator_job_info", job(0, "none", "", "", "", "", "", "3")), 1);
  EXPECT_EQ(Value(m, "nodewatch_accelerator_job_info",
                  job(0, "kubernetes", "infer/server-0", "", "infer", "server-0", "triton", "5")),
            1);
  EXPECT_EQ(Value(m, "nodewatch_accelerator_processes", {"0", uuid(0)}), 2);
  EXPECT_EQ(ErrorCount(m, "nvml_error"), 0u)
      << "the parent's NO_PERMISSION in MIG mode is never asked";
}

// Dynamic Resource Allocation through the real helper and a gRPC kubelet:
// a GPU by claim (its process's memory joined to the pod), a claim shared
// by two pods, a MIG device by claim, an allocated GPU with no process yet
// named by a kubelet 1.30 (CDI names only), an IMEX channel (not a GPU) and
// a device of no GPU here. NVIDIA's DRA driver names GPUs by their device
// minor, which is not their NVML index: the driver's information files
// (format of driver 550, /proc/driver/nvidia/gpus/<PCI>/information) give
// each of the fake's GPUs (PCI 0000:1a:00.0 + 0x10 per index) another.
TEST(JobsCgroup, DraClaimsNameThePodsOfTheirGpus) {
  testing::TempDir proc;
  const unsigned minors[] = {1, 0, 2, 3};
  for (unsigned i = 0; i < 4; ++i) {
    char bus[16];
    std::snprintf(bus, sizeof bus, "0000:%02x:00.0", 0x1a + 0x10 * i);
    fs::create_directories(proc.path() / "driver/nvidia/gpus" / bus);
    std::ofstream(proc.path() / "driver/nvidia/gpus" / bus / "information")
        << "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nGPU UUID: \t " << uuid(i)
        << "\nVideo BIOS: \t 96.00.74.00.0d\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
        << "DMA Mask: \t 0xfffffffffffff\nBus Location: \t " << bus << "\nDevice Minor: \t "
        << minors[i] << "\nGPU Excluded:\t No\n";
  }
  testing::TempDir dir;
  const std::string socket = (dir.path() / "kubelet.sock").string();
  testing::FakePodResourcesServer kubelet(socket);
  const std::string nv = "gpu.nvidia.com";
  kubelet.Set({
      {"train", "llama-0", "trainer", "", "", "llama-gpus", nv, "gpu-1"},  // GPU 0
      {"infer", "server-a", "triton", "", "", "shared-gpu", nv, "gpu-0"},  // GPU 1
      {"infer", "server-b", "triton", "", "", "shared-gpu", nv, "gpu-0"},  // GPU 1
      {"idle", "waiter-0", "main", "", "", "reserved", "", "",             // GPU 2
       "k8s.gpu.nvidia.com/claim=0f6a4c1e-93a4-4c55-8d2b-0e2a7b5c9d11-gpu-2"},
      {"infer", "small-0", "triton", "", "", "mig-claim", nv, "gpu-3-mig-19-0-1"},  // GPU 3
      {"train", "llama-0", "imex", "", "", "domain", "compute-domain.nvidia.com", "channel-0"},
      {"train", "lost-0", "main", "", "", "gone", nv, "gpu-9"},
  });
  ASSERT_TRUE(kubelet.Start());
  PodResourcesWatcher::Options o;
  o.socket = socket;
  o.timeout = 2s;
  o.helper = nodewatch::testing::kPodResourcesHelper;
  testing::TempDir scenario_dir;
  std::ostringstream s;
  // PIDs that are no process: unknown owners, whose memory is the pod's
  // where the device is one pod's alone.
  s << "devices 4\nmig 3 1\nprocesses 0 " << no_such_pid() << ":1024\nprocesses 1 "
    << no_such_pid(1) << ":2048\n";
  const auto scenario = scenario_dir.write("dra.scenario", s.str());
  setenv("FAKE_NVML_SCENARIO", scenario.c_str(), 1);
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_nvml_backend(std::make_shared<NvmlService>(FAKE_NVML_LIBRARY)));
  JobSources jobs;
  jobs.proc = sources::FsRoot(proc.path());
  jobs.pod_resources = std::make_shared<PodResourcesWatcher>(o);
  AcceleratorCollector collector(std::move(backends), std::move(jobs));
  MetricSink m(accelerator_metric_table());
  CollectOnce(collector, m, 10s);

  const std::string info = "nodewatch_accelerator_job_info";
  const std::string claims = "nodewatch_accelerator_claim_pods";
  // GPU 0 is minor 1: the claim's, with the memory of its process.
  EXPECT_EQ(Value(m, info,
                  job(0, "kubernetes", "train/llama-0", "", "train", "llama-0", "trainer", "",
                      "llama-gpus")),
            1);
  EXPECT_EQ(Value(m, "nodewatch_accelerator_process_memory_used_bytes", mem(0, "train/llama-0")),
            1024.0 * (1 << 20));
  EXPECT_EQ(Value(m, claims, {"0", uuid(0), "train", "llama-gpus", nv, "gpu-1"}), 1);
  // GPU 1, shared: both pods named, the memory neither's.
  for (const char* pod : {"server-a", "server-b"})
    EXPECT_EQ(Value(m, info,
                    job(1, "kubernetes", std::string("infer/") + pod, "", "infer", pod, "triton",
                        "", "shared-gpu")),
              1);
  EXPECT_EQ(Value(m, claims, {"1", uuid(1), "infer", "shared-gpu", nv, "gpu-0"}), 2);
  EXPECT_EQ(Value(m, info, job(1, "unknown", "", "")), 1);
  // GPU 2, allocated with no process yet, from the CDI name of a 1.30 kubelet.
  EXPECT_EQ(
      Value(m, info,
            job(2, "kubernetes", "idle/waiter-0", "", "idle", "waiter-0", "main", "", "reserved")),
      1);
  EXPECT_EQ(Value(m, claims, {"2", uuid(2), "idle", "reserved", nv, "gpu-2"}), 1);
  // GPU 3's MIG device: on its GPU, the instance unknown.
  EXPECT_EQ(Value(m, info,
                  job(3, "kubernetes", "infer/small-0", "", "infer", "small-0", "triton", "",
                      "mig-claim")),
            1);
  EXPECT_EQ(Value(m, claims, {"3", uuid(3), "infer", "mig-claim", nv, "gpu-3-mig-19-0-1"}), 1);
  // The IMEX channel is no GPU and no error; gpu-9 is no GPU here: counted.
  EXPECT_EQ(ErrorCount(m, "dra_device"), 1u);
  EXPECT_EQ(Value(m, "nodewatch_accelerator_pod_resources_up", {}), 1);
}

// 100 processes (more than the first array of 64: the INSUFFICIENT_SIZE
// round trip), none of them a live process, through each layout: the
// current `_v3`, the old driver's first version (16-byte struct), and a
// 535.86 driver, whose `_v3` writes a 32-byte struct (asked through `_v2`).
// Every PID and memory read right: one "unknown" job with their sum.
struct Layout {
  const char* name;
  const char* library;
  const char* driver;  // a scenario line, or ""
  const char* call;    // the function that must have been called
};
class JobsProcessLayout : public ::testing::TestWithParam<Layout> {};

TEST_P(JobsProcessLayout, EveryProcessIsReadRight) {
  const Layout& l = GetParam();
  std::ostringstream s;
  s << "devices 1\n" << l.driver << "processes 0";
  double total = 0;
  for (unsigned i = 0; i < 100; ++i) {
    s << " " << no_such_pid(i) << ":" << (i + 1);
    total += (i + 1.0) * (1 << 20);
  }
  s << "\n";
  testing::TempDir scenario_dir;
  const auto scenario = scenario_dir.write("layout.scenario", s.str());
  setenv("FAKE_NVML_SCENARIO", scenario.c_str(), 1);
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_nvml_backend(std::make_shared<NvmlService>(l.library)));
  AcceleratorCollector c(std::move(backends), JobSources{});
  MetricSink m(accelerator_metric_table());
  CollectOnce(c, m, 10s);
  EXPECT_EQ(Value(m, "nodewatch_accelerator_processes", {"0", uuid(0)}), 100);
  EXPECT_EQ(Value(m, "nodewatch_accelerator_job_info", job(0, "unknown", "", "")), 1);
  EXPECT_EQ(Value(m, "nodewatch_accelerator_process_memory_used_bytes", mem(0, "")), total);
  EXPECT_EQ(ErrorCount(m, "nvml_error"), 0u);
  testing::FakeNvmlHooks hooks(l.library);
  EXPECT_GE(hooks.Calls(l.call), 2u) << "a short array first, then one large enough";
}

INSTANTIATE_TEST_SUITE_P(Layouts, JobsProcessLayout,
                         ::testing::Values(Layout{"v3", FAKE_NVML_LIBRARY, "",
                                                  "nvmlDeviceGetComputeRunningProcesses_v3"},
                                           Layout{"v1", FAKE_NVML_OLD_LIBRARY, "",
                                                  "nvmlDeviceGetComputeRunningProcesses"},
                                           Layout{"r535_86", FAKE_NVML_LIBRARY,
                                                  "driver 535.86.10\n",
                                                  "nvmlDeviceGetComputeRunningProcesses_v2"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(JobsCgroup, MoreJobsThanTheBoundAreCountedNotExported) {
  std::string why;
  const auto root = writable_root(cgroup_mount("cgroup2"), &why);
  if (!root) GTEST_SKIP() << "the job bound through real cgroups not tested: " << why;
  Cgroups cg(*root);
  std::vector<std::unique_ptr<Sleeper>> ps;
  std::ostringstream s;
  s << "devices 1\nprocesses 0";
  for (int i = 0; i < 11; ++i) {
    ps.push_back(std::make_unique<Sleeper>());
    ASSERT_TRUE(ps.back()->join(*root / "system.slice" / "slurmstepd.scope" /
                                ("job_" + std::to_string(100 + i)) / "step_0" / "user" / "task_0"));
    s << " " << ps.back()->pid() << ":" << (i + 1);
  }
  s << "\n";
  testing::TempDir scenario_dir;
  const auto scenario = scenario_dir.write("many.scenario", s.str());
  Node node(scenario.string(), nullptr, 8);
  const MetricSink m = node.Collect();
  // The eight largest: jobs 103..110.
  EXPECT_TRUE(Has(m, "nodewatch_accelerator_job_info", job(0, "slurm", "110", "0")));
  EXPECT_TRUE(Has(m, "nodewatch_accelerator_job_info", job(0, "slurm", "103", "0")));
  EXPECT_FALSE(Has(m, "nodewatch_accelerator_job_info", job(0, "slurm", "102", "0")));
  EXPECT_EQ(ErrorCount(m, "job_limit"), 1u);
}

}  // namespace
}  // namespace nodewatch::accelerator
