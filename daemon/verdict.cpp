#include "verdict.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>
#include <tuple>

#include "accelerator/accelerator_metrics.hpp"
#include "bmc/bmc_metrics.hpp"
#include "daemon_metrics.hpp"
#include "imex/imex_metrics.hpp"
#include "imex/imex_parse.hpp"
#include "interconnect/interconnect_metrics.hpp"
#include "kernel/kernel_metrics.hpp"
#include "nic/nic_metrics.hpp"
#include "nodewatch/text.hpp"
#include "pcie/pcie_metrics.hpp"
#include "storage/storage_metrics.hpp"

namespace nodewatch {
namespace {

constexpr std::size_t kAccelerator = 0, kNvlink = 1, kPcie = 2, kFabric = 3, kNic = 4, kStorage = 5,
                      kKernel = 6, kPlatform = 7, kVersions = 8;

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
  // The families it reads (whichever rules run).
  static constexpr std::array<std::string_view, 2> kReads = {
      accelerator::families::kInfo, accelerator::families::kRecoveryAction};
  std::map<std::pair<std::string, std::string>, std::string> component;  // (index, uuid)
  std::map<std::string, std::string> nvml_action;  // component -> kActions word, if not none

  explicit Accelerators(const Samples& s) {
    for (const Sample& x : s.of(accelerator::families::kInfo)) {
      std::string bus(x.label("pci_bus_id"));
      component[{std::string(x.label("accelerator")), std::string(x.label("uuid"))}] =
          bus.empty() ? std::string(x.label("uuid")) : bus;
    }
    for (const Sample& x : s.of(accelerator::families::kRecoveryAction)) {
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
    case Health::kDegraded: return "degraded";
  }
  return "unknown";
}

std::string_view collector_of(std::size_t subsystem) {
  static constexpr std::array<std::string_view, kSubsystems.size()> kFeeds = {
      "accelerator",
      "accelerator",
      "pcie",
      "interconnect",
      "nic",
      "storage",
      "kernel",
      "bmc",
      "",  // versions: the daemon's own reads and every collector's info series
      ""};
  return kFeeds.at(subsystem);
}

Health Verdict::overall() const {
  // The exporter's own state is for the SRE, not the scheduler: a failing
  // collector that feeds a subsystem has made that subsystem unknown
  // already; one that feeds none (textfile, mesh) leaves the node as fit.
  bool unknown = false, degraded = false;
  for (std::size_t i = 0; i < health.size(); ++i) {
    if (i == kExporter) continue;
    if (health[i] == Health::kUnhealthy) return Health::kUnhealthy;
    if (health[i] == Health::kUnknown) unknown = true;
    if (health[i] == Health::kDegraded) degraded = true;
  }
  return unknown ? Health::kUnknown : degraded ? Health::kDegraded : Health::kHealthy;
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
           text::json_escaped(p.component) + "\",\"problem\":\"" + text::json_escaped(p.problem) +
           "\",\"action\":\"" + p.action + "\",\"detail\":\"" + text::json_escaped(p.detail) +
           "\"}";
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

VerdictEngine::VerdictEngine(Expectations expect, NodeVersions versions)
    : expect_(std::move(expect)), versions_(std::move(versions)) {}

namespace {

// What a rule reads, and where it puts what it finds.
struct Check {
  const Samples& s;
  const Expectations& e;
  const Accelerators& acc;
  std::chrono::steady_clock::time_point now;
  std::map<std::string, WindowedCount>& counters;
  std::vector<Problem>& out;
  const std::vector<VersionFact>& versions;
  std::string_view rule;  // the one running, "" outside the rules

  void add(std::size_t sub, std::string component, std::string problem, std::string_view action,
           std::string detail, bool unknown = false) {
    out.push_back(Problem{sub, std::move(component), std::move(problem), std::string(action),
                          std::move(detail), unknown, rule});
  }
  // A problem that leaves the node fit: its subsystem is degraded.
  void degrade(std::size_t sub, std::string component, std::string problem, std::string_view action,
               std::string detail) {
    add(sub, std::move(component), std::move(problem), action, std::move(detail));
    out.back().degraded = true;
  }
};

// One check of one subsystem: the families it reads and what it does with
// them. It runs when the subsystem's collector is up. families() is the
// union of what the rules read, and Samples asserts that nothing else is.
struct Rule {
  std::string_view name;
  std::size_t subsystem;
  std::vector<std::string_view> reads;
  void (*check)(Check&);
};

// --- accelerator ---

void accelerators_enumerated(Check& c) {
  const auto& info = c.s.of(accelerator::families::kInfo);
  if (!c.e.accelerator_models.empty()) {
    std::map<std::string, int> have;
    for (const Sample& x : info) have[std::string(x.label("model"))] += 1;
    for (const auto& [model, want] : c.e.accelerator_models) {
      int n = have.count(model) ? have[model] : 0;
      if (n < want)
        c.add(kAccelerator, model, "missing", "reboot",
              std::to_string(n) + " of " + std::to_string(want) + " enumerated");
    }
    for (const Sample& x : info) {
      std::string model(x.label("model"));
      if (!c.e.accelerator_models.count(model))
        c.add(kAccelerator, c.acc.of(x), "wrong_model", "inspect_hardware",
              "\"" + model + "\" is not an expected model");
    }
  } else if (c.e.accelerator_count && static_cast<int>(info.size()) < *c.e.accelerator_count) {
    c.add(kAccelerator, "", "missing", "reboot",
          std::to_string(info.size()) + " of " + std::to_string(*c.e.accelerator_count) +
              " accelerators enumerated");
  }
}

// A vendor's GPUs on the bus with its driver not answering: after a kernel
// or driver upgrade the first failure (a module that did not build or load;
// a library and module of different versions), and one that left alone
// looks like a node without GPUs. The library alone, with no GPU of the
// vendor, is a node without them: healthy.
void accelerator_drivers(Check& c) {
  for (const Sample& x : c.s.of(accelerator::families::kDriverUp)) {
    if (x.value != 0) continue;
    const std::string vendor(x.label("vendor"));
    const Sample* gpus = c.s.find(accelerator::families::kDriverDevices, {{"vendor", vendor}});
    if (gpus == nullptr || gpus->value <= 0) continue;
    std::string state = "down";
    for (const Sample& s : c.s.of(accelerator::families::kDriverState))
      if (s.value == 1 && s.label("vendor") == vendor) state = std::string(s.label("state"));
    const Sample* info = c.s.find(accelerator::families::kDriverInfo, {{"vendor", vendor}});
    std::string detail = fmt(gpus->value) + " " + vendor + " GPU(s) on the bus, the driver " +
                         (state == "not_bound" ? "bound to none or not all" : "says " + state);
    if (info != nullptr) {
      detail +=
          " (library " +
          (info->label("library_version").empty() ? std::string("?")
                                                  : std::string(info->label("library_version"))) +
          ", kernel module " +
          (info->label("kernel_module_version").empty()
               ? std::string("not loaded or unversioned")
               : std::string(info->label("kernel_module_version"))) +
          ")";
    }
    // A library and a module of different versions: the reboot loads the
    // module the library was installed with.
    c.add(kAccelerator, vendor, "driver_" + state, state == "version_mismatch" ? "reboot" : "drain",
          std::move(detail));
  }
}

void accelerators_responding(Check& c) {
  for (const Sample& x : c.s.of(accelerator::families::kUp))
    if (x.value == 0) {
      std::string comp = c.acc.of(x);
      c.add(kAccelerator, comp, "not_responding", c.acc.action(comp, "reset_gpu"),
            "accelerator " + std::string(x.label("accelerator")) + " does not answer its driver");
    }
}

void driver_recovery_action(Check& c) {
  for (const Sample& x : c.s.of(accelerator::families::kRecoveryAction)) {
    std::string_view action = action_of_nvml(x.label("action"));
    if (x.value != 1 || action == "none") continue;
    c.add(kAccelerator, c.acc.of(x), "driver_requests_" + std::string(x.label("action")), action,
          "the driver asks for " + std::string(x.label("action")));
  }
}

void row_remap_failed(Check& c) {
  for (const Sample& x : c.s.of(accelerator::families::kRowRemapFailed))
    if (x.value == 1)
      c.add(kAccelerator, c.acc.of(x), "row_remap_failed", "contact_vendor",
            "a memory row could not be remapped: the device needs service");
}

void row_remap_pending(Check& c) {
  for (const Sample& x : c.s.of(accelerator::families::kRowRemapPending))
    if (x.value == 1) {
      std::string comp = c.acc.of(x);
      c.add(kAccelerator, comp, "row_remap_pending", c.acc.action(comp, "reset_gpu"),
            "a memory row remap waits for a reset");
    }
}

void memory_unrepairable(Check& c) {
  for (const Sample& x : c.s.of(accelerator::families::kMemoryUnrepairable))
    if (x.value == 1)
      c.add(kAccelerator, c.acc.of(x), "memory_unrepairable", "contact_vendor",
            "the GPU reports memory it can no longer repair: the device needs service");
}

void repair_pending(Check& c) {
  for (const Sample& x : c.s.of(accelerator::families::kRepairPending))
    if (x.value == 1) {
      std::string comp = c.acc.of(x);
      c.add(kAccelerator, comp, std::string(x.label("unit")) + "_repair_pending",
            c.acc.action(comp, "reset_gpu"),
            "a " + std::string(x.label("unit")) + " repair waits for a reset");
    }
}

void thermal_margin(Check& c) {
  double margin = c.e.threshold("NodewatchAcceleratorThermalMarginLow.celsius");
  // The driver's own margin where it gives one (it knows memory's
  // threshold too); else the GPU's slowdown less its hottest sensor.
  std::set<std::pair<std::string_view, std::string_view>> judged;
  for (const Sample& x : c.s.of(accelerator::families::kThermalMarginCelsius)) {
    judged.insert({x.label("accelerator"), x.label("uuid")});
    if (x.value < margin)
      c.add(kAccelerator, c.acc.of(x), "thermal_margin_low", "inspect_hardware",
            fmt(x.value) + " °C from the nearest slowdown threshold, as the driver reckons");
  }
  for (const Sample& x : c.s.of(accelerator::families::kTemperatureSlowdownCelsius)) {
    if (judged.contains({x.label("accelerator"), x.label("uuid")})) continue;
    double hottest = -INFINITY;
    for (const Sample& t : c.s.of(accelerator::families::kTemperatureCelsius))
      if (t.label("accelerator") == x.label("accelerator") && t.label("uuid") == x.label("uuid") &&
          t.label("sensor") != "memory")
        hottest = std::max(hottest, t.value);
    if (std::isfinite(hottest) && x.value - hottest < margin)
      c.add(kAccelerator, c.acc.of(x), "thermal_margin_low", "inspect_hardware",
            fmt(hottest) + " °C, slowdown at " + fmt(x.value) + " °C");
  }
}

// --- nvlink ---

void nvlinks_active(Check& c) {
  if (!c.e.nvlinks_active) return;
  for (const Sample& x : c.s.of(interconnect::families::kNvlinkLinksActive))
    if (x.value < *c.e.nvlinks_active) {
      std::string comp = c.acc.of(x);
      c.add(kNvlink, comp, "links_inactive", c.acc.action(comp, "reset_gpu"),
            fmt(x.value) + " of " + std::to_string(*c.e.nvlinks_active) + " NVLinks active");
    }
}

void fabric_healthy(Check& c) {
  for (const Sample& x : c.s.of(accelerator::families::kFabricHealthy))
    if (x.value == 0) {
      std::string comp = c.acc.of(x);
      c.add(kNvlink, comp, "fabric_unhealthy", c.acc.action(comp, "reset_gpu"),
            "the NVLink fabric reports a fault for this accelerator");
    }
}

void fabric_registered(Check& c) {
  for (const Sample& x : c.s.of(accelerator::families::kFabricState)) {
    std::string_view state = x.label("state");
    if (x.value == 1 && (state == "not_started" || state == "in_progress"))
      c.add(kNvlink, c.acc.of(x), "fabric_not_registered", "drain",
            "NVLink fabric registration is " + std::string(state));
  }
}

// IMEX: only where the imex collector found it configured (it exports
// nothing elsewhere). A daemon that says it is anything but ready cannot
// import or export memory for a job across the domain's nodes; one that
// does not answer at all is a problem only where nvidia-imex.service is
// enabled to run (IMEX started per job by a scheduler's prolog is stopped
// between jobs). The domain's state is not this node's: a degraded domain
// points at the peer that is down (NodewatchImexPeerUnreachable).
void imex_ready(Check& c) {
  std::string_view service;
  for (const Sample& x : c.s.of(imex::families::kInfo)) service = x.label("service");
  for (const Sample& x : c.s.of(imex::families::kDaemonState)) {
    std::string_view state = x.label("state");
    if (x.value != 1 || state == "ready") continue;
    if (std::find(std::begin(imex::kDaemonStates), std::end(imex::kDaemonStates), state) !=
        std::end(imex::kDaemonStates))
      c.add(kNvlink, "imex", "imex_not_ready", "drain",
            "the IMEX daemon is " + std::string(state) +
                ": GPUs of this node cannot share memory across the NVLink domain");
    else if (state == "unreachable" && service == "enabled")
      c.add(kNvlink, "imex", "imex_not_ready", "drain",
            "the IMEX daemon does not answer on its command service, and nvidia-imex.service is "
            "enabled");
  }
}

// --- pcie ---

void pcie_links(Check& c) {
  const double busy = c.e.threshold("NodewatchPcieLinkSpeedBelowMaxWhileBusy.busy");
  for (const ExpectedPcie& d : c.e.pcie) {
    const Sample* w = c.s.find(pcie::families::kLinkWidth, {{"device", d.device}});
    const Sample* sp =
        c.s.find(pcie::families::kLinkSpeedTransfersPerSecond, {{"device", d.device}});
    if (w == nullptr && sp == nullptr &&
        c.s.find(pcie::families::kDeviceInfo, {{"device", d.device}}) == nullptr) {
      c.add(kPcie, d.device, "missing", "inspect_hardware", "not on the bus");
      continue;
    }
    if (d.width && (w == nullptr || w->value < *d.width))
      c.add(kPcie, d.device, "width_below_expected", "inspect_hardware",
            (w ? "x" + fmt(w->value) : std::string("no width")) + ", expected x" +
                std::to_string(*d.width));
    // A GPU lowers its link speed when idle: its speed counts only while
    // it is busy (as NodewatchPcieLinkSpeedBelowMaxWhileBusy has it).
    bool idle = false;
    for (const Sample& u : c.s.of(accelerator::families::kUtilizationRatio))
      if (c.acc.of(u) == d.device && u.value < busy) idle = true;
    if (d.speed && !idle && (sp == nullptr || sp->value < *d.speed))
      c.add(kPcie, d.device, "speed_below_expected", "inspect_hardware",
            (sp ? format_transfer_rate(sp->value) : std::string("no speed")) + ", expected " +
                format_transfer_rate(*d.speed));
  }
}

// --- fabric ---

void fabric_ports(Check& c) {
  for (const ExpectedPort& p : c.e.ports) {
    std::string port = std::to_string(p.port);
    const Sample* st =
        c.s.find(interconnect::families::kPortState, {{"device", p.device}, {"port", port}});
    if (st == nullptr) {
      c.add(kFabric, p.component(), "port_missing", "inspect_hardware", "no such port");
      continue;
    }
    if (st->value != 4) {
      c.add(kFabric, p.component(), "port_down", "check_cable",
            "state " + std::string(port_state_name(st->value)) + ", expected active");
      continue;
    }
    const Sample* rate = c.s.find(interconnect::families::kPortRateBytesPerSecond,
                                  {{"device", p.device}, {"port", port}});
    if (p.rate && (rate == nullptr || rate->value < *p.rate))
      c.add(kFabric, p.component(), "rate_below_expected", "check_cable",
            (rate ? format_bit_rate(rate->value) : std::string("no rate")) + ", expected " +
                format_bit_rate(*p.rate));
  }
}

// --- nic ---

void nics(Check& c) {
  for (const ExpectedNic& n : c.e.nics) {
    const Sample* up = c.s.find(nic::families::kUp, {{"interface", n.interface}});
    if (up == nullptr) {
      c.add(kNic, n.interface, "missing", "inspect_hardware", "no such interface");
      continue;
    }
    if (up->value != 1) {
      c.add(kNic, n.interface, "down", "check_cable", "not up");
      continue;
    }
    const Sample* sp = c.s.find(nic::families::kSpeedBytesPerSecond, {{"interface", n.interface}});
    if (n.speed && (sp == nullptr || sp->value < *n.speed))
      c.add(kNic, n.interface, "speed_below_expected", "check_cable",
            (sp ? format_bit_rate(sp->value) : std::string("no speed")) + ", expected " +
                format_bit_rate(*n.speed));
  }
}

// --- storage ---

void storage_probes(Check& c) {
  std::set<std::string> probed;
  for (const Sample& x : c.s.of(storage::families::kProbeStuck)) {
    std::string path(x.label("path"));
    probed.insert(path);
    if (x.value == 1) {
      c.add(kStorage, path, "probe_stuck", "check_storage",
            "a probe operation has not returned within its timeout");
      continue;
    }
    std::string failing;
    bool answered = false;
    for (const Sample& y : c.s.of(storage::families::kProbeSuccess)) {
      if (y.label("path") != path) continue;
      answered = true;
      if (y.value != 1)
        failing += (failing.empty() ? "" : ", ") + std::string(y.label("operation"));
    }
    if (!failing.empty())
      c.add(kStorage, path, "probe_failing", "check_storage", "failing: " + failing);
    else if (!answered)
      c.add(kStorage, path, "probe_pending", "none", "the probe has not finished a cycle yet",
            true);
  }
  for (const std::string& path : c.e.probes)
    if (!probed.count(path))
      c.add(kStorage, path, "probe_not_configured", "none",
            "expected, but no storage probe is configured for it", true);
}

void nfs_mounts(Check& c) {
  for (const std::string& mp : c.e.nfs_mounts)
    if (c.s.find(storage::families::kNfsMountInfo, {{"mountpoint", mp}}) == nullptr)
      c.add(kStorage, mp, "nfs_mount_missing", "check_storage", "not mounted");
}

// --- kernel ---

void kernel_log_readable(Check& c) {
  for (const Sample& x : c.s.of(kernel::families::kLogUp))
    if (x.value == 0)
      c.add(kKernel, "", "log_unreadable", "none", "the kernel log cannot be read", true);
}

// An XID 79 is for the rest of the boot (the counts start afresh at the
// next one); other hardware XIDs (not application_xids()) are problems for
// the alert's window after the count last grew.
void xids(Check& c) {
  double window = c.e.threshold("NodewatchKernelXidHardware.window");
  for (auto& [key, seen] : c.counters) seen.live = false;
  for (const Sample& x : c.s.of(kernel::families::kXidEventsTotal)) {
    std::string_view xid = x.label("xid");
    std::string bus(x.label("pci_bus_id"));
    if (x.value <= 0 || application_xids().contains(xid)) continue;
    if (xid == "79") {
      c.add(kKernel, bus, "xid_79", "reboot",
            fmt(x.value) + " in this boot: the GPU has fallen off the bus");
      continue;
    }
    auto [it, fresh] = c.counters.try_emplace(bus + "\n" + std::string(xid));
    WindowedCount& seen = it->second;
    // A count this engine has not seen before may be old or new: it
    // counts as new (a restarted daemon, a --check, see it once).
    if (fresh || x.value > seen.value) seen.grew = c.now;
    seen.value = x.value;
    seen.live = true;
    if (c.now - seen.grew < std::chrono::duration<double>(window))
      c.add(kKernel, bus, "xid_" + std::string(xid),
            c.acc.nvml_action.count(bus) ? c.acc.nvml_action.at(bus) : "reset_gpu",
            fmt(x.value) + " in this boot, the last within " +
                format_duration(Millis(static_cast<long long>(window * 1000))));
  }
  std::erase_if(c.counters, [](const auto& kv) { return !kv.second.live; });
}

// A GPU fallen off the bus that no XID 79 has named already.
void gpu_fallen_off_bus(Check& c) {
  std::set<std::string, std::less<>> fallen;
  for (const Sample& x : c.s.of(kernel::families::kXidEventsTotal))
    if (x.value > 0 && x.label("xid") == "79") fallen.insert(std::string(x.label("pci_bus_id")));
  for (const Sample& x : c.s.of(kernel::families::kEventsTotal)) {
    std::string dev(x.label("device"));
    if (x.label("event") == "gpu_fallen_off_bus" && x.value > 0 && !fallen.count(dev))
      c.add(kKernel, dev, "gpu_fallen_off_bus", "reboot", "in this boot");
  }
}

void memory_uncorrected(Check& c) {
  for (const Sample& x : c.s.of(kernel::families::kMemoryUncorrectedErrorsTotal))
    if (x.value > 0) {
      std::string comp(x.label("controller"));
      if (!x.label("dimm").empty()) comp += "/" + std::string(x.label("dimm"));
      c.add(kKernel, comp, "memory_uncorrected", "inspect_hardware",
            fmt(x.value) + " uncorrected memory error(s) in this boot");
    }
}

// --- platform ---

// A sensor's reading, in its unit, for a problem's detail ("" for a
// discrete sensor).
std::string sensor_reading(const Samples& s, std::string_view sensor) {
  static constexpr std::pair<std::string_view, std::string_view> kReadings[] = {
      {bmc::families::kTemperatureCelsius, " °C"}, {bmc::families::kFanSpeedRpm, " RPM"},
      {bmc::families::kPowerWatts, " W"},          {bmc::families::kVoltageVolts, " V"},
      {bmc::families::kCurrentAmperes, " A"},      {bmc::families::kSensorValue, ""}};
  for (const auto& [family, unit] : kReadings)
    for (const Sample& x : s.of(family))
      if (x.label("sensor") == sensor)
        return ", reading " + fmt(x.value) +
               (unit.empty() ? " " + std::string(x.label("unit")) : std::string(unit));
  return "";
}

// A critical sensor (a failed fan or PSU, a temperature at its critical
// threshold, a leak) unfits the node; a warning degrades it. The state is
// FreeIPMI's interpretation (collectors/bmc/bmc_metrics.hpp).
void bmc_sensors(Check& c) {
  for (const Sample& x : c.s.of(bmc::families::kSensorState)) {
    if (x.value < 1) continue;
    std::string sensor(x.label("sensor"));
    std::string detail = std::string(x.label("type")) + " sensor " +
                         (x.value >= 2 ? "critical" : "at a warning") + sensor_reading(c.s, sensor);
    if (x.value >= 2)
      c.add(kPlatform, sensor, "sensor_critical", "inspect_hardware", std::move(detail));
    else
      c.degrade(kPlatform, sensor, "sensor_warning", "inspect_hardware", std::move(detail));
  }
}

// A BMC that [expect.bmc] says the node has, and that does not answer (or
// is not there at all: no device and no host).
void bmc_answers(Check& c) {
  if (!c.e.bmc) return;
  const Sample* up = c.s.find(bmc::families::kUp, {});
  if (up == nullptr)
    c.add(kPlatform, "bmc", "bmc_missing", "inspect_hardware",
          "[expect.bmc] has one, but there is no IPMI device and no host to reach it");
  else if (up->value != 1)
    c.add(kPlatform, "bmc", "bmc_not_answering", "inspect_hardware",
          "the BMC does not answer: power, fans and temperatures are not watched");
}

// --- versions ---

// Each pinned component ([expect.versions]) against what the node runs: a
// device on another version unfits the node until it is brought to the
// pinned one; a pinned one whose version could not be read (its collector
// is down or off, the device is gone) could not be checked.
void versions_pinned(Check& c) {
  for (const auto& [component, pin] : c.e.versions) {
    std::set<std::string> devices;
    for (const VersionFact& f : c.versions) {
      if (f.component != component) continue;
      devices.insert(f.device);
      const std::vector<std::string>& allowed = pin.allowed(f.device);
      if (allowed.empty() || std::find(allowed.begin(), allowed.end(), f.version) != allowed.end())
        continue;
      std::string expected;
      for (std::size_t i = 0; i < allowed.size(); ++i)
        expected += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ") + allowed[i];
      c.add(kVersions, f.device.empty() ? component : component + "/" + f.device,
            "version_mismatch", "drain", "runs " + f.version + ", expected " + expected);
    }
    if (devices.empty() && !pin.any.empty())
      c.add(kVersions, component, "version_unknown", "none",
            "pinned, but no version of it was read", true);
    for (const auto& [device, allowed] : pin.devices)
      if (!devices.count(device))
        c.add(kVersions, component + "/" + device, "version_unknown", "none",
              "pinned, but no version of it was read", true);
  }
}

// Every rule, by subsystem. Adding a check is a function above, a line
// here and its case in RuleCases() (tests/unit/verdict_test.cpp), which
// VerdictRules.EveryRuleHasACase asks for.
const std::vector<Rule>& rules() {
  static const std::vector<Rule> kRules = {
      {"accelerators_enumerated",
       kAccelerator,
       {accelerator::families::kInfo},
       accelerators_enumerated},
      {"accelerator_drivers",
       kAccelerator,
       {accelerator::families::kDriverUp, accelerator::families::kDriverState,
        accelerator::families::kDriverInfo, accelerator::families::kDriverDevices},
       accelerator_drivers},
      {"accelerators_responding",
       kAccelerator,
       {accelerator::families::kUp},
       accelerators_responding},
      {"driver_recovery_action",
       kAccelerator,
       {accelerator::families::kRecoveryAction},
       driver_recovery_action},
      {"row_remap_failed",
       kAccelerator,
       {accelerator::families::kRowRemapFailed},
       row_remap_failed},
      {"row_remap_pending",
       kAccelerator,
       {accelerator::families::kRowRemapPending},
       row_remap_pending},
      {"memory_unrepairable",
       kAccelerator,
       {accelerator::families::kMemoryUnrepairable},
       memory_unrepairable},
      {"repair_pending", kAccelerator, {accelerator::families::kRepairPending}, repair_pending},
      {"thermal_margin",
       kAccelerator,
       {accelerator::families::kThermalMarginCelsius,
        accelerator::families::kTemperatureSlowdownCelsius,
        accelerator::families::kTemperatureCelsius},
       thermal_margin},
      {"nvlinks_active", kNvlink, {interconnect::families::kNvlinkLinksActive}, nvlinks_active},
      {"fabric_healthy", kNvlink, {accelerator::families::kFabricHealthy}, fabric_healthy},
      {"fabric_registered", kNvlink, {accelerator::families::kFabricState}, fabric_registered},
      {"imex_ready", kNvlink, {imex::families::kInfo, imex::families::kDaemonState}, imex_ready},
      {"pcie_links",
       kPcie,
       {pcie::families::kLinkWidth, pcie::families::kLinkSpeedTransfersPerSecond,
        pcie::families::kDeviceInfo, accelerator::families::kUtilizationRatio},
       pcie_links},
      {"fabric_ports",
       kFabric,
       {interconnect::families::kPortState, interconnect::families::kPortRateBytesPerSecond},
       fabric_ports},
      {"nics", kNic, {nic::families::kUp, nic::families::kSpeedBytesPerSecond}, nics},
      {"storage_probes",
       kStorage,
       {storage::families::kProbeStuck, storage::families::kProbeSuccess},
       storage_probes},
      {"nfs_mounts", kStorage, {storage::families::kNfsMountInfo}, nfs_mounts},
      {"kernel_log_readable", kKernel, {kernel::families::kLogUp}, kernel_log_readable},
      {"xids", kKernel, {kernel::families::kXidEventsTotal}, xids},
      {"gpu_fallen_off_bus",
       kKernel,
       {kernel::families::kXidEventsTotal, kernel::families::kEventsTotal},
       gpu_fallen_off_bus},
      {"memory_uncorrected",
       kKernel,
       {kernel::families::kMemoryUncorrectedErrorsTotal},
       memory_uncorrected},
      {"bmc_sensors",
       kPlatform,
       {bmc::families::kSensorState, bmc::families::kTemperatureCelsius,
        bmc::families::kFanSpeedRpm, bmc::families::kPowerWatts, bmc::families::kVoltageVolts,
        bmc::families::kCurrentAmperes, bmc::families::kSensorValue},
       bmc_sensors},
      {"bmc_answers", kPlatform, {bmc::families::kUp}, bmc_answers},
      {"versions_pinned",
       kVersions,
       {version_families().begin(), version_families().end()},
       versions_pinned},
  };
  return kRules;
}

// Whether [expect] lists something that subsystem `sub` is checked for.
bool expects(const Expectations& e, std::size_t sub) {
  switch (sub) {
    case kAccelerator: return e.accelerator_count.has_value() || !e.accelerator_models.empty();
    case kNvlink: return e.nvlinks_active.has_value();
    case kPcie: return !e.pcie.empty();
    case kFabric: return !e.ports.empty();
    case kNic: return !e.nics.empty();
    case kStorage: return !e.probes.empty() || !e.nfs_mounts.empty();
    case kPlatform: return e.bmc;
    default: return false;
  }
}

// Which subsystems the collectors let us see; a problem for each that they
// do not, and for each collector that is down.
std::array<bool, kSubsystems.size()> observe(Check& c,
                                             const std::vector<CollectorState>& collectors) {
  std::array<bool, kSubsystems.size()> observed{};
  for (std::size_t sub = 0; sub < kExporter; ++sub) {
    std::string name(collector_of(sub));
    if (name.empty()) {  // versions: each rule says what it could not check
      observed[sub] = true;
      continue;
    }
    auto it = std::find_if(collectors.begin(), collectors.end(),
                           [&](const CollectorState& x) { return x.name == name; });
    if (it == collectors.end()) {
      if (expects(c.e, sub))
        c.add(sub, name, "not_collected", "none",
              "the " + name + " collector is disabled, and [expect] lists what it reads", true);
    } else if (!it->ran) {
      c.add(sub, name, "not_observed", "none",
            "the first collection of " + name + " has not finished", true);
    } else if (!it->up) {
      c.add(sub, name, "not_observed", "none",
            "the " + name + " collector is down" +
                (it->error.empty() ? std::string() : ": " + it->error),
            true);
    } else {
      observed[sub] = true;
    }
  }
  for (const CollectorState& s : collectors)
    if (s.ran && !s.up)
      c.add(kExporter, s.name, "collector_down", "none",
            s.error.empty() ? "its last collection failed" : s.error);
  return observed;
}

// Sorts the problems, one per key, and the health of each subsystem.
void conclude(Verdict& v) {
  std::vector<Problem>& out = v.problems;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end(),
                        [](const Problem& a, const Problem& b) { return a.key() == b.key(); }),
            out.end());
  for (std::size_t i = 0; i < kSubsystems.size(); ++i) {
    Health h = Health::kHealthy;
    for (const Problem& p : out) {
      if (p.subsystem != i) continue;
      if (!p.unknown && !p.degraded) {
        h = Health::kUnhealthy;
        break;
      }
      if (p.unknown) h = Health::kUnknown;
      if (p.degraded && h == Health::kHealthy) h = Health::kDegraded;
    }
    v.health[i] = h;
  }
}

}  // namespace

const FamilySet& VerdictEngine::families() {
  static const FamilySet kFamilies = [] {
    FamilySet out(Accelerators::kReads.begin(), Accelerators::kReads.end());
    for (const Rule& r : rules()) out.insert(r.reads.begin(), r.reads.end());
    return out;
  }();
  return kFamilies;
}

std::vector<std::string_view> VerdictEngine::rule_names() {
  std::vector<std::string_view> out;
  for (const Rule& r : rules()) out.push_back(r.name);
  return out;
}

// A version is a fact of firmware and drivers, which change with a reboot
// or a driver reload, not with a collection that failed: one that was read
// is kept while its source cannot say (its collector is down, the BMC does
// not answer, the device is served without it: a read that failed), and
// for kVersionGrace after it was last read otherwise (a device that a
// fault hid for a few collections), so that nodewatch_version_info does
// not come and go with faults. A version read anew replaces it at once; a
// collector disabled has its versions go after the grace.
std::vector<VersionFact> VerdictEngine::versions_now(const Samples& s,
                                                     const std::vector<CollectorState>& collectors,
                                                     std::chrono::steady_clock::time_point now) {
  const Sample* bmc_up = s.find(bmc::families::kUp, {});
  auto silent = [&](std::string_view component) {
    if (component == "bmc_firmware" && bmc_up != nullptr && bmc_up->value != 1) return true;
    std::string_view from = collector_of_component(component);
    auto it = std::find_if(collectors.begin(), collectors.end(),
                           [&](const CollectorState& c) { return c.name == from; });
    return !from.empty() && it != collectors.end() && !it->up;
  };
  std::set<std::pair<std::string, std::string>> unread;
  for (VersionFact& f : version_facts(s, versions_, &unread))
    last_versions_[{f.component, f.device}] = {std::move(f.version), now};
  std::vector<VersionFact> out;
  for (auto it = last_versions_.begin(); it != last_versions_.end();) {
    auto& [key, seen] = *it;
    if (silent(key.first) || unread.count(key)) seen.second = now;
    if (now - seen.second >= kVersionGrace) {
      it = last_versions_.erase(it);
      continue;
    }
    out.push_back({key.first, key.second, seen.first});
    ++it;
  }
  return out;
}

Verdict VerdictEngine::evaluate(const Samples& s, const std::vector<CollectorState>& collectors,
                                std::chrono::steady_clock::time_point now, double unix_now) {
  Verdict v;
  v.unix_time = unix_now;
  Accelerators acc(s);
  v.versions = versions_now(s, collectors, now);
  Check c{s, expect_, acc, now, counters_, v.problems, v.versions, {}};
  const auto observed = observe(c, collectors);
  for (const Rule& r : rules()) {
    c.rule = r.name;
    if (observed[r.subsystem]) r.check(c);
  }
  conclude(v);
  return v;
}

const MetricTable& VerdictEngine::metric_table() {
  static const MetricTable kTable(
      {
          describe(families::kNodeHealthy),
          describe(families::kNodeProblemInfo),
          describe(families::kNodeProblems),
          describe(families::kNodeVerdictTimestampSeconds),
          describe(families::kNodeExpected),
          describe(families::kVersionInfo),
      },
      // The versions are the node's, not the verdict's.
      {"nodewatch_version_"});
  return kTable;
}

void VerdictEngine::render(const Verdict& v, MetricSink& out) const {
  std::array<std::size_t, kSubsystems.size()> counts{};
  for (const Problem& p : v.problems) counts[p.subsystem] += 1;
  for (std::size_t i = 0; i < kSubsystems.size(); ++i)
    out.add(families::kNodeHealthy, {kSubsystems[i]}, fit(v.health[i]) ? 1 : 0);
  std::size_t listed = 0;
  for (const Problem& p : v.problems) {
    if (listed++ == kMaxProblemSeries) break;
    out.add(families::kNodeProblemInfo,
            {kSubsystems[p.subsystem], p.component, p.problem, p.action}, 1);
  }
  for (std::size_t i = 0; i < kSubsystems.size(); ++i)
    out.add(families::kNodeProblems, {kSubsystems[i]}, static_cast<double>(counts[i]));
  out.add(families::kNodeVerdictTimestampSeconds, {}, v.unix_time);
  const Expectations& e = expect_;
  auto x = [&out](std::string_view sub, std::string_view comp, std::string_view what, double val) {
    out.add(families::kNodeExpected, {sub, comp, what}, val);
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
  if (e.bmc) x("platform", "bmc", "up", 1);
  for (const VersionFact& f : v.versions)
    out.add(families::kVersionInfo, {f.component, f.device, f.version}, 1);
}

}  // namespace nodewatch
