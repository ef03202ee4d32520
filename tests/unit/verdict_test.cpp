// The node verdict's parts on their own: the exposition parser it reads
// snapshots with, the [expect] file (its errors, its round trip through
// --learn-expected), each rule of the verdict, the windowed XIDs, the
// bounded series, and the worker that evaluates after each publish.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <toml++/toml.h>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "app.hpp"
#include "config.hpp"
#include "expect.hpp"
#include "node_health.hpp"
#include "samples.hpp"
#include "self_metrics.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/manual_clock.hpp"
#include "support/paths.hpp"
#include "verdict.hpp"
#include "worker_pool.hpp"

namespace nodewatch {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

// --- the families the verdict and the expect file read ----------------------

// Every family the verdict or --learn-expected reads is one that nodewatchd
// declares: a collector's, or the daemon's own. A family renamed in its
// collector and not here would otherwise read as no samples, and the
// verdict as healthy; the verdict's own tests feed hand-written text and
// cannot see it.
TEST(VerdictFamilies, EveryFamilyReadIsDeclaredByACollectorOrTheDaemon) {
  std::map<std::string, std::string> declared;  // name -> who declares it
  auto take = [&](const MetricTable& t, std::string_view who) {
    for (const MetricDesc& d : t.descs()) declared.emplace(d.name, who);
  };
  take(SelfMetrics::table(), "daemon");
  take(SelfMetrics::process_table(), "daemon");
  // nodewatch_version_info: the verdict's own, read back from a running
  // daemon's /metrics by --learn-expected.
  take(VerdictEngine::metric_table(), "daemon");
  for (const CollectorSpec& spec : builtin_collectors()) {
    ASSERT_TRUE(spec.metrics) << spec.name;
    take(spec.metrics(), spec.name);
  }
  for (const FamilySet* set : {&VerdictEngine::families(), &learn_families()})
    for (const std::string& name : *set)
      EXPECT_TRUE(declared.count(name)) << name << " is read but no collector declares it";
}

// --- samples ---------------------------------------------------------------

TEST(Samples, KeepsTheWantedFamiliesWithUnescapedLabels) {
  FamilySet wanted = {"a_b", "c"};
  Samples s(&wanted);
  std::size_t bad = s.add(
      "# HELP a_b x\n# TYPE a_b gauge\na_b{x=\"1\",y=\"q\\\"uo\\\\te\\nz\"} 2.5\n"
      "a_bc{x=\"1\"} 9\nother 1\nc 3 1700000000000\nc{x=\"inf\"} +Inf\n");
  EXPECT_EQ(bad, 0u);
  ASSERT_EQ(s.of("a_b").size(), 1u);
  EXPECT_EQ(s.of("a_b")[0].label("y"), "q\"uo\\te\nz");
  EXPECT_EQ(s.of("a_b")[0].value, 2.5);
  EXPECT_EQ(s.of("a_b")[0].label("absent"), "");
  EXPECT_FALSE(s.has("a_bc"));  // a longer name is another family
  EXPECT_FALSE(s.has("other"));
  ASSERT_EQ(s.of("c").size(), 2u);
  EXPECT_EQ(s.of("c")[0].value, 3);  // the timestamp is not the value
  EXPECT_TRUE(std::isinf(s.of("c")[1].value));
}

TEST(Samples, CountsMalformedLinesOfWantedFamiliesAndGoesOn) {
  FamilySet wanted = {"m"};
  Samples s(&wanted);
  EXPECT_EQ(s.add("m{x=\"unterminated} 1\nm{x=1} 2\nm 1x\nm\nm{x=\"ok\"} 4\n"), 4u);
  ASSERT_EQ(s.of("m").size(), 1u);
  EXPECT_EQ(s.of("m")[0].value, 4);
}

// --- [expect] --------------------------------------------------------------

Expectations Parse(const std::string& text, std::vector<ConfigError>* errors) {
  return parse_expect_file(text, "expect.toml", errors);
}

std::string Errors(const std::vector<ConfigError>& errors) {
  std::string out;
  for (const auto& e : errors) out += e.str() + "\n";
  return out;
}

TEST(Expect, ReadsEverySection) {
  std::vector<ConfigError> errors;
  Expectations e = Parse(R"([expect.accelerator]
models = { "H100" = 6, "H200" = 2 }
nvlinks_active = 18
[[expect.pcie]]
device = "0000:1a:00.0"
width = 16
speed = "32GT/s"
[[expect.fabric]]
device = "mlx5_0"
port = 1
rate = "400Gb/s"
[[expect.nic]]
interface = "ens1f0np0"
speed = "100 Gb/s"
[expect.storage]
probes = ["/data"]
nfs_mounts = ["/home"]
[expect.thresholds.NodewatchKernelXidHardware]
window = "15m"
[expect.thresholds.NodewatchAcceleratorThermalMarginLow]
celsius = 5
)",
                         &errors);
  ASSERT_TRUE(errors.empty()) << Errors(errors);
  EXPECT_EQ(e.accelerator_count, 8);  // the models add up
  EXPECT_EQ(e.accelerator_models.at("H200"), 2);
  EXPECT_EQ(e.nvlinks_active, 18);
  ASSERT_EQ(e.pcie.size(), 1u);
  EXPECT_EQ(e.pcie[0].width, 16);
  EXPECT_EQ(e.pcie[0].speed, 32e9);
  ASSERT_EQ(e.ports.size(), 1u);
  EXPECT_EQ(e.ports[0].rate, 50e9);
  EXPECT_EQ(e.ports[0].component(), "mlx5_0/1");
  EXPECT_EQ(e.nics[0].speed, 12.5e9);
  EXPECT_EQ(e.probes, std::vector<std::string>{"/data"});
  EXPECT_EQ(e.threshold("NodewatchKernelXidHardware.window"), 900);
  EXPECT_EQ(e.threshold("NodewatchAcceleratorThermalMarginLow.celsius"), 5);
}

TEST(Expect, ThresholdsDefaultToTheAlertsFile) {
  // alerts/thresholds.toml is built in: its values are the defaults.
  Expectations e;
  EXPECT_EQ(e.threshold("NodewatchKernelXidHardware.window"), 300);  // "5m"
  EXPECT_EQ(e.threshold("NodewatchAcceleratorThermalMarginLow.celsius"), 3);
  EXPECT_GT(threshold_defaults().size(), 50u);
  EXPECT_TRUE(threshold_defaults().at("NodewatchKernelXidHardware.window").duration);
  EXPECT_THROW(e.threshold("NoSuchAlert.x"), std::out_of_range);
}

TEST(Expect, NamesEachMistakeWithItsLine) {
  std::vector<ConfigError> errors;
  Parse(R"([expect.accelerator]
count = 8
models = { "H100" = 7 }
[[expect.pcie]]
device = "1a:00.0"
width = 16
[[expect.pcie]]
device = "0000:1a:00.0"
[[expect.fabric]]
device = "mlx5_0"
rate = "fast"
[[expect.fabric]]
device = "mlx5_0"
port = 1
[[expect.nic]]
interface = "a/b"
[expect.storage]
probes = ["relative"]
[expect.thresholds.NoSuchAlert]
x = 1
[expect.thresholds.NodewatchKernelXidHardware]
window = 5
typo = 1
[expect.colour]
)",
        &errors);
  std::string all = Errors(errors);
  for (const char* want :
       {"expect.toml:3:10: expect.accelerator.models: the models add up to 7, count is 8",
        "expect.pcie[0].device: \"1a:00.0\" is not a PCI address",
        "expect.pcie[1].device: needs width, speed or both",
        "expect.fabric[0].rate: \"fast\" is not a rate",
        "expect.fabric[1].device: port mlx5_0/1 is listed twice",
        "expect.nic[0].interface: \"a/b\" is not an interface name",
        "expect.storage.probes: \"relative\" is not absolute",
        "expect.thresholds.NoSuchAlert: unknown key",
        "expect.thresholds.NodewatchKernelXidHardware.window: expected a duration",
        "expect.thresholds.NodewatchKernelXidHardware.typo: unknown key",
        "expect.colour: unknown key"})
    EXPECT_THAT(all, HasSubstr(want));
}

TEST(Expect, TheFileMustBeARegularFileAndAlone) {
  testing::TempDir dir;
  auto cfg = [&](const std::string& text) {
    auto p = dir.write("nodewatch.toml", text);
    return load_config(p.string(), true, {});
  };
  dir.write("model.toml", "[expect.accelerator]\ncount = 4\n");
  ConfigResult ok = cfg("[expect]\nfile = \"model.toml\"\n");  // relative to the configuration
  ASSERT_TRUE(ok.config) << Errors(ok.errors);
  EXPECT_EQ(ok.config->expect.accelerator_count, 4);
  EXPECT_EQ(ok.config->expect.file, (dir.path() / "model.toml").string());

  ConfigResult both = cfg("[expect]\nfile = \"model.toml\"\n[expect.accelerator]\ncount = 2\n");
  EXPECT_THAT(Errors(both.errors), HasSubstr("expect.accelerator: with expect.file set"));
  ConfigResult missing = cfg("[expect]\nfile = \"nope.toml\"\n");
  EXPECT_THAT(Errors(missing.errors), HasSubstr("expect.file: cannot read"));
  ConfigResult directory = cfg("[expect]\nfile = \"/\"\n");
  EXPECT_THAT(Errors(directory.errors), HasSubstr("is not a regular file"));
  ASSERT_EQ(::mkfifo((dir.path() / "fifo").c_str(), 0644), 0);
  ConfigResult fifo = cfg("[expect]\nfile = \"fifo\"\n");  // never opened: it would block
  EXPECT_THAT(Errors(fifo.errors), HasSubstr("is not a regular file"));
  dir.write("nested.toml", "[expect]\nfile = \"model.toml\"\n");
  ConfigResult nested = cfg("[expect]\nfile = \"nested.toml\"\n");
  EXPECT_THAT(Errors(nested.errors), HasSubstr("an expect file cannot name another"));
  dir.write("broken.toml", "[expect.accelerator]\ncount = \n");
  ConfigResult broken = cfg("[expect]\nfile = \"broken.toml\"\n");
  ASSERT_FALSE(broken.errors.empty());
  EXPECT_EQ(broken.errors[0].file, (dir.path() / "broken.toml").string());
  EXPECT_EQ(broken.errors[0].line, 2);
}

// A node as its collectors would export it.
const char* kNodeText =
    R"(nodewatch_accelerator_info{accelerator="0",uuid="GPU-a",vendor="nvidia",model="H100 \"SXM\"",pci_bus_id="0000:1a:00.0"} 1
nodewatch_accelerator_info{accelerator="1",uuid="GPU-b",vendor="nvidia",model="H100 \"SXM\"",pci_bus_id="0000:2a:00.0"} 1
nodewatch_accelerator_nvlink_links_active{accelerator="0",uuid="GPU-a"} 18
nodewatch_accelerator_nvlink_links_active{accelerator="1",uuid="GPU-b"} 18
nodewatch_pcie_device_info{device="0000:1a:00.0",kind="accelerator"} 1
nodewatch_pcie_device_info{device="0000:17:00.0",kind="bridge"} 1
nodewatch_pcie_device_info{device="0000:3b:00.0",kind="network"} 1
nodewatch_pcie_link_width{device="0000:1a:00.0"} 16
nodewatch_pcie_link_speed_transfers_per_second{device="0000:1a:00.0"} 2500000000
nodewatch_pcie_link_width{device="0000:17:00.0"} 16
nodewatch_pcie_link_width{device="0000:3b:00.0"} 16
nodewatch_pcie_link_speed_transfers_per_second{device="0000:3b:00.0"} 32000000000
nodewatch_interconnect_port_state{device="mlx5_0",port="1"} 4
nodewatch_interconnect_port_rate_bytes_per_second{device="mlx5_0",port="1"} 50000000000
nodewatch_interconnect_port_state{device="mlx5_1",port="1"} 1
nodewatch_nic_info{interface="ens1",driver="mlx5_core",firmware="",bus_info="0000:3b:00.0",mac="",operstate="up"} 1
nodewatch_nic_up{interface="ens1"} 1
nodewatch_nic_speed_bytes_per_second{interface="ens1"} 12500000000
nodewatch_nic_info{interface="veth0",driver="veth",firmware="",bus_info="",mac="",operstate="up"} 1
nodewatch_nic_up{interface="veth0"} 1
nodewatch_storage_probe_stuck{path="/data"} 0
nodewatch_storage_probe_success{path="/data",operation="read"} 1
nodewatch_storage_probe_stuck{path="/bad"} 0
nodewatch_storage_probe_success{path="/bad",operation="write"} 0
nodewatch_storage_nfs_mount_info{mountpoint="/home",export="e",server="s",protocol="tcp",version="4.2"} 1
)";

Samples NodeSamples(const std::string& text, const FamilySet& families) {
  Samples s(&families);
  EXPECT_EQ(s.add(text), 0u);
  return s;
}

TEST(Expect, LearnsWhatAKnownGoodNodeHasAndReadsItBack) {
  Learned l = learn_expectations(NodeSamples(kNodeText, learn_families()));
  const Expectations& e = l.expect;
  EXPECT_EQ(e.accelerator_count, 2);
  EXPECT_EQ(e.accelerator_models.at("H100 \"SXM\""), 2);
  EXPECT_EQ(e.nvlinks_active, 18);
  // Accelerators and NICs, not bridges; no speed for a GPU (idle downshift).
  ASSERT_EQ(e.pcie.size(), 2u);
  EXPECT_EQ(e.pcie[0].device, "0000:1a:00.0");
  EXPECT_FALSE(e.pcie[0].speed);
  EXPECT_EQ(e.pcie[1].speed, 32e9);
  ASSERT_EQ(e.ports.size(), 1u);  // the down port is not expected
  EXPECT_EQ(e.ports[0].rate, 50e9);
  ASSERT_EQ(e.nics.size(), 1u);                            // the veth is not hardware
  EXPECT_EQ(e.probes, std::vector<std::string>{"/data"});  // /bad fails: not expected
  EXPECT_EQ(e.nfs_mounts, std::vector<std::string>{"/home"});
  std::string notes;
  for (const auto& n : l.notes) notes += n + "\n";
  EXPECT_THAT(notes, HasSubstr("mlx5_1/1 is not active"));
  EXPECT_THAT(notes, HasSubstr("storage probe /bad does not answer"));

  std::string text = expectations_toml(e, l.notes, {"learned on test"});
  std::vector<ConfigError> errors;
  Expectations back = Parse(text, &errors);
  ASSERT_TRUE(errors.empty()) << Errors(errors) << text;
  EXPECT_EQ(back, e) << text;
  EXPECT_THAT(text, HasSubstr("rate = \"400Gb/s\""));
  EXPECT_THAT(text, HasSubstr("# note: fabric port mlx5_1/1 is not active"));
}

TEST(Expect, RatesReadAndWrittenInTheirUnits) {
  EXPECT_EQ(parse_transfer_rate("2.5GT/s"), 2.5e9);
  EXPECT_EQ(parse_bit_rate("200 Gb/s"), 25e9);
  EXPECT_EQ(parse_bit_rate("100Mb/s"), 12.5e6);
  for (const char* bad : {"", "GT/s", "32", "32 gt/s", "-1Gb/s", "0Gb/s", "1e3Gb/s"})
    EXPECT_FALSE(parse_bit_rate(bad) || parse_transfer_rate(bad)) << bad;
  EXPECT_EQ(format_transfer_rate(16e9), "16GT/s");
  EXPECT_EQ(format_bit_rate(312500000), "2.5Gb/s");
  EXPECT_EQ(format_bit_rate(12.5e6), "100Mb/s");
}

// --- the verdict ---------------------------------------------------------------

std::vector<CollectorState> AllUp() {
  std::vector<CollectorState> c;
  for (const char* n : {"accelerator", "pcie", "interconnect", "nic", "storage", "kernel", "bmc"})
    c.push_back(CollectorState{n, true, true, ""});
  return c;
}

Verdict Evaluate(VerdictEngine& engine, const std::string& text,
                 const std::vector<CollectorState>& collectors = AllUp(),
                 std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) {
  return engine.evaluate(NodeSamples(text, VerdictEngine::families()), collectors, now, 1.7e9);
}

Expectations Learned(const std::string& text) {
  return learn_expectations(NodeSamples(text, learn_families())).expect;
}

std::string Problems(const Verdict& v) {
  std::string out;
  for (const Problem& p : v.problems)
    out += std::string(kSubsystems[p.subsystem]) + " " + p.component + " " + p.problem + " " +
           p.action + (p.unknown ? " (unknown)" : "") + "\n";
  return out;
}

TEST(Verdict, TheNodeAsLearnedIsHealthyAndEachDepartureIsAProblem) {
  // The learned node, without its failing probe (configured, it fails).
  std::string good = std::regex_replace(
      std::string(kNodeText), std::regex("nodewatch_storage_probe_[a-z]+\\{path=\"/bad\".*\n"), "");
  VerdictEngine engine(Learned(good));
  Verdict v = Evaluate(engine, good);
  EXPECT_EQ(v.overall(), Health::kHealthy) << Problems(v);

  auto replace = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? t : t.replace(at, from.size(), to);
  };
  struct Case {
    std::string text;
    std::string want;
  };
  const std::vector<Case> cases = {
      {replace("nodewatch_accelerator_info{accelerator=\"1\"", "x{accelerator=\"1\""),
       "accelerator H100 \"SXM\" missing reboot"},
      {replace("{accelerator=\"1\",uuid=\"GPU-b\"} 18", "{accelerator=\"1\",uuid=\"GPU-b\"} 17"),
       "nvlink 0000:2a:00.0 links_inactive reset_gpu"},
      {replace("nodewatch_pcie_link_width{device=\"0000:1a:00.0\"} 16",
               "nodewatch_pcie_link_width{device=\"0000:1a:00.0\"} 8"),
       "pcie 0000:1a:00.0 width_below_expected inspect_hardware"},
      {replace("{device=\"0000:3b:00.0\"} 32000000000", "{device=\"0000:3b:00.0\"} 16000000000"),
       "pcie 0000:3b:00.0 speed_below_expected inspect_hardware"},
      {replace("nodewatch_pcie_device_info{device=\"0000:3b:00.0\",kind=\"network\"} 1\n", "") + "",
       ""},  // the info alone missing is not a problem: width and speed are there
      {replace("port_state{device=\"mlx5_0\",port=\"1\"} 4",
               "port_state{device=\"mlx5_0\",port=\"1\"} 2"),
       "fabric mlx5_0/1 port_down check_cable"},
      {replace("{device=\"mlx5_0\",port=\"1\"} 50000000000",
               "{device=\"mlx5_0\",port=\"1\"} 25000000000"),
       "fabric mlx5_0/1 rate_below_expected check_cable"},
      {replace("nodewatch_nic_up{interface=\"ens1\"} 1", "nodewatch_nic_up{interface=\"ens1\"} 0"),
       "nic ens1 down check_cable"},
      {replace("nodewatch_nic_up{interface=\"ens1\"} 1", ""), "nic ens1 missing inspect_hardware"},
      {replace("probe_stuck{path=\"/data\"} 0", "probe_stuck{path=\"/data\"} 1"),
       "storage /data probe_stuck check_storage"},
      {replace("operation=\"read\"} 1", "operation=\"read\"} 0"),
       "storage /data probe_failing check_storage"},
      {replace("mountpoint=\"/home\"", "mountpoint=\"/other\""),
       "storage /home nfs_mount_missing check_storage"},
  };
  for (const Case& c : cases) {
    VerdictEngine fresh(Learned(good));
    Verdict bad = Evaluate(fresh, c.text);
    EXPECT_EQ(Problems(bad), c.want.empty() ? "" : c.want + "\n") << c.want;
    EXPECT_EQ(bad.overall(), c.want.empty() ? Health::kHealthy : Health::kUnhealthy) << c.want;
  }
}

TEST(Verdict, AnIdleGpusPcieSpeedIsNotHeldAgainstIt) {
  Expectations e;
  e.pcie.push_back(ExpectedPcie{"0000:1a:00.0", 16, 32e9});
  const std::string gpu =
      "nodewatch_accelerator_info{accelerator=\"0\",uuid=\"GPU-a\",model=\"m\",pci_bus_id=\"0000:"
      "1a:00.0\"} 1\n"
      "nodewatch_pcie_link_width{device=\"0000:1a:00.0\"} 16\n"
      "nodewatch_pcie_link_speed_transfers_per_second{device=\"0000:1a:00.0\"} 2500000000\n";
  VerdictEngine engine(e);
  // Idle (below NodewatchPcieLinkSpeedBelowMaxWhileBusy.busy, 0.5): at
  // 2.5GT/s as GPUs are at rest.
  EXPECT_EQ(
      Problems(Evaluate(
          engine,
          gpu + "nodewatch_accelerator_utilization_ratio{accelerator=\"0\",uuid=\"GPU-a\"} 0.1\n")),
      "");
  // Busy, and still at 2.5GT/s: a link that trained down.
  EXPECT_EQ(
      Problems(Evaluate(
          engine,
          gpu + "nodewatch_accelerator_utilization_ratio{accelerator=\"0\",uuid=\"GPU-a\"} 0.9\n")),
      "pcie 0000:1a:00.0 speed_below_expected inspect_hardware\n");
  // Its utilization unknown: the expected speed holds.
  EXPECT_EQ(Problems(Evaluate(engine, gpu)),
            "pcie 0000:1a:00.0 speed_below_expected inspect_hardware\n");
}

TEST(Verdict, FollowsTheDriversRecoveryAction) {
  Expectations e;
  e.nvlinks_active = 18;
  VerdictEngine engine(e);
  const std::string text =
      "nodewatch_accelerator_info{accelerator=\"3\",uuid=\"GPU-d\",model=\"m\",pci_bus_id=\"0000:"
      "4a:00.0\"} 1\n"
      "nodewatch_accelerator_recovery_action{accelerator=\"3\",uuid=\"GPU-d\",action=\"none\"} 0\n"
      "nodewatch_accelerator_recovery_action{accelerator=\"3\",uuid=\"GPU-d\",action=\"node_"
      "reboot\"} 1\n"
      "nodewatch_accelerator_nvlink_links_active{accelerator=\"3\",uuid=\"GPU-d\"} 12\n"
      "nodewatch_accelerator_up{accelerator=\"3\",uuid=\"GPU-d\"} 0\n"
      "nodewatch_accelerator_row_remap_failed{accelerator=\"3\",uuid=\"GPU-d\"} 1\n"
      "nodewatch_kernel_xid_events_total{pci_bus_id=\"0000:4a:00.0\",xid=\"48\"} 1\n";
  Verdict v = Evaluate(engine, text);
  // The driver asks for a reboot: every problem of that GPU that a reset
  // would fix asks for the reboot instead; a failed remap still needs the
  // vendor.
  EXPECT_EQ(Problems(v),
            "accelerator 0000:4a:00.0 driver_requests_node_reboot reboot\n"
            "accelerator 0000:4a:00.0 not_responding reboot\n"
            "accelerator 0000:4a:00.0 row_remap_failed contact_vendor\n"
            "nvlink 0000:4a:00.0 links_inactive reboot\n"
            "kernel 0000:4a:00.0 xid_48 reboot\n");
}

TEST(Verdict, AnXid79StaysForTheBootOtherHardwareXidsForTheirWindow) {
  VerdictEngine engine(Expectations{});
  auto t0 = std::chrono::steady_clock::now();
  const std::string xids =
      "nodewatch_kernel_log_up 1\n"
      "nodewatch_kernel_xid_events_total{pci_bus_id=\"0000:1a:00.0\",xid=\"79\"} 1\n"
      "nodewatch_kernel_xid_events_total{pci_bus_id=\"0000:2a:00.0\",xid=\"48\"} 2\n"
      "nodewatch_kernel_xid_events_total{pci_bus_id=\"0000:3a:00.0\",xid=\"13\"} 40\n"
      "nodewatch_kernel_events_total{event=\"gpu_fallen_off_bus\",device=\"0000:1a:00.0\"} 1\n"
      "nodewatch_kernel_events_total{event=\"gpu_fallen_off_bus\",device=\"0000:5a:00.0\"} 1\n"
      "nodewatch_memory_uncorrected_errors_total{controller=\"mc1\",dimm=\"dimm2\"} 1\n";
  // First seen by this engine: new (a --check, a restarted daemon).
  const std::string all =
      "kernel 0000:1a:00.0 xid_79 reboot\n"
      "kernel 0000:2a:00.0 xid_48 reset_gpu\n"
      "kernel 0000:5a:00.0 gpu_fallen_off_bus reboot\n"
      "kernel mc1/dimm2 memory_uncorrected inspect_hardware\n";
  EXPECT_EQ(Problems(Evaluate(engine, xids, AllUp(), t0)), all);
  // The XID 48 count has not grown for the window (5m): no longer a
  // problem; XID 79 and the memory error stay for the boot.
  const std::string later =
      "kernel 0000:1a:00.0 xid_79 reboot\n"
      "kernel 0000:5a:00.0 gpu_fallen_off_bus reboot\n"
      "kernel mc1/dimm2 memory_uncorrected inspect_hardware\n";
  EXPECT_EQ(Problems(Evaluate(engine, xids, AllUp(), t0 + 4min)), all);
  EXPECT_EQ(Problems(Evaluate(engine, xids, AllUp(), t0 + 6min)), later);
  // It grows: a problem again, for another window.
  std::string grown = std::regex_replace(xids, std::regex("xid=\"48\"\\} 2"), "xid=\"48\"} 3");
  EXPECT_EQ(Problems(Evaluate(engine, grown, AllUp(), t0 + 7min)), all);
  EXPECT_EQ(Problems(Evaluate(engine, grown, AllUp(), t0 + 13min)), later);
}

TEST(Verdict, TheApplicationXidsOfTheThresholdsFileAreNoProblem) {
  // The list built in is the one of alerts/thresholds.toml in the tree (the
  // one the recording rules are rendered with).
  toml::table file =
      toml::parse_file(std::string(NODEWATCH_TESTS_SOURCE_DIR) + "/../alerts/thresholds.toml");
  const toml::array* listed = file["xid"]["application"].as_array();
  ASSERT_NE(listed, nullptr);
  std::set<std::string, std::less<>> want;
  for (const toml::node& x : *listed) want.insert(std::to_string(x.value_or<std::int64_t>(0)));
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(application_xids(), want);
  for (const std::string& xid : application_xids()) {
    VerdictEngine engine(Expectations{});
    EXPECT_EQ(Problems(Evaluate(engine,
                                "nodewatch_kernel_xid_events_total{pci_bus_id=\"0000:1a:00.0\","
                                "xid=\"" +
                                    xid + "\"} 3\n")),
              "")
        << xid;
  }
  // Any other code is hardware class (79 has its own problem).
  int code = 1;
  while (want.contains(std::to_string(code)) || code == 79) ++code;
  std::string other = std::to_string(code);
  VerdictEngine engine(Expectations{});
  EXPECT_EQ(Problems(Evaluate(engine,
                              "nodewatch_kernel_xid_events_total{pci_bus_id=\"0000:1a:00.0\","
                              "xid=\"" +
                                  other + "\"} 3\n")),
            "kernel 0000:1a:00.0 xid_" + other + " reset_gpu\n");
}

// --- one case per rule -----------------------------------------------------

// A rule of rules() (daemon/verdict.cpp), by name: the expectations and the
// samples that make it report its problem (`want`, the whole verdict: no
// other rule reports anything), and a near miss, samples that it reads and
// finds no problem in.
struct RuleCase {
  std::string_view rule;
  Expectations expect;
  std::string bad;
  std::string want;  // as Problems() prints it
  std::string near_miss;
};

// "name{accelerator="0",uuid="GPU-a"<extra>} value\n"
std::string Gpu(std::string_view name, std::string_view extra, std::string_view value) {
  return "nodewatch_accelerator_" + std::string(name) + "{accelerator=\"0\",uuid=\"GPU-a\"" +
         std::string(extra) + "} " + std::string(value) + "\n";
}

Expectations With(const std::function<void(Expectations&)>& set) {
  Expectations e;
  set(e);
  return e;
}

const std::vector<RuleCase>& RuleCases() {
  const std::string info =
      "nodewatch_accelerator_info{accelerator=\"0\",uuid=\"GPU-a\",model=\"H100\","
      "pci_bus_id=\"0000:1a:00.0\"} 1\n";
  const std::string xid = "nodewatch_kernel_xid_events_total{pci_bus_id=\"0000:1a:00.0\",xid=";
  static const std::vector<RuleCase> kCases = {
      {"accelerators_enumerated", With([](Expectations& e) { e.accelerator_count = 2; }), info,
       "accelerator  missing reboot",
       info + std::regex_replace(info, std::regex("\"0\""), "\"1\"")},
      // The library answers "driver not loaded" with an NVIDIA GPU on the
      // bus; the near miss: the library alone, no NVIDIA GPU.
      {"accelerator_drivers",
       {},
       "nodewatch_accelerator_driver_up{vendor=\"nvidia\"} 0\n"
       "nodewatch_accelerator_driver_state{vendor=\"nvidia\",state=\"ok\"} 0\n"
       "nodewatch_accelerator_driver_state{vendor=\"nvidia\",state=\"not_loaded\"} 1\n"
       "nodewatch_accelerator_driver_info{vendor=\"nvidia\","
       "library_version=\"550.163.01\",kernel_module_version=\"\"} 1\n"
       "nodewatch_accelerator_driver_devices{vendor=\"nvidia\"} 2\n",
       "accelerator nvidia driver_not_loaded drain",
       "nodewatch_accelerator_driver_up{vendor=\"nvidia\"} 0\n"
       "nodewatch_accelerator_driver_state{vendor=\"nvidia\",state=\"ok\"} 0\n"
       "nodewatch_accelerator_driver_state{vendor=\"nvidia\",state=\"not_loaded\"} 1\n"
       "nodewatch_accelerator_driver_info{vendor=\"nvidia\","
       "library_version=\"550.163.01\",kernel_module_version=\"\"} 1\n"
       "nodewatch_accelerator_driver_devices{vendor=\"nvidia\"} 0\n"},
      {"accelerators_responding",
       {},
       Gpu("up", "", "0"),
       "accelerator GPU-a not_responding reset_gpu",
       Gpu("up", "", "1")},
      {"driver_recovery_action",
       {},
       Gpu("recovery_action", ",action=\"gpu_reset\"", "1"),
       "accelerator GPU-a driver_requests_gpu_reset reset_gpu",
       Gpu("recovery_action", ",action=\"gpu_reset\"", "0") +
           Gpu("recovery_action", ",action=\"none\"", "1")},
      {"row_remap_failed",
       {},
       Gpu("row_remap_failed", "", "1"),
       "accelerator GPU-a row_remap_failed contact_vendor",
       Gpu("row_remap_failed", "", "0")},
      {"row_remap_pending",
       {},
       Gpu("row_remap_pending", "", "1"),
       "accelerator GPU-a row_remap_pending reset_gpu",
       Gpu("row_remap_pending", "", "0")},
      {"memory_unrepairable",
       {},
       Gpu("memory_unrepairable", "", "1"),
       "accelerator GPU-a memory_unrepairable contact_vendor",
       Gpu("memory_unrepairable", "", "0")},
      {"repair_pending",
       {},
       Gpu("repair_pending", ",unit=\"tpc\"", "1") +
           Gpu("repair_pending", ",unit=\"channel\"", "0"),
       "accelerator GPU-a tpc_repair_pending reset_gpu",
       Gpu("repair_pending", ",unit=\"tpc\"", "0") +
           Gpu("repair_pending", ",unit=\"channel\"", "0")},
      // NodewatchAcceleratorThermalMarginLow.celsius is 3: 2 below the
      // slowdown is too close, 3 is not; the memory sensor does not count.
      {"thermal_margin",
       {},
       Gpu("temperature_slowdown_celsius", "", "90") +
           Gpu("temperature_celsius", ",sensor=\"gpu\"", "88"),
       "accelerator GPU-a thermal_margin_low inspect_hardware",
       Gpu("temperature_slowdown_celsius", "", "90") +
           Gpu("temperature_celsius", ",sensor=\"gpu\"", "87") +
           Gpu("temperature_celsius", ",sensor=\"memory\"", "89")},
      {"nvlinks_active", With([](Expectations& e) { e.nvlinks_active = 18; }),
       Gpu("nvlink_links_active", "", "17"), "nvlink GPU-a links_inactive reset_gpu",
       Gpu("nvlink_links_active", "", "18")},
      {"fabric_healthy",
       {},
       Gpu("fabric_healthy", "", "0"),
       "nvlink GPU-a fabric_unhealthy reset_gpu",
       Gpu("fabric_healthy", "", "1")},
      {"fabric_registered",
       {},
       Gpu("fabric_state", ",state=\"in_progress\"", "1"),
       "nvlink GPU-a fabric_not_registered drain",
       Gpu("fabric_state", ",state=\"in_progress\"", "0") +
           Gpu("fabric_state", ",state=\"completed\"", "1")},
      // IMEX's daemon in any state but ready; not answering at all counts
      // only where its unit is enabled (IMEX started per job is stopped
      // between jobs).
      {"imex_ready",
       {},
       "nodewatch_imex_info{mode=\"nodes_file\",config_file=\"/etc/nvidia-imex/config.cfg\","
       "service=\"disabled\",version=\"580.95.05\"} 1\n"
       "nodewatch_imex_daemon_state{state=\"ready\"} 0\n"
       "nodewatch_imex_daemon_state{state=\"waiting_for_peers\"} 1\n",
       "nvlink imex imex_not_ready drain",
       "nodewatch_imex_info{mode=\"nodes_file\",config_file=\"/etc/nvidia-imex/config.cfg\","
       "service=\"disabled\",version=\"\"} 1\n"
       "nodewatch_imex_daemon_state{state=\"ready\"} 0\n"
       "nodewatch_imex_daemon_state{state=\"unreachable\"} 1\n"},
      {"pcie_links", With([](Expectations& e) {
         e.pcie.push_back({"0000:3b:00.0", 16, std::nullopt});
       }),
       "nodewatch_pcie_link_width{device=\"0000:3b:00.0\"} 8\n",
       "pcie 0000:3b:00.0 width_below_expected inspect_hardware",
       "nodewatch_pcie_link_width{device=\"0000:3b:00.0\"} 16\n"},
      {"fabric_ports", With([](Expectations& e) {
         e.ports.push_back({"mlx5_0", 1, std::nullopt});
       }),
       "nodewatch_interconnect_port_state{device=\"mlx5_0\",port=\"1\"} 1\n",
       "fabric mlx5_0/1 port_down check_cable",
       "nodewatch_interconnect_port_state{device=\"mlx5_0\",port=\"1\"} 4\n"
       "nodewatch_interconnect_port_state{device=\"mlx5_0\",port=\"2\"} 1\n"},
      {"nics", With([](Expectations& e) {
         e.nics.push_back({"ens1", std::nullopt});
       }),
       "nodewatch_nic_up{interface=\"ens1\"} 0\n", "nic ens1 down check_cable",
       "nodewatch_nic_up{interface=\"ens1\"} 1\nnodewatch_nic_up{interface=\"ens2\"} 0\n"},
      {"storage_probes",
       {},
       "nodewatch_storage_probe_stuck{path=\"/data\"} 0\n"
       "nodewatch_storage_probe_success{path=\"/data\",operation=\"read\"} 0\n",
       "storage /data probe_failing check_storage",
       "nodewatch_storage_probe_stuck{path=\"/data\"} 0\n"
       "nodewatch_storage_probe_success{path=\"/data\",operation=\"read\"} 1\n"},
      {"nfs_mounts", With([](Expectations& e) { e.nfs_mounts = {"/home"}; }),
       "nodewatch_storage_nfs_mount_info{mountpoint=\"/other\"} 1\n",
       "storage /home nfs_mount_missing check_storage",
       "nodewatch_storage_nfs_mount_info{mountpoint=\"/home\"} 1\n"},
      {"kernel_log_readable",
       {},
       "nodewatch_kernel_log_up 0\n",
       "kernel  log_unreadable none (unknown)",
       "nodewatch_kernel_log_up 1\n"},
      // XID 13 is an application XID (alerts/thresholds.toml).
      {"xids",
       {},
       xid + "\"48\"} 1\n",
       "kernel 0000:1a:00.0 xid_48 reset_gpu",
       xid + "\"13\"} 1\n" + xid + "\"48\"} 0\n"},
      // An XID 79 on the same GPU has said it already (xids reports it).
      {"gpu_fallen_off_bus",
       {},
       "nodewatch_kernel_events_total{event=\"gpu_fallen_off_bus\",device=\"0000:1a:00.0\"} 1\n",
       "kernel 0000:1a:00.0 gpu_fallen_off_bus reboot",
       "nodewatch_kernel_events_total{event=\"gpu_fallen_off_bus\",device=\"0000:1a:00.0\"} 1\n" +
           xid + "\"79\"} 1\n"},
      {"memory_uncorrected",
       {},
       "nodewatch_memory_uncorrected_errors_total{controller=\"mc0\",dimm=\"dimm1\"} 1\n",
       "kernel mc0/dimm1 memory_uncorrected inspect_hardware",
       "nodewatch_memory_uncorrected_errors_total{controller=\"mc0\",dimm=\"dimm1\"} 0\n"},
      // A failed fan; the near miss: at a warning, which only degrades.
      {"bmc_sensors",
       {},
       "nodewatch_bmc_sensor_state{sensor=\"FAN1\",type=\"Fan\"} 2\n",
       "platform FAN1 sensor_critical inspect_hardware",
       "nodewatch_bmc_sensor_state{sensor=\"FAN1\",type=\"Fan\"} 0\n"},
      // The NIC's firmware pinned per device; the near miss: the allowed one.
      {"versions_pinned", With([](Expectations& e) {
         e.versions["nic_firmware"].any = {"28.39.1002"};
         e.versions["nic_firmware"].devices["eth1"] = {"28.40.1000", "28.41.1000"};
       }),
       "nodewatch_nic_info{interface=\"eth0\",firmware=\"28.39.1002\"} 1\n"
       "nodewatch_nic_info{interface=\"eth1\",firmware=\"28.39.1002\"} 1\n",
       "versions nic_firmware/eth1 version_mismatch drain",
       "nodewatch_nic_info{interface=\"eth0\",firmware=\"28.39.1002\"} 1\n"
       "nodewatch_nic_info{interface=\"eth1\",firmware=\"28.41.1000\"} 1\n"},
      {"bmc_answers", With([](Expectations& e) { e.bmc = true; }), "nodewatch_bmc_up 0\n",
       "platform bmc bmc_not_answering inspect_hardware", "nodewatch_bmc_up 1\n"},
  };
  return kCases;
}

// The problems that rule `rule` reported.
std::string ProblemsOf(const Verdict& v, std::string_view rule) {
  Verdict only;
  for (const Problem& p : v.problems)
    if (p.rule == rule) only.problems.push_back(p);
  return Problems(only);
}

TEST(VerdictRules, EveryRuleHasACase) {
  std::set<std::string_view> cased;
  for (const RuleCase& c : RuleCases()) {
    EXPECT_TRUE(cased.insert(c.rule).second) << c.rule << " has two cases";
    const auto names = VerdictEngine::rule_names();
    EXPECT_NE(std::find(names.begin(), names.end(), c.rule), names.end())
        << "a case for " << c.rule << ", which is no rule of rules()";
  }
  for (std::string_view name : VerdictEngine::rule_names())
    EXPECT_TRUE(cased.count(name))
        << "the rule " << name << " has no case in RuleCases() (tests/unit/verdict_test.cpp)";
}

// A sensor at a warning degrades the node, which stays fit; a critical one
// unfits it, and the problem names the sensor's type and reading.
TEST(VerdictRules, ABmcWarningDegradesAndACriticalSensorUnfits) {
  VerdictEngine engine{Expectations{}};
  Verdict v = Evaluate(engine,
                       "nodewatch_bmc_sensor_state{sensor=\"Inlet Temp\",type=\"Temperature\"} 1\n"
                       "nodewatch_bmc_temperature_celsius{sensor=\"Inlet Temp\"} 41\n");
  EXPECT_EQ(Problems(v), "platform Inlet Temp sensor_warning inspect_hardware\n");
  EXPECT_EQ(v.health[7], Health::kDegraded);
  EXPECT_EQ(v.overall(), Health::kDegraded);
  EXPECT_TRUE(fit(v.overall()));
  EXPECT_EQ(v.line(), "degraded: platform/sensor_warning Inlet Temp -> inspect_hardware\n");
  v = Evaluate(engine,
               "nodewatch_bmc_sensor_state{sensor=\"Inlet Temp\",type=\"Temperature\"} 2\n"
               "nodewatch_bmc_temperature_celsius{sensor=\"Inlet Temp\"} 47.5\n"
               "nodewatch_bmc_sensor_state{sensor=\"PSU2\",type=\"Power Supply\"} 1\n");
  EXPECT_EQ(v.overall(), Health::kUnhealthy);
  EXPECT_FALSE(fit(v.overall()));
  ASSERT_EQ(v.problems.size(), 2u);
  EXPECT_EQ(v.problems[0].detail, "Temperature sensor critical, reading 47.5 °C");
  EXPECT_EQ(v.problems[1].detail, "Power Supply sensor at a warning");
  // An unknown subsystem outranks a degraded one.
  VerdictEngine other{Expectations{}};
  std::vector<CollectorState> down = AllUp();
  down[0].up = false;
  v = Evaluate(other, "nodewatch_bmc_sensor_state{sensor=\"F\",type=\"Fan\"} 1\n", down);
  EXPECT_EQ(v.overall(), Health::kUnknown);
}

// A pin names the component, the device, what runs and what is allowed; a
// pinned component that nothing reports could not be checked; the kernel's
// release comes from the daemon's own read.
TEST(VerdictRules, VersionPinsNameWhatRunsAndWhatIsExpected) {
  Expectations e;
  e.versions["kernel"].any = {"6.1.0-28-amd64"};
  e.versions["accelerator_driver"].any = {"550.127.05", "550.144.03"};
  e.versions["bmc_firmware"].any = {"3.21"};
  VerdictEngine engine(e, NodeVersions{"6.1.0-31-amd64", "2.1.3"});
  Verdict v =
      Evaluate(engine,
               "nodewatch_accelerator_driver_info{vendor=\"nvidia\",library_version=\"550.90."
               "07\",kernel_module_version=\"550.90.07\"} 1\n");
  EXPECT_EQ(Problems(v),
            "versions accelerator_driver/nvidia version_mismatch drain\n"
            "versions bmc_firmware version_unknown none (unknown)\n"
            "versions kernel version_mismatch drain\n");
  EXPECT_EQ(v.problems[0].detail, "runs 550.90.07, expected 550.127.05 or 550.144.03");
  EXPECT_EQ(v.problems[2].detail, "runs 6.1.0-31-amd64, expected 6.1.0-28-amd64");
  EXPECT_EQ(v.overall(), Health::kUnhealthy);
  MetricSink sink(VerdictEngine::metric_table());
  engine.render(v, sink);
  const std::string text = sink.render();
  EXPECT_NE(
      text.find("nodewatch_version_info{component=\"bios\",device=\"\",version=\"2.1.3\"} 1\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("nodewatch_version_info{component=\"accelerator_driver\",device=\"nvidia\","
                      "version=\"550.90.07\"} 1\n"),
            std::string::npos)
      << text;
  // The right versions: healthy.
  VerdictEngine right(e, NodeVersions{"6.1.0-28-amd64", ""});
  v = Evaluate(right,
               "nodewatch_accelerator_driver_info{vendor=\"nvidia\",library_version=\"550.144.03\","
               "kernel_module_version=\"\"} 1\n"
               "nodewatch_bmc_info{firmware=\"3.21\",manufacturer=\"x\",product=\"1\",ipmi_"
               "version=\"2.0\",interface=\"inband\"} 1\n");
  EXPECT_EQ(Problems(v), "");
}

// A collector that fails has its series dropped, not its devices'
// firmware changed: the versions it gave are kept while it is down (the
// soak's invariant: no series vanishes that did not have to), and go
// when it answers without them.
TEST(VerdictRules, VersionsAreKeptWhileTheirSourceCannotSayAndForAGraceAfter) {
  VerdictEngine engine(Expectations{});
  auto t = std::chrono::steady_clock::now();
  const std::string nic = "nodewatch_nic_info{interface=\"eth0\",firmware=\"28.39.1002\"} 1\n";
  auto has = [](const Verdict& v) {
    return std::count(v.versions.begin(), v.versions.end(),
                      VersionFact{"nic_firmware", "eth0", "28.39.1002"}) == 1;
  };
  std::vector<CollectorState> collectors = AllUp();
  ASSERT_EQ(collectors[3].name, "nic");
  EXPECT_TRUE(has(Evaluate(engine, nic, collectors, t)));
  // Its collector down for an hour: kept.
  collectors[3].up = false;
  EXPECT_TRUE(has(Evaluate(engine, "", collectors, t + std::chrono::hours(1))));
  // Up again without the device: kept for the grace, then gone.
  collectors[3].up = true;
  t += std::chrono::hours(1);
  EXPECT_TRUE(has(Evaluate(engine, "", collectors, t + kVersionGrace / 2)));
  EXPECT_FALSE(has(Evaluate(engine, "", collectors, t + kVersionGrace)));
  // Served with an empty version (a read that failed: the soak's faults
  // make amdgpu's vbios_version answer EIO): kept past the grace.
  EXPECT_TRUE(has(Evaluate(engine, nic, collectors, t)));
  const std::string blank = "nodewatch_nic_info{interface=\"eth0\",firmware=\"\"} 1\n";
  EXPECT_TRUE(has(Evaluate(engine, blank, collectors, t + kVersionGrace * 2)));
  // Another version read: it replaces the old at once.
  Verdict v = Evaluate(engine, "nodewatch_nic_info{interface=\"eth0\",firmware=\"28.40.1000\"} 1\n",
                       collectors, t + kVersionGrace * 2);
  EXPECT_FALSE(has(v));
  EXPECT_EQ(v.versions.size(), 1u);
  // The BMC's firmware while the BMC does not answer.
  const std::string info =
      "nodewatch_bmc_info{firmware=\"3.21\",manufacturer=\"m\",product=\"1\",ipmi_version=\"2.0\","
      "interface=\"inband\"} 1\n";
  const VersionFact bmc{"bmc_firmware", "", "3.21"};
  auto has_bmc = [&](const Verdict& x) {
    return std::count(x.versions.begin(), x.versions.end(), bmc) == 1;
  };
  const auto later = t + std::chrono::hours(2);
  EXPECT_TRUE(has_bmc(Evaluate(engine, "nodewatch_bmc_up 1\n" + info, collectors, later)));
  EXPECT_TRUE(
      has_bmc(Evaluate(engine, "nodewatch_bmc_up 0\n", collectors, later + kVersionGrace * 2)));
}

// What --learn-expected writes of versions reads back as the same pins.
TEST(VerdictRules, LearnedVersionsRoundTripThroughTheExpectFile) {
  nodewatch::Learned l = learn_expectations(
      NodeSamples("nodewatch_nic_info{interface=\"eth0\",firmware=\"28.39.1002\"} 1\n"
                  "nodewatch_nic_info{interface=\"eth1\",firmware=\"28.40.1000\"} 1\n"
                  "nodewatch_interconnect_port_info{device=\"mlx5_0\",port=\"1\",firmware=\"28.39."
                  "1002\"} 1\n"
                  "nodewatch_interconnect_port_info{device=\"mlx5_0\",port=\"2\",firmware=\"28.39."
                  "1002\"} 1\n",
                  learn_families()),
      NodeVersions{"6.1.0-28-amd64", ""});
  EXPECT_EQ(l.expect.versions["kernel"].any, std::vector<std::string>{"6.1.0-28-amd64"});
  EXPECT_EQ(l.expect.versions["hca_firmware"].any, std::vector<std::string>{"28.39.1002"});
  EXPECT_EQ(l.expect.versions["nic_firmware"].devices.size(), 2u);
  const std::string toml = expectations_toml(l.expect, {}, {});
  EXPECT_NE(toml.find("nic_firmware = { \"eth0\" = \"28.39.1002\", \"eth1\" = \"28.40.1000\" }\n"),
            std::string::npos)
      << toml;
  std::vector<ConfigError> errors;
  Expectations back = parse_expect_file(toml, "learned.toml", &errors);
  EXPECT_TRUE(errors.empty()) << (errors.empty() ? "" : errors.front().message);
  EXPECT_EQ(back.versions, l.expect.versions);
}

// The driver's thermal margin (NVML 12.8 on) decides where it is given:
// it knows memory's threshold, which slowdown less the GPU sensor misses.
TEST(VerdictRules, TheDriversThermalMarginDecidesWhereItIsGiven) {
  VerdictEngine engine{Expectations{}};
  // The GPU sensor is far from slowdown; the driver says 1 °C.
  Verdict v = Evaluate(engine, Gpu("temperature_slowdown_celsius", "", "90") +
                                   Gpu("temperature_celsius", ",sensor=\"gpu\"", "70") +
                                   Gpu("thermal_margin_celsius", "", "1"));
  EXPECT_EQ(Problems(v), "accelerator GPU-a thermal_margin_low inspect_hardware\n");
  // The GPU sensor is 2 °C from slowdown; the driver says 10: no problem.
  VerdictEngine fresh{Expectations{}};
  v = Evaluate(fresh, Gpu("temperature_slowdown_celsius", "", "90") +
                          Gpu("temperature_celsius", ",sensor=\"gpu\"", "88") +
                          Gpu("thermal_margin_celsius", "", "10"));
  EXPECT_EQ(Problems(v), "");
}

// IMEX: each state the imex collector gives, with the unit enabled and not.
TEST(VerdictRules, ImexNotAnsweringCountsOnlyWhereItsUnitIsEnabled) {
  auto node = [](std::string_view service, std::string_view state) {
    return "nodewatch_imex_info{mode=\"nodes_file\",config_file=\"/c\",service=\"" +
           std::string(service) + "\",version=\"\"} 1\nnodewatch_imex_daemon_state{state=\"" +
           std::string(state) + "\"} 1\n";
  };
  const std::pair<std::string, std::string> cases[] = {
      {node("enabled", "ready"), ""},
      {node("enabled", "unreachable"), "nvlink imex imex_not_ready drain\n"},
      {node("disabled", "unreachable"), ""},
      {node("absent", "unreachable"), ""},
      {node("enabled", "command_off"), ""},
      {node("enabled", "ctl_missing"), ""},
      {node("enabled", "query_failed"), ""},
      {node("enabled", "no_permission"), ""},
      {node("disabled", "unavailable"), "nvlink imex imex_not_ready drain\n"},
      {node("enabled", "shutting_down"), "nvlink imex imex_not_ready drain\n"},
      {"", ""},  // no IMEX: nothing
  };
  for (const auto& [exposition, want] : cases) {
    SCOPED_TRACE(exposition);
    VerdictEngine engine{Expectations{}};
    Verdict v = Evaluate(engine, exposition);
    EXPECT_EQ(Problems(v), want);
    EXPECT_EQ(v.overall(), want.empty() ? Health::kHealthy : Health::kUnhealthy);
  }
}

TEST(VerdictRules, EachReportsItsProblemAndNotANearMiss) {
  for (const RuleCase& c : RuleCases()) {
    SCOPED_TRACE(std::string(c.rule));
    VerdictEngine engine(c.expect);
    Verdict bad = Evaluate(engine, c.bad);
    // The whole verdict is the rule's problem: no other rule reports one.
    EXPECT_EQ(Problems(bad), c.want + "\n");
    EXPECT_EQ(ProblemsOf(bad, c.rule), c.want + "\n");
    VerdictEngine fresh(c.expect);
    EXPECT_EQ(ProblemsOf(Evaluate(fresh, c.near_miss), c.rule), "");
  }
}

TEST(Verdict, ACollectorDownOrMissingMakesItsSubsystemsUnknown) {
  Expectations e;
  e.ports.push_back(ExpectedPort{"mlx5_0", 1, std::nullopt});
  e.accelerator_count = 8;
  VerdictEngine engine(e);
  auto collectors = AllUp();
  collectors[0].up = false;
  collectors[0].error = "nvml: driver not loaded";
  std::erase_if(collectors, [](const CollectorState& c) { return c.name == "interconnect"; });
  Verdict v = Evaluate(engine, "", collectors);
  EXPECT_EQ(Problems(v),
            "accelerator accelerator not_observed none (unknown)\n"
            "nvlink accelerator not_observed none (unknown)\n"
            "fabric interconnect not_collected none (unknown)\n"
            "exporter accelerator collector_down none\n");
  EXPECT_EQ(v.health[0], Health::kUnknown);
  EXPECT_EQ(v.health[2], Health::kHealthy);  // pcie is up and nothing is expected of it
  EXPECT_EQ(v.health[kExporter], Health::kUnhealthy);
  EXPECT_EQ(v.overall(), Health::kUnknown);  // not unhealthy: nothing is known to be wrong
  EXPECT_THAT(
      v.json(),
      HasSubstr("\"detail\":\"the accelerator collector is down: nvml: driver not loaded\""));

  // A failing collector that feeds no subsystem (textfile): the exporter
  // says so, the node stays fit.
  collectors = AllUp();
  collectors.push_back(CollectorState{"textfile", true, false, "no such directory"});
  VerdictEngine nothing_expected(Expectations{});
  Verdict textfile = Evaluate(nothing_expected, "", collectors);
  EXPECT_EQ(textfile.health[kExporter], Health::kUnhealthy);
  EXPECT_EQ(Problems(textfile), "exporter textfile collector_down none\n");
  EXPECT_EQ(textfile.overall(), Health::kHealthy);
  // Before the first round: unknown too.
  collectors = AllUp();
  for (auto& c : collectors) c.ran = false, c.up = false;
  EXPECT_EQ(Evaluate(engine, "", collectors).overall(), Health::kUnknown);
  // A real problem elsewhere makes the node unhealthy even so.
  collectors = AllUp();
  collectors[0].up = false;
  Expectations with_pcie = e;
  with_pcie.pcie.push_back(ExpectedPcie{"0000:1a:00.0", 16, std::nullopt});
  VerdictEngine engine2(with_pcie);
  EXPECT_EQ(Evaluate(engine2, "", collectors).overall(), Health::kUnhealthy);
}

TEST(Verdict, RendersBoundedSeriesAndTheExpectedInventory) {
  Expectations e;
  for (int i = 0; i < 150; ++i) {
    char dev[16];
    std::snprintf(dev, sizeof dev, "0000:%02x:00.0", i);
    e.pcie.push_back(ExpectedPcie{dev, 16, std::nullopt});
  }
  e.accelerator_models["H100"] = 8;
  e.accelerator_count = 8;
  e.ports.push_back(ExpectedPort{"mlx5_0", 1, 50e9});
  VerdictEngine engine(e);
  Verdict v = Evaluate(engine, "");
  ASSERT_EQ(v.problems.size(), 152u);  // 150 devices, the GPUs and the port missing
  MetricSink sink(VerdictEngine::metric_table());
  engine.render(v, sink);
  EXPECT_TRUE(sink.violations().empty());
  std::string text = sink.render();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n') - std::count(text.begin(), text.end(), '#'),
            kSubsystems.size() + kMaxProblemSeries + kSubsystems.size() + 1 + 150 + 2 + 2);
  double v_pcie = 0;
  ASSERT_TRUE(sink.get("nodewatch_node_problems", {"pcie"}, &v_pcie));
  EXPECT_EQ(v_pcie, 150);  // all of them, beyond the series bound
  double healthy = 1;
  ASSERT_TRUE(sink.get("nodewatch_node_healthy", {"pcie"}, &healthy));
  EXPECT_EQ(healthy, 0);
  double rate = 0;
  ASSERT_TRUE(
      sink.get("nodewatch_node_expected", {"fabric", "mlx5_0/1", "rate_bytes_per_second"}, &rate));
  EXPECT_EQ(rate, 50e9);
  ASSERT_TRUE(sink.get("nodewatch_node_expected", {"accelerator", "", "count"}, &rate));
  EXPECT_EQ(rate, 8);
  EXPECT_TRUE(VerdictEngine::metric_table().lint("nodewatch_node_").empty());
}

TEST(Verdict, TableJsonAndLineSayTheSame) {
  Expectations e;
  e.ports.push_back(ExpectedPort{"mlx5_0", 1, std::nullopt});
  VerdictEngine engine(e);
  Verdict v =
      Evaluate(engine, "nodewatch_interconnect_port_state{device=\"mlx5_0\",port=\"1\"} 1\n");
  EXPECT_THAT(v.table(), HasSubstr("\nfabric       unhealthy  mlx5_0/1   port_down  check_cable  "
                                   "state down, expected active\n"));
  EXPECT_THAT(v.table(), HasSubstr("\nnode: unhealthy\n"));
  EXPECT_EQ(v.line(), "unhealthy: fabric/port_down mlx5_0/1 -> check_cable\n");
  EXPECT_THAT(
      v.json(),
      HasSubstr("{\"subsystem\":\"fabric\",\"component\":\"mlx5_0/1\",\"problem\":\"port_down\","
                "\"action\":\"check_cable\",\"detail\":\"state down, expected active\"}"));
  EXPECT_THAT(v.json(), HasSubstr("\"evaluated_at\":1700000000.000,"));
  // The JSON is JSON (toml++ reads JSON's subset of literals poorly; this
  // checks the quoting: every label value with a quote is escaped).
  Expectations q;
  q.accelerator_models["A \"B\"\n"] = 1;
  VerdictEngine quoted(q);
  Verdict vq = Evaluate(quoted, "");
  EXPECT_THAT(vq.json(), HasSubstr("\"component\":\"A \\\"B\\\"\\n\""));
}

// --- the worker -----------------------------------------------------------------

TEST(NodeHealth, EvaluatesAfterPublishesOffTheCallersThreadAndReusesUnchangedParses) {
  Expectations e;
  e.pcie.push_back(ExpectedPcie{"0000:1a:00.0", 16, std::nullopt});
  NodeHealth health(e);
  EXPECT_EQ(health.current(), nullptr);
  SnapshotStore store;
  store.publish("pcie", make_rendered("nodewatch_pcie_link_width{device=\"0000:1a:00.0\"} 16\n"));
  health.update(store.current(), AllUp());
  ASSERT_TRUE(testing::Eventually([&] { return health.current() != nullptr; }, 5s));
  EXPECT_EQ(health.current()->verdict.overall(), Health::kHealthy);
  EXPECT_THAT(health.current()->metrics->text,
              HasSubstr("nodewatch_node_healthy{subsystem=\"pcie\"} 1\n"));
  store.publish("pcie", make_rendered("nodewatch_pcie_link_width{device=\"0000:1a:00.0\"} 4\n"));
  health.update(store.current(), AllUp());
  ASSERT_TRUE(testing::Eventually(
      [&] { return health.current()->verdict.overall() == Health::kUnhealthy; }, 5s));
  EXPECT_THAT(health.current()->json(), HasSubstr("\"problem\":\"width_below_expected\""));
  // New expectations at a reload: the next evaluation uses them.
  Expectations relaxed = e;
  relaxed.pcie[0].width = 4;
  health.set_expectations(relaxed);
  health.update(store.current(), AllUp());
  ASSERT_TRUE(testing::Eventually(
      [&] { return health.current()->verdict.overall() == Health::kHealthy; }, 5s));
}

TEST(NodeHealth, ABurstOfResultsCostsOneEvaluationAndTheLastOneCounts) {
  testing::ManualClock clock;
  WorkerPool pool(1, "test-pool", 0, clock);
  Expectations e;
  e.pcie.push_back(ExpectedPcie{"0000:1a:00.0", 16, std::nullopt});
  NodeHealth health(e, nullptr, NodeHealth::kRefresh, &pool);
  SnapshotStore store;
  store.publish("pcie", make_rendered("nodewatch_pcie_link_width{device=\"0000:1a:00.0\"} 16\n"));
  const auto t0 = clock.now();
  health.update(store.current(), AllUp());
  ASSERT_TRUE(testing::Eventually([&] { return health.evaluations() == 1; }, 5s));
  // 50 results before the next second: each changes the width; the last is x4.
  for (int i = 0; i < 50; ++i) {
    store.publish("pcie", make_rendered("nodewatch_pcie_link_width{device=\"0000:1a:00.0\"} " +
                                        std::to_string(i == 49 ? 4 : 16) + "\n"));
    health.update(store.current(), AllUp());
  }
  // One evaluation waits for kMinGap after the first; none runs before.
  ASSERT_TRUE(testing::Eventually([&] { return clock.next() == t0 + NodeHealth::kMinGap; }, 5s));
  clock.set(t0 + NodeHealth::kMinGap - 1ms);
  EXPECT_EQ(health.evaluations(), 1u);
  clock.set(t0 + NodeHealth::kMinGap);
  ASSERT_TRUE(testing::Eventually([&] { return health.evaluations() == 2; }, 5s));
  EXPECT_EQ(health.current()->verdict.overall(), Health::kUnhealthy);
  // Nothing new: the next evaluation is the refresh, kRefresh later.
  const auto refresh = t0 + NodeHealth::kMinGap + NodeHealth::kRefresh;
  ASSERT_TRUE(testing::Eventually([&] { return clock.next() == refresh; }, 5s));
  clock.set(refresh - 1ms);
  EXPECT_EQ(health.evaluations(), 2u);
}

TEST(NodeHealth, WithoutResultsTheLastSnapshotsAreEvaluatedAgain) {
  // Every collector hourly: the verdict still refreshes (its timestamp, the
  // windows of XIDs), on the snapshots it last saw.
  testing::ManualClock clock;
  WorkerPool pool(1, "test-pool", 0, clock);
  NodeHealth health(Expectations{}, nullptr, 100ms, &pool);
  clock.set(clock.now() + 300ms);
  EXPECT_EQ(clock.next(), Clock::time_point::max());
  EXPECT_EQ(health.evaluations(), 0u);  // nothing seen yet: nothing to evaluate
  SnapshotStore store;
  store.publish("kernel", make_rendered("nodewatch_kernel_log_up 1\n"));
  health.update(store.current(), AllUp());
  for (std::uint64_t n = 1; n <= 3; ++n) {
    ASSERT_TRUE(testing::Eventually([&] { return health.evaluations() == n; }, 5s)) << n;
    // The same snapshots again, 100ms after the last evaluation began.
    const auto due = clock.now() + 100ms;
    ASSERT_TRUE(testing::Eventually([&] { return clock.next() == due; }, 5s)) << n;
    EXPECT_EQ(health.evaluations(), n);
    clock.set(due);
  }
  EXPECT_EQ(health.current()->verdict.overall(), Health::kHealthy);
}

TEST(NodeHealth, ResultsOfJobsDueTogetherAreEvaluatedOnceOnThePoolThatHadThem) {
  // The daemon's shape: collections are timed jobs of one pool, and the
  // verdict runs on that pool, after the collections due with the results.
  testing::ManualClock clock;
  WorkerPool pool(1, "test-pool", 0, clock);
  SnapshotStore store;
  std::mutex mu;
  std::vector<std::thread::id> collected_on;
  std::vector<std::thread::id> evaluated_on;
  std::vector<int> widths_seen;
  NodeHealth health(
      Expectations{},
      [&] {
        std::lock_guard lock(mu);
        evaluated_on.push_back(std::this_thread::get_id());
        auto set = store.current();
        const std::string& text = set->by_collector.at("pcie")->text;
        widths_seen.push_back(std::stoi(text.substr(text.rfind(' ') + 1)));
        return NodeInput{set, AllUp()};
      },
      NodeHealth::kRefresh, &pool);
  const auto due = clock.now() + 50ms;
  for (int i = 1; i <= 3; ++i) {
    pool.post_at(due, [&, i] {
      store.publish("pcie", make_rendered("nodewatch_pcie_link_width{device=\"a\"} " +
                                          std::to_string(i * 4) + "\n"));
      {
        std::lock_guard lock(mu);
        collected_on.push_back(std::this_thread::get_id());
      }
      health.changed();
    });
  }
  clock.set(due);
  ASSERT_TRUE(testing::Eventually([&] { return health.evaluations() == 1; }, 5s));
  // The next is the refresh: no evaluation of its own for the later results.
  ASSERT_TRUE(testing::Eventually([&] { return clock.next() == due + NodeHealth::kRefresh; }, 5s));
  EXPECT_EQ(health.evaluations(), 1u);
  std::lock_guard lock(mu);
  ASSERT_EQ(collected_on.size(), 3u);
  ASSERT_EQ(evaluated_on.size(), 1u);
  EXPECT_EQ(evaluated_on[0], collected_on[0]);
  EXPECT_EQ(widths_seen, std::vector<int>{12});  // after the last of them
  EXPECT_NE(health.current(), nullptr);
}

TEST(NodeHealth, GoesWhileAnEvaluationIsPostedAndThePoolRunsOn) {
  testing::ManualClock clock;
  WorkerPool pool(1, "test-pool", 0, clock);
  const auto t0 = clock.now();
  SnapshotStore store;
  store.publish("kernel", make_rendered("nodewatch_kernel_log_up 1\n"));
  std::atomic<int> sourced{0};
  {
    NodeHealth health(
        Expectations{},
        [&] {
          ++sourced;
          return NodeInput{store.current(), AllUp()};
        },
        NodeHealth::kRefresh, &pool);
    health.changed();
    ASSERT_TRUE(testing::Eventually([&] { return health.evaluations() == 1; }, 5s));
    health.changed();  // posted kMinGap after the first: still pending below
    ASSERT_TRUE(testing::Eventually([&] { return clock.next() == t0 + NodeHealth::kMinGap; }, 5s));
  }
  std::atomic<bool> ran{false};
  pool.post_at(t0 + NodeHealth::kMinGap, [&] { ran = true; });
  clock.set(t0 + NodeHealth::kMinGap);
  ASSERT_TRUE(testing::Eventually([&] { return ran.load(); }, 5s));
  EXPECT_EQ(sourced.load(), 1);  // the pending evaluation went with it
}

TEST(NodeHealth, ParsesOnlyTheSnapshotsThatChanged) {
  SnapshotSamples parsed;
  SnapshotStore store;
  store.publish("pcie", make_rendered("nodewatch_pcie_link_width{device=\"a\"} 16\n"));
  store.publish("kernel", make_rendered("nodewatch_kernel_log_up 1\nunrelated 5\n"));
  Samples s1 = parsed.samples_of(*store.current());
  EXPECT_EQ(s1.size(), 2u);
  store.publish("pcie", make_rendered("nodewatch_pcie_link_width{device=\"a\"} 8\n"));
  Samples s2 = parsed.samples_of(*store.current());
  EXPECT_EQ(s2.of("nodewatch_pcie_link_width").at(0).value, 8);
  EXPECT_EQ(s2.size(), 2u);
  store.withdraw("kernel");  // a collector down: its samples go
  EXPECT_EQ(parsed.samples_of(*store.current()).size(), 1u);
}

}  // namespace
}  // namespace nodewatch
