#pragma once
// The uncore collector: counters of the CPU's own performance monitoring
// units (uncore PMUs: the host side of the C2C and PCIe links, memory and
// fabric traffic), through perf_event_open(2).
//
// By itself (collectors.uncore.host_links) it counts the traffic between
// the CPU and the devices it hosts on the PMUs known.hpp knows (Grace,
// Vera, Intel IIO), with the PCI functions behind each link.
//
// Events are named in perf's syntax (collectors.uncore.events =
// ["nvidia_scf_pmu_0/gmem_rd_data/", "uncore_iio_free_running_*/bw_in_port0/"]);
// the PMUs and their events are found in sysfs at run time (pmu.hpp), a
// name ending in '*' naming every PMU with that prefix. Each event is opened
// once on every CPU of its PMU's cpumask, kept open, and read each
// collection; the counts are summed over those CPUs and scaled as sysfs
// says. The counters are re-opened when a PMU's type or cpumask changes
// (CPU hotplug moves an uncore PMU to another CPU) and when it comes back
// after going, and the exported total goes on from where it was: the
// counters and totals live in a service (CollectorEnv::service), so a
// reload that rebuilds the collector keeps them too.
//
// Opening needs CAP_PERFMON (or perf_event_paranoid <= 0): without it,
// nodewatch_uncore_pmu_up{pmu} is 0 and the refusal is counted and logged
// once (reason no_permission); nothing else fails. The unit grants
// CAP_PERFMON and lets perf_event_open through its system-call filter.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nodewatch/collector.hpp"
#include "uncore/known.hpp"
#include "uncore/perf.hpp"
#include "uncore/pmu.hpp"

namespace nodewatch {

// The catalog entry: name "uncore", off by default.
const CollectorSpec& uncore_collector_spec();

namespace uncore {

struct UncoreOptions {
  std::vector<std::string> events;  // perf syntax, each checked by parse_request
  // Count the host-link events of the PMUs known.hpp knows, where the
  // node has them (nodewatch_uncore_host_link_*).
  bool host_links = true;
  // Descriptors all events may hold together (one per event per CPU).
  std::int64_t max_counters = 256;
  bool operator==(const UncoreOptions&) const = default;
};

UncoreOptions read_uncore_options(OptionReader& r);

const MetricTable& uncore_metric_table();

class Counters;

class UncoreCollector final : public Collector {
 public:
  UncoreCollector(Roots roots, UncoreOptions options, std::shared_ptr<Counters> counters);
  ~UncoreCollector() override;

  const MetricTable& metrics() const override { return uncore_metric_table(); }
  void collect(const CollectContext& ctx, MetricSink& out) override;

  // Descriptors held now, and events known (open or keeping a total):
  // for tests.
  std::size_t open_counters() const;
  std::size_t known_events() const;

 private:
  void find_link_devices(const sources::FsRoot& sys);
  void emit_host_links(MetricSink& out) const;

  Roots roots_;
  UncoreOptions options_;
  std::vector<EventRequest> requests_;
  std::shared_ptr<Counters> counters_;
  Cpu cpu_;  // for the known tables
  // The known host-link events of the PMUs last listed, and the devices
  // behind them as of the PCI functions last listed: found again when a
  // listing changes, and every kRefindRounds collections.
  static constexpr int kRefindRounds = 40;
  std::vector<std::string> link_pmus_;
  std::vector<HostLinkEvent> links_;
  bool links_found_ = false;
  int rounds_since_found_ = 0;
  std::vector<std::string> link_pci_;
  std::vector<HostLinkDevice> link_devices_;
  bool devices_found_ = false;
};

// The counters and their totals, shared by the collectors of one daemon
// (CollectorEnv::service key "uncore"), opened through `perf`: the
// kernel's unless a test scripts one (it must outlive them).
std::shared_ptr<Counters> make_counters(PerfApi& perf = system_perf());

}  // namespace uncore
}  // namespace nodewatch
