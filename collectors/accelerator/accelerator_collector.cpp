#include "accelerator/accelerator_collector.hpp"

#include <array>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "accelerator/job_cgroups.hpp"
#include "nodewatch/options.hpp"

namespace nodewatch {
namespace accelerator {
namespace {

constexpr const char* kInfo = "nodewatch_accelerator_info";
constexpr const char* kUp = "nodewatch_accelerator_up";
constexpr const char* kRecoveryAction = "nodewatch_accelerator_recovery_action";
constexpr const char* kFabricState = "nodewatch_accelerator_fabric_state";
constexpr const char* kJobInfo = "nodewatch_accelerator_job_info";
constexpr const char* kJobMemory = "nodewatch_accelerator_process_memory_used_bytes";
constexpr const char* kProcesses = "nodewatch_accelerator_processes";
constexpr const char* kPodResourcesUp = "nodewatch_accelerator_pod_resources_up";

// nvmlDeviceGpuRecoveryAction_t by value, and NVML_GPU_FABRIC_STATE_*.
constexpr std::array<const char*, 6> kRecoveryActions = {
    "none", "gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset", "recover_imex_domain"};
constexpr std::array<const char*, 4> kFabricStates = {"not_supported", "not_started", "in_progress",
                                                      "completed"};

void emit_gpm(const GpmActivity& g, const std::vector<std::string>& labels, bool instance,
              MetricSink& out) {
  struct Family {
    const char* device;
    const char* instance;
    std::optional<double> GpmActivity::*value;
  };
  static constexpr std::array<Family, 5> kFamilies = {{
      {"nodewatch_accelerator_graphics_active_ratio",
       "nodewatch_accelerator_gpu_instance_graphics_active_ratio", &GpmActivity::graphics_active},
      {"nodewatch_accelerator_sm_active_ratio",
       "nodewatch_accelerator_gpu_instance_sm_active_ratio", &GpmActivity::sm_active},
      {"nodewatch_accelerator_sm_occupancy_ratio",
       "nodewatch_accelerator_gpu_instance_sm_occupancy_ratio", &GpmActivity::sm_occupancy},
      {"nodewatch_accelerator_tensor_active_ratio",
       "nodewatch_accelerator_gpu_instance_tensor_active_ratio", &GpmActivity::tensor_active},
      {"nodewatch_accelerator_dram_bandwidth_ratio",
       "nodewatch_accelerator_gpu_instance_dram_bandwidth_ratio", &GpmActivity::dram_bandwidth},
  }};
  for (const Family& f : kFamilies)
    if (const auto& v = g.*(f.value)) out.add(instance ? f.instance : f.device, labels, *v);
}

std::vector<std::string> device_labels(const DeviceSample& d) {
  return {std::to_string(d.index), d.uuid};
}

std::vector<std::string> with(const DeviceSample& d, std::string extra) {
  auto l = device_labels(d);
  l.push_back(std::move(extra));
  return l;
}

}  // namespace

const MetricTable& accelerator_metric_table() {
  using T = MetricType;
  const std::vector<std::string> dev{"accelerator", "uuid"};
  auto plus = [&](std::string l) {
    auto v = dev;
    v.push_back(std::move(l));
    return v;
  };
  static const MetricTable t({
      {kInfo,
       T::kGauge,
       "",
       "Static facts about an accelerator; always 1.",
       {"accelerator", "uuid", "vendor", "model", "pci_bus_id", "driver_version", "serial"}},
      {kUp, T::kGauge, "",
       "1 if the accelerator answers its driver, 0 if it is lost, needs a reset or is stuck.", dev},
      {"nodewatch_accelerator_utilization_ratio", T::kGauge, "",
       "Fraction of the last sample period during which a kernel was running (0..1).", dev},
      {"nodewatch_accelerator_memory_utilization_ratio", T::kGauge, "",
       "Fraction of the last sample period during which device memory was read or written (0..1).",
       dev},
      {"nodewatch_accelerator_memory_used_bytes", T::kGauge, "bytes", "Device memory in use.", dev},
      {"nodewatch_accelerator_memory_total_bytes", T::kGauge, "bytes", "Device memory in total.",
       dev},
      {"nodewatch_accelerator_temperature_celsius", T::kGauge, "celsius",
       "Temperature by sensor (gpu, memory, edge, junction, ...).", plus("sensor")},
      {"nodewatch_accelerator_temperature_slowdown_celsius", T::kGauge, "celsius",
       "Temperature at which the device starts to slow its clocks down.", dev},
      {"nodewatch_accelerator_power_watts", T::kGauge, "watts", "Power draw.", dev},
      {"nodewatch_accelerator_power_limit_watts", T::kGauge, "watts", "Enforced power limit.", dev},
      {"nodewatch_accelerator_energy_joules_total", T::kCounter, "joules",
       "Energy consumed since the driver was loaded.", dev},
      {"nodewatch_accelerator_clock_hertz", T::kGauge, "hertz",
       "Current clock by domain (sm, graphics, memory).", plus("clock")},
      {"nodewatch_accelerator_clock_throttle_active", T::kGauge, "",
       "1 while the clocks are held down for this reason, else 0.", plus("reason")},
      {"nodewatch_accelerator_clock_throttle_seconds_total", T::kCounter, "seconds",
       "Time the clocks were held down for this reason.", plus("reason")},
      {"nodewatch_accelerator_ecc_errors_total", T::kCounter, "",
       "Device memory ECC errors since the driver was loaded (volatile), by type (corrected, "
       "uncorrected).",
       plus("type")},
      {"nodewatch_accelerator_remapped_rows", T::kGauge, "",
       "Memory rows remapped, by the kind of error that caused it (correctable, uncorrectable).",
       plus("cause")},
      {"nodewatch_accelerator_row_remap_pending", T::kGauge, "",
       "1 if a row remap waits for the next reset of the device.", dev},
      {"nodewatch_accelerator_row_remap_failed", T::kGauge, "",
       "1 if a row remap has failed: the device needs service.", dev},
      {"nodewatch_accelerator_xid_errors_total", T::kCounter, "",
       "XID error events by code, counted since nodewatch started.", plus("xid")},
      {"nodewatch_accelerator_host_link_bytes_total", T::kCounter, "bytes",
       "Bytes over the host link (PCIe) by direction (tx: from the device, rx: to it).",
       plus("direction")},
      {"nodewatch_accelerator_host_link_throughput_bytes_per_second", T::kGauge, "bytes_per_second",
       "Host-link throughput sampled by the driver, where it has no byte counter.",
       plus("direction")},
      {"nodewatch_accelerator_pcie_replays_total", T::kCounter, "",
       "PCIe replays (link-level retransmissions) since the driver was loaded.", dev},
      {"nodewatch_accelerator_c2c_link_active", T::kGauge, "",
       "1 if the NVLink-C2C link to the CPU is active.", plus("link")},
      {"nodewatch_accelerator_c2c_link_errors_total", T::kCounter, "",
       "NVLink-C2C link errors (CRC and replays).", plus("link")},
      // GPM (NVIDIA Hopper and later), over the last collection interval.
      {"nodewatch_accelerator_graphics_active_ratio", T::kGauge, "",
       "Fraction of the last interval the graphics or compute engine was busy (0..1).", dev},
      {"nodewatch_accelerator_sm_active_ratio", T::kGauge, "",
       "Fraction of the last interval the SMs had at least one warp resident, averaged over all "
       "SMs (0..1).",
       dev},
      {"nodewatch_accelerator_sm_occupancy_ratio", T::kGauge, "",
       "Resident warps over the SMs' maximum, averaged over the last interval (0..1).", dev},
      {"nodewatch_accelerator_tensor_active_ratio", T::kGauge, "",
       "Fraction of the last interval any tensor core pipe was busy (0..1).", dev},
      {"nodewatch_accelerator_dram_bandwidth_ratio", T::kGauge, "",
       "Device memory bandwidth used over the peak, over the last interval (0..1).", dev},
      {"nodewatch_accelerator_gpu_instance_graphics_active_ratio", T::kGauge, "",
       "graphics_active_ratio of one MIG GPU instance.", plus("gpu_instance")},
      {"nodewatch_accelerator_gpu_instance_sm_active_ratio", T::kGauge, "",
       "sm_active_ratio of one MIG GPU instance.", plus("gpu_instance")},
      {"nodewatch_accelerator_gpu_instance_sm_occupancy_ratio", T::kGauge, "",
       "sm_occupancy_ratio of one MIG GPU instance.", plus("gpu_instance")},
      {"nodewatch_accelerator_gpu_instance_tensor_active_ratio", T::kGauge, "",
       "tensor_active_ratio of one MIG GPU instance.", plus("gpu_instance")},
      {"nodewatch_accelerator_gpu_instance_dram_bandwidth_ratio", T::kGauge, "",
       "dram_bandwidth_ratio of one MIG GPU instance.", plus("gpu_instance")},
      {kRecoveryAction, T::kGauge, "",
       "The driver's verdict on what the device needs: 1 for the action it asks for (none, "
       "gpu_reset, node_reboot, drain_p2p, drain_and_reset, recover_imex_domain), 0 for the "
       "others.",
       plus("action")},
      {kFabricState, T::kGauge, "",
       "NVLink fabric registration: 1 for the current state (not_supported, not_started, "
       "in_progress, completed), 0 for the others.",
       plus("state")},
      {"nodewatch_accelerator_fabric_healthy", T::kGauge, "",
       "1 if the device completed fabric registration and its fabric health shows no fault, else "
       "0.",
       dev},
      {"nodewatch_accelerator_fabric_info",
       T::kGauge,
       "",
       "The NVLink fabric the device registered with; always 1.",
       {"accelerator", "uuid", "clique_id", "cluster_uuid"}},
      // Jobs (jobs.hpp): from the processes' cgroups and the kubelet's
      // pod-resources API.
      {kProcesses, T::kGauge, "", "Compute processes running on the device now.", dev},
      {kJobInfo,
       T::kGauge,
       "",
       "A job on the device now; always 1. scheduler is slurm, kubernetes, none (a process in no "
       "job) or unknown (a process whose cgroup could not be read); job_id is the Slurm job id, "
       "the "
       "Kubernetes pod UID, or namespace/pod where no process gave the UID.",
       {"accelerator", "uuid", "scheduler", "job_id", "step", "namespace", "pod", "container",
        "gpu_instance"}},
      {kJobMemory, T::kGauge, "bytes", "Device memory used by the processes of one job, summed.",
       plus("job_id")},
      {kPodResourcesUp,
       T::kGauge,
       "",
       "1 if the kubelet's pod-resources API answered the last List, 0 if it failed; absent where "
       "its socket is absent.",
       {}},
  });
  return t;
}

void emit_device(const DeviceSample& d, MetricSink& out) {
  const auto dev = device_labels(d);
  out.add(kInfo,
          std::vector<std::string>{std::to_string(d.index), d.uuid, d.vendor, d.model, d.pci_bus_id,
                                   d.driver_version, d.serial},
          1);
  out.add(kUp, dev, d.up ? 1 : 0);
  report_device_errors(d, out);
  auto opt = [&](const char* name, const std::optional<double>& v, double scale = 1.0) {
    if (v) out.add(name, dev, *v * scale);
  };
  opt("nodewatch_accelerator_utilization_ratio", d.utilization_ratio);
  opt("nodewatch_accelerator_memory_utilization_ratio", d.memory_utilization_ratio);
  opt("nodewatch_accelerator_memory_used_bytes", d.memory_used_bytes);
  opt("nodewatch_accelerator_memory_total_bytes", d.memory_total_bytes);
  for (const auto& [sensor, v] : d.temperature_celsius)
    out.add("nodewatch_accelerator_temperature_celsius", with(d, sensor), v);
  opt("nodewatch_accelerator_temperature_slowdown_celsius", d.temperature_slowdown_celsius);
  opt("nodewatch_accelerator_power_watts", d.power_watts);
  opt("nodewatch_accelerator_power_limit_watts", d.power_limit_watts);
  opt("nodewatch_accelerator_energy_joules_total", d.energy_joules);
  for (const auto& [clock, v] : d.clock_hertz)
    out.add("nodewatch_accelerator_clock_hertz", with(d, clock), v);
  for (const auto& [reason, active] : d.clock_throttle_active)
    out.add("nodewatch_accelerator_clock_throttle_active", with(d, reason), active ? 1 : 0);
  for (const auto& [reason, s] : d.clock_throttle_seconds)
    out.add("nodewatch_accelerator_clock_throttle_seconds_total", with(d, reason), s);
  if (d.ecc_corrected)
    out.add("nodewatch_accelerator_ecc_errors_total", with(d, "corrected"), *d.ecc_corrected);
  if (d.ecc_uncorrected)
    out.add("nodewatch_accelerator_ecc_errors_total", with(d, "uncorrected"), *d.ecc_uncorrected);
  if (d.remapped_rows_correctable)
    out.add("nodewatch_accelerator_remapped_rows", with(d, "correctable"),
            *d.remapped_rows_correctable);
  if (d.remapped_rows_uncorrectable)
    out.add("nodewatch_accelerator_remapped_rows", with(d, "uncorrectable"),
            *d.remapped_rows_uncorrectable);
  if (d.row_remap_pending)
    out.add("nodewatch_accelerator_row_remap_pending", dev, *d.row_remap_pending ? 1 : 0);
  if (d.row_remap_failed)
    out.add("nodewatch_accelerator_row_remap_failed", dev, *d.row_remap_failed ? 1 : 0);
  for (const auto& [xid, n] : d.xid_errors)
    out.add("nodewatch_accelerator_xid_errors_total", with(d, std::to_string(xid)),
            static_cast<double>(n));
  if (d.host_link_tx_bytes)
    out.add("nodewatch_accelerator_host_link_bytes_total", with(d, "tx"), *d.host_link_tx_bytes);
  if (d.host_link_rx_bytes)
    out.add("nodewatch_accelerator_host_link_bytes_total", with(d, "rx"), *d.host_link_rx_bytes);
  if (d.host_link_tx_bytes_per_second)
    out.add("nodewatch_accelerator_host_link_throughput_bytes_per_second", with(d, "tx"),
            *d.host_link_tx_bytes_per_second);
  if (d.host_link_rx_bytes_per_second)
    out.add("nodewatch_accelerator_host_link_throughput_bytes_per_second", with(d, "rx"),
            *d.host_link_rx_bytes_per_second);
  opt("nodewatch_accelerator_pcie_replays_total", d.pcie_replays);
  for (const auto& [link, active] : d.c2c_link_active)
    out.add("nodewatch_accelerator_c2c_link_active", with(d, std::to_string(link)), active ? 1 : 0);
  for (const auto& [link, n] : d.c2c_link_errors)
    out.add("nodewatch_accelerator_c2c_link_errors_total", with(d, std::to_string(link)), n);
  if (d.gpm) emit_gpm(*d.gpm, dev, false, out);
  for (const auto& [gi, g] : d.gpm_instances) emit_gpm(g, with(d, std::to_string(gi)), true, out);
  if (d.recovery_action) {
    // A value this code does not know (a newer driver's) is an action too:
    // exported as "unknown", so that an alert on action != "none" sees it.
    const bool known = *d.recovery_action < kRecoveryActions.size();
    for (std::size_t a = 0; a < kRecoveryActions.size(); ++a)
      out.add(kRecoveryAction, with(d, kRecoveryActions[a]),
              known && *d.recovery_action == a ? 1 : 0);
    if (!known) out.add(kRecoveryAction, with(d, "unknown"), 1);
  }
  if (d.fabric) {
    const FabricSample& f = *d.fabric;
    for (std::size_t s = 0; s < kFabricStates.size(); ++s)
      out.add(kFabricState, with(d, kFabricStates[s]), f.state == s ? 1 : 0);
    if (f.state != 0) out.add("nodewatch_accelerator_fabric_healthy", dev, f.healthy ? 1 : 0);
    if (f.state == kFabricStates.size() - 1)
      out.add(
          "nodewatch_accelerator_fabric_info",
          std::vector<std::string>{std::to_string(d.index), d.uuid, f.clique_id, f.cluster_uuid},
          1);
  }
  if (d.processes) out.add(kProcesses, dev, static_cast<double>(d.processes->size()));
  std::map<std::string, double> memory;  // by job_id
  for (const DeviceJob& j : d.jobs.jobs) {
    out.add(kJobInfo,
            std::vector<std::string>{std::to_string(d.index), d.uuid, j.scheduler, j.job_id, j.step,
                                     j.namespace_name, j.pod, j.container, j.gpu_instance},
            1);
    if (j.memory_used_bytes) memory[j.job_id] += *j.memory_used_bytes;
  }
  for (const auto& [job, bytes] : memory) out.add(kJobMemory, with(d, job), bytes);
}

AcceleratorCollector::AcceleratorCollector(std::vector<std::unique_ptr<Backend>> backends,
                                           JobSources jobs)
    : backends_(std::move(backends)), jobs_(std::move(jobs)) {}

void AcceleratorCollector::attribute_jobs(std::vector<DeviceSample>& devices,
                                          const CollectContext& ctx, MetricSink& out) {
  if (jobs_.max_jobs_per_device == 0 || devices.empty()) return;
  // The kubelet's assignments, fresh if it answers in time.
  std::vector<PodDevice> assigned;
  if (jobs_.pod_resources) {
    // At most half the time left: the cgroup reads and the emit come after,
    // and a kubelet that never answers must not take the collection past
    // its deadline (which would withdraw every GPU's series).
    const auto now = std::chrono::steady_clock::now();
    const auto until = ctx.deadline > now ? now + (ctx.deadline - now) / 2 : now;
    PodResourcesWatcher::Snapshot snap = jobs_.pod_resources->get(until);
    if (snap.state != PodResourcesWatcher::Snapshot::State::kAbsent)
      out.add(kPodResourcesUp, {}, snap.state == PodResourcesWatcher::Snapshot::State::kUp ? 1 : 0);
    // Failures since this collector's last look (a rebuilt collector starts
    // from the shared watcher's count, not from 0).
    if (pod_resources_failures_ && snap.failures > *pod_resources_failures_)
      out.error("pod_resources", jobs_.pod_resources->options().socket,
                snap.error.empty() ? std::string("List failed") : snap.error);
    else if (!pod_resources_failures_ && snap.state == PodResourcesWatcher::Snapshot::State::kDown)
      out.error("pod_resources", jobs_.pod_resources->options().socket, snap.error);
    pod_resources_failures_ = snap.failures;
    assigned = std::move(snap.devices);
  }
  // Each process's owner, read once per collection however many devices
  // it runs on: from /proc/PID/cgroup, or, for a process that /proc does
  // not show (hidden from the daemon, or gone), from the cgroup tree.
  std::map<unsigned, std::optional<JobOwner>> owners;
  std::set<unsigned> hidden;
  for (const DeviceSample& d : devices) {
    if (!d.processes) continue;
    for (const DeviceProcess& p : *d.processes) {
      auto [it, fresh] = owners.try_emplace(p.pid);
      if (!fresh) continue;
      const sources::Read r = jobs_.proc.read(std::to_string(p.pid) + "/cgroup");
      if (r.ok())
        it->second = job_owner_from_proc_cgroup(r.text);
      else if (r.failed())
        out.error("cgroup_read", "pid " + std::to_string(p.pid),
                  "/proc/" + std::to_string(p.pid) + "/cgroup: " + r.error_name());
      else
        hidden.insert(p.pid);
    }
  }
  if (!hidden.empty()) {
    const CgroupScan scan =
        scan_job_cgroups(jobs_.sys, hidden, [&ctx] { return ctx.should_stop(); });
    for (const auto& [pid, owner] : scan.owners) owners[pid] = owner;
    if (scan.truncated)
      out.error("cgroup_scan", jobs_.sys.full("fs/cgroup"),
                "stopped after " + std::to_string(scan.dirs) + " cgroups");
  }
  auto owner_of = [&](unsigned pid) -> std::optional<JobOwner> { return owners[pid]; };
  for (DeviceSample& d : devices) {
    std::vector<PodAssignment> assignments;
    for (const PodDevice& pd : assigned) {
      const std::string id = normalize_device_id(pd.device_id);
      if (id.empty()) continue;
      if (id == d.uuid || (!d.pci_bus_id.empty() && id == d.pci_bus_id))
        assignments.push_back({pd.namespace_name, pd.pod, pd.container, std::nullopt});
      else if (auto mig = d.mig_instances.find(id); mig != d.mig_instances.end())
        assignments.push_back({pd.namespace_name, pd.pod, pd.container, mig->second});
    }
    static const std::vector<DeviceProcess> kNone;
    const std::vector<DeviceProcess>& ps = d.processes ? *d.processes : kNone;
    d.jobs = device_jobs(
        ps, [&](std::size_t i) { return owner_of(ps[i].pid); }, assignments,
        jobs_.max_jobs_per_device);
    if (d.jobs.omitted > 0)
      out.error("job_limit", d.uuid.empty() ? "accelerator " + std::to_string(d.index) : d.uuid,
                std::to_string(d.jobs.omitted) + " jobs beyond max_jobs_per_device = " +
                    std::to_string(jobs_.max_jobs_per_device) + " left out");
  }
}

void AcceleratorCollector::collect(const CollectContext& ctx, MetricSink& out) {
  // A backend that throws (a broken library) fails the collection — the
  // collector is reported down and the error names the backend — unless
  // another backend found devices: a broken libnvidia-ml on an AMD node
  // must not hide the AMD GPUs. Then the failure is a partial one, with the
  // backend as its subject (the scheduler logs it when it starts and ends).
  std::vector<std::pair<std::string_view, CollectError>> failures;
  std::vector<DeviceSample> devices;
  for (auto& b : backends_) {
    if (ctx.should_stop()) break;
    try {
      for (DeviceSample& d : b->sample(ctx)) devices.push_back(std::move(d));
    } catch (const CollectError& e) {
      failures.emplace_back(b->name(), e);
    }
  }
  attribute_jobs(devices, ctx, out);
  for (const DeviceSample& d : devices) emit_device(d, out);
  if (failures.empty()) return;
  if (devices.empty()) throw failures.front().second;
  for (const auto& [backend, e] : failures) out.error(e.reason(), backend, e.what());
}

void report_device_errors(const DeviceSample& d, MetricSink& out) {
  const std::string subject = d.uuid.empty() ? "accelerator " + std::to_string(d.index) : d.uuid;
  for (const DeviceError& e : d.errors) {
    if (e.logged_by_backend)
      out.error(e.reason);
    else
      out.error(e.reason, subject, e.detail);
  }
}

AcceleratorOptions read_accelerator_options(OptionReader& r) {
  AcceleratorOptions o;
  o.max_jobs_per_device = static_cast<std::size_t>(
      r.get_int("max_jobs_per_device", static_cast<std::int64_t>(o.max_jobs_per_device), 0, 64));
  o.pod_resources_socket = r.get_string("pod_resources_socket", o.pod_resources_socket);
  if (!o.pod_resources_socket.empty() && o.pod_resources_socket.front() != '/')
    r.error("pod_resources_socket", "must be an absolute path, or \"\" to never ask");
  o.pod_resources_timeout =
      r.get_duration("pod_resources_timeout", o.pod_resources_timeout, Millis(10), Millis(10000));
  // One NVML for the whole daemon: [nvml] library.
  r.refuse_moved("nvml_library", "library in [nvml]");
  return o;
}

}  // namespace accelerator
}  // namespace nodewatch
