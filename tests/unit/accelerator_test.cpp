// The accelerator collector over scripted backends: how device samples
// become series (the vendor backends have tests of their own).

#include "accelerator/accelerator_collector.hpp"
#include "interconnect/interconnect_collector.hpp"

#include <gtest/gtest.h>

#include <toml++/toml.h>

#include "config.hpp"
#include "support/collector_test.hpp"

namespace nodewatch::accelerator {
namespace {

using nodewatch::testing::CollectOnce;
using nodewatch::testing::Value;

class ScriptedBackend : public Backend {
 public:
  std::string_view name() const override { return "scripted"; }
  std::vector<DeviceSample> sample(const CollectContext&) override {
    if (throw_) throw CollectError("library_error", "libfake.so: missing symbol nvmlInit_v2");
    return devices_;
  }
  DriverState driver_state() override { return driver_; }
  std::vector<DeviceSample> devices_;
  DriverState driver_;  // not known: nothing said
  bool throw_ = false;
};

DeviceSample FullDevice() {
  DeviceSample d;
  d.index = 3;
  d.uuid = "GPU-8f6e1a2b-0000-0000-0000-000000000003";
  d.vendor = "nvidia";
  d.model = "NVIDIA H100 80GB HBM3";
  d.pci_bus_id = "0000:5d:00.0";
  d.driver_version = "550.54.15";
  d.serial = "1654123456789";
  d.vbios = "96.00.74.00.0b";
  d.utilization_ratio = 0.87;
  d.memory_utilization_ratio = 0.42;
  d.memory_used_bytes = 64.0 * (1ULL << 30);
  d.memory_total_bytes = 80.0 * (1ULL << 30);
  d.temperature_celsius = {{"gpu", 61}, {"memory", 70}};
  d.temperature_slowdown_celsius = 87;
  d.power_watts = 612.5;
  d.power_limit_watts = 700;
  d.energy_joules = 123456.789;
  d.clock_hertz = {{"sm", 1.98e9}, {"memory", 2.619e9}};
  d.clock_throttle_active = {{"sw_power_cap", true}, {"hw_thermal", false}};
  d.clock_throttle_seconds = {{"sw_power_cap", 12.5}};
  d.ecc_corrected = 4;
  d.ecc_uncorrected = 0;
  d.remapped_rows_correctable = 2;
  d.remapped_rows_uncorrectable = 1;
  d.row_remap_pending = true;
  d.row_remap_failed = false;
  d.xid_errors = {{79, 2}, {48, 1}};
  d.host_links["pcie"].tx_bytes = 1e12;
  d.host_links["pcie"].rx_bytes = 2e12;
  d.host_links["pcie"].capacity_bytes_per_second = 63e9;
  d.host_links["c2c"].tx_bytes = 3e12;
  d.host_links["c2c"].rx_bytes = 4e12;
  d.host_links["c2c"].capacity_bytes_per_second = 450e9;
  d.pcie_replays = 7;
  d.c2c_link_active = {{0, true}, {1, false}};
  d.c2c_link_errors = {{0, 3}};
  d.c2c_link_b2b_replays = {{0, 1}};
  d.c2c_link_low_power = {{1, true}};
  d.c2c_link_bytes = {{0, {5e11, 6e11}}};
  return d;
}

TEST(AcceleratorTest, TableIsWellFormed) {
  nodewatch::testing::ExpectWellFormedTable(accelerator_metric_table(), "nodewatch_accelerator_");
}

TEST(AcceleratorTest, EveryFieldBecomesItsSeries) {
  auto backend = std::make_unique<ScriptedBackend>();
  backend->devices_.push_back(FullDevice());
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::move(backend));
  AcceleratorCollector c(std::move(backends));
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  const std::string a = "3", u = "GPU-8f6e1a2b-0000-0000-0000-000000000003";
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_info",
                  {a, u, "nvidia", "NVIDIA H100 80GB HBM3", "0000:5d:00.0", "550.54.15",
                   "1654123456789", "96.00.74.00.0b"}),
            1);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_up", {a, u}), 1);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_utilization_ratio", {a, u}), 0.87);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_memory_used_bytes", {a, u}), 68719476736.0);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_temperature_celsius", {a, u, "memory"}), 70);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_temperature_slowdown_celsius", {a, u}), 87);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_power_watts", {a, u}), 612.5);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_energy_joules_total", {a, u}), 123456.789);
  EXPECT_DOUBLE_EQ(Value(sink, "nodewatch_accelerator_clock_hertz", {a, u, "sm"}), 1.98e9);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_clock_throttle_active", {a, u, "sw_power_cap"}), 1);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_clock_throttle_active", {a, u, "hw_thermal"}), 0);
  EXPECT_DOUBLE_EQ(
      Value(sink, "nodewatch_accelerator_clock_throttle_seconds_total", {a, u, "sw_power_cap"}),
      12.5);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_ecc_errors_total", {a, u, "corrected"}), 4);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_ecc_errors_total", {a, u, "uncorrected"}), 0);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_remapped_rows", {a, u, "uncorrectable"}), 1);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_row_remap_pending", {a, u}), 1);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_row_remap_failed", {a, u}), 0);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_xid_errors_total", {a, u, "79"}), 2);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_host_link_bytes_total", {a, u, "pcie", "rx"}), 2e12);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_host_link_bytes_total", {a, u, "c2c", "tx"}), 3e12);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_host_link_capacity_bytes_per_second", {a, u, "c2c"}),
            450e9);
  EXPECT_EQ(
      Value(sink, "nodewatch_accelerator_host_link_capacity_bytes_per_second", {a, u, "pcie"}),
      63e9);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_pcie_replays_total", {a, u}), 7);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_c2c_link_active", {a, u, "1"}), 0);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_c2c_link_errors_total", {a, u, "0"}), 3);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_c2c_link_b2b_replays_total", {a, u, "0"}), 1);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_c2c_link_low_power", {a, u, "1"}), 1);
  double unused;
  // The sampled throughput appears only when there is no byte counter.
  EXPECT_FALSE(sink.get("nodewatch_accelerator_host_link_throughput_bytes_per_second",
                        {a, u, "pcie", "tx"}, &unused));
  // Per-link C2C bytes only when the collector is asked for them.
  EXPECT_FALSE(sink.get("nodewatch_accelerator_c2c_link_bytes_total", {a, u, "0", "tx"}, &unused));
  auto asked = std::make_unique<ScriptedBackend>();
  asked->devices_.push_back(FullDevice());
  std::vector<std::unique_ptr<Backend>> with_links;
  with_links.push_back(std::move(asked));
  AcceleratorCollector per_link(std::move(with_links), JobSources{}, /*c2c_link_bytes=*/true);
  MetricSink links(per_link.metrics());
  CollectOnce(per_link, links);
  EXPECT_EQ(Value(links, "nodewatch_accelerator_c2c_link_bytes_total", {a, u, "0", "tx"}), 5e11);
  EXPECT_EQ(Value(links, "nodewatch_accelerator_c2c_link_bytes_total", {a, u, "0", "rx"}), 6e11);
}

TEST(AcceleratorTest, ALostDeviceHasInfoAndUpZeroOnlyAndItsReasonIsCounted) {
  auto backend = std::make_unique<ScriptedBackend>();
  DeviceSample lost;
  lost.index = 1;
  lost.uuid = "GPU-1";
  lost.vendor = "nvidia";
  lost.up = false;
  lost.errors = {"gpu_lost"};
  backend->devices_.push_back(lost);
  backend->devices_.push_back(FullDevice());
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::move(backend));
  AcceleratorCollector c(std::move(backends));
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(Value(sink, "nodewatch_accelerator_up", {"1", "GPU-1"}), 0);
  double unused;
  EXPECT_FALSE(sink.get("nodewatch_accelerator_utilization_ratio", {"1", "GPU-1"}, &unused));
  EXPECT_EQ(sink.errors().at("gpu_lost"), 1u);
  // The healthy device is complete.
  EXPECT_EQ(
      Value(sink, "nodewatch_accelerator_up", {"3", "GPU-8f6e1a2b-0000-0000-0000-000000000003"}),
      1);
}

TEST(AcceleratorTest, NoDevicesIsNotAnError) {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::make_unique<ScriptedBackend>());
  AcceleratorCollector c(std::move(backends));
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(sink.sample_count(), 0u);
  EXPECT_TRUE(sink.errors().empty());
}

TEST(AcceleratorTest, ABrokenBackendFailsTheCollection) {
  auto backend = std::make_unique<ScriptedBackend>();
  backend->throw_ = true;
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::move(backend));
  AcceleratorCollector c(std::move(backends));
  MetricSink sink(c.metrics());
  CollectContext ctx{std::chrono::steady_clock::now() + std::chrono::seconds(1), nullptr};
  try {
    c.collect(ctx, sink);
    FAIL() << "expected CollectError";
  } catch (const CollectError& e) {
    EXPECT_EQ(e.reason(), "library_error");
    EXPECT_NE(std::string(e.what()).find("missing symbol"), std::string::npos);
  }
}

TEST(AcceleratorTest, ABrokenBackendDoesNotHideAnotherBackendsDevices) {
  auto broken = std::make_unique<ScriptedBackend>();
  broken->throw_ = true;
  auto working = std::make_unique<ScriptedBackend>();
  working->devices_.push_back(FullDevice());
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::move(broken));
  backends.push_back(std::move(working));
  AcceleratorCollector c(std::move(backends));
  MetricSink sink(c.metrics());
  CollectOnce(c, sink);
  EXPECT_EQ(
      Value(sink, "nodewatch_accelerator_up", {"3", "GPU-8f6e1a2b-0000-0000-0000-000000000003"}),
      1);
  EXPECT_EQ(sink.errors().at("library_error"), 1u);
}

// The library moved to [nvml]: the old key is refused with a message that
// names the new one, for both collectors that used to have it.
TEST(AcceleratorTest, OldNvmlLibraryKeysAreRefusedWithTheNewPlace) {
  std::vector<CollectorSpec> catalog = {accelerator_collector_spec(),
                                        interconnect_collector_spec()};
  ConfigResult r = parse_config(
      "[collectors.accelerator]\nnvml_library = \"/x.so\"\n"
      "[collectors.interconnect]\nnvml_library = \"/x.so\"\n",
      "x.toml", catalog);
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.errors[0].key, "collectors.accelerator.nvml_library");
  EXPECT_EQ(r.errors[1].key, "collectors.interconnect.nvml_library");
  for (const auto& e : r.errors) {
    EXPECT_NE(e.message.find("[nvml]"), std::string::npos) << e.str();
    EXPECT_EQ(e.line, e.key.find("accelerator") != std::string::npos ? 2 : 4) << e.str();
  }
  ConfigResult ok = parse_config("[nvml]\nlibrary = \"/x.so\"\n", "x.toml", catalog);
  ASSERT_TRUE(ok.config);
  EXPECT_EQ(ok.config->shared.nvml_library, "/x.so");
  ConfigResult empty = parse_config("[nvml]\nlibrary = \"\"\n", "x.toml", catalog);
  ASSERT_EQ(empty.errors.size(), 1u);
  EXPECT_EQ(empty.errors[0].key, "nvml.library");
  ConfigResult unknown = parse_config("[nvml]\nlibary = \"/x.so\"\n", "x.toml", catalog);
  ASSERT_EQ(unknown.errors.size(), 1u);
  EXPECT_EQ(unknown.errors[0].key, "nvml.libary");
}

}  // namespace
}  // namespace nodewatch::accelerator
