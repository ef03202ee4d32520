// The bmc collector against OpenIPMI's BMC simulator (tests/support/
// ipmi_sim.hpp): the real nodewatchd and nwd-bmc (FreeIPMI 1.6.10) over
// IPMI 1.5 and 2.0 on the loopback, sensors failed and restored while the
// daemon runs, the verdict, a stopped BMC, the SEL across restarts and a
// clear; and FreeIPMI's own ipmi-sensors asked the same BMC.

#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/ipmi_sim.hpp"
#include "support/scrape.hpp"

namespace nodewatch::testing {
namespace {

using namespace std::chrono_literals;

constexpr const char* kOthersOff =
    "[collectors.accelerator]\nenabled = false\n[collectors.pcie]\nenabled = false\n"
    "[collectors.nic]\nenabled = false\n[collectors.interconnect]\nenabled = false\n"
    "[collectors.storage]\nenabled = false\n[collectors.mesh]\nenabled = false\n"
    "[collectors.uncore]\nenabled = false\n[collectors.imex]\nenabled = false\n";

class BmcSim : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = IpmiSim::CannotRun(); !why.empty()) GTEST_SKIP() << why;
    sim_ = std::make_unique<IpmiSim>(dir_.path() / "sim");
    ASSERT_EQ(sim_->error(), "");
    std::filesystem::create_directories(dir_.path() / "textfile");
  }

  // The configuration: the bmc collector every second against the
  // simulator, a textfile collector beside it (every second too), the
  // BMC expected; nothing else.
  std::filesystem::path Config(const std::string& protocol = "lan",
                               const std::string& expect = "") const {
    return dir_.write(
        "nodewatch.toml",
        std::string(kOthersOff) + "[collectors.textfile]\ninterval = \"1s\"\ndirectory = \"" +
            (dir_.path() / "textfile").string() +
            "\"\n[collectors.bmc]\ninterval = \"1s\"\ntimeout = \"1s\"\nhost = \"" + sim_->host() +
            "\"\nprotocol = \"" + protocol + "\"\nusername = \"" + IpmiSim::kUser +
            "\"\npassword_file = \"" + sim_->password_file().string() + "\"\nstate_directory = \"" +
            (dir_.path() / "state").string() + "\"\n[expect.bmc]\npresent = true\n" + expect +
            TestSections(dir_.path()) + "enabled = false\n");
  }

  std::unique_ptr<DaemonProcess> Start(const std::filesystem::path& config,
                                       const std::string& log = "log") const {
    DaemonProcess::Options o;
    o.args = {"--config", config.string(), "--listen", "127.0.0.1:0"};
    return std::make_unique<DaemonProcess>(o, dir_.path() / log);
  }

  struct Checked {
    int rc = -1;
    std::string out;
  };
  Checked Check(const std::filesystem::path& config, const std::string& output = "line") const {
    DaemonProcess::Options o;
    o.args = {"--config", config.string(), "--check", "--output", output};
    o.stdout_file = dir_.path() / "check.out";
    DaemonProcess c(o, dir_.path() / "check.log");
    Checked r;
    r.rc = c.wait(20s).value_or(-1);
    r.out = ReadFile(dir_.path() / "check.out");
    return r;
  }

  static std::string Body(std::uint16_t port) {
    auto r = Request(port, "GET", "/metrics");
    return r ? r->body : "";
  }
  static std::optional<double> Value(std::uint16_t port, const std::string& series) {
    return SampleValue(Body(port), series);
  }
  // Whether the daemon reads the fan's first reading (the simulator reads
  // its files first 250 ms after it starts).
  static bool ReadsTheFan(std::uint16_t port) {
    return Eventually(
        [&] { return Value(port, "nodewatch_bmc_fan_speed_rpm{sensor=\"FAN1\"}") == 5000.0; }, 10s);
  }

  TempDir dir_;
  std::unique_ptr<IpmiSim> sim_;
};

constexpr const char* kFanState = "nodewatch_bmc_sensor_state{sensor=\"FAN1\",type=\"Fan\"}";
constexpr const char* kPsuState =
    "nodewatch_bmc_sensor_state{sensor=\"PSU1 Status\",type=\"Power Supply\"}";

TEST_F(BmcSim, FailingAFanAndAPsuTurnsTheirStatesAndTheCheckAndRestoringThemTurnsBack) {
  auto config = Config();
  auto d = Start(config);
  auto port = d->port();
  ASSERT_TRUE(port) << d->log();
  ASSERT_TRUE(ReadsTheFan(*port)) << d->log() << Body(*port);
  const std::string body = Body(*port);
  EXPECT_EQ(SampleValue(body, "nodewatch_bmc_up"), 1);
  EXPECT_EQ(SampleValue(body, "nodewatch_bmc_temperature_celsius{sensor=\"Inlet Temp\"}"), 30);
  EXPECT_EQ(SampleValue(body, "nodewatch_bmc_power_watts{sensor=\"PSU1 Input\"}"), 350);
  EXPECT_NEAR(SampleValue(body, "nodewatch_bmc_voltage_volts{sensor=\"P12V\"}").value_or(0), 12,
              1e-9);
  EXPECT_EQ(SampleValue(body, kFanState), 0);
  EXPECT_EQ(SampleValue(body, kPsuState), 0);
  EXPECT_NE(body.find("nodewatch_bmc_info{firmware=\"3.21\",manufacturer=\"MontaVista Software, "
                      "Inc.\",product=\"3842\",ipmi_version=\"2.0\",interface=\"lan\"} 1\n"),
            std::string::npos)
      << body;
  EXPECT_EQ(SampleValue(body, "nodewatch_bmc_sel_free_bytes"), 16000);
  // The simulator has no DCMI: no node power.
  EXPECT_EQ(body.find("nodewatch_bmc_node_power_watts"), std::string::npos);

  // FreeIPMI's own tool reads the same readings and states.
  auto freeipmi = sim_->FreeIpmiSensors();
  EXPECT_EQ(freeipmi["FAN1"], std::make_pair(std::string("Nominal"), std::string("5000.00")));
  EXPECT_EQ(freeipmi["Inlet Temp"], std::make_pair(std::string("Nominal"), std::string("30.00")));
  EXPECT_EQ(freeipmi["P12V"].second, "12.00");
  EXPECT_EQ(freeipmi["PSU1 Status"].first, "Nominal");
  Checked ok = Check(config);
  EXPECT_EQ(ok.rc, 0) << ok.out;
  EXPECT_EQ(ok.out, "healthy\n");

  // Both the fan's and the PSU's state at `v`.
  auto both = [&](double v) {
    return Eventually(
        [&] {
          std::string b = Body(*port);
          return SampleValue(b, kFanState) == v && SampleValue(b, kPsuState) == v;
        },
        10s);
  };
  // The fan below its critical threshold (300 < 500 RPM), the PSU failed.
  const auto failed_at = std::chrono::steady_clock::now();
  sim_->set("fan1", 3);
  sim_->set("psu1", 3);
  ASSERT_TRUE(both(2)) << Body(*port);
  // Within two intervals (1 s each) and the simulator's poll (250 ms).
  EXPECT_LE(std::chrono::steady_clock::now() - failed_at, 2250ms + 500ms);
  EXPECT_EQ(Value(*port, "nodewatch_bmc_fan_speed_rpm{sensor=\"FAN1\"}"), 300);
  freeipmi = sim_->FreeIpmiSensors();
  EXPECT_EQ(freeipmi["FAN1"].first, "Critical");
  EXPECT_EQ(freeipmi["PSU1 Status"].first, "Critical");
  Checked bad = Check(config);
  EXPECT_EQ(bad.rc, 1) << bad.out;
  EXPECT_NE(bad.out.find("platform/sensor_critical FAN1 -> inspect_hardware"), std::string::npos)
      << bad.out;
  EXPECT_NE(bad.out.find("platform/sensor_critical PSU1 Status -> inspect_hardware"),
            std::string::npos)
      << bad.out;
  auto health = Request(*port, "GET", "/-/node-health");
  ASSERT_TRUE(health);
  EXPECT_NE(health->body.find("\"detail\":\"Fan sensor critical, reading 300 RPM\""),
            std::string::npos)
      << health->body;

  sim_->set("fan1", 50);
  sim_->set("psu1", 1);
  ASSERT_TRUE(both(0)) << Body(*port);
  Checked back = Check(config);
  EXPECT_EQ(back.rc, 0) << back.out;
}

// nodewatch_version_info has the kernel's release and the BMC's firmware; a
// wrong [expect.versions] pin makes --check unhealthy, naming the component
// and both versions, and the right one does not.
TEST_F(BmcSim, AVersionPinDecidesTheCheckNamingBothVersions) {
  const std::string kernel = ReadFile("/proc/sys/kernel/osrelease")
                                 .substr(0, ReadFile("/proc/sys/kernel/osrelease").find('\n'));
  auto wrong = Config("lan", "[expect.versions]\nkernel = \"" + kernel +
                                 "\"\nbmc_firmware = [\"3.19\", \"3.20\"]\n");
  auto d = Start(wrong);
  auto port = d->port();
  ASSERT_TRUE(port) << d->log();
  const std::string bmc =
      "nodewatch_version_info{component=\"bmc_firmware\",device=\"\",version=\"3.21\"}";
  ASSERT_TRUE(Eventually([&] { return Value(*port, bmc) == 1.0; }, 10s)) << Body(*port);
  EXPECT_EQ(Value(*port, "nodewatch_version_info{component=\"kernel\",device=\"\",version=\"" +
                             kernel + "\"}"),
            1);
  Checked bad = Check(wrong, "json");
  EXPECT_EQ(bad.rc, 1) << bad.out;
  EXPECT_NE(
      bad.out.find("{\"subsystem\":\"versions\",\"component\":\"bmc_firmware\",\"problem\":"
                   "\"version_mismatch\",\"action\":\"drain\",\"detail\":\"runs 3.21, expected "
                   "3.19 or 3.20\"}"),
      std::string::npos)
      << bad.out;
  EXPECT_EQ(bad.out.find("\"component\":\"kernel\""), std::string::npos) << bad.out;

  // The right pin, read on reload.
  auto right =
      Config("lan", "[expect.versions]\nkernel = \"" + kernel + "\"\nbmc_firmware = \"3.21\"\n");
  d->signal(SIGHUP);
  ASSERT_TRUE(d->wait_log("configuration reloaded")) << d->log();
  EXPECT_TRUE(Eventually([&] { return Check(right).rc == 0; }, 10s)) << Check(right).out;
}

// IPMI 2.0 (RMCP+, cipher suite 3) reads the same BMC.
TEST_F(BmcSim, IpmiTwoPointZeroReadsTheSameSensors) {
  auto d = Start(Config("lanplus"));
  auto port = d->port();
  ASSERT_TRUE(port) << d->log();
  ASSERT_TRUE(ReadsTheFan(*port)) << d->log() << Body(*port);
  const std::string body = Body(*port);
  EXPECT_EQ(SampleValue(body, "nodewatch_bmc_up"), 1);
  EXPECT_NE(body.find("interface=\"lanplus\""), std::string::npos);
}

// A stopped BMC: /metrics answers in under a second throughout, bmc_up
// goes to 0, the textfile collector keeps its interval, and the BMC is
// read again once it answers.
TEST_F(BmcSim, AStoppedBmcLeavesTheScrapeFastAndTheOtherCollectorsOnTime) {
  auto config = Config();
  auto d = Start(config);
  auto port = d->port();
  ASSERT_TRUE(port) << d->log();
  ASSERT_TRUE(Eventually([&] { return Value(*port, "nodewatch_bmc_up") == 1.0; }, 10s)) << d->log();
  sim_->stop();
  const double textfile_before = LastSuccess(*port, "textfile").value_or(0);
  bool saw_down = false;
  ScrapeTimes t = ScrapeFor(*port, 5s, 100ms, [&](const std::string& b) {
    if (SampleValue(b, "nodewatch_bmc_up") == 0.0) saw_down = true;
  });
  EXPECT_TRUE(saw_down) << Body(*port);
  EXPECT_LT(t.worst(), 1000) << "a scrape took " << t.worst() << " ms";
  const double textfile_after = LastSuccess(*port, "textfile").value_or(0);
  // Every second for 5 s: at least 3 more.
  EXPECT_GE(textfile_after - textfile_before, 3) << "the textfile collector fell behind";
  Checked stopped = Check(config);
  EXPECT_EQ(stopped.rc, 1) << stopped.out;
  EXPECT_NE(stopped.out.find("platform/bmc_not_answering bmc"), std::string::npos) << stopped.out;
  const std::string body = Body(*port);
  EXPECT_GE(SampleValue(body,
                        "nodewatch_collector_errors_total{collector=\"bmc\",reason=\"bmc_"
                        "timeout\"}")
                .value_or(0),
            1)
      << body;
  // No sensor's last reading stays exported as if it were current.
  EXPECT_EQ(body.find("nodewatch_bmc_fan_speed_rpm"), std::string::npos) << body;

  sim_->resume();
  // The helper is started again after its backoff (1, 2, 4 s...).
  EXPECT_TRUE(Eventually([&] { return Value(*port, "nodewatch_bmc_up") == 1.0; }, 20s)) << d->log();
}

// The SEL's entries are counted once: a restart of the daemon does not
// count them again, a clear of the SEL neither resets nor lowers the
// counts, and entries after the clear are counted.
TEST_F(BmcSim, SelEntriesAreCountedOnceAcrossRestartsAndAClear) {
  auto config = Config();
  const std::string critical =
      "nodewatch_bmc_sel_events_total{type=\"Temperature\",state=\"critical\"}";
  auto total = [&](std::uint16_t port) {
    double sum = 0;
    std::regex rx("nodewatch_bmc_sel_events_total\\{[^}]*\\} ([0-9.e+]+)");
    std::string b = Body(port);
    for (std::sregex_iterator it(b.begin(), b.end(), rx), end; it != end; ++it)
      sum += std::stod((*it)[1]);
    return sum;
  };
  double counted = 0;
  {
    auto d = Start(config);
    auto port = d->port();
    ASSERT_TRUE(port) << d->log();
    ASSERT_TRUE(Eventually([&] { return Value(*port, "nodewatch_bmc_up") == 1.0; }, 10s));
    EXPECT_NE(d->log().find("fetched the SDR"), std::string::npos) << d->log();
    // Past the critical threshold (47 > 45 °C): the simulator logs the
    // crossings of the upper non-critical and critical thresholds.
    sim_->set("inlet", 47);
    ASSERT_TRUE(Eventually([&] { return Value(*port, critical).value_or(0) >= 1; }, 10s))
        << Body(*port);
    std::this_thread::sleep_for(1500ms);  // every entry of the crossing counted
    counted = total(*port);
    EXPECT_EQ(Value(*port, "nodewatch_bmc_sel_entries"), counted);
  }
  {
    auto d = Start(config, "log2");
    auto port = d->port();
    ASSERT_TRUE(port) << d->log();
    ASSERT_TRUE(Eventually([&] { return Value(*port, "nodewatch_bmc_up") == 1.0; }, 10s));
    std::this_thread::sleep_for(1500ms);
    EXPECT_EQ(total(*port), counted) << "a restart counted the SEL again";
    // The SDR was cached by the first daemon, and the repository has not
    // changed since: not fetched again.
    EXPECT_EQ(d->log().find("fetched the SDR"), std::string::npos) << d->log();

    CmdResult clear = RunCommand("ipmi-sel -h " + sim_->host() + " -u " + IpmiSim::kUser + " -p " +
                                 IpmiSim::kPassword + " -l admin -D LAN -a md5 --clear");
    if (clear.status != 0) GTEST_SKIP() << "FreeIPMI's ipmi-sel cannot clear: " << clear.output;
    ASSERT_TRUE(Eventually([&] { return Value(*port, "nodewatch_bmc_sel_entries") == 0.0; }, 5s));
    EXPECT_EQ(total(*port), counted) << "a clear changed the counts";
    // Back under, and over again: new entries after the clear.
    sim_->set("inlet", 30);
    std::this_thread::sleep_for(600ms);
    sim_->set("inlet", 47);
    EXPECT_TRUE(Eventually([&] { return total(*port) > counted; }, 10s)) << Body(*port);
    EXPECT_TRUE(Eventually(
        [&] {
          return total(*port) == counted + Value(*port, "nodewatch_bmc_sel_entries").value_or(0);
        },
        5s))
        << Body(*port);
  }
}

}  // namespace
}  // namespace nodewatch::testing
