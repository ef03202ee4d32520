// The accelerator collector under each NVIDIA driver generation it supports
// (R535, R550, R570, R580, R590, and one whose version cannot be read),
// through the fake libnvidia-ml.so.1, which numbers its fields the way that
// generation's NVML header does (tests/fakes/fake_nvml/fake_nvml.cpp,
// meaning_of; the backend's own table is nvml_fields.cpp): the throttle
// times come from the ids of that generation and no power-smoothing value
// is exported; a field that answers with another value type is counted and
// dropped; GPM activity over each pair of samples, MIG instances included;
// the recovery action and the fabric state.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>  // before support/collector_test.hpp, which uses std::nan without it
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "accelerator/accelerator_collector.hpp"
#include "accelerator/backend.hpp"
#include "accelerator/nvml/nvml_fields.hpp"
#include "accelerator/nvml/nvml_gpm.hpp"
#include "accelerator/nvml/nvml_queries.hpp"
#include "accelerator/nvml/nvml_service.hpp"
#include "support/collector_test.hpp"
#include "support/fake_nvml.hpp"
#include "support/paths.hpp"

namespace nodewatch::accelerator {
namespace {

using nodewatch::testing::CollectOnce;
using nodewatch::testing::ErrorCount;
using nodewatch::testing::ExpectConformant;
using nodewatch::testing::Value;
constexpr auto Has = nodewatch::testing::HasSeries;
using namespace std::chrono_literals;

std::string scenario(const char* name) {
  return (nodewatch::testing::fixtures_dir() / "nvml" / name).string();
}

std::vector<std::string> dev(unsigned i) {
  char b[64];
  std::snprintf(b, sizeof b, "GPU-00000000-0000-4000-8000-0000000000%02u", i);
  return {std::to_string(i), b};
}
std::vector<std::string> with(unsigned i, std::string extra) {
  auto l = dev(i);
  l.push_back(std::move(extra));
  return l;
}
std::vector<std::string> host(unsigned i, std::string link, std::string direction) {
  auto l = with(i, std::move(link));
  l.push_back(std::move(direction));
  return l;
}

// Collects through one accelerator collector over a service of its own.
class Node {
 public:
  explicit Node(const std::string& scenario_file, const char* library = FAKE_NVML_LIBRARY) {
    setenv("FAKE_NVML_SCENARIO", scenario_file.c_str(), 1);
    std::vector<std::unique_ptr<Backend>> backends;
    backends.push_back(make_nvml_backend(std::make_shared<NvmlService>(library)));
    collector_ = std::make_unique<AcceleratorCollector>(std::move(backends));
  }
  MetricSink Collect() {
    MetricSink sink(accelerator_metric_table());
    CollectOnce(*collector_, sink, 10s);
    ExpectConformant(sink);
    return sink;
  }
  void Destroy() { collector_.reset(); }

 private:
  std::unique_ptr<AcceleratorCollector> collector_;
};

const char* const kThrottleTimes[] = {"sw_power_cap", "sync_boost", "sw_thermal", "hw_thermal",
                                      "hw_power_brake"};

// The fake gives throttle time k·(i+1) s for reason k = 1..5, whichever id
// its generation gives that reason; `present` says which reasons exist.
void ExpectThrottleTimes(const MetricSink& s, unsigned i, const std::vector<bool>& present) {
  for (unsigned k = 0; k < 5; ++k) {
    SCOPED_TRACE(kThrottleTimes[k]);
    const auto labels = with(i, kThrottleTimes[k]);
    if (!present[k]) {
      EXPECT_FALSE(Has(s, "nodewatch_accelerator_clock_throttle_seconds_total", labels));
      continue;
    }
    EXPECT_DOUBLE_EQ(Value(s, "nodewatch_accelerator_clock_throttle_seconds_total", labels),
                     (k + 1.0) * (i + 1.0));
  }
}

struct Generation {
  const char* scenario;
  const char* driver;
  bool throttle_times;  // the three branch-dependent throttle times
  bool pcie_bytes;      // 197/198 (else the sampled throughput)
  bool recovery;        // 230
  bool c2c_errors;      // 231-234
  bool c2c_bytes;       // GPM's C2C throughput (R575 on, the branch known)
};

class DriverGenerationTest : public ::testing::TestWithParam<Generation> {};

TEST_P(DriverGenerationTest, ReadsWhatThatDriverNumbersAndNothingElse) {
  const Generation& g = GetParam();
  Node node(scenario(g.scenario));
  const MetricSink s = node.Collect();
  // No error at all: in particular no field answered with a type that its
  // meaning does not have, so no power-smoothing id was asked.
  EXPECT_TRUE(s.errors().empty()) << s.render();
  for (unsigned i = 0; i < 2; ++i) {
    SCOPED_TRACE("GPU " + std::to_string(i));
    EXPECT_EQ(Value(s, "nodewatch_accelerator_up", dev(i)), 1);
    ExpectThrottleTimes(s, i, {true, true, g.throttle_times, g.throttle_times, g.throttle_times});
    EXPECT_EQ(Has(s, "nodewatch_accelerator_host_link_bytes_total", host(i, "pcie", "tx")),
              g.pcie_bytes);
    EXPECT_EQ(Has(s, "nodewatch_accelerator_host_link_throughput_bytes_per_second",
                  host(i, "pcie", "tx")),
              !g.pcie_bytes);
    EXPECT_TRUE(
        Has(s, "nodewatch_accelerator_host_link_capacity_bytes_per_second", with(i, "pcie")));
    EXPECT_EQ(Has(s, "nodewatch_accelerator_recovery_action", with(i, "none")), g.recovery);
    if (g.recovery) {
      EXPECT_EQ(Value(s, "nodewatch_accelerator_recovery_action", with(i, "none")), 1);
    }
    // C2C: the state (170/171) on every generation; the error count only
    // where 231/232 exist.
    EXPECT_EQ(Value(s, "nodewatch_accelerator_c2c_link_active", with(i, "0")), 1);
    EXPECT_EQ(Has(s, "nodewatch_accelerator_c2c_link_errors_total", with(i, "0")), g.c2c_errors);
    EXPECT_EQ(Has(s, "nodewatch_accelerator_c2c_link_b2b_replays_total", with(i, "0")),
              g.c2c_errors);
    EXPECT_EQ(Has(s, "nodewatch_accelerator_c2c_link_low_power", with(i, "0")), g.c2c_errors);
    EXPECT_TRUE(
        Has(s, "nodewatch_accelerator_host_link_capacity_bytes_per_second", with(i, "c2c")));
  }
  // GPM over two samples: the activity from every generation; the C2C
  // bytes only from one that has them, and asking them of an older driver
  // (whose GPM refuses a request naming an id it lacks) must not cost the
  // activity.
  std::this_thread::sleep_for(150ms);
  const MetricSink second = node.Collect();
  EXPECT_TRUE(second.errors().empty()) << second.render();
  for (unsigned i = 0; i < 2; ++i) {
    SCOPED_TRACE("GPU " + std::to_string(i));
    EXPECT_TRUE(Has(second, "nodewatch_accelerator_sm_active_ratio", dev(i)));
    EXPECT_EQ(Has(second, "nodewatch_accelerator_host_link_bytes_total", host(i, "c2c", "tx")),
              g.c2c_bytes);
  }
  // No value of any series is one of the power-smoothing answers exported
  // as a time (1e-9, 2e-9, 3e-9 s, or 14-16 ns).
  std::istringstream text(s.render());
  for (std::string line; std::getline(text, line);) {
    if (line.empty() || line[0] == '#') continue;
    const double v = std::strtod(line.substr(line.rfind(' ') + 1).c_str(), nullptr);
    EXPECT_FALSE(v > 0 && v < 1e-6) << line;
  }
  EXPECT_EQ(Value(s, "nodewatch_accelerator_info",
                  {"0", dev(0)[1], "nvidia", "NVIDIA H100 80GB HBM3", "0000:1a:00.0", g.driver,
                   "1650000000000", "96.00.99.00.01"}),
            1);
}

INSTANTIATE_TEST_SUITE_P(
    Nvml, DriverGenerationTest,
    ::testing::Values(
        Generation{"driver_r535.scenario", "535.104.05", false, false, false, false, false},
        Generation{"driver_r550.scenario", "550.54.15", false, false, false, false, false},
        Generation{"driver_r570.scenario", "570.124.06", false, true, true, false, false},
        Generation{"driver_r580.scenario", "580.65.06", true, true, true, true, true},
        Generation{"driver_r590.scenario", "590.44.01", true, true, true, true, true},
        // The version unreadable: the branch-dependent ids and GPM metrics
        // are not asked.
        Generation{"driver_unknown.scenario", "", false, true, true, true, false}),
    [](const ::testing::TestParamInfo<Generation>& p) {
      std::string n = p.param.scenario;
      return n.substr(0, n.find('.'));
    });

TEST(NvmlGenerationTest, TheBranchComesFromTheNvmlVersionElseTheDriverVersion) {
  EXPECT_EQ(nvml_driver_branch("13.590.44.01", "590.44.01"), 590u);
  EXPECT_EQ(nvml_driver_branch("12.535.104.05", ""), 535u);
  EXPECT_EQ(nvml_driver_branch("", "575.51.03"), 575u);
  EXPECT_EQ(nvml_driver_branch("garbage", "580.65.06"), 580u);
  EXPECT_EQ(nvml_driver_branch("13.x", "570.124"), 570u);
  EXPECT_FALSE(nvml_driver_branch("", "").has_value());
  EXPECT_FALSE(nvml_driver_branch("13.5", "5.1").has_value());
  EXPECT_FALSE(nvml_driver_branch("abc", "v590").has_value());
}

TEST(NvmlGenerationTest, ThrottleTimeIdsFollowTheBranch) {
  using F = NvmlVersionedField;
  EXPECT_FALSE(nvml_field_id(F::kClocksEventSwThermalNs, 535).has_value());
  EXPECT_FALSE(nvml_field_id(F::kClocksEventSwThermalNs, 570).has_value());
  EXPECT_EQ(nvml_field_id(F::kClocksEventSwThermalNs, 575), 251u);
  EXPECT_EQ(nvml_field_id(F::kClocksEventHwPowerBrakeNs, 589), 253u);
  EXPECT_EQ(nvml_field_id(F::kClocksEventSwThermalNs, 590), 269u);
  EXPECT_EQ(nvml_field_id(F::kClocksEventHwThermalNs, 595), 270u);
  EXPECT_FALSE(nvml_field_id(F::kClocksEventSwThermalNs, std::nullopt).has_value());
  // 251 under R590 and 269 under R580 are power smoothing: no meaning here.
  EXPECT_EQ(nvml_field_def(251, 590), nullptr);
  EXPECT_EQ(nvml_field_def(269, 580), nullptr);
  ASSERT_NE(nvml_field_def(251, 580), nullptr);
  EXPECT_EQ(nvml_field_def(251, 580)->kind, NvmlFieldKind::kInteger64);
  // A stable id means the same with no branch at all.
  ASSERT_NE(nvml_field_def(197, std::nullopt), nullptr);
  EXPECT_EQ(nvml_field_def(197, std::nullopt)->name, "pcie_count_tx_bytes");
}

TEST(NvmlGenerationTest, ValueTypesByKind) {
  using K = NvmlFieldKind;
  EXPECT_TRUE(nvml_field_type_ok(K::kInteger64, nvml::kValueTypeUnsignedLongLong));
  EXPECT_FALSE(nvml_field_type_ok(K::kInteger64, nvml::kValueTypeUnsignedInt));
  EXPECT_FALSE(nvml_field_type_ok(K::kInteger64, nvml::kValueTypeDouble));
  EXPECT_TRUE(nvml_field_type_ok(K::kInteger, nvml::kValueTypeUnsignedInt));
  EXPECT_FALSE(nvml_field_type_ok(K::kInteger, nvml::kValueTypeDouble));
  EXPECT_TRUE(nvml_field_type_ok(K::kNumber, nvml::kValueTypeDouble));
  EXPECT_FALSE(nvml_field_type_ok(K::kNumber, 7));
}

// R580 whose 251 answers as R590's power smoothing would (an unsigned int
// 1), and whose 197 answers a double and 82 a type NVML does not have: each
// dropped and counted as nvml_field_type, the rest of the device intact.
TEST(NvmlGenerationTest, AFieldOfTheWrongValueTypeIsCountedAndDropped) {
  Node node(scenario("driver_r580.scenario"));
  const MetricSink before = node.Collect();
  ExpectThrottleTimes(before, 0, {true, true, true, true, true});
  nodewatch::testing::FakeNvmlHooks hooks(FAKE_NVML_LIBRARY);
  hooks.Script("field_value 0 251 ui 1");
  const MetricSink s1 = node.Collect();
  ExpectThrottleTimes(s1, 0, {true, true, false, true, true});
  EXPECT_EQ(ErrorCount(s1, "nvml_field_type"), 1u);
  // The detail names the field and both types (what the scheduler logs
  // when the failure starts).
  const auto f = s1.failures().find({"nvml_field_type", dev(0)[1]});
  ASSERT_NE(f, s1.failures().end());
  EXPECT_EQ(f->second,
            "field 251 (clocks_event_reason_sw_therm_slowdown) answered unsigned int, expected a "
            "64-bit integer");

  hooks.Script("field_value 0 197 d 1e12");
  hooks.Script("field_value 1 82 9 40");
  const MetricSink s = node.Collect();
  ExpectThrottleTimes(s, 0, {true, true, false, true, true});
  EXPECT_FALSE(Has(s, "nodewatch_accelerator_host_link_bytes_total", host(0, "pcie", "tx")));
  EXPECT_TRUE(Has(s, "nodewatch_accelerator_host_link_bytes_total", host(0, "pcie", "rx")));
  EXPECT_FALSE(Has(s, "nodewatch_accelerator_temperature_celsius", with(1, "memory")));
  EXPECT_EQ(Value(s, "nodewatch_accelerator_temperature_celsius", with(0, "memory")), 40);
  ExpectThrottleTimes(s, 1, {true, true, true, true, true});
  EXPECT_EQ(ErrorCount(s, "nvml_field_type"), 3u);
  EXPECT_EQ(s.errors().size(), 1u);
  // The first detail per device: 197 comes before 251 in the batch.
  EXPECT_EQ(s.failures().at({"nvml_field_type", dev(0)[1]}),
            "field 197 (pcie_count_tx_bytes) answered double, expected a 64-bit integer");
  EXPECT_EQ(s.failures().at({"nvml_field_type", dev(1)[1]}),
            "field 82 (memory_temp) answered value type 9, expected a number");
}

// The fake's activity over samples a, b of device i (GPU instance gi):
// base + i + (a.seq mod 10) + gi percent.
double Fake(double base, unsigned i, unsigned older_seq, unsigned gi = 0) {
  return (base + i + older_seq % 10 + gi) / 100;
}

TEST(NvmlGenerationTest, GpmActivityIsThatOfTheLastTwoSamplesPerDeviceAndGpuInstance) {
  Node node(scenario("gpm_mig.scenario"));
  const MetricSink first = node.Collect();
  for (unsigned i = 0; i < 4; ++i)
    EXPECT_FALSE(Has(first, "nodewatch_accelerator_sm_active_ratio", dev(i))) << i;
  struct Family {
    const char* device;
    const char* instance;
    double base;
  };
  const Family families[] = {
      {"nodewatch_accelerator_graphics_active_ratio",
       "nodewatch_accelerator_gpu_instance_graphics_active_ratio", 50},
      {"nodewatch_accelerator_sm_active_ratio",
       "nodewatch_accelerator_gpu_instance_sm_active_ratio", 40},
      {"nodewatch_accelerator_sm_occupancy_ratio",
       "nodewatch_accelerator_gpu_instance_sm_occupancy_ratio", 30},
      {"nodewatch_accelerator_tensor_active_ratio",
       "nodewatch_accelerator_gpu_instance_tensor_active_ratio", 20},
      {"nodewatch_accelerator_dram_bandwidth_ratio",
       "nodewatch_accelerator_gpu_instance_dram_bandwidth_ratio", 10},
  };
  for (unsigned cycle = 2; cycle <= 4; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    std::this_thread::sleep_for(110ms);
    const MetricSink s = node.Collect();
    EXPECT_TRUE(s.errors().empty()) << s.render();
    for (const Family& f : families) {
      SCOPED_TRACE(f.device);
      // GPUs 0 and 3: the whole device, over samples cycle-1 and cycle.
      EXPECT_DOUBLE_EQ(Value(s, f.device, dev(0)), Fake(f.base, 0, cycle - 1));
      EXPECT_DOUBLE_EQ(Value(s, f.device, dev(3)), Fake(f.base, 3, cycle - 1));
      // GPU 1 has no GPM: nothing, and no error.
      EXPECT_FALSE(Has(s, f.device, dev(1)));
      // GPU 2 is in MIG mode: per GPU instance, not the whole device.
      EXPECT_FALSE(Has(s, f.device, dev(2)));
      EXPECT_DOUBLE_EQ(Value(s, f.instance, with(2, "1")), Fake(f.base, 2, cycle - 1, 1));
      EXPECT_DOUBLE_EQ(Value(s, f.instance, with(2, "5")), Fake(f.base, 2, cycle - 1, 5));
      EXPECT_FALSE(Has(s, f.instance, with(0, "0")));
    }
    // MIG: utilization is not supported on the whole device; not an error.
    EXPECT_FALSE(Has(s, "nodewatch_accelerator_utilization_ratio", dev(2)));
  }
  // Collections closer than 100 ms apart keep the older sample: the next
  // value spans both intervals (samples 4 and 6, so the older seq is 4).
  const MetricSink quick = node.Collect();
  EXPECT_FALSE(Has(quick, "nodewatch_accelerator_sm_active_ratio", dev(0)));
  std::this_thread::sleep_for(110ms);
  const MetricSink later = node.Collect();
  EXPECT_DOUBLE_EQ(Value(later, "nodewatch_accelerator_sm_active_ratio", dev(0)), Fake(40, 0, 4));

  // Samples are freed with the service: none left in the library.
  nodewatch::testing::FakeNvmlHooks hooks(FAKE_NVML_LIBRARY);
  EXPECT_GT(hooks.GpmSamples(), 0);
  node.Destroy();
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (hooks.GpmSamples() != 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(hooks.GpmSamples(), 0);
}

TEST(NvmlGenerationTest, GpmRatiosAreClampedPercentages) {
  EXPECT_DOUBLE_EQ(*gpm_ratio(42.5), 0.425);
  EXPECT_DOUBLE_EQ(*gpm_ratio(100.4), 1.0);
  EXPECT_DOUBLE_EQ(*gpm_ratio(-0.1), 0.0);
  EXPECT_FALSE(gpm_ratio(std::nan("")).has_value());
  EXPECT_FALSE(gpm_ratio(INFINITY).has_value());
}

void ExpectOneOf(const MetricSink& s, const char* family, unsigned i,
                 const std::vector<std::string>& values, const std::string& on) {
  for (const std::string& v : values)
    EXPECT_EQ(Value(s, family, with(i, v)), v == on ? 1 : 0) << family << " " << v;
}

TEST(NvmlGenerationTest, RecoveryActionAndFabricStateAsTheDriverSaysThem) {
  Node node(scenario("recovery_fabric.scenario"));
  const MetricSink s = node.Collect();
  EXPECT_TRUE(s.errors().empty()) << s.render();
  const std::vector<std::string> actions = {"none",      "gpu_reset",       "node_reboot",
                                            "drain_p2p", "drain_and_reset", "recover_imex_domain"};
  ExpectOneOf(s, "nodewatch_accelerator_recovery_action", 0, actions, "none");
  ExpectOneOf(s, "nodewatch_accelerator_recovery_action", 1, actions, "gpu_reset");
  ExpectOneOf(s, "nodewatch_accelerator_recovery_action", 2, actions, "node_reboot");
  ExpectOneOf(s, "nodewatch_accelerator_recovery_action", 3, actions, "drain_and_reset");
  // A value this nodewatch does not know: every known action 0, "unknown" 1.
  ExpectOneOf(s, "nodewatch_accelerator_recovery_action", 4, actions, "");
  EXPECT_EQ(Value(s, "nodewatch_accelerator_recovery_action", with(4, "unknown")), 1);
  EXPECT_FALSE(Has(s, "nodewatch_accelerator_recovery_action", with(0, "unknown")));

  const std::vector<std::string> states = {"not_supported", "not_started", "in_progress",
                                           "completed"};
  const char* kState = "nodewatch_accelerator_fabric_state";
  const char* kHealthy = "nodewatch_accelerator_fabric_healthy";
  const std::string cluster = "a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf";
  ExpectOneOf(s, kState, 0, states, "completed");
  EXPECT_EQ(Value(s, kHealthy, dev(0)), 1);
  EXPECT_EQ(Value(s, "nodewatch_accelerator_fabric_info", {"0", dev(0)[1], "7", cluster}), 1);
  ExpectOneOf(s, kState, 1, states, "completed");
  EXPECT_EQ(Value(s, kHealthy, dev(1)), 0);  // bandwidth degraded
  ExpectOneOf(s, kState, 2, states, "in_progress");
  EXPECT_EQ(Value(s, kHealthy, dev(2)), 0);
  EXPECT_FALSE(Has(s, "nodewatch_accelerator_fabric_info", {"2", dev(2)[1], "7", cluster}));
  EXPECT_EQ(Value(s, kHealthy, dev(3)), 0);  // completed with an error status
  EXPECT_EQ(Value(s, kHealthy, dev(4)), 0);  // summary: limited capacity
  ExpectOneOf(s, kState, 5, states, "not_supported");
  EXPECT_FALSE(Has(s, kHealthy, dev(5)));
  EXPECT_EQ(Value(s, kHealthy, dev(6)), 1);  // every health field says FALSE
  EXPECT_EQ(Value(s, "nodewatch_accelerator_fabric_info", {"6", dev(6)[1], "32766", cluster}), 1);
  for (const std::string& st : states) EXPECT_FALSE(Has(s, kState, with(7, st))) << st;
  EXPECT_FALSE(Has(s, kHealthy, dev(7)));

  // The summary (v3, R580 here) and the faults the mask reports on.
  const char* kSummary = "nodewatch_accelerator_fabric_health_summary";
  const char* kFault = "nodewatch_accelerator_fabric_fault";
  const std::vector<std::string> summaries = {"healthy", "unhealthy", "limited_capacity"};
  ExpectOneOf(s, kSummary, 4, summaries, "limited_capacity");
  EXPECT_FALSE(Has(s, kSummary, with(0, "healthy"))) << "summary 0: not supported, not exported";
  EXPECT_FALSE(Has(s, kFault, with(0, "degraded_bandwidth"))) << "a mask of 'not supported'";
  EXPECT_EQ(Value(s, kFault, with(1, "degraded_bandwidth")), 1);
  EXPECT_FALSE(Has(s, kFault, with(1, "route_recovery")));
  const std::vector<std::string> faults = {"degraded_bandwidth",
                                           "route_recovery",
                                           "route_unhealthy",
                                           "access_timeout_recovery",
                                           "incorrect_sysguid",
                                           "incorrect_chassis_serial",
                                           "no_partition",
                                           "insufficient_nvlinks",
                                           "incompatible_gpu_firmware",
                                           "invalid_location",
                                           "gpu_state_invalid"};
  for (const std::string& f : faults) EXPECT_EQ(Value(s, kFault, with(6, f)), 0) << f;
}

// Repairs pending a reset (R580 on) and unrepairable memory (R590 on), as
// the driver says them; an older driver is not asked what it lacks.
TEST(NvmlGenerationTest, RepairStatusAndUnrepairableMemoryByDriver) {
  const std::string file = ::testing::TempDir() + "repair.scenario";
  auto write = [&](const char* text) {
    std::FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(text, f);
    std::fclose(f);
  };
  const char* kRepair = "nodewatch_accelerator_repair_pending";
  const char* kUnrepairable = "nodewatch_accelerator_memory_unrepairable";
  write(
      "devices 3\ndriver 590.44.01\nrepair_pending 1 channel\nrepair_pending 2 tpc\n"
      "unrepairable 2\n");
  {
    Node node(file);
    const MetricSink s = node.Collect();
    EXPECT_TRUE(s.errors().empty()) << s.render();
    EXPECT_EQ(Value(s, kRepair, with(0, "channel")), 0);
    EXPECT_EQ(Value(s, kRepair, with(0, "tpc")), 0);
    EXPECT_EQ(Value(s, kRepair, with(1, "channel")), 1);
    EXPECT_EQ(Value(s, kRepair, with(1, "tpc")), 0);
    EXPECT_EQ(Value(s, kRepair, with(2, "tpc")), 1);
    EXPECT_EQ(Value(s, kUnrepairable, dev(0)), 0);
    EXPECT_EQ(Value(s, kUnrepairable, dev(2)), 1);
  }
  write("devices 1\ndriver 580.65.06\nunrepairable 0\n");
  {
    Node node(file);
    const MetricSink s = node.Collect();
    EXPECT_TRUE(s.errors().empty()) << s.render();
    EXPECT_EQ(Value(s, kRepair, with(0, "channel")), 0);
    EXPECT_FALSE(Has(s, kUnrepairable, dev(0))) << "R580 has no unrepairable-memory flag";
  }
  write("devices 1\ndriver 570.124.06\n");
  {
    Node node(file);
    const MetricSink s = node.Collect();
    EXPECT_TRUE(s.errors().empty()) << s.render();
    EXPECT_FALSE(Has(s, kRepair, with(0, "channel")));
  }
}

// R570 knows only the v2 fabric struct (no health summary): asked v3, it
// answers ARGUMENT_VERSION_MISMATCH, and v2 is used from then on.
TEST(NvmlGenerationTest, FabricFallsBackToTheV2StructOnAnOlderDriver) {
  const std::string file = ::testing::TempDir() + "fabric_r570.scenario";
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("devices 2\ndriver 570.124.06\nfabric 0 3 summary 3\nfabric 1 3 health 4\n", f);
    std::fclose(f);
  }
  Node node(file);
  for (int cycle = 0; cycle < 2; ++cycle) {
    const MetricSink s = node.Collect();
    EXPECT_TRUE(s.errors().empty()) << s.render();
    // The summary is not in v2: GPU 0 is healthy by its (empty) mask.
    EXPECT_EQ(Value(s, "nodewatch_accelerator_fabric_healthy", dev(0)), 1);
    // ROUTE_RECOVERY TRUE (1 << 2).
    EXPECT_EQ(Value(s, "nodewatch_accelerator_fabric_healthy", dev(1)), 0);
  }
  nodewatch::testing::FakeNvmlHooks hooks(FAKE_NVML_LIBRARY);
  // One mismatch per device, then v2 only: 3 calls per device in 2 cycles.
  EXPECT_EQ(hooks.Calls("nvmlDeviceGetGpuFabricInfoV", 0), 3u);
}

TEST(NvmlGenerationTest, FabricHealthReadsEveryFieldOfTheMask) {
  nvml::GpuFabricInfoV3 info{};
  info.state = nvml::kFabricStateCompleted;
  info.status = nvml::kSuccess;
  EXPECT_TRUE(fabric_sample(info, true).healthy);
  for (unsigned shift : {0u, 2u, 4u, 6u}) {
    info.health_mask = 1u << shift;  // TRUE
    EXPECT_FALSE(fabric_sample(info, true).healthy) << shift;
    info.health_mask = 2u << shift;  // FALSE
    EXPECT_TRUE(fabric_sample(info, true).healthy) << shift;
  }
  info.health_mask = 1u << 8;  // incorrect configuration: none
  EXPECT_TRUE(fabric_sample(info, true).healthy);
  const char* kConfig[] = {"incorrect_sysguid",    "incorrect_chassis_serial",  "no_partition",
                           "insufficient_nvlinks", "incompatible_gpu_firmware", "invalid_location",
                           "gpu_state_invalid"};
  for (unsigned c = 2; c <= 8; ++c) {
    info.health_mask = c << 8;
    const FabricSample f = fabric_sample(info, true);
    EXPECT_FALSE(f.healthy) << c;
    // Exactly this one of the configuration faults is present.
    for (unsigned k = 0; k < 7; ++k) EXPECT_EQ(f.faults.at(kConfig[k]), k + 2 == c) << c;
    EXPECT_FALSE(f.faults.contains("degraded_bandwidth")) << "not reported on";
  }
  info.health_mask = 12u << 8;  // a configuration value newer than 13.3
  EXPECT_TRUE(fabric_sample(info, true).faults.at("incorrect_configuration"));
  EXPECT_FALSE(fabric_sample(info, true).healthy);
  info.health_mask = (1u << 4) | (2u << 6);  // route unhealthy; access timeout FALSE
  EXPECT_TRUE(fabric_sample(info, true).faults.at("route_unhealthy"));
  EXPECT_FALSE(fabric_sample(info, true).faults.at("access_timeout_recovery"));
  info.health_mask = 0;
  info.health_summary = 7;  // newer than 13.3
  EXPECT_EQ(fabric_sample(info, true).summary, "unknown");
  EXPECT_FALSE(fabric_sample(info, true).healthy);
  info.health_mask = 0;
  info.health_summary = 2;  // unhealthy
  EXPECT_FALSE(fabric_sample(info, true).healthy);
  EXPECT_TRUE(fabric_sample(info, false).healthy);  // v2: no summary to read
  info.health_summary = 0;
  info.state = nvml::kFabricStateInProgress;
  const FabricSample f = fabric_sample(info, true);
  EXPECT_FALSE(f.healthy);
  EXPECT_TRUE(f.clique_id.empty());
}

}  // namespace
}  // namespace nodewatch::accelerator
