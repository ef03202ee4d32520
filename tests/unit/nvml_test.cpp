// Tests of the NVML service's device questions against the fake
// libnvidia-ml.so.1 (tests/fakes/fake_nvml), through the real
// AcceleratorCollector (one service of its own per test): every
// series with its value, unit and labels; a GPU lost in the middle of a run;
// a GPU without ECC; a library missing a required symbol; an old library
// without the newest versioned symbols; XID events; a call that hangs past
// the deadline; no library at all. The scenarios, and the values each fake
// device reports, are in tests/fixtures/nvml/README.md.

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>  // before support/collector_test.hpp, which uses std::nan without it
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "accelerator/accelerator_collector.hpp"
#include "accelerator/backend.hpp"
#include "accelerator/nvml/nvml_queries.hpp"
#include "accelerator/nvml/nvml_service.hpp"
#include "support/collector_test.hpp"
#include "support/daemon_process.hpp"
#include "support/driver_summary.hpp"
#include "support/fake_nvml.hpp"
#include "support/paths.hpp"

namespace nodewatch::accelerator {
namespace {

using nodewatch::testing::CollectOnce;
using nodewatch::testing::ExpectConformant;
using nodewatch::testing::ExpectWellFormedTable;
using nodewatch::testing::TempDir;
using nodewatch::testing::Value;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr unsigned kGpus = 8;
constexpr double kGiB = 1024.0 * 1024 * 1024;

std::string scenario(const char* name) {
  return (nodewatch::testing::fixtures_dir() / "nvml" / name).string();
}

// What fake device i reports, in the units nodewatch exports
// (tests/fixtures/nvml/README.md, "What device i reports").
struct Gpu {
  unsigned i;
  std::string a() const { return std::to_string(i); }
  std::string uuid() const {
    char b[64];
    std::snprintf(b, sizeof b, "GPU-00000000-0000-4000-8000-0000000000%02u", i);
    return b;
  }
  std::string bus_id() const {
    char b[32];
    std::snprintf(b, sizeof b, "0000:%02x:00.0", 0x1a + 0x10 * i);
    return b;
  }
  std::vector<std::string> dev() const { return {a(), uuid()}; }
  std::vector<std::string> with(std::string extra) const { return {a(), uuid(), std::move(extra)}; }
  // A host link's labels: link ("pcie", "c2c"), then direction.
  std::vector<std::string> host(std::string link, std::string direction) const {
    return {a(), uuid(), std::move(link), std::move(direction)};
  }
  std::vector<std::string> info() const {
    return {a(),
            uuid(),
            "nvidia",
            "NVIDIA H100 80GB HBM3",
            bus_id(),
            "580.65.06",
            std::to_string(1650000000000ull + i),
            "96.00.99.00.01"};
  }
};

// Series per device in eight_gpus.scenario: info, up, 2 utilization,
// 2 memory, 2 temperatures, slowdown, thermal margin, power, limit, energy, 3 clocks,
// the platform's place,
// 9 throttle reasons, 5 throttle times, 2 ECC, 2 remapped rows, pending,
// failed, 2 repairs pending (R580), replays, 2 PCIe byte counters, the capacities of PCIe and C2C,
// and per C2C link (2) its state, errors, back-to-back replays and power
// state, 6 recovery actions, the compute process count (0: the default
// scenario runs none, so no job either). (GPM, and with it the C2C bytes,
// needs two cycles: none in a first collection.)
constexpr std::size_t kSeriesPerGpu = 59;
// And once a node whose NVML library loads: the driver's up, its 8 states,
// info and devices (nodewatch_accelerator_driver_*).
constexpr std::size_t kDriverSeries = 11;

// The number of samples with accelerator="i".
std::size_t SeriesOf(const MetricSink& sink, unsigned i) {
  std::istringstream in(sink.render());
  const std::string needle = "{accelerator=\"" + std::to_string(i) + "\"";
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#' && line.find(needle) != std::string::npos) ++n;
  return n;
}

bool Has(const MetricSink& sink, std::string_view name, const std::vector<std::string>& labels) {
  double v = 0;
  return sink.get(name, labels, &v);
}

std::uint64_t ErrorCount(const MetricSink& sink, std::string_view reason) {
  auto it = sink.errors().find(reason);
  return it == sink.errors().end() ? 0 : it->second;
}

// The NVIDIA driver's families of a collection, in one line.
std::string DriverState(const MetricSink& s) {
  return nodewatch::testing::DriverSummary(s.render(), "nvidia");
}

// One accelerator collector over an NVML service of its own for `library`,
// the fake reading `scenario_file`.
class FakeNode {
 public:
  // With the service's tuning (a short retry interval).
  // `c2c_link_bytes`: the collector's option of that name.
  // `sys`: where NVIDIA GPUs are looked for on the PCI bus (none there by
  // default).
  FakeNode(const std::string& library, const std::string& scenario_file,
           NvmlServiceOptions options = {}, bool c2c_link_bytes = false,
           const std::filesystem::path& sys = "/nonexistent/sys") {
    setenv("FAKE_NVML_SCENARIO", scenario_file.c_str(), 1);
    std::vector<std::unique_ptr<Backend>> backends;
    backends.push_back(make_nvml_backend(std::make_shared<NvmlService>(library, options),
                                         Roots{sys, "/nonexistent/proc", nullptr}));
    collector_ =
        std::make_unique<AcceleratorCollector>(std::move(backends), JobSources{}, c2c_link_bytes);
  }

  MetricSink Collect(std::chrono::milliseconds timeout = 10s) {
    MetricSink sink(accelerator_metric_table());
    CollectOnce(*collector_, sink, timeout);
    return sink;
  }

  // A second collection far enough after a first for GPM (NVML wants its
  // samples more than 100 ms apart): the one with GPM's series.
  MetricSink CollectWithGpm() {
    Collect();
    std::this_thread::sleep_for(150ms);
    return Collect();
  }

  Collector& collector() { return *collector_; }
  void Destroy() { collector_.reset(); }

 private:
  std::unique_ptr<AcceleratorCollector> collector_;
};

using FakeHooks = nodewatch::testing::FakeNvmlHooks;

// Every series of a healthy device from the full library, value by value.
// `old_driver`: the fallbacks of an old library (v1 memory counts the
// reserved memory as used; no field values, so no memory temperature, no
// throttle times, no C2C, and the sampled PCIe throughput instead of byte
// counters).
// `cycle`: which collection of the service this is (1 the first): from the
// second on, GPM activity over samples cycle-1 and cycle, which the fake
// gives as base + i + ((cycle - 1) mod 10) percent. 0: not known to the
// caller (a device lost and back, a session reopened): then GPM is either
// absent or all five families are there, with one k in 0..9 for all five.
void ExpectHealthyGpu(const MetricSink& s, unsigned index, bool old_driver = false,
                      unsigned cycle = 0) {
  SCOPED_TRACE("GPU " + std::to_string(index) + ", cycle " + std::to_string(cycle));
  const Gpu g{index};
  const double i = index;
  EXPECT_EQ(Value(s, "nodewatch_accelerator_info", g.info()), 1);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_up", g.dev()), 1);
  EXPECT_DOUBLE_EQ(Value(s, "nodewatch_accelerator_utilization_ratio", g.dev()),
                   (10 * i + 5) / 100);
  EXPECT_DOUBLE_EQ(Value(s, "nodewatch_accelerator_memory_utilization_ratio", g.dev()),
                   (3 * i + 1) / 100);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_memory_used_bytes", g.dev()),
            (i + 1) * kGiB + (old_driver ? 512.0 * 1024 * 1024 : 0));
  EXPECT_EQ(Value(s, "nodewatch_accelerator_memory_total_bytes", g.dev()), 80 * kGiB);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_temperature_celsius", g.with("gpu")), 30 + i);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_temperature_slowdown_celsius", g.dev()), 80 + i);
  // The driver's own margin, where it has the call (not the old library).
  if (!old_driver) {
    EXPECT_EQ(Value(s, "nodewatch_accelerator_thermal_margin_celsius", g.dev()), 45 - i);
    // Four GPUs a tray, as the fake places them.
    EXPECT_EQ(Value(s, "nodewatch_accelerator_platform_info",
                    {g.a(), g.uuid(), "1821225000123", std::to_string(2 + g.i / 4),
                     std::to_string(g.i / 4), "0", std::to_string(g.i % 4 + 1)}),
              1);
  }
  EXPECT_DOUBLE_EQ(Value(s, "nodewatch_accelerator_power_watts", g.dev()), 100.25 + i);
  EXPECT_DOUBLE_EQ(Value(s, "nodewatch_accelerator_power_limit_watts", g.dev()), 700 - 10 * i);
  EXPECT_DOUBLE_EQ(Value(s, "nodewatch_accelerator_energy_joules_total", g.dev()), 5e6 + i);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_clock_hertz", g.with("sm")), (1800 + i) * 1e6);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_clock_hertz", g.with("graphics")), (1700 + i) * 1e6);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_clock_hertz", g.with("memory")), (2600 + i) * 1e6);
  const char* reasons[] = {"gpu_idle",
                           "applications_clocks_setting",
                           "sw_power_cap",
                           "hw_slowdown",
                           "sync_boost",
                           "sw_thermal",
                           "hw_thermal",
                           "hw_power_brake",
                           "display_clock_setting"};
  for (unsigned bit = 0; bit < 9; ++bit)
    EXPECT_EQ(Value(s, "nodewatch_accelerator_clock_throttle_active", g.with(reasons[bit])),
              bit == index ? 1 : 0)
        << reasons[bit];
  EXPECT_EQ(Value(s, "nodewatch_accelerator_ecc_errors_total", g.with("corrected")), 10 * i);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_ecc_errors_total", g.with("uncorrected")), i);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_remapped_rows", g.with("correctable")), i);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_remapped_rows", g.with("uncorrectable")), index % 3);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_row_remap_pending", g.dev()), index % 2);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_row_remap_failed", g.dev()), index == 7 ? 1 : 0);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_pcie_replays_total", g.dev()), 100 + i);
  // PCIe generation 5, 16 lanes, 128b/130b.
  EXPECT_DOUBLE_EQ(
      Value(s, "nodewatch_accelerator_host_link_capacity_bytes_per_second", g.with("pcie")),
      16 * 32e9 * 128 / 130 / 8);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_processes", g.dev()), 0);

  const char* throttle_times[] = {"sw_power_cap", "sync_boost", "sw_thermal", "hw_thermal",
                                  "hw_power_brake"};
  if (old_driver) {
    EXPECT_FALSE(Has(s, "nodewatch_accelerator_temperature_celsius", g.with("memory")));
    for (const char* r : throttle_times)
      EXPECT_FALSE(Has(s, "nodewatch_accelerator_clock_throttle_seconds_total", g.with(r))) << r;
    EXPECT_EQ(Value(s, "nodewatch_accelerator_host_link_throughput_bytes_per_second",
                    g.host("pcie", "tx")),
              (1000 + i) * 1024);
    EXPECT_EQ(Value(s, "nodewatch_accelerator_host_link_throughput_bytes_per_second",
                    g.host("pcie", "rx")),
              (2000 + i) * 1024);
    EXPECT_FALSE(Has(s, "nodewatch_accelerator_host_link_bytes_total", g.host("pcie", "tx")));
    EXPECT_FALSE(Has(s, "nodewatch_accelerator_c2c_link_active", g.with("0")));
    EXPECT_FALSE(
        Has(s, "nodewatch_accelerator_host_link_capacity_bytes_per_second", g.with("c2c")));
    return;
  }
  EXPECT_EQ(Value(s, "nodewatch_accelerator_temperature_celsius", g.with("memory")), 40 + i);
  for (unsigned k = 0; k < 5; ++k)
    EXPECT_DOUBLE_EQ(
        Value(s, "nodewatch_accelerator_clock_throttle_seconds_total", g.with(throttle_times[k])),
        (k + 1) * (i + 1))
        << throttle_times[k];
  EXPECT_EQ(Value(s, "nodewatch_accelerator_host_link_bytes_total", g.host("pcie", "tx")),
            1e12 + i * 1e9);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_host_link_bytes_total", g.host("pcie", "rx")),
            2e12 + i * 1e9);
  EXPECT_FALSE(
      Has(s, "nodewatch_accelerator_host_link_throughput_bytes_per_second", g.host("pcie", "tx")));
  EXPECT_EQ(Value(s, "nodewatch_accelerator_c2c_link_active", g.with("0")), 1);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_c2c_link_active", g.with("1")), 0);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_c2c_link_errors_total", g.with("0")), i);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_c2c_link_errors_total", g.with("1")), i + 11);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_c2c_link_b2b_replays_total", g.with("0")), i);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_c2c_link_b2b_replays_total", g.with("1")), i + 2);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_c2c_link_low_power", g.with("0")), 0);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_c2c_link_low_power", g.with("1")), 1);
  // Link 0 active at 45,000 MB/s; link 1 is inactive and adds nothing.
  EXPECT_EQ(Value(s, "nodewatch_accelerator_host_link_capacity_bytes_per_second", g.with("c2c")),
            45000e6);
  const char* actions[] = {"none",      "gpu_reset",       "node_reboot",
                           "drain_p2p", "drain_and_reset", "recover_imex_domain"};
  for (const char* a : actions)
    EXPECT_EQ(Value(s, "nodewatch_accelerator_recovery_action", g.with(a)),
              std::string(a) == "none" ? 1 : 0)
        << a;
  struct Gpm {
    const char* name;
    double base;
  };
  const Gpm gpm[] = {{"nodewatch_accelerator_graphics_active_ratio", 50},
                     {"nodewatch_accelerator_sm_active_ratio", 40},
                     {"nodewatch_accelerator_sm_occupancy_ratio", 30},
                     {"nodewatch_accelerator_tensor_active_ratio", 20},
                     {"nodewatch_accelerator_dram_bandwidth_ratio", 10}};
  bool with_gpm = cycle >= 2;
  std::optional<double> k;  // the fake's (seq mod 10) of the older sample
  if (cycle >= 2) k = (cycle - 1) % 10;
  if (cycle == 0 && Has(s, gpm[0].name, g.dev())) {
    with_gpm = true;
    k = Value(s, gpm[0].name, g.dev()) * 100 - gpm[0].base - i;
    EXPECT_TRUE(*k >= -1e-9 && *k <= 9 + 1e-9) << *k;
  }
  for (const Gpm& m : gpm) {
    if (!with_gpm)
      EXPECT_FALSE(Has(s, m.name, g.dev())) << m.name;
    else
      EXPECT_NEAR(Value(s, m.name, g.dev()), (m.base + i + *k) / 100, 1e-12) << m.name;
  }
  // The C2C bytes come with GPM (tx and rx; the per-link ones only when
  // asked), at twice the rate to the device as from it.
  EXPECT_EQ(Has(s, "nodewatch_accelerator_host_link_bytes_total", g.host("c2c", "tx")), with_gpm);
  if (with_gpm) {
    const double tx = Value(s, "nodewatch_accelerator_host_link_bytes_total", g.host("c2c", "tx"));
    EXPECT_GT(tx, 0);
    EXPECT_NEAR(Value(s, "nodewatch_accelerator_host_link_bytes_total", g.host("c2c", "rx")) / tx,
                2.0, 1e-9);
  }
  EXPECT_FALSE(Has(s, "nodewatch_accelerator_c2c_link_bytes_total", g.host("0", "tx")));
  EXPECT_EQ(SeriesOf(s, index), kSeriesPerGpu + (with_gpm ? 7 : 0));
}

// A device reported down for `reason`: its identity, its place in the
// rack (so that a tray's lost GPUs are seen together) and up 0, nothing
// else.
void ExpectDownGpu(const MetricSink& s, unsigned index) {
  SCOPED_TRACE("GPU " + std::to_string(index));
  const Gpu g{index};
  EXPECT_EQ(Value(s, "nodewatch_accelerator_info", g.info()), 1);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_up", g.dev()), 0);
  EXPECT_EQ(SeriesOf(s, index), 3u);
}

TEST(NvmlTest, MetricTableIsWellFormed) {
  ExpectWellFormedTable(accelerator_metric_table(), "nodewatch_accelerator_");
}

TEST(NvmlTest, NormalizesPciBusIds) {
  EXPECT_EQ(normalize_pci_bus_id("00000000:1A:00.0"), "0000:1a:00.0");
  EXPECT_EQ(normalize_pci_bus_id("0000:1A:00.0"), "0000:1a:00.0");
  EXPECT_EQ(normalize_pci_bus_id("1a:00.0"), "0000:1a:00.0");
  EXPECT_EQ(normalize_pci_bus_id("00000002:C1:1F.7"), "0002:c1:1f.7");
  EXPECT_EQ(normalize_pci_bus_id("00010000:01:00.0"), "10000:01:00.0");
  EXPECT_EQ(normalize_pci_bus_id(""), "");
  EXPECT_EQ(normalize_pci_bus_id("XXXXXXXXXXXX"), "");
  EXPECT_EQ(normalize_pci_bus_id("0000:1a:00"), "");
  EXPECT_EQ(normalize_pci_bus_id("0000:1g:00.0"), "");
  EXPECT_EQ(normalize_pci_bus_id("0000:100:00.0"), "");
}

TEST(NvmlTest, ReadsFieldValuesByType) {
  nvml::FieldValue f{};
  f.value_type = nvml::kValueTypeUnsignedLongLong;
  f.value.ull_val = 5000000000ull;
  EXPECT_EQ(field_value_as_double(f), 5e9);
  f.value_type = nvml::kValueTypeSignedInt;
  f.value.si_val = -3;
  EXPECT_EQ(field_value_as_double(f), -3);
  f.value_type = nvml::kValueTypeDouble;
  f.value.d_val = 0.5;
  EXPECT_EQ(field_value_as_double(f), 0.5);
  f.value_type = nvml::kValueTypeUnsignedShort;
  f.value.ull_val = 0;
  f.value.us_val = 7;
  EXPECT_EQ(field_value_as_double(f), 7);
  f.value_type = 42;
  EXPECT_FALSE(field_value_as_double(f).has_value());
}

TEST(NvmlTest, ThrottleReasonsCoverEveryBitOnce) {
  std::set<std::string_view> labels;
  unsigned long long bits = 0;
  for (const NvmlThrottleReason& r : nvml_throttle_reasons()) {
    EXPECT_TRUE(labels.insert(r.label).second) << r.label;
    EXPECT_EQ(bits & r.bit, 0u) << r.label;
    bits |= r.bit;
  }
  EXPECT_EQ(bits, 0x1FFu);
}

TEST(NvmlTest, EightGpusExportEverySeriesWithTheirValues) {
  FakeNode node(FAKE_NVML_LIBRARY, scenario("eight_gpus.scenario"));
  const MetricSink s = node.Collect();
  for (unsigned i = 0; i < kGpus; ++i) ExpectHealthyGpu(s, i, false, 1);
  EXPECT_TRUE(s.errors().empty());
  EXPECT_EQ(s.sample_count(), kGpus * kSeriesPerGpu + kDriverSeries);
  // A second cycle reads the same, now with GPM activity over the two
  // cycles' samples (and reuses the device threads). NVML wants GPM samples
  // more than 100 ms apart; a closer pair gives no activity.
  std::this_thread::sleep_for(110ms);
  const MetricSink again = node.Collect();
  for (unsigned i = 0; i < kGpus; ++i) ExpectHealthyGpu(again, i, false, 2);
  EXPECT_TRUE(again.errors().empty());
  // Every family but those that other scenarios produce (XID events; the
  // sampled throughput, only without byte counters; MIG instances; fabric;
  // unrepairable memory, of R590 drivers;
  // jobs and claims, which need processes or a kubelet:
  // tests/integration/jobs_cgroup_test.cpp)
  // or an option (the per-link C2C bytes).
  const std::string text = again.render();
  for (const MetricDesc& d : accelerator_metric_table().descs()) {
    if (d.name == "nodewatch_accelerator_xid_errors_total" ||
        d.name == "nodewatch_accelerator_host_link_throughput_bytes_per_second" ||
        d.name.rfind("nodewatch_accelerator_gpu_instance_", 0) == 0 ||
        d.name.rfind("nodewatch_accelerator_fabric_", 0) == 0 ||
        d.name == "nodewatch_accelerator_memory_unrepairable" ||  // R590 on
        d.name == "nodewatch_accelerator_job_info" ||
        d.name == "nodewatch_accelerator_claim_pods" ||
        d.name == "nodewatch_accelerator_process_memory_used_bytes" ||
        d.name.rfind("nodewatch_accelerator_pod_resources_", 0) == 0 ||
        d.name == "nodewatch_accelerator_c2c_link_bytes_total")
      continue;
    EXPECT_NE(text.find("\n" + d.name + "{"), std::string::npos) << d.name;
  }
  // Newest symbols first; the 20 ms sampling call is not made when the
  // byte counters exist.
  // (Two cycles so far: each call once per GPU and cycle.)
  FakeHooks hooks(FAKE_NVML_LIBRARY);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetMemoryInfo_v2"), 2 * kGpus);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetMemoryInfo"), 0u);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetPciInfo_v3"), 2 * kGpus);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetTemperatureV"), 2 * kGpus);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetCurrentClocksEventReasons"), 2 * kGpus);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetPcieThroughput"), 0u);
  // GPM support is asked once per session; one sample per GPU and cycle.
  EXPECT_EQ(hooks.Calls("nvmlGpmQueryDeviceSupport"), kGpus);
  EXPECT_EQ(hooks.Calls("nvmlGpmSampleGet"), 2 * kGpus);

  // A third cycle takes the activity over samples 2 and 3, not 1 and 3.
  std::this_thread::sleep_for(110ms);
  const MetricSink third = node.Collect();
  for (unsigned i = 0; i < kGpus; ++i) ExpectHealthyGpu(third, i, false, 3);
}

TEST(NvmlTest, GpuLostMidQueryIsDownAndTheOthersComplete) {
  FakeNode node(FAKE_NVML_LIBRARY, scenario("gpu_lost.scenario"));
  for (int cycle = 0; cycle < 2; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    const MetricSink s = node.Collect();
    // What GPU 3 answered before it was lost (utilization, memory) is
    // dropped with the rest; it keeps its identity.
    ExpectDownGpu(s, 3);
    EXPECT_EQ(ErrorCount(s, "gpu_lost"), 1u);
    EXPECT_EQ(s.errors().size(), 1u);
    for (unsigned i = 0; i < kGpus; ++i)
      if (i != 3) ExpectHealthyGpu(s, i);
  }
}

TEST(NvmlTest, GpuLostOrNeedingResetBetweenCyclesKeepsItsSeriesIdentity) {
  FakeNode node(FAKE_NVML_LIBRARY, scenario("eight_gpus.scenario"));
  const MetricSink before = node.Collect();
  for (unsigned i = 0; i < kGpus; ++i) ExpectHealthyGpu(before, i);

  FakeHooks hooks(FAKE_NVML_LIBRARY);
  hooks.Script("lost 3");
  hooks.Script("reset_required 5");
  const MetricSink s = node.Collect();
  // Even the device handle is refused now: the uuid is the one seen before.
  ExpectDownGpu(s, 3);
  ExpectDownGpu(s, 5);
  EXPECT_EQ(ErrorCount(s, "gpu_lost"), 1u);
  EXPECT_EQ(ErrorCount(s, "reset_required"), 1u);
  EXPECT_EQ(s.errors().size(), 2u);
  for (unsigned i = 0; i < kGpus; ++i)
    if (i != 3 && i != 5) ExpectHealthyGpu(s, i);
}

TEST(NvmlTest, GpuWithoutEccLacksOnlyEccSeries) {
  FakeNode node(FAKE_NVML_LIBRARY, scenario("no_ecc.scenario"));
  const MetricSink s = node.Collect();
  const Gpu g{5};
  EXPECT_FALSE(Has(s, "nodewatch_accelerator_ecc_errors_total", g.with("corrected")));
  EXPECT_FALSE(Has(s, "nodewatch_accelerator_ecc_errors_total", g.with("uncorrected")));
  EXPECT_EQ(SeriesOf(s, 5), kSeriesPerGpu - 2);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_up", g.dev()), 1);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_remapped_rows", g.with("correctable")), 5);
  // NOT_SUPPORTED is not an error.
  EXPECT_TRUE(s.errors().empty());
  for (unsigned i = 0; i < kGpus; ++i)
    if (i != 5) ExpectHealthyGpu(s, i);
}

// NVLink-C2C bytes: GPM's MiB/s over each pair of samples times the time
// between them, added up. The fake's rates are constant (device i: 1000(i+1)
// MiB/s from it, 2000(i+1) to it; link l: 100(l+1)+i and 200(l+1)+i), and
// every sum is taken over the same intervals, so the sums stand in the
// rates' ratios exactly, and each lies between the rate times the time
// slept and the rate times the whole run.
TEST(NvmlTest, C2cBytesAreTheGpmRatesIntegratedOverEachInterval) {
  constexpr double kMiB = 1024.0 * 1024;
  FakeNode node(FAKE_NVML_LIBRARY, scenario("eight_gpus.scenario"), {}, /*c2c_link_bytes=*/true);
  const auto start = Clock::now();
  const MetricSink first = node.Collect();
  EXPECT_FALSE(Has(first, "nodewatch_accelerator_host_link_bytes_total", Gpu{0}.host("c2c", "tx")));
  std::this_thread::sleep_for(200ms);
  const MetricSink second = node.Collect();
  std::this_thread::sleep_for(200ms);
  const MetricSink third = node.Collect();
  const double run = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_TRUE(third.errors().empty()) << third.render();
  for (unsigned i : {0u, 5u}) {
    SCOPED_TRACE("GPU " + std::to_string(i));
    const Gpu g{i};
    const double rate = 1000.0 * (i + 1) * kMiB;
    const double tx2 =
        Value(second, "nodewatch_accelerator_host_link_bytes_total", g.host("c2c", "tx"));
    const double tx3 =
        Value(third, "nodewatch_accelerator_host_link_bytes_total", g.host("c2c", "tx"));
    EXPECT_GE(tx2, rate * 0.2);
    EXPECT_GE(tx3 - tx2, rate * 0.2);
    EXPECT_LE(tx3, rate * run);
    EXPECT_NEAR(
        Value(third, "nodewatch_accelerator_host_link_bytes_total", g.host("c2c", "rx")) / tx3, 2.0,
        1e-9);
    for (unsigned l = 0; l < 2; ++l) {
      const std::string link = std::to_string(l);
      EXPECT_NEAR(Value(third, "nodewatch_accelerator_c2c_link_bytes_total", g.host(link, "tx")),
                  tx3 * (100.0 * (l + 1) + i) / (1000.0 * (i + 1)), tx3 * 1e-9)
          << link;
      EXPECT_NEAR(Value(third, "nodewatch_accelerator_c2c_link_bytes_total", g.host(link, "rx")),
                  tx3 * (200.0 * (l + 1) + i) / (1000.0 * (i + 1)), tx3 * 1e-9)
          << link;
    }
  }
}

// A Grace-attached GPU has the C2C host link only: no PCIe series at all,
// not a zero. An x86 one has PCIe only: no C2C series. Each link's
// capacity is there for its utilization.
TEST(NvmlTest, EachKindOfNodeHasTheHostLinkItsGpusUse) {
  {
    FakeNode node(FAKE_NVML_LIBRARY, scenario("grace_c2c.scenario"));
    const MetricSink s = node.CollectWithGpm();
    for (unsigned i = 0; i < 4; ++i) {
      SCOPED_TRACE("Grace, GPU " + std::to_string(i));
      const Gpu g{i};
      EXPECT_TRUE(Has(s, "nodewatch_accelerator_host_link_bytes_total", g.host("c2c", "tx")));
      EXPECT_TRUE(Has(s, "nodewatch_accelerator_host_link_bytes_total", g.host("c2c", "rx")));
      // Links 0, 2, 4, 6, 8 active, at 45,000 + 100 l MB/s.
      EXPECT_EQ(
          Value(s, "nodewatch_accelerator_host_link_capacity_bytes_per_second", g.with("c2c")),
          (5 * 45000.0 + 100 * (0 + 2 + 4 + 6 + 8)) * 1e6);
      for (const char* d : {"tx", "rx"}) {
        EXPECT_FALSE(Has(s, "nodewatch_accelerator_host_link_bytes_total", g.host("pcie", d)));
        EXPECT_FALSE(Has(s, "nodewatch_accelerator_host_link_throughput_bytes_per_second",
                         g.host("pcie", d)));
      }
      EXPECT_FALSE(
          Has(s, "nodewatch_accelerator_host_link_capacity_bytes_per_second", g.with("pcie")));
    }
    // NOT_SUPPORTED everywhere it is missing: nothing counted.
    EXPECT_TRUE(s.errors().empty()) << s.render();
  }
  {
    FakeNode node(FAKE_NVML_LIBRARY, scenario("x86_pcie.scenario"));
    const MetricSink s = node.CollectWithGpm();
    for (unsigned i = 0; i < 2; ++i) {
      SCOPED_TRACE("x86, GPU " + std::to_string(i));
      const Gpu g{i};
      EXPECT_EQ(Value(s, "nodewatch_accelerator_host_link_bytes_total", g.host("pcie", "tx")),
                1e12 + i * 1e9);
      EXPECT_TRUE(
          Has(s, "nodewatch_accelerator_host_link_capacity_bytes_per_second", g.with("pcie")));
      EXPECT_FALSE(Has(s, "nodewatch_accelerator_host_link_bytes_total", g.host("c2c", "tx")));
      EXPECT_FALSE(
          Has(s, "nodewatch_accelerator_host_link_capacity_bytes_per_second", g.with("c2c")));
      EXPECT_FALSE(Has(s, "nodewatch_accelerator_c2c_link_active", g.with("0")));
    }
    EXPECT_TRUE(s.errors().empty()) << s.render();
  }
}

// Without the option, the per-link C2C bytes stay out and the sum stays in.
TEST(NvmlTest, C2cBytesPerLinkOnlyWhenAsked) {
  FakeNode node(FAKE_NVML_LIBRARY, scenario("eight_gpus.scenario"));
  const MetricSink s = node.CollectWithGpm();
  EXPECT_TRUE(Has(s, "nodewatch_accelerator_host_link_bytes_total", Gpu{1}.host("c2c", "tx")));
  EXPECT_FALSE(Has(s, "nodewatch_accelerator_c2c_link_bytes_total", Gpu{1}.host("0", "tx")));
}

TEST(NvmlTest, OtherQueryErrorsDropOneValueAndAreCounted) {
  FakeNode node(FAKE_NVML_LIBRARY, scenario("errors.scenario"));
  const MetricSink s = node.Collect();
  // GPU 1: power answered UNKNOWN; the rest of it is there.
  const Gpu g1{1};
  EXPECT_FALSE(Has(s, "nodewatch_accelerator_power_watts", g1.dev()));
  EXPECT_EQ(Value(s, "nodewatch_accelerator_up", g1.dev()), 1);
  EXPECT_EQ(SeriesOf(s, 1), kSeriesPerGpu - 1);
  EXPECT_EQ(ErrorCount(s, "nvml_error"), 1u);
  EXPECT_EQ(s.errors().size(), 1u);
  // GPU 0: no byte counters, so the sampled throughput, for it alone.
  const Gpu g0{0};
  EXPECT_FALSE(Has(s, "nodewatch_accelerator_host_link_bytes_total", g0.host("pcie", "tx")));
  EXPECT_EQ(Value(s, "nodewatch_accelerator_host_link_throughput_bytes_per_second",
                  g0.host("pcie", "tx")),
            1000 * 1024);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_host_link_throughput_bytes_per_second",
                  g0.host("pcie", "rx")),
            2000 * 1024);
  EXPECT_EQ(SeriesOf(s, 0), kSeriesPerGpu);
  FakeHooks hooks(FAKE_NVML_LIBRARY);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetPcieThroughput", 0), 2u);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetPcieThroughput"), 2u);
  for (unsigned i = 2; i < kGpus; ++i) ExpectHealthyGpu(s, i);
}

TEST(NvmlTest, LibraryMissingARequiredSymbolFailsEveryCycle) {
  FakeNode node(FAKE_NVML_BROKEN_LIBRARY, scenario("eight_gpus.scenario"));
  for (int cycle = 0; cycle < 2; ++cycle) {
    MetricSink sink(accelerator_metric_table());
    CollectContext ctx{Clock::now() + 10s, nullptr};
    try {
      node.collector().collect(ctx, sink);
      ADD_FAILURE() << "collect did not throw";
    } catch (const CollectError& e) {
      EXPECT_EQ(e.reason(), "library_error");
      EXPECT_NE(std::string(e.what()).find("missing symbol nvmlDeviceGetCount"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(FAKE_NVML_BROKEN_LIBRARY), std::string::npos);
    }
    ExpectConformant(sink);
    // Nothing of the devices; the driver's state, which a collection that
    // another vendor's devices carry would export.
    EXPECT_EQ(DriverState(sink), "up=0 state=library_broken library= module= devices=0 states=8");
    EXPECT_EQ(sink.sample_count(), kDriverSeries);
  }
}

TEST(NvmlTest, OldLibraryFallbacksGiveTheSameCoreValues) {
  FakeNode node(FAKE_NVML_OLD_LIBRARY, scenario("eight_gpus.scenario"));
  const MetricSink s = node.Collect();
  for (unsigned i = 0; i < kGpus; ++i) ExpectHealthyGpu(s, i, /*old_driver=*/true);
  EXPECT_TRUE(s.errors().empty());
  // No field values: no memory temperature, 5 throttle times, 8 C2C series
  // of 2 links and the C2C capacity, 6 recovery actions; no thermal margin,
  // no platform info and no repair status (calls the old library lacks);
  // the driver's.
  EXPECT_EQ(s.sample_count(), kGpus * (kSeriesPerGpu - 25) + kDriverSeries);
  FakeHooks hooks(FAKE_NVML_OLD_LIBRARY);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetMemoryInfo"), kGpus);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetPciInfo"), kGpus);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetTemperature"), kGpus);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetCurrentClocksThrottleReasons"), kGpus);
}

// Collects until `done` holds (the XID thread delivers events on its own
// schedule), at most 10 s.
MetricSink CollectUntil(FakeNode& node, const std::function<bool(const MetricSink&)>& done) {
  const auto until = Clock::now() + 10s;
  for (;;) {
    MetricSink s = node.Collect();
    if (done(s) || Clock::now() >= until) return s;
    std::this_thread::sleep_for(20ms);
  }
}

void ExpectXidCounts(const char* library) {
  FakeNode node(library, scenario("xid.scenario"));
  auto xid = [](const MetricSink& s, unsigned gpu, const char* code) {
    double v = 0;
    return s.get("nodewatch_accelerator_xid_errors_total", Gpu{gpu}.with(code), &v) ? v : 0.0;
  };
  const MetricSink s = CollectUntil(node, [&](const MetricSink& m) {
    return xid(m, 2, "79") == 2 && xid(m, 2, "48") == 1 && xid(m, 5, "94") == 1;
  });
  EXPECT_EQ(Value(s, "nodewatch_accelerator_xid_errors_total", Gpu{2}.with("79")), 2);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_xid_errors_total", Gpu{2}.with("48")), 1);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_xid_errors_total", Gpu{5}.with("94")), 1);
  // GPU 7 could not register: its scripted XID never arrives; nobody else
  // has any.
  const std::string text = s.render();
  std::size_t families = 0;
  for (std::size_t at = 0;
       (at = text.find("\nnodewatch_accelerator_xid_errors_total{", at)) != std::string::npos; ++at)
    ++families;
  EXPECT_EQ(families, 3u);
  // Counters: the next cycle still has them.
  const MetricSink again = node.Collect();
  EXPECT_EQ(Value(again, "nodewatch_accelerator_xid_errors_total", Gpu{2}.with("79")), 2);
}

TEST(NvmlTest, XidEventsAreCountedPerDeviceAndCode) {
  ExpectXidCounts(FAKE_NVML_LIBRARY);
}

TEST(NvmlTest, XidEventsThroughTheOldWaitSymbol) {
  ExpectXidCounts(FAKE_NVML_OLD_LIBRARY);
}

TEST(NvmlTest, HungCallMarksOnlyThatDeviceStuckAndCollectMeetsTheDeadline) {
  FakeNode node(FAKE_NVML_LIBRARY, scenario("blocking.scenario"));
  const auto timeout = 1000ms;
  auto start = Clock::now();
  const MetricSink s = node.Collect(timeout);
  EXPECT_LT(Clock::now() - start, timeout);
  // GPU 6 is inside nvmlDeviceGetPowerUsage; its identity was read before.
  ExpectDownGpu(s, 6);
  EXPECT_EQ(ErrorCount(s, "device_stuck"), 1u);
  EXPECT_EQ(s.errors().size(), 1u);
  for (unsigned i = 0; i < kGpus; ++i)
    if (i != 6) ExpectHealthyGpu(s, i);

  // Still stuck: reported again, and no second query is queued behind it.
  FakeHooks hooks(FAKE_NVML_LIBRARY);
  start = Clock::now();
  const MetricSink again = node.Collect(timeout);
  EXPECT_LT(Clock::now() - start, timeout);
  ExpectDownGpu(again, 6);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetPowerUsage", 6), 1u);

  // Once the call returns, the device is read again in full.
  ASSERT_TRUE(hooks.WaitUnblocked());
  const MetricSink after = CollectUntil(node, [](const MetricSink& m) {
    double up = 0;
    return m.get("nodewatch_accelerator_up", Gpu{6}.dev(), &up) && up == 1;
  });
  ExpectHealthyGpu(after, 6);
  EXPECT_TRUE(after.errors().empty());
}

TEST(NvmlTest, DestroyingTheServiceDoesNotWaitForAHungCall) {
  // The detached thread goes on through the fake after its call returns
  // (the rest of its device's questions) and may still be there when this
  // test ends: the library must not be unloaded under it, so a handle is
  // kept open for the process. (Unloaded, its globals were destroyed under
  // the thread: ThreadSanitizer saw it once the thread had more questions
  // to ask after the hung one.)
  FakeNode node(FAKE_NVML_LIBRARY, scenario("blocking_long.scenario"));
  // The first collection starts GPU 6's query; on a loaded machine under
  // TSan it may give up before that thread has read the identity, so what
  // it shows of GPU 6 is not asserted here.
  (void)node.Collect(2s);
  static FakeHooks* const kept_mapped = new FakeHooks(FAKE_NVML_LIBRARY);
  (void)kept_mapped;
  FakeHooks hooks(FAKE_NVML_LIBRARY);  // keeps the library mapped for the wait below
  // The test is about a thread that is inside the call when Destroy starts.
  ASSERT_TRUE(hooks.WaitBlocked()) << "GPU 6's call never started";
  // Inside the call, its identity is known: down, with its identity, and
  // no second query queued behind the stuck one.
  const MetricSink s = node.Collect(2s);
  ExpectDownGpu(s, 6);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetPowerUsage", 6), 1u);
  const auto start = Clock::now();
  node.Destroy();
  const auto took = Clock::now() - start;
  // One grace period (1 s) for all threads, then the stuck one is detached:
  // it is still in the library when Destroy returns (the call sleeps 6 s).
  EXPECT_LT(took, 4s) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                      << " ms";
  EXPECT_GT(hooks.Blocked(), 0) << "Destroy waited for the hung call";
  // The detached thread returns from the fake on its own and cleans up.
  EXPECT_TRUE(hooks.WaitUnblocked());
}

TEST(NvmlTest, NoLibraryMeansNoDevicesAndNoError) {
  FakeNode node("/nonexistent/libnvidia-ml.so.1", scenario("eight_gpus.scenario"));
  for (int cycle = 0; cycle < 2; ++cycle) {
    const MetricSink s = node.Collect();
    EXPECT_EQ(s.sample_count(), 0u);  // no library, no NVIDIA GPU: nothing to say
    EXPECT_TRUE(s.errors().empty());
  }
}

// A sysfs with NVIDIA functions on the PCI bus (`gpus` 3D controllers, one
// VGA function of another vendor, one NVIDIA GPU handed to a virtual
// machine through vfio-pci) and the nvidia module's version, when given.
class NvidiaBus {
 public:
  NvidiaBus(int gpus, const std::string& module) {
    for (int i = 0; i < gpus; ++i)
      function("0000:" + std::to_string(17 + i) + ":00.0", "0x10de", "0x030200", "nvidia");
    function("0000:03:00.0", "0x1a03", "0x030000", "ast");  // the BMC's display
    function("0000:40:00.0", "0x10de", "0x030200", "vfio-pci");
    if (!module.empty()) dir_.write("module/nvidia/version", module + "\n");
  }
  std::filesystem::path sys() const { return dir_.path(); }

 private:
  void function(const std::string& bdf, const std::string& vendor, const std::string& cls,
                const std::string& driver) {
    dir_.write("bus/pci/devices/" + bdf + "/vendor", vendor + "\n");
    dir_.write("bus/pci/devices/" + bdf + "/class", cls + "\n");
    std::filesystem::create_directories(dir_.path() / "bus/pci/drivers" / driver);
    std::filesystem::create_directory_symlink("../../../bus/pci/drivers/" + driver,
                                              dir_.path() / "bus/pci/devices" / bdf / "driver");
  }
  TempDir dir_;
};

// Installed, with no driver and no NVIDIA GPU (a CPU node with the
// driver's packages): said, and not an error; the node is healthy (the
// verdict needs a GPU on the bus).
TEST(NvmlTest, DriverNotLoadedMeansNoDevicesAndNoError) {
  FakeNode node(FAKE_NVML_LIBRARY, scenario("driver_not_loaded.scenario"));
  const MetricSink s = node.Collect();
  EXPECT_TRUE(s.errors().empty());
  EXPECT_EQ(DriverState(s), "up=0 state=not_loaded library=580.65.06 module= devices=0 states=8");
  EXPECT_EQ(s.sample_count(), kDriverSeries);
}

// nvmlInit's other answers are the driver's state, not the collector's
// failure: each with the GPUs on the bus and the module's version.
TEST(NvmlTest, AnInitFailureIsTheDriversStateWithTheGpusOnTheBus) {
  struct Case {
    const char* scenario;
    const char* state;
    const char* module;
  };
  for (const Case& k : {Case{"driver_not_loaded.scenario", "not_loaded", ""},
                        Case{"version_mismatch.scenario", "version_mismatch", "550.54.15"},
                        Case{"no_permission.scenario", "no_permission", "580.65.06"}}) {
    SCOPED_TRACE(k.scenario);
    NvidiaBus bus(2, k.module);
    FakeNode node(FAKE_NVML_LIBRARY, scenario(k.scenario), {}, false, bus.sys());
    const MetricSink s = node.Collect();
    EXPECT_TRUE(s.errors().empty());
    EXPECT_EQ(DriverState(s), std::string("up=0 state=") + k.state +
                                  " library=580.65.06 module=" + k.module + " devices=2 states=8");
  }
}

TEST(NvmlTest, AnAnsweringDriverIsUpWithItsVersions) {
  NvidiaBus bus(8, "580.65.06");
  FakeNode node(FAKE_NVML_LIBRARY, scenario("eight_gpus.scenario"), {}, false, bus.sys());
  const MetricSink s = node.Collect();
  EXPECT_EQ(DriverState(s), "up=1 state=ok library=580.65.06 module=580.65.06 devices=8 states=8");
}

// No library at all with NVIDIA GPUs on the bus: said, library_missing.
TEST(NvmlTest, NoLibraryWithGpusOnTheBusIsSaid) {
  NvidiaBus bus(1, "");
  FakeNode node("/nonexistent/libnvidia-ml.so.1", scenario("eight_gpus.scenario"), {}, false,
                bus.sys());
  const MetricSink s = node.Collect();
  EXPECT_EQ(DriverState(s), "up=0 state=library_missing library= module= devices=1 states=8");
}

// --- Regressions of the review's findings. ---

// XID 79 on one GPU makes every wait on the set holding it fail at once;
// the set is built again without it, and a later XID on a healthy GPU is
// still counted. The failed waits are counted as xid_wait_error.
TEST(NvmlTest, XidCountingSurvivesALostGpuInTheEventSet) {
  FakeNode node(FAKE_NVML_LIBRARY, scenario("xid_wait_lost.scenario"));
  auto xid = [](const MetricSink& s, unsigned gpu, const char* code) {
    double v = 0;
    return s.get("nodewatch_accelerator_xid_errors_total", Gpu{gpu}.with(code), &v) ? v : 0.0;
  };
  std::uint64_t wait_errors = 0;
  const MetricSink s = CollectUntil(node, [&](const MetricSink& m) {
    wait_errors += ErrorCount(m, "xid_wait_error");
    return xid(m, 3, "79") == 1 && xid(m, 1, "48") == 1 && wait_errors > 0;
  });
  EXPECT_EQ(xid(s, 3, "79"), 1);
  EXPECT_EQ(xid(s, 1, "48"), 1);
  EXPECT_GT(wait_errors, 0u);
  // The collection itself carries on for the healthy GPUs.
  EXPECT_EQ(Value(s, "nodewatch_accelerator_up", Gpu{0}.dev()), 1);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_up", Gpu{1}.dev()), 1);
}

// Holds the fake library loaded for a test, so that its state (here:
// count_error's count across nvmlInit) outlives a session's dlclose.
struct HoldLibrary {
  explicit HoldLibrary(const char* library) : handle(dlopen(library, RTLD_NOW | RTLD_LOCAL)) {}
  ~HoldLibrary() {
    if (handle != nullptr) dlclose(handle);
  }
  HoldLibrary(const HoldLibrary&) = delete;
  HoldLibrary& operator=(const HoldLibrary&) = delete;
  void* handle;
};

// nvmlDeviceGetCount fails (a driver reload) for the first two sessions;
// each failed session is dropped and NVML initialised again after the
// retry interval, and the third one works, without restarting anything.
TEST(NvmlTest, DeviceCountFailureReinitialisesNvmlUntilItRecovers) {
  HoldLibrary hold(FAKE_NVML_LIBRARY);
  ASSERT_NE(hold.handle, nullptr);
  FakeNode node(FAKE_NVML_LIBRARY, scenario("count_error.scenario"),
                NvmlServiceOptions{.retry_interval = 0ms});
  for (int cycle = 0; cycle < 2; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    MetricSink sink(accelerator_metric_table());
    CollectContext ctx{Clock::now() + 10s, nullptr};
    try {
      node.collector().collect(ctx, sink);
      ADD_FAILURE() << "collect did not throw";
    } catch (const CollectError& e) {
      EXPECT_EQ(e.reason(), "nvml_error");
      EXPECT_NE(std::string(e.what()).find("nvmlDeviceGetCount failed"), std::string::npos)
          << e.what();
    }
  }
  const MetricSink s = node.Collect();
  for (unsigned i = 0; i < kGpus; ++i) ExpectHealthyGpu(s, i);
  EXPECT_TRUE(s.errors().empty());
}

// A driver reloaded under a running session: every device refuses a handle
// (LIB_RM_VERSION_MISMATCH). The session is dropped and opened again.
TEST(NvmlTest, EveryDeviceFailingReinitialisesNvml) {
  FakeNode node(FAKE_NVML_LIBRARY, scenario("eight_gpus.scenario"),
                NvmlServiceOptions{.retry_interval = 0ms});
  const MetricSink before = node.Collect();
  for (unsigned i = 0; i < kGpus; ++i) ExpectHealthyGpu(before, i);
  {
    FakeHooks hooks(FAKE_NVML_LIBRARY);
    hooks.Script("fail * nvmlDeviceGetHandleByIndex 18");
  }
  const MetricSink broken = node.Collect();
  EXPECT_EQ(ErrorCount(broken, "nvml_error"), kGpus);
  // A new nvmlInit starts the scenario afresh (the scripted failure gone).
  const MetricSink after = node.Collect();
  for (unsigned i = 0; i < kGpus; ++i) ExpectHealthyGpu(after, i);
  EXPECT_TRUE(after.errors().empty());
}

// The device count is read once per session, not on every cycle.
TEST(NvmlTest, DeviceCountIsReadOncePerSession) {
  FakeNode node(FAKE_NVML_LIBRARY, scenario("eight_gpus.scenario"));
  for (int cycle = 0; cycle < 3; ++cycle) {
    const MetricSink s = node.Collect();
    for (unsigned i = 0; i < kGpus; ++i) ExpectHealthyGpu(s, i);
  }
  FakeHooks hooks(FAKE_NVML_LIBRARY);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetCount_v2") + hooks.Calls("nvmlDeviceGetCount"), 1u);
}

// One failed UUID read keeps the last good identity (the series keep their
// labels); the error is counted.
TEST(NvmlTest, FailedIdentityReadKeepsTheLastGoodIdentity) {
  FakeNode node(FAKE_NVML_LIBRARY, scenario("eight_gpus.scenario"));
  const MetricSink before = node.Collect();
  ExpectHealthyGpu(before, 2);
  FakeHooks hooks(FAKE_NVML_LIBRARY);
  hooks.Script("fail 2 nvmlDeviceGetUUID 999");
  hooks.Script("fail 2 nvmlDeviceGetSerial 999");
  const MetricSink s = node.Collect();
  for (unsigned i = 0; i < kGpus; ++i) ExpectHealthyGpu(s, i);
  EXPECT_EQ(ErrorCount(s, "nvml_error"), 2u);
  EXPECT_FALSE(Has(s, "nodewatch_accelerator_up", {"2", ""}));
}

// A handle refused for a reason other than lost or reset required (say
// NO_PERMISSION) is an error, not a device down: up stays 1, no values.
TEST(NvmlTest, HandleErrorOtherThanLostKeepsTheDeviceUp) {
  FakeNode node(FAKE_NVML_LIBRARY, scenario("eight_gpus.scenario"));
  const MetricSink before = node.Collect();
  ExpectHealthyGpu(before, 4);
  FakeHooks hooks(FAKE_NVML_LIBRARY);
  hooks.Script("fail 4 nvmlDeviceGetHandleByIndex 4");
  const MetricSink s = node.Collect();
  const Gpu g{4};
  EXPECT_EQ(Value(s, "nodewatch_accelerator_info", g.info()), 1);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_up", g.dev()), 1);
  EXPECT_EQ(SeriesOf(s, 4), 3u);  // info, platform info, up
  EXPECT_EQ(ErrorCount(s, "nvml_error"), 1u);
  EXPECT_EQ(s.errors().size(), 1u);
  for (unsigned i = 0; i < kGpus; ++i)
    if (i != 4) ExpectHealthyGpu(s, i);
}

// The C2C error counter (CRC + replays) does not go backwards when one of
// its two fields fails for a cycle: that field counts with its last good
// value.
TEST(NvmlTest, C2cErrorCounterKeepsAFailedFieldsLastValue) {
  FakeNode node(FAKE_NVML_LIBRARY, scenario("eight_gpus.scenario"));
  const MetricSink before = node.Collect();
  ExpectHealthyGpu(before, 2);
  FakeHooks hooks(FAKE_NVML_LIBRARY);
  hooks.Script("field_fail 2 232 999");
  const MetricSink s = node.Collect();
  EXPECT_EQ(Value(s, "nodewatch_accelerator_c2c_link_errors_total", Gpu{2}.with("0")), 2);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_c2c_link_errors_total", Gpu{2}.with("1")), 2 + 11);
  EXPECT_EQ(ErrorCount(s, "nvml_error"), 2u);  // one per link
}

// GetMemoryInfo_v2 / GetTemperatureV that exist but refuse fall back to the
// v1 calls at run time.
TEST(NvmlTest, NewerCallsThatRefuseFallBackToTheV1Calls) {
  FakeNode node(FAKE_NVML_LIBRARY, scenario("fallbacks.scenario"));
  const MetricSink s = node.Collect();
  EXPECT_TRUE(s.errors().empty());
  // v1 memory: used includes the reserved 512 MiB.
  EXPECT_EQ(Value(s, "nodewatch_accelerator_memory_used_bytes", Gpu{0}.dev()),
            kGiB + 512.0 * 1024 * 1024);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_memory_total_bytes", Gpu{0}.dev()), 80 * kGiB);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_temperature_celsius", Gpu{1}.with("gpu")), 31);
  for (unsigned i = 2; i < kGpus; ++i) ExpectHealthyGpu(s, i);
  FakeHooks hooks(FAKE_NVML_LIBRARY);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetMemoryInfo"), 1u);
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetTemperature"), 1u);
}

}  // namespace
}  // namespace nodewatch::accelerator
