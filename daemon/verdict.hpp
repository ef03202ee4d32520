#pragma once
// Is this node fit to run a job? The verdict per subsystem, computed from
// the collectors' samples and the expected inventory (expect.hpp) after each
// collection round, never on the scrape path. Served as nodewatch_node_*
// families, as /-/node-health, and by `nodewatchd --check`.
//
// A subsystem is healthy; unhealthy (a problem that unfits the node);
// unknown (its collector is down, disabled while something is expected of
// it, or has not finished its first round); or degraded (a problem that
// leaves the node fit to run a job, but asks for an action: a sensor at a
// warning). The node is unhealthy when a subsystem other than the exporter
// is; else unknown when one of them is unknown; else degraded when one is;
// else healthy. Healthy and degraded nodes are fit (fit()). The exporter subsystem (a failing
// collector) is reported but does not decide: a collector that feeds a
// subsystem has made that one unknown already.

#include <array>
#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "expect.hpp"
#include "nodewatch/metric.hpp"
#include "samples.hpp"
#include "versions.hpp"

namespace nodewatch {

inline constexpr std::array<std::string_view, 10> kSubsystems = {
    "accelerator", "nvlink", "pcie",     "fabric",   "nic",
    "storage",     "kernel", "platform", "versions", "exporter"};
inline constexpr std::size_t kExporter = 9;

// The fixed set of actions a problem can ask for.
inline constexpr std::array<std::string_view, 8> kActions = {
    "none",        "reset_gpu",     "reboot",        "drain", "inspect_hardware",
    "check_cable", "check_storage", "contact_vendor"};

enum class Health { kHealthy, kUnhealthy, kUnknown, kDegraded };
std::string_view health_name(Health h);
// Whether a node (or subsystem) in `h` may run a job: healthy or degraded.
inline bool fit(Health h) {
  return h == Health::kHealthy || h == Health::kDegraded;
}

struct Problem {
  std::size_t subsystem = 0;  // index into kSubsystems
  std::string component;      // PCI address, "mlx5_0/1", interface, path, collector, or ""
  std::string problem;        // snake_case
  std::string action;         // one of kActions
  std::string detail;         // one line for people
  // The subsystem could not be checked: unknown, not unhealthy.
  bool unknown = false;
  // The rule that found it (one of VerdictEngine::rule_names()), or "" for
  // a collector's state.
  std::string_view rule;
  // The node stays fit: the subsystem is degraded, not unhealthy.
  bool degraded = false;
  auto key() const { return std::tie(subsystem, component, problem); }
  bool operator<(const Problem& o) const { return key() < o.key(); }
};

// What the verdict needs to know of a collector.
struct CollectorState {
  std::string name;
  bool ran = false;  // finished (or timed out) at least once
  bool up = false;
  std::string error;  // why it is down
};

struct Verdict {
  std::array<Health, kSubsystems.size()> health{};
  std::vector<VersionFact> versions;  // what the node runs (versions.hpp)
  std::vector<Problem> problems;      // sorted, unique by key()
  double unix_time = 0;

  Health overall() const;
  // {"status": ..., "evaluated_at": ..., "subsystems": {...}, "problems": [...]}
  std::string json() const;
  // One line per subsystem and per problem, in aligned columns.
  std::string table() const;
  // One line: "healthy", or the state and each problem as
  // "subsystem/problem component: action" (node-problem-detector's message).
  std::string line() const;
};

// Most problems exported as nodewatch_node_problem_info (the rest are
// counted in nodewatch_node_problems and listed by /-/node-health).
inline constexpr std::size_t kMaxProblemSeries = 100;

// A windowed counter (an XID whose remedy is a reset) as the engine last
// saw it.
struct WindowedCount {
  double value = 0;
  std::chrono::steady_clock::time_point grew;
  bool live = false;
};

// How long a version not read any more is kept (verdict.cpp, versions_now).
inline constexpr std::chrono::minutes kVersionGrace{5};

class VerdictEngine {
 public:
  explicit VerdictEngine(Expectations expect, NodeVersions versions = {});

  const Expectations& expectations() const { return expect_; }

  // One evaluation. Keeps, between calls, when each windowed counter (an
  // XID whose remedy is a reset) last grew; a count first seen by this
  // engine counts as grown now.
  Verdict evaluate(const Samples& samples, const std::vector<CollectorState>& collectors,
                   std::chrono::steady_clock::time_point now, double unix_now);

  // The families evaluate() reads (its rules'): parse only these.
  static const FamilySet& families();
  // The name of each rule, in the order they run.
  static std::vector<std::string_view> rule_names();
  // nodewatch_node_* declarations.
  static const MetricTable& metric_table();
  // The verdict and the expectations as nodewatch_node_* samples.
  void render(const Verdict& v, MetricSink& out) const;

 private:
  std::vector<VersionFact> versions_now(const Samples& s,
                                        const std::vector<CollectorState>& collectors,
                                        std::chrono::steady_clock::time_point now);

  Expectations expect_;
  NodeVersions versions_;
  // Each (component, device)'s version, and when it was last read (or its
  // source could not say).
  std::map<std::pair<std::string, std::string>,
           std::pair<std::string, std::chrono::steady_clock::time_point>>
      last_versions_;
  std::map<std::string, WindowedCount> counters_;
};

// The collector that feeds subsystem `s` ("" for the exporter).
std::string_view collector_of(std::size_t subsystem);

}  // namespace nodewatch
