#include "verdict.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>
#include <tuple>

namespace nodewatch {
namespace {

constexpr std::size_t kAccelerator = 0, kNvlink = 1, kPcie = 2, kFabric = 3, kNic = 4, kStorage = 5,
                      kKernel = 6;

// XIDs that the application causes (NVIDIA's device plugin keeps the GPU
// healthy on them; alerts/nodewatch-recording.yml has the same list).
constexpr std::array<std::string_view, 5> kApplicationXids = {"13", "31", "43", "45", "68"};

// NVML's recovery action (nvmlDeviceGpuRecoveryAction_t, as the accelerator
// collector names it) as one of kActions.
std::string_view action_of_nvml(std::string_view nvml) {
  if (nvml == "gpu_reset" || nvml == "drain_and_reset") return "reset_gpu";
  if (nvml == "node_reboot") return "reboot";
  if (nvml == "drain_p2p" || nvml == "recover_imex_domain") return "drain";
  return "none";
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

constexpr std::string_view port_state_name(double state) {
  if (state == 1) return "down";
  if (state == 2) return "init";
  if (state == 3) return "armed";
  if (state == 4) return "active";
  if (state == 5) return "active_defer";
  return "unknown";
}

// Per accelerator: what names it in a problem (its PCI address, else its
// UUID) and the recovery action its driver asks for.
struct Accelerators {
  std::map<std::pair<std::string, std::string>, std::string> component;  // (index, uuid)
  std::map<std::string, std::string> nvml_action;  // component -> kActions word, if not none

  explicit Accelerators(const Samples& s) {
    for (const Sample& x : s.of("nodewatch_accelerator_info")) {
      std::string bus(x.label("pci_bus_id"));
      component[{std::string(x.label("accelerator")), std::string(x.label("uuid"))}] =
          bus.empty() ? std::string(x.label("uuid")) : bus;
    }
    for (const Sample& x : s.of("nodewatch_accelerator_recovery_action")) {
      if (x.value != 1) continue;
      std::string_view action = action_of_nvml(x.label("action"));
      if (action != "none") nvml_action[of(x)] = std::string(action);
    }
  }
  std::string of(const Sample& x) const {
    auto it = component.find({std::string(x.label("accelerator")), std::string(x.label("uuid"))});
    if (it != component.end()) return it->second;
    return std::string(x.label("uuid"));
  }
  // The driver's action where it has one, else `fallback`.
  std::string action(const std::string& comp, std::string_view fallback) const {
    auto it = nvml_action.find(comp);
    return it != nvml_action.end() ? it->second : std::string(fallback);
  }
};

}  // namespace

std::string_view health_name(Health h) {
  switch (h) {
    case Health::kHealthy: return "healthy";
    case Health::kUnhealthy: return "unhealthy";
    case Health::kUnknown: return "unknown";
  }
  return "unknown";
}

std::string_view collector_of(std::size_t subsystem) {
  static constexpr std::array<std::string_view, kSubsystems.size()> kFeeds = {
      "accelerator", "accelerator", "pcie", "interconnect", "nic", "storage", "kernel", ""};
  return kFeeds.at(subsystem);
}

Health Verdict::overall() const {
  // The exporter's own state is for the SRE, not the scheduler: a failing
  // collector that feeds a subsystem has made that subsystem unknown
  // already; one that feeds none (textfile, mesh) leaves the node as fit.
  bool unknown = false;
  for (std::size_t i = 0; i < health.size(); ++i) {
    if (i == kExporter) continue;
    if (health[i] == Health::kUnhealthy) return Health::kUnhealthy;
    if (health[i] == Health::kUnknown) unknown = true;
  }
  return unknown ? Health::kUnknown : Health::kHealthy;
}

std::string Verdict::json() const {
  std::string out = "{\"status\":\"";
  out += health_name(overall());
  out += "\",\"evaluated_at\":";
  char when[32];
  std::snprintf(when, sizeof when, "%.3f", unix_time);
  out += when;
  out += ",\"subsystems\":{";
  for (std::size_t i = 0; i < kSubsystems.size(); ++i) {
    out += (i ? ",\"" : "\"") + std::string(kSubsystems[i]) + "\":\"" +
           std::string(health_name(health[i])) + "\"";
  }
  out += "},\"problems\":[";
  for (std::size_t i = 0; i < problems.size(); ++i) {
    const Problem& p = problems[i];
    out += (i ? "," : "");
    out += "{\"subsystem\":\"" + std::string(kSubsystems[p.subsystem]) + "\",\"component\":\"" +
           escape_string(p.component) + "\",\"problem\":\"" + escape_string(p.problem) +
           "\",\"action\":\"" + p.action + "\",\"detail\":\"" + escape_string(p.detail) + "\"}";
  }
  out += "]}\n";
  return out;
}

std::string Verdict::table() const {
  std::vector<std::array<std::string, 6>> rows;
  rows.push_back({"SUBSYSTEM", "STATE", "COMPONENT", "PROBLEM", "ACTION", "DETAIL"});
  for (std::size_t i = 0; i < kSubsystems.size(); ++i) {
    bool any = false;
    for (const Problem& p : problems) {
      if (p.subsystem != i) continue;
      rows.push_back({any ? "" : std::string(kSubsystems[i]),
                      any ? "" : std::string(health_name(health[i])),
                      p.component.empty() ? "-" : p.component, p.problem, p.action, p.detail});
      any = true;
    }
    if (!any)
      rows.push_back(
          {std::string(kSubsystems[i]), std::string(health_name(health[i])), "", "", "", ""});
  }
  std::array<std::size_t, 6> width{};
  for (const auto& r : rows)
    for (std::size_t c = 0; c < 5; ++c) width[c] = std::max(width[c], r[c].size());
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t c = 0; c < 6; ++c) {
      line += r[c];
      if (c < 5) line += std::string(width[c] - r[c].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  out += "node: " + std::string(health_name(overall())) + "\n";
  return out;
}

std::string Verdict::line() const {
  std::string out(health_name(overall()));
  bool first = true;
  for (const Problem& p : problems) {
    out += first ? ": " : "; ";
    first = false;
    out += std::string(kSubsystems[p.subsystem]) + "/" + p.problem;
    if (!p.component.empty()) out += " " + p.component;
    out += " -> " + p.action;
  }
  return out + "\n";
}

VerdictEngine::VerdictEngine(Expectations expect) : expect_(std::move(expect)) {}

const FamilySet& VerdictEngine::families() {
  static const FamilySet kFamilies = {
      "nodewatch_accelerator_info",
      "nodewatch_accelerator_up",
      "nodewatch_accelerator_utilization_ratio",
      "nodewatch_accelerator_recovery_action",
      "nodewatch_accelerator_row_remap_failed",
      "nodewatch_accelerator_row_remap_pending",
      "nodewatch_accelerator_temperature_celsius",
      "nodewatch_accelerator_temperature_slowdown_celsius",
      "nodewatch_accelerator_nvlink_links_active",
      "nodewatch_accelerator_fabric_state",
      "nodewatch_accelerator_fabric_healthy",
      "nodewatch_pcie_device_info",
      "nodewatch_pcie_link_width",
      "nodewatch_pcie_link_speed_transfers_per_second",
      "nodewatch_interconnect_port_state",
      "nodewatch_interconnect_port_rate_bytes_per_second",
      "nodewatch_nic_up",
      "nodewatch_nic_speed_bytes_per_second",
      "nodewatch_storage_probe_stuck",
      "nodewatch_storage_probe_success",
      "nodewatch_storage_nfs_mount_info",
      "nodewatch_kernel_log_up",
      "nodewatch_kernel_xid_events_total",
      "nodewatch_kernel_events_total",
      "nodewatch_memory_uncorrected_errors_total",
  };
  return kFamilies;
}

Verdict VerdictEngine::evaluate(const Samples& s, const std::vector<CollectorState>& collectors,
                                std::chrono::steady_clock::time_point now, double unix_now) {
  Verdict v;
  v.unix_time = unix_now;
  std::vector<Problem>& out = v.problems;
  auto add = [&out](std::size_t sub, std::string component, std::string problem,
                    std::string_view action, std::string detail, bool unknown = false) {
    out.push_back(Problem{sub, std::move(component), std::move(problem), std::string(action),
                          std::move(detail), unknown});
  };
  const Expectations& e = expect_;
  auto expects = [&e](std::size_t sub) {
    switch (sub) {
      case kAccelerator: return e.accelerator_count.has_value() || !e.accelerator_models.empty();
      case kNvlink: return e.nvlinks_active.has_value();
      case kPcie: return !e.pcie.empty();
      case kFabric: return !e.ports.empty();
      case kNic: return !e.nics.empty();
      case kStorage: return !e.probes.empty() || !e.nfs_mounts.empty();
      default: return false;
    }
  };

  // Which subsystems the collectors let us see.
  std::array<bool, kSubsystems.size()> observed{};
  for (std::size_t sub = 0; sub < kExporter; ++sub) {
    std::string_view name = collector_of(sub);
    auto c = std::find_if(collectors.begin(), collectors.end(),
                          [&](const CollectorState& x) { return x.name == name; });
    if (c == collectors.end()) {
      if (expects(sub))
        add(sub, std::string(name), "not_collected", "none",
            "the " + std::string(name) + " collector is disabled, and [expect] lists what it reads",
            true);
    } else if (!c->ran) {
      add(sub, std::string(name), "not_observed", "none",
          "the first collection of " + std::string(name) + " has not finished", true);
    } else if (!c->up) {
      add(sub, std::string(name), "not_observed", "none",
          "the " + std::string(name) + " collector is down" +
              (c->error.empty() ? std::string() : ": " + c->error),
          true);
    } else {
      observed[sub] = true;
    }
  }
  for (const CollectorState& c : collectors)
    if (c.ran && !c.up)
      add(kExporter, c.name, "collector_down", "none",
          c.error.empty() ? "its last collection failed" : c.error);

  Accelerators acc(s);
  if (observed[kAccelerator]) {
    const auto& info = s.of("nodewatch_accelerator_info");
    if (!e.accelerator_models.empty()) {
      std::map<std::string, int> have;
      for (const Sample& x : info) have[std::string(x.label("model"))] += 1;
      for (const auto& [model, want] : e.accelerator_models) {
        int n = have.count(model) ? have[model] : 0;
        if (n < want)
          add(kAccelerator, model, "missing", "reboot",
              std::to_string(n) + " of " + std::to_string(want) + " enumerated");
      }
      for (const Sample& x : info) {
        std::string model(x.label("model"));
        if (!e.accelerator_models.count(model))
          add(kAccelerator, acc.of(x), "wrong_model", "inspect_hardware",
              "\"" + model + "\" is not an expected model");
      }
    } else if (e.accelerator_count && static_cast<int>(info.size()) < *e.accelerator_count) {
      add(kAccelerator, "", "missing", "reboot",
          std::to_string(info.size()) + " of " + std::to_string(*e.accelerator_count) +
              " accelerators enumerated");
    }
    for (const Sample& x : s.of("nodewatch_accelerator_up"))
      if (x.value == 0) {
        std::string c = acc.of(x);
        add(kAccelerator, c, "not_responding", acc.action(c, "reset_gpu"),
            "accelerator " + std::string(x.label("accelerator")) + " does not answer its driver");
      }
    for (const Sample& x : s.of("nodewatch_accelerator_recovery_action")) {
      std::string_view action = action_of_nvml(x.label("action"));
      if (x.value != 1 || action == "none") continue;
      add(kAccelerator, acc.of(x), "driver_requests_" + std::string(x.label("action")), action,
          "the driver asks for " + std::string(x.label("action")));
    }
    for (const Sample& x : s.of("nodewatch_accelerator_row_remap_failed"))
      if (x.value == 1)
        add(kAccelerator, acc.of(x), "row_remap_failed", "contact_vendor",
            "a memory row could not be remapped: the device needs service");
    for (const Sample& x : s.of("nodewatch_accelerator_row_remap_pending"))
      if (x.value == 1) {
        std::string c = acc.of(x);
        add(kAccelerator, c, "row_remap_pending", acc.action(c, "reset_gpu"),
            "a memory row remap waits for a reset");
      }
    double margin = e.threshold("NodewatchAcceleratorThermalMarginLow.celsius");
    for (const Sample& x : s.of("nodewatch_accelerator_temperature_slowdown_celsius")) {
      double hottest = -INFINITY;
      for (const Sample& t : s.of("nodewatch_accelerator_temperature_celsius"))
        if (t.label("accelerator") == x.label("accelerator") &&
            t.label("uuid") == x.label("uuid") && t.label("sensor") != "memory")
          hottest = std::max(hottest, t.value);
      if (std::isfinite(hottest) && x.value - hottest < margin)
        add(kAccelerator, acc.of(x), "thermal_margin_low", "inspect_hardware",
            fmt(hottest) + " °C, slowdown at " + fmt(x.value) + " °C");
    }
  }

  if (observed[kNvlink]) {
    if (e.nvlinks_active) {
      for (const Sample& x : s.of("nodewatch_accelerator_nvlink_links_active"))
        if (x.value < *e.nvlinks_active) {
          std::string c = acc.of(x);
          add(kNvlink, c, "links_inactive", acc.action(c, "reset_gpu"),
              fmt(x.value) + " of " + std::to_string(*e.nvlinks_active) + " NVLinks active");
        }
    }
    for (const Sample& x : s.of("nodewatch_accelerator_fabric_healthy"))
      if (x.value == 0) {
        std::string c = acc.of(x);
        add(kNvlink, c, "fabric_unhealthy", acc.action(c, "reset_gpu"),
            "the NVLink fabric reports a fault for this accelerator");
      }
    for (const Sample& x : s.of("nodewatch_accelerator_fabric_state")) {
      std::string_view state = x.label("state");
      if (x.value == 1 && (state == "not_started" || state == "in_progress"))
        add(kNvlink, acc.of(x), "fabric_not_registered", "drain",
            "NVLink fabric registration is " + std::string(state));
    }
  }

  if (observed[kPcie]) {
    const double busy = e.threshold("NodewatchPcieLinkSpeedBelowMaxWhileBusy.busy");
    for (const ExpectedPcie& d : e.pcie) {
      const Sample* w = s.find("nodewatch_pcie_link_width", {{"device", d.device}});
      const Sample* sp =
          s.find("nodewatch_pcie_link_speed_transfers_per_second", {{"device", d.device}});
      if (w == nullptr && sp == nullptr &&
          s.find("nodewatch_pcie_device_info", {{"device", d.device}}) == nullptr) {
        add(kPcie, d.device, "missing", "inspect_hardware", "not on the bus");
        continue;
      }
      if (d.width && (w == nullptr || w->value < *d.width))
        add(kPcie, d.device, "width_below_expected", "inspect_hardware",
            (w ? "x" + fmt(w->value) : std::string("no width")) + ", expected x" +
                std::to_string(*d.width));
      // A GPU lowers its link speed when idle: its speed counts only while
      // it is busy (as NodewatchPcieLinkSpeedBelowMaxWhileBusy has it).
      bool idle = false;
      for (const Sample& u : s.of("nodewatch_accelerator_utilization_ratio"))
        if (acc.of(u) == d.device && u.value < busy) idle = true;
      if (d.speed && !idle && (sp == nullptr || sp->value < *d.speed))
        add(kPcie, d.device, "speed_below_expected", "inspect_hardware",
            (sp ? format_transfer_rate(sp->value) : std::string("no speed")) + ", expected " +
                format_transfer_rate(*d.speed));
    }
  }

  if (observed[kFabric]) {
    for (const ExpectedPort& p : e.ports) {
      std::string port = std::to_string(p.port);
      const Sample* st =
          s.find("nodewatch_interconnect_port_state", {{"device", p.device}, {"port", port}});
      if (st == nullptr) {
        add(kFabric, p.component(), "port_missing", "inspect_hardware", "no such port");
        continue;
      }
      if (st->value != 4) {
        add(kFabric, p.component(), "port_down", "check_cable",
            "state " + std::string(port_state_name(st->value)) + ", expected active");
        continue;
      }
      const Sample* rate = s.find("nodewatch_interconnect_port_rate_bytes_per_second",
                                  {{"device", p.device}, {"port", port}});
      if (p.rate && (rate == nullptr || rate->value < *p.rate))
        add(kFabric, p.component(), "rate_below_expected", "check_cable",
            (rate ? format_bit_rate(rate->value) : std::string("no rate")) + ", expected " +
                format_bit_rate(*p.rate));
    }
  }

  if (observed[kNic]) {
    for (const ExpectedNic& n : e.nics) {
      const Sample* up = s.find("nodewatch_nic_up", {{"interface", n.interface}});
      if (up == nullptr) {
        add(kNic, n.interface, "missing", "inspect_hardware", "no such interface");
        continue;
      }
      if (up->value != 1) {
        add(kNic, n.interface, "down", "check_cable", "not up");
        continue;
      }
      const Sample* sp =
          s.find("nodewatch_nic_speed_bytes_per_second", {{"interface", n.interface}});
      if (n.speed && (sp == nullptr || sp->value < *n.speed))
        add(kNic, n.interface, "speed_below_expected", "check_cable",
            (sp ? format_bit_rate(sp->value) : std::string("no speed")) + ", expected " +
                format_bit_rate(*n.speed));
    }
  }

  if (observed[kStorage]) {
    std::set<std::string> probed;
    for (const Sample& x : s.of("nodewatch_storage_probe_stuck")) {
      std::string path(x.label("path"));
      probed.insert(path);
      if (x.value == 1) {
        add(kStorage, path, "probe_stuck", "check_storage",
            "a probe operation has not returned within its timeout");
        continue;
      }
      std::string failing;
      bool answered = false;
      for (const Sample& y : s.of("nodewatch_storage_probe_success")) {
        if (y.label("path") != path) continue;
        answered = true;
        if (y.value != 1)
          failing += (failing.empty() ? "" : ", ") + std::string(y.label("operation"));
      }
      if (!failing.empty())
        add(kStorage, path, "probe_failing", "check_storage", "failing: " + failing);
      else if (!answered)
        add(kStorage, path, "probe_pending", "none", "the probe has not finished a cycle yet",
            true);
    }
    for (const std::string& path : e.probes)
      if (!probed.count(path))
        add(kStorage, path, "probe_not_configured", "none",
            "expected, but no storage probe is configured for it", true);
    for (const std::string& mp : e.nfs_mounts)
      if (s.find("nodewatch_storage_nfs_mount_info", {{"mountpoint", mp}}) == nullptr)
        add(kStorage, mp, "nfs_mount_missing", "check_storage", "not mounted");
  }

  if (observed[kKernel]) {
    for (const Sample& x : s.of("nodewatch_kernel_log_up"))
      if (x.value == 0)
        add(kKernel, "", "log_unreadable", "none", "the kernel log cannot be read", true);
    // An XID 79 is for the rest of the boot (the counts start afresh at the
    // next one); other hardware XIDs are problems for the alert's window
    // after the count last grew.
    double window = e.threshold("NodewatchKernelXidHardware.window");
    for (auto& [key, seen] : counters_) seen.live = false;
    std::set<std::string> fallen;
    for (const Sample& x : s.of("nodewatch_kernel_xid_events_total")) {
      std::string_view xid = x.label("xid");
      std::string bus(x.label("pci_bus_id"));
      if (x.value <= 0 || std::find(kApplicationXids.begin(), kApplicationXids.end(), xid) !=
                              kApplicationXids.end())
        continue;
      if (xid == "79") {
        fallen.insert(bus);
        add(kKernel, bus, "xid_79", "reboot",
            fmt(x.value) + " in this boot: the GPU has fallen off the bus");
        continue;
      }
      auto [it, fresh] = counters_.try_emplace(bus + "\n" + std::string(xid));
      Seen& seen = it->second;
      // A count this engine has not seen before may be old or new: it
      // counts as new (a restarted daemon, a --check, see it once).
      if (fresh || x.value > seen.value) seen.grew = now;
      seen.value = x.value;
      seen.live = true;
      if (now - seen.grew < std::chrono::duration<double>(window))
        add(kKernel, bus, "xid_" + std::string(xid),
            acc.nvml_action.count(bus) ? acc.nvml_action.at(bus) : "reset_gpu",
            fmt(x.value) + " in this boot, the last within " +
                format_duration(Millis(static_cast<long long>(window * 1000))));
    }
    std::erase_if(counters_, [](const auto& kv) { return !kv.second.live; });
    for (const Sample& x : s.of("nodewatch_kernel_events_total")) {
      std::string dev(x.label("device"));
      if (x.label("event") == "gpu_fallen_off_bus" && x.value > 0 && !fallen.count(dev))
        add(kKernel, dev, "gpu_fallen_off_bus", "reboot", "in this boot");
    }
    for (const Sample& x : s.of("nodewatch_memory_uncorrected_errors_total"))
      if (x.value > 0) {
        std::string c(x.label("controller"));
        if (!x.label("dimm").empty()) c += "/" + std::string(x.label("dimm"));
        add(kKernel, c, "memory_uncorrected", "inspect_hardware",
            fmt(x.value) + " uncorrected memory error(s) in this boot");
      }
  }

  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end(),
                        [](const Problem& a, const Problem& b) { return a.key() == b.key(); }),
            out.end());
  for (std::size_t i = 0; i < kSubsystems.size(); ++i) {
    Health h = Health::kHealthy;
    for (const Problem& p : out) {
      if (p.subsystem != i) continue;
      if (!p.unknown) {
        h = Health::kUnhealthy;
        break;
      }
      h = Health::kUnknown;
    }
    v.health[i] = h;
  }
  return v;
}

const MetricTable& VerdictEngine::metric_table() {
  static const MetricTable kTable({
      {"nodewatch_node_healthy",
       MetricType::kGauge,
       "",
       "1 if the subsystem is healthy; 0 if it has a problem or could not be checked.",
       {"subsystem"}},
      {"nodewatch_node_problem_info",
       MetricType::kGauge,
       "",
       "A current problem of the node and the action it asks for; always 1.",
       {"subsystem", "component", "problem", "action"}},
      {"nodewatch_node_problems",
       MetricType::kGauge,
       "",
       "Current problems of the subsystem, including those beyond the problem_info bound.",
       {"subsystem"}},
      {"nodewatch_node_verdict_timestamp_seconds",
       MetricType::kGauge,
       "seconds",
       "Unix time the node verdict was last computed.",
       {}},
      {"nodewatch_node_expected",
       MetricType::kGauge,
       "",
       "What the node is expected to have ([expect]), next to what is measured.",
       {"subsystem", "component", "what"}},
  });
  return kTable;
}

void VerdictEngine::render(const Verdict& v, MetricSink& out) const {
  std::array<std::size_t, kSubsystems.size()> counts{};
  for (const Problem& p : v.problems) counts[p.subsystem] += 1;
  for (std::size_t i = 0; i < kSubsystems.size(); ++i)
    out.add("nodewatch_node_healthy", {kSubsystems[i]}, v.health[i] == Health::kHealthy ? 1 : 0);
  std::size_t listed = 0;
  for (const Problem& p : v.problems) {
    if (listed++ == kMaxProblemSeries) break;
    out.add("nodewatch_node_problem_info",
            {kSubsystems[p.subsystem], p.component, p.problem, p.action}, 1);
  }
  for (std::size_t i = 0; i < kSubsystems.size(); ++i)
    out.add("nodewatch_node_problems", {kSubsystems[i]}, static_cast<double>(counts[i]));
  out.add("nodewatch_node_verdict_timestamp_seconds", {}, v.unix_time);
  const Expectations& e = expect_;
  auto x = [&out](std::string_view sub, std::string_view comp, std::string_view what, double val) {
    out.add("nodewatch_node_expected", {sub, comp, what}, val);
  };
  if (e.accelerator_count) x("accelerator", "", "count", *e.accelerator_count);
  for (const auto& [model, n] : e.accelerator_models) x("accelerator", model, "count", n);
  if (e.nvlinks_active) x("nvlink", "", "links_active", *e.nvlinks_active);
  for (const ExpectedPcie& d : e.pcie) {
    if (d.width) x("pcie", d.device, "width", *d.width);
    if (d.speed) x("pcie", d.device, "speed_transfers_per_second", *d.speed);
  }
  for (const ExpectedPort& p : e.ports) {
    x("fabric", p.component(), "active", 1);
    if (p.rate) x("fabric", p.component(), "rate_bytes_per_second", *p.rate);
  }
  for (const ExpectedNic& n : e.nics) {
    x("nic", n.interface, "up", 1);
    if (n.speed) x("nic", n.interface, "speed_bytes_per_second", *n.speed);
  }
  for (const std::string& p : e.probes) x("storage", p, "probe", 1);
  for (const std::string& m : e.nfs_mounts) x("storage", m, "nfs_mount", 1);
}

}  // namespace nodewatch
