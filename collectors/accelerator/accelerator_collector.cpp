#include "accelerator/accelerator_collector.hpp"
#include "accelerator/dra.hpp"

#include <array>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "accelerator/accelerator_metrics.hpp"
#include "accelerator/job_cgroups.hpp"
#include "nodewatch/options.hpp"

namespace nodewatch {
namespace accelerator {
namespace {

// nvmlDeviceGpuRecoveryAction_t by value, and NVML_GPU_FABRIC_STATE_*.
constexpr std::array<const char*, 6> kRecoveryActions = {
    "none", "gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset", "recover_imex_domain"};
constexpr std::array<const char*, 4> kFabricStates = {"not_supported", "not_started", "in_progress",
                                                      "completed"};

void emit_gpm(const GpmActivity& g, const std::vector<std::string>& labels, bool instance,
              MetricSink& out) {
  struct Pair {
    std::string_view device;
    std::string_view instance;
    std::optional<double> GpmActivity::*value;
  };
  static constexpr std::array<Pair, 5> kFamilies = {{
      {families::kGraphicsActiveRatio, families::kGpuInstanceGraphicsActiveRatio,
       &GpmActivity::graphics_active},
      {families::kSmActiveRatio, families::kGpuInstanceSmActiveRatio, &GpmActivity::sm_active},
      {families::kSmOccupancyRatio, families::kGpuInstanceSmOccupancyRatio,
       &GpmActivity::sm_occupancy},
      {families::kTensorActiveRatio, families::kGpuInstanceTensorActiveRatio,
       &GpmActivity::tensor_active},
      {families::kDramBandwidthRatio, families::kGpuInstanceDramBandwidthRatio,
       &GpmActivity::dram_bandwidth},
  }};
  for (const Pair& f : kFamilies)
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
  static const MetricTable t({
      describe(families::kInfo),
      describe(families::kPlatformInfo),
      describe(families::kUp),
      describe(families::kDriverUp),
      describe(families::kDriverState),
      describe(families::kDriverInfo),
      describe(families::kDriverDevices),
      describe(families::kUtilizationRatio),
      describe(families::kMemoryUtilizationRatio),
      describe(families::kMemoryUsedBytes),
      describe(families::kMemoryTotalBytes),
      describe(families::kTemperatureCelsius),
      describe(families::kTemperatureSlowdownCelsius),
      describe(families::kThermalMarginCelsius),
      describe(families::kPowerWatts),
      describe(families::kPowerLimitWatts),
      describe(families::kEnergyJoulesTotal),
      describe(families::kClockHertz),
      describe(families::kClockThrottleActive),
      describe(families::kClockThrottleSecondsTotal),
      describe(families::kEccErrorsTotal),
      describe(families::kRemappedRows),
      describe(families::kRowRemapPending),
      describe(families::kRowRemapFailed),
      describe(families::kRepairPending),
      describe(families::kMemoryUnrepairable),
      describe(families::kXidErrorsTotal),
      describe(families::kHostLinkBytesTotal),
      describe(families::kHostLinkThroughputBytesPerSecond),
      describe(families::kHostLinkCapacityBytesPerSecond),
      describe(families::kPcieReplaysTotal),
      describe(families::kC2cLinkActive),
      describe(families::kC2cLinkErrorsTotal),
      describe(families::kC2cLinkB2bReplaysTotal),
      describe(families::kC2cLinkLowPower),
      describe(families::kC2cLinkBytesTotal),
      // GPM (NVIDIA Hopper and later), over the last collection interval.
      describe(families::kGraphicsActiveRatio),
      describe(families::kSmActiveRatio),
      describe(families::kSmOccupancyRatio),
      describe(families::kTensorActiveRatio),
      describe(families::kDramBandwidthRatio),
      describe(families::kGpuInstanceGraphicsActiveRatio),
      describe(families::kGpuInstanceSmActiveRatio),
      describe(families::kGpuInstanceSmOccupancyRatio),
      describe(families::kGpuInstanceTensorActiveRatio),
      describe(families::kGpuInstanceDramBandwidthRatio),
      describe(families::kRecoveryAction),
      describe(families::kFabricState),
      describe(families::kFabricHealthy),
      describe(families::kFabricHealthSummary),
      describe(families::kFabricFault),
      describe(families::kFabricInfo),
      // Jobs (jobs.hpp): from the processes' cgroups and the kubelet's
      // pod-resources API.
      describe(families::kProcesses),
      describe(families::kJobInfo),
      describe(families::kClaimPods),
      describe(families::kProcessMemoryUsedBytes),
      describe(families::kPodResourcesUp),
      describe(families::kPodResourcesHelperRestartsTotal),
  });
  return t;
}

// The NVLink fabric registration and health of one device.
void emit_fabric(const DeviceSample& d, const FabricSample& f, MetricSink& out) {
  const auto dev = device_labels(d);
  for (std::size_t s = 0; s < kFabricStates.size(); ++s)
    out.add(families::kFabricState, with(d, kFabricStates[s]), f.state == s ? 1 : 0);
  if (f.state != 0) out.add(families::kFabricHealthy, dev, f.healthy ? 1 : 0);
  if (!f.summary.empty()) {
    for (const char* s : {"healthy", "unhealthy", "limited_capacity"})
      out.add(families::kFabricHealthSummary, with(d, s), f.summary == s ? 1 : 0);
    if (f.summary == "unknown") out.add(families::kFabricHealthSummary, with(d, "unknown"), 1);
  }
  for (const auto& [fault, present] : f.faults)
    out.add(families::kFabricFault, with(d, fault), present ? 1 : 0);
  if (f.state == kFabricStates.size() - 1)
    out.add(families::kFabricInfo,
            std::vector<std::string>{std::to_string(d.index), d.uuid, f.clique_id, f.cluster_uuid},
            1);
}

void emit_device(const DeviceSample& d, MetricSink& out) {
  const auto dev = device_labels(d);
  out.add(families::kInfo,
          std::vector<std::string>{std::to_string(d.index), d.uuid, d.vendor, d.model, d.pci_bus_id,
                                   d.driver_version, d.serial, d.vbios},
          1);
  if (d.platform)
    out.add(families::kPlatformInfo,
            std::vector<std::string>{
                std::to_string(d.index), d.uuid, d.platform->chassis_serial,
                std::to_string(d.platform->slot), std::to_string(d.platform->tray),
                std::to_string(d.platform->host), std::to_string(d.platform->module)},
            1);
  out.add(families::kUp, dev, d.up ? 1 : 0);
  report_device_errors(d, out);
  auto opt = [&](std::string_view name, const std::optional<double>& v, double scale = 1.0) {
    if (v) out.add(name, dev, *v * scale);
  };
  opt(families::kUtilizationRatio, d.utilization_ratio);
  opt(families::kMemoryUtilizationRatio, d.memory_utilization_ratio);
  opt(families::kMemoryUsedBytes, d.memory_used_bytes);
  opt(families::kMemoryTotalBytes, d.memory_total_bytes);
  for (const auto& [sensor, v] : d.temperature_celsius)
    out.add(families::kTemperatureCelsius, with(d, sensor), v);
  opt(families::kTemperatureSlowdownCelsius, d.temperature_slowdown_celsius);
  opt(families::kThermalMarginCelsius, d.thermal_margin_celsius);
  opt(families::kPowerWatts, d.power_watts);
  opt(families::kPowerLimitWatts, d.power_limit_watts);
  opt(families::kEnergyJoulesTotal, d.energy_joules);
  for (const auto& [clock, v] : d.clock_hertz) out.add(families::kClockHertz, with(d, clock), v);
  for (const auto& [reason, active] : d.clock_throttle_active)
    out.add(families::kClockThrottleActive, with(d, reason), active ? 1 : 0);
  for (const auto& [reason, s] : d.clock_throttle_seconds)
    out.add(families::kClockThrottleSecondsTotal, with(d, reason), s);
  if (d.ecc_corrected) out.add(families::kEccErrorsTotal, with(d, "corrected"), *d.ecc_corrected);
  if (d.ecc_uncorrected)
    out.add(families::kEccErrorsTotal, with(d, "uncorrected"), *d.ecc_uncorrected);
  if (d.remapped_rows_correctable)
    out.add(families::kRemappedRows, with(d, "correctable"), *d.remapped_rows_correctable);
  if (d.remapped_rows_uncorrectable)
    out.add(families::kRemappedRows, with(d, "uncorrectable"), *d.remapped_rows_uncorrectable);
  if (d.row_remap_pending) out.add(families::kRowRemapPending, dev, *d.row_remap_pending ? 1 : 0);
  if (d.row_remap_failed) out.add(families::kRowRemapFailed, dev, *d.row_remap_failed ? 1 : 0);
  for (const auto& [unit, pending] : d.repair_pending)
    out.add(families::kRepairPending, with(d, unit), pending ? 1 : 0);
  if (d.memory_unrepairable)
    out.add(families::kMemoryUnrepairable, dev, *d.memory_unrepairable ? 1 : 0);
  for (const auto& [xid, n] : d.xid_errors)
    out.add(families::kXidErrorsTotal, with(d, std::to_string(xid)), static_cast<double>(n));
  for (const auto& host_link : d.host_links) {
    // Not a structured binding: Clang 14 cannot capture one in a lambda.
    const std::string& link = host_link.first;
    const HostLinkSample& h = host_link.second;
    auto by = [&](const char* direction) {
      std::vector<std::string> l = with(d, link);
      l.emplace_back(direction);
      return l;
    };
    if (h.tx_bytes) out.add(families::kHostLinkBytesTotal, by("tx"), *h.tx_bytes);
    if (h.rx_bytes) out.add(families::kHostLinkBytesTotal, by("rx"), *h.rx_bytes);
    if (h.tx_bytes_per_second)
      out.add(families::kHostLinkThroughputBytesPerSecond, by("tx"), *h.tx_bytes_per_second);
    if (h.rx_bytes_per_second)
      out.add(families::kHostLinkThroughputBytesPerSecond, by("rx"), *h.rx_bytes_per_second);
    if (h.capacity_bytes_per_second)
      out.add(families::kHostLinkCapacityBytesPerSecond, with(d, link),
              *h.capacity_bytes_per_second);
  }
  opt(families::kPcieReplaysTotal, d.pcie_replays);
  for (const auto& [link, active] : d.c2c_link_active)
    out.add(families::kC2cLinkActive, with(d, std::to_string(link)), active ? 1 : 0);
  for (const auto& [link, n] : d.c2c_link_errors)
    out.add(families::kC2cLinkErrorsTotal, with(d, std::to_string(link)), n);
  for (const auto& [link, n] : d.c2c_link_b2b_replays)
    out.add(families::kC2cLinkB2bReplaysTotal, with(d, std::to_string(link)), n);
  for (const auto& [link, low] : d.c2c_link_low_power)
    out.add(families::kC2cLinkLowPower, with(d, std::to_string(link)), low ? 1 : 0);
  for (const auto& [link, b] : d.c2c_link_bytes) {
    std::vector<std::string> l = with(d, std::to_string(link));
    l.emplace_back("tx");
    out.add(families::kC2cLinkBytesTotal, l, b.tx);
    l.back() = "rx";
    out.add(families::kC2cLinkBytesTotal, l, b.rx);
  }
  if (d.gpm) emit_gpm(*d.gpm, dev, false, out);
  for (const auto& [gi, g] : d.gpm_instances) emit_gpm(g, with(d, std::to_string(gi)), true, out);
  if (d.recovery_action) {
    // A value this code does not know (a newer driver's) is an action too:
    // exported as "unknown", so that an alert on action != "none" sees it.
    const bool known = *d.recovery_action < kRecoveryActions.size();
    for (std::size_t a = 0; a < kRecoveryActions.size(); ++a)
      out.add(families::kRecoveryAction, with(d, kRecoveryActions[a]),
              known && *d.recovery_action == a ? 1 : 0);
    if (!known) out.add(families::kRecoveryAction, with(d, "unknown"), 1);
  }
  if (d.fabric) emit_fabric(d, *d.fabric, out);
  if (d.processes) out.add(families::kProcesses, dev, static_cast<double>(d.processes->size()));
  std::map<std::string, double> memory;  // by job_id
  for (const DeviceJob& j : d.jobs.jobs) {
    out.add(families::kJobInfo,
            std::vector<std::string>{std::to_string(d.index), d.uuid, j.scheduler, j.job_id, j.step,
                                     j.namespace_name, j.pod, j.container, j.gpu_instance, j.claim},
            1);
    if (j.memory_used_bytes) memory[j.job_id] += *j.memory_used_bytes;
  }
  for (const DeviceClaim& c : d.claims)
    out.add(families::kClaimPods,
            {std::to_string(d.index), d.uuid, c.namespace_name, c.claim, c.driver, c.device},
            static_cast<double>(c.pods));
  for (const auto& [job, bytes] : memory)
    out.add(families::kProcessMemoryUsedBytes, with(d, job), bytes);
}

AcceleratorCollector::AcceleratorCollector(std::vector<std::unique_ptr<Backend>> backends,
                                           JobSources jobs, bool c2c_link_bytes)
    : backends_(std::move(backends)), jobs_(std::move(jobs)), c2c_link_bytes_(c2c_link_bytes) {}

std::vector<AcceleratorCollector::ClaimedDevice> AcceleratorCollector::match_claims(
    const std::vector<PodDevice>& assigned, const std::vector<DeviceSample>& devices,
    MetricSink& out) {
  std::vector<ClaimedDevice> matched;
  // The device numbers the DRA drivers name GPUs by: AMD's DRM card (from
  // the backend), NVIDIA's device minor (read here, once per collection and
  // GPU, only where a claim names an NVIDIA GPU).
  std::map<std::size_t, std::optional<unsigned>> minors;
  auto minor_of = [&](std::size_t i) -> std::optional<unsigned> {
    const DeviceSample& d = devices[i];
    if (d.vendor != "nvidia") return d.drm_card;
    auto [it, fresh] = minors.try_emplace(i);
    if (!fresh || d.pci_bus_id.empty()) return it->second;
    const std::string path = "driver/nvidia/gpus/" + d.pci_bus_id + "/information";
    const sources::Read r = jobs_.proc.read(path);
    if (r.ok()) it->second = dra::nvidia_device_minor(r.text);
    if (!it->second)
      out.error("dra_device", d.uuid,
                jobs_.proc.full(path) + (r.ok() ? ": no Device Minor" : ": " + r.error_name()));
    return it->second;
  };
  std::set<std::string> unmatched;
  for (const PodDevice& pd : assigned) {
    if (pd.driver.empty()) continue;
    const std::optional<dra::GpuRef> gpu = dra::gpu_of(pd.driver, pd.dra_device);
    if (!gpu) continue;  // not a GPU (an IMEX channel, another driver's device)
    bool found = false;
    for (std::size_t i = 0; i < devices.size() && !found; ++i)
      if (devices[i].vendor == gpu->vendor && minor_of(i) == gpu->minor) {
        matched.push_back({i, &pd});
        found = true;
      }
    if (!found) unmatched.insert(pd.driver + " " + pd.dra_device);
  }
  for (const std::string& u : unmatched)
    out.error("dra_device", u, "a claim's device names no GPU this node reads");
  return matched;
}

void AcceleratorCollector::attribute_jobs(std::vector<DeviceSample>& devices,
                                          const CollectContext& ctx, MetricSink& out) {
  if (jobs_.max_jobs_per_device == 0 || devices.empty()) return;
  // The kubelet's assignments, fresh if it answers in time.
  std::vector<PodDevice> assigned;
  if (jobs_.pod_resources) {
    // At most half the time left: the cgroup reads and the emit come after,
    // and a kubelet that never answers must not take the collection past
    // its deadline (which would withdraw every GPU's series).
    const auto until = std::chrono::steady_clock::now() + ctx.left() / 2;
    PodResourcesWatcher::Snapshot snap = jobs_.pod_resources->get(until);
    if (snap.state != PodResourcesWatcher::Snapshot::State::kAbsent) {
      out.add(families::kPodResourcesUp, {},
              snap.state == PodResourcesWatcher::Snapshot::State::kUp ? 1 : 0);
      out.add(families::kPodResourcesHelperRestartsTotal, {},
              static_cast<double>(snap.helper_restarts));
    }
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
  const std::vector<ClaimedDevice> claimed = match_claims(assigned, devices, out);
  for (std::size_t di = 0; di < devices.size(); ++di) {
    DeviceSample& d = devices[di];
    std::vector<PodAssignment> assignments;
    std::map<std::tuple<std::string, std::string, std::string, std::string>, std::set<std::string>>
        claim_pods;
    for (const ClaimedDevice& c : claimed) {
      if (c.device != di) continue;
      const PodDevice& pd = *c.assignment;
      assignments.push_back({pd.namespace_name, pd.pod, pd.container, std::nullopt, pd.claim});
      claim_pods[{pd.claim_namespace, pd.claim, pd.driver, pd.dra_device}].insert(pd.pod);
    }
    d.claims.clear();
    for (const auto& [k, pods] : claim_pods)
      d.claims.push_back(
          {std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k), pods.size()});
    for (const PodDevice& pd : assigned) {
      if (!pd.driver.empty()) continue;  // a claim's: matched above
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
    const DriverState driver = b->driver_state();
    if (!driver.known) continue;
    out.add(families::kDriverUp, {driver.vendor}, driver.up ? 1 : 0);
    for (std::string_view s : driver.states)
      out.add(families::kDriverState, {driver.vendor, std::string(s)}, s == driver.state ? 1 : 0);
    out.add(families::kDriverInfo, {driver.vendor, driver.library_version, driver.module_version},
            1);
    out.add(families::kDriverDevices, {driver.vendor}, driver.devices);
  }
  attribute_jobs(devices, ctx, out);
  for (DeviceSample& d : devices) {
    if (!c2c_link_bytes_) d.c2c_link_bytes.clear();
    emit_device(d, out);
  }
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
      r.get_int("max_jobs_per_device", static_cast<std::int64_t>(o.max_jobs_per_device), 0, 64,
                "jobs kept per accelerator in `nodewatch_accelerator_job_info`, largest memory "
                "first (the rest counted as job_limit); 0: no job attribution"));
  o.pod_resources_socket =
      r.get_string("pod_resources_socket", o.pod_resources_socket,
                   "the kubelet's pod-resources API, asked once per collection for the pods' "
                   "names and devices; an absent socket is not asked, not an error; \"\": never");
  if (!o.pod_resources_socket.empty() && o.pod_resources_socket.front() != '/')
    r.error("pod_resources_socket", "must be an absolute path, or \"\" to never ask");
  o.pod_resources_timeout =
      r.get_duration("pod_resources_timeout", o.pod_resources_timeout, Millis(10), Millis(10000),
                     "the List call's deadline, and the longest a collection waits for it; a "
                     "late answer leaves the previous one in use");
  o.c2c_link_bytes = r.get_bool(
      "c2c_link_bytes", o.c2c_link_bytes,
      "also export the NVLink-C2C bytes per link (`nodewatch_accelerator_c2c_link_bytes_total`, "
      "2 series per link, up to 14 links per accelerator); the per-accelerator "
      "`nodewatch_accelerator_host_link_bytes_total{link=\"c2c\"}` is always exported");
  // One NVML for the whole daemon: [nvml] library.
  r.refuse_moved("nvml_library", "library in [nvml]");
  return o;
}

}  // namespace accelerator
}  // namespace nodewatch
