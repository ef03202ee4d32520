// The node verdict end to end: the e2e node (tests/support/e2e_node.hpp),
// made healthy, with an expected inventory; then one fault at a time, each
// the way the node would show it (the fake NVML's scenario, a sysfs
// attribute, a kernel log record, a probe file that blocks), and what
// `nodewatchd --check` and /-/node-health say of it.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <regex>
#include <thread>

#include "support/daemon_process.hpp"
#include "support/e2e_node.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/lease.hpp"

namespace nodewatch {
namespace {

using namespace std::chrono_literals;
using testing::DaemonProcess;
using testing::E2ENodeArgs;
using testing::E2ENodeOptions;
using testing::Eventually;
using testing::Lease;
using testing::ReadFile;
using testing::Request;
using testing::TempDir;

// What the e2e node has, written by hand (not learned): its ten
// accelerators by model, 18 NVLinks each, the PCIe links of an NVIDIA GPU
// and of a ConnectX NIC, two InfiniBand ports.
constexpr const char* kExpected = R"([expect.accelerator]
count = 10
models = { "NVIDIA H100 80GB HBM3" = 8, "AMD Instinct MI300X OAM" = 1, "AMD Instinct MI210" = 1 }
nvlinks_active = 18

[[expect.pcie]]
device = "0000:04:00.0"
width = 16

[[expect.pcie]]
device = "0000:05:00.0"
width = 16
speed = "32GT/s"

[[expect.fabric]]
device = "mlx5_0"
port = 1
rate = "200Gb/s"

[[expect.fabric]]
device = "mlx4_0"
port = 1
)";

// The e2e node, healthy: its kernel log without the records of its faults
// (the first four: boot, command line, the NVIDIA module, EDAC), its
// memory controllers' uncorrected counts at 0, its GPUs without remapped
// rows pending or failed.
class VerdictNode {
 public:
  explicit VerdictNode(const std::string& extra_config = "",
                       const std::string& expect = kExpected) {
    std::string log = ReadFile(testing::kE2EFixtures / "kernel" / "kmsg-node.txt");
    std::size_t end = 0;
    for (int i = 0; i < 4; ++i) end = log.find('\n', end) + 1;
    kmsg_ = dir_.write("kmsg.txt", log.substr(0, end));
    dir_.write("expect.toml", expect);
    E2ENodeOptions o;
    o.kmsg = kmsg_;
    o.extra_config =
        "[expect]\nfile = \"" + (dir_.path() / "expect.toml").string() + "\"\n" + extra_config;
    args_ = E2ENodeArgs(dir_, o);
    for (const auto& e :
         std::filesystem::recursive_directory_iterator(sys() / "devices/system/edac"))
      if (e.path().filename() == "ue_count" || e.path().filename() == "dimm_ue_count")
        std::ofstream(e.path()) << "0\n";
    scenario_ = dir_.write("nvml.scenario",
                           ReadFile(testing::E2ENvmlScenario()) + "remapped_rows * 0 0 0 0\n");
  }

  const TempDir& dir() const { return dir_; }
  std::filesystem::path sys() const { return dir_.path() / "node" / "sys"; }
  // One more line for the fake NVML (read again at each nvmlInit).
  void add_nvml(const std::string& line) {
    std::ofstream(scenario_, std::ios::app) << line << "\n";
  }
  void add_kmsg(const std::string& record) {
    std::ofstream(kmsg_, std::ios::app) << record << "\n";
  }
  void write_sys(const std::string& rel, const std::string& value) {
    std::filesystem::path p = sys() / rel;
    ASSERT_TRUE(std::filesystem::exists(p)) << p;
    std::ofstream(p) << value << "\n";
  }

  // IMEX configured (tests/fixtures/imex): a three-node domain of which
  // this node is the first, nvidia-imex.service enabled or not, and what
  // the fake nvidia-imex-ctl answers: the daemon's state and the domain.
  void imex(const std::string& state, const std::string& domain = "domain-up.json",
            bool enabled = true) {
    const std::filesystem::path node = dir_.path() / "node";
    std::ofstream(node / "etc/nvidia-imex/config.cfg", std::ios::app)
        << "BIND_INTERFACE_IP=198.18.0.1\n";
    std::ofstream(node / "etc/nvidia-imex/nodes_config.cfg")
        << "198.18.0.1\n198.18.0.2\n198.18.0.3\n";
    if (enabled) {
      std::filesystem::create_directories(node / "etc/systemd/system/multi-user.target.wants");
      std::ofstream(node / "etc/systemd/system/multi-user.target.wants/nvidia-imex.service");
    }
    std::ofstream(node / "bin/q.out") << state << "\n";
    std::ofstream(node / "bin/N.out") << ReadFile(testing::kE2EFixtures / "imex" / domain);
  }
  std::string imex_calls() const { return ReadFile(dir_.path() / "node/bin/calls"); }

  struct Run {
    std::optional<int> rc;
    std::string out;
    std::string log;
    double seconds = 0;
  };
  Run run(std::vector<std::string> extra, const std::vector<std::string>& env = {}) const {
    DaemonProcess::Options o;
    o.args = args_;
    o.args.insert(o.args.end(), extra.begin(), extra.end());
    o.env = env;
    o.env.push_back("FAKE_NVML_SCENARIO=" + scenario_.string());
    static int n = 0;
    o.stdout_file = dir_.path() / ("out-" + std::to_string(++n));
    auto start = std::chrono::steady_clock::now();
    DaemonProcess d(o, dir_.path() / ("log-" + std::to_string(n)));
    Run r;
    r.rc = d.wait(20s);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.out = ReadFile(o.stdout_file);
    r.log = d.log();
    return r;
  }
  Run check(const std::string& output = "table") const {
    return run({"--check", "--local", "--output", output});
  }
  const std::vector<std::string>& args() const { return args_; }
  // Replaces `from` (which must be there) in the configuration.
  void edit_config(const std::string& from, const std::string& to) {
    std::string config = ReadFile(args_[1]);
    auto at = config.find(from);
    ASSERT_NE(at, std::string::npos) << from << "\n" << config;
    config.replace(at, from.size(), to);
    std::ofstream(args_[1]) << config;
  }
  const std::filesystem::path& scenario() const { return scenario_; }

 private:
  TempDir dir_;
  std::filesystem::path kmsg_;
  std::filesystem::path scenario_;
  std::vector<std::string> args_;
};

std::string JsonProblem(const std::string& subsystem, const std::string& component,
                        const std::string& problem, const std::string& action) {
  return "{\"subsystem\":\"" + subsystem + "\",\"component\":\"" + component + "\",\"problem\":\"" +
         problem + "\",\"action\":\"" + action + "\"";
}

TEST(NodeVerdict, TheHealthyNodeWithItsExpectedFileIsHealthy) {
  VerdictNode node;
  auto r = node.check();
  ASSERT_EQ(r.rc, 0) << r.out << r.log;
  EXPECT_NE(r.out.find("node: healthy"), std::string::npos) << r.out;
  for (std::string_view s : {"accelerator", "nvlink", "pcie", "fabric", "nic", "storage", "kernel",
                             "platform", "exporter"})
    EXPECT_TRUE(std::regex_search(r.out, std::regex("\n" + std::string(s) + " +healthy\n")))
        << s << "\n"
        << r.out;
  // For the notes: a Slurm prolog's budget is seconds.
  std::printf("--check on the e2e node (one local round, process start to exit): %.2f s\n",
              r.seconds);
  EXPECT_LT(r.seconds, 5.0) << "far above the 2 s goal";

  auto j = node.check("json");
  ASSERT_EQ(j.rc, 0) << j.out;
  EXPECT_EQ(j.out.rfind("{\"status\":\"healthy\"", 0), 0u) << j.out;
  EXPECT_NE(j.out.find("\"problems\":[]"), std::string::npos) << j.out;
}

struct Fault {
  const char* name;
  std::function<void(VerdictNode&)> make;
  const char* subsystem;
  const char* component;
  const char* problem;
  const char* action;
};

void PrintTo(const Fault& f, std::ostream* os) {
  *os << f.name;
}

class NodeVerdictFault : public ::testing::TestWithParam<Fault> {};

TEST_P(NodeVerdictFault, NamesTheSubsystemTheProblemAndTheAction) {
  const Fault& f = GetParam();
  VerdictNode node;
  f.make(node);
  auto table = node.check();
  std::printf("%s", table.out.c_str());
  ASSERT_EQ(table.rc, 1) << table.out << table.log;
  EXPECT_TRUE(std::regex_search(
      table.out, std::regex("\n" + std::string(f.subsystem) + " +unhealthy +(.*\n[ ]+)*" +
                            std::regex_replace(std::string(f.component),
                                               std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
                            " +" + f.problem + " +" + f.action + " ")))
      << table.out;
  EXPECT_NE(table.out.find("node: unhealthy"), std::string::npos) << table.out;
  auto json = node.check("json");
  ASSERT_EQ(json.rc, 1) << json.out;
  EXPECT_EQ(json.out.rfind("{\"status\":\"unhealthy\"", 0), 0u) << json.out;
  EXPECT_NE(json.out.find(JsonProblem(f.subsystem, f.component, f.problem, f.action)),
            std::string::npos)
      << json.out;
  // Nothing else is wrong with the node.
  EXPECT_EQ(std::count(json.out.begin(), json.out.end(), '{') - 2, 1) << json.out;
}

INSTANTIATE_TEST_SUITE_P(
    E2ENode, NodeVerdictFault,
    ::testing::Values(
        Fault{"GpuLost", [](VerdictNode& n) { n.add_nvml("devices 7"); }, "accelerator",
              "NVIDIA H100 80GB HBM3", "missing", "reboot"},
        Fault{"NvlinkDown", [](VerdictNode& n) { n.add_nvml("nvlink_down 2 5"); }, "nvlink",
              "0000:3a:00.0", "links_inactive", "reset_gpu"},
        Fault{"PcieLinkAtX8",
              [](VerdictNode& n) {
                n.write_sys("bus/pci/devices/0000:04:00.0/current_link_width", "8");
              },
              "pcie", "0000:04:00.0", "width_below_expected", "inspect_hardware"},
        Fault{
            "IbPortDown",
            [](VerdictNode& n) { n.write_sys("class/infiniband/mlx5_0/ports/1/state", "1: DOWN"); },
            "fabric", "mlx5_0/1", "port_down", "check_cable"},
        Fault{"Xid79InTheKernelLog",
              [](VerdictNode& n) {
                n.add_kmsg(
                    "4,4,2650118032,-;NVRM: Xid (PCI:0000:8a:00): 79, pid='<unknown>', "
                    "name=<unknown>, GPU has fallen off the bus.");
              },
              "kernel", "0000:8a:00.0", "xid_79", "reboot"},
        Fault{"ImexDaemonWaitingForPeers",
              [](VerdictNode& n) { n.imex("WAITING_FOR_PEERS", "domain-degraded.json"); }, "nvlink",
              "imex", "imex_not_ready", "drain"},
        Fault{"DriverAsksForAReboot", [](VerdictNode& n) { n.add_nvml("recovery_action 6 2"); },
              "accelerator", "0000:7a:00.0", "driver_requests_node_reboot", "reboot"}),
    [](const ::testing::TestParamInfo<Fault>& i) { return std::string(i.param.name); });

// IMEX both ways: configured and ready in a degraded domain (a peer down
// is the peer's problem, not this node's), and installed but not
// configured, where the ctl would say the daemon is unavailable: healthy,
// and the ctl never run.
TEST(NodeVerdict, ImexIsJudgedOnlyWhereItIsConfiguredAndOnlyForThisNode) {
  VerdictNode ready;
  ready.imex("READY", "domain-degraded.json");
  auto r = ready.check();
  EXPECT_EQ(r.rc, 0) << r.out << r.log;
  EXPECT_NE(ready.imex_calls().find(" -q"), std::string::npos);
  auto m = ready.run({"--once"});
  ASSERT_EQ(m.rc, 0) << m.log;
  for (const char* line : {"nodewatch_imex_daemon_state{state=\"ready\"} 1",
                           "nodewatch_imex_domain_state{state=\"degraded\"} 1",
                           "nodewatch_imex_peer_connected{peer=\"198.18.0.3\"} 0",
                           "nodewatch_imex_domain_nodes_ready 2"})
    EXPECT_NE(m.out.find(line), std::string::npos) << line << "\n" << m.out;

  VerdictNode installed;
  std::ofstream(installed.dir().path() / "node/bin/q.out") << "UNAVAILABLE\n";
  auto h = installed.check();
  EXPECT_EQ(h.rc, 0) << h.out << h.log;
  auto n = installed.run({"--once"});
  EXPECT_EQ(n.out.find("nodewatch_imex_daemon_state"), std::string::npos);
  EXPECT_EQ(installed.imex_calls(), "");

  // Configured, the daemon not running, its unit not enabled (started by a
  // job's prolog): not this node's problem between jobs.
  VerdictNode per_job;
  per_job.imex("", "domain-up.json", false);
  std::ofstream(per_job.dir().path() / "node/bin/q.out")
      << ReadFile(testing::kE2EFixtures / "imex" / "unreachable.txt");
  std::ofstream(per_job.dir().path() / "node/bin/q.rc") << "1\n";
  auto j = per_job.check();
  EXPECT_EQ(j.rc, 0) << j.out << j.log;
}

TEST(NodeVerdict, WhatItLearnsFromTheHealthyNodeIsHealthyFedBack) {
  VerdictNode node;
  auto learned = node.run({"--learn-expected", "--local"});
  ASSERT_EQ(learned.rc, 0) << learned.out << learned.log;
  for (const char* line : {"count = 10", "nvlinks_active = 18", "device = \"0000:04:00.0\"",
                           "device = \"mlx5_0\"", "rate = \"200Gb/s\"", "speed = \"32GT/s\""})
    EXPECT_NE(learned.out.find(line), std::string::npos) << line << "\n" << learned.out;
  // The down port is not expected, and the file says so.
  EXPECT_EQ(learned.out.find("device = \"mlx5_2\""), std::string::npos) << learned.out;
  EXPECT_NE(learned.out.find("mlx5_2/1 is not active"), std::string::npos) << learned.out;

  VerdictNode fed_back("", learned.out);
  auto r = fed_back.check();
  EXPECT_EQ(r.rc, 0) << learned.out << r.out << r.log;
  // And it still sees a fault in what it learned: the NIC's link at x8.
  fed_back.write_sys("bus/pci/devices/0000:05:00.0/current_link_width", "8");
  auto bad = fed_back.check("json");
  EXPECT_EQ(bad.rc, 1) << bad.out;
  EXPECT_NE(
      bad.out.find(JsonProblem("pcie", "0000:05:00.0", "width_below_expected", "inspect_hardware")),
      std::string::npos)
      << bad.out;
}

TEST(NodeVerdict, NothingToDecideWithoutTheCollectorsItNeeds) {
  // The fabric is expected, but the interconnect collector is off: the
  // verdict cannot say, and --check exits 2, neither 0 nor 1.
  VerdictNode node;
  node.edit_config("[collectors.interconnect]\n", "[collectors.interconnect]\nenabled = false\n");
  auto r = node.check();
  EXPECT_EQ(r.rc, 2) << r.out << r.log;
  EXPECT_TRUE(
      std::regex_search(r.out, std::regex("\nfabric +unknown +interconnect +not_collected +none ")))
      << r.out;
  EXPECT_NE(r.out.find("node: unknown"), std::string::npos) << r.out;
}

// A running daemon: --check asks it (its /-/node-health) instead of opening
// NVML a second time; /-/node-health is 200 or 503 with the problems.
TEST(NodeVerdict, CheckAsksTheRunningDaemonAndNodeHealthFollowsTheFault) {
  TempDir scratch;
  std::filesystem::path probe_dir = scratch.path() / "data";
  std::filesystem::create_directories(probe_dir);
  VerdictNode node("[[collectors.storage.probe]]\npath = \"" + probe_dir.string() +
                   "\"\noperations = [\"stat\", \"read\"]\ninterval = \"500ms\"\n"
                   "timeout = \"300ms\"\n");
  // The e2e configuration collects storage once an hour: faster here, so
  // that the probe's state reaches the verdict.
  node.edit_config("[collectors.storage]\ninterval = \"1h\"",
                   "[collectors.storage]\ninterval = \"500ms\"\ntimeout = \"400ms\"");
  std::filesystem::path inits = scratch.path() / "nvml-inits";
  DaemonProcess::Options o;
  o.args = node.args();
  o.args.insert(o.args.end(), {"--listen", "127.0.0.1:0"});
  o.env = {"FAKE_NVML_SCENARIO=" + node.scenario().string(),
           "FAKE_NVML_INIT_LOG=" + inits.string()};
  DaemonProcess d(o, scratch.path() / "log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  auto health = [&] { return Request(*port, "GET", "/-/node-health"); };
  ASSERT_TRUE(Eventually(
      [&] {
        auto r = health();
        return r && r->status == 200;
      },
      10s))
      << (health() ? health()->body : "no answer") << d.log();
  auto ok = health();
  EXPECT_EQ(ok->headers["content-type"], "application/json");
  EXPECT_EQ(ok->headers["nodewatch-node-status"], "healthy");
  EXPECT_EQ(ok->body.rfind("{\"status\":\"healthy\"", 0), 0u) << ok->body;
  auto metrics = Request(*port, "GET", "/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("nodewatch_node_healthy{subsystem=\"storage\"} 1\n"),
            std::string::npos);
  EXPECT_NE(
      metrics->body.find(
          "nodewatch_node_expected{subsystem=\"accelerator\",component=\"\",what=\"count\"} 10\n"),
      std::string::npos);
  const std::string before = ReadFile(inits);
  ASSERT_EQ(std::count(before.begin(), before.end(), '\n'), 1) << before;

  // Over the daemon's check socket (tests/support/daemon_process.hpp puts
  // it in the node's directory).
  const std::string socket = (node.dir().path() / "check.sock").string();
  auto ask = [&](const std::string& output) {
    return node.run({"--check", "--output", output}, {"FAKE_NVML_INIT_LOG=" + inits.string()});
  };
  auto asked = ask("table");
  EXPECT_EQ(asked.rc, 0) << asked.out << asked.log;
  EXPECT_NE(asked.out.find("source: the running daemon on " + socket), std::string::npos)
      << asked.out;
  EXPECT_EQ(ReadFile(inits), before) << "--check opened NVML although the daemon runs";
  auto learned = node.run({"--learn-expected"}, {"FAKE_NVML_INIT_LOG=" + inits.string()});
  EXPECT_EQ(learned.rc, 0) << learned.log;
  EXPECT_NE(learned.out.find("from the running daemon on " + socket), std::string::npos)
      << learned.out;
  EXPECT_NE(learned.out.find("nvlinks_active = 18"), std::string::npos) << learned.out;
  EXPECT_EQ(ReadFile(inits), before) << "--learn-expected opened NVML although the daemon runs";

  // A lease is held on the probe file: the read's open() waits, the probe
  // is stuck (as on a hung mount; the real one: hung_mount_test).
  std::filesystem::path file;
  ASSERT_TRUE(Eventually(
      [&] {
        for (const auto& e : std::filesystem::directory_iterator(probe_dir))
          if (e.path().filename().string().rfind(".nodewatch-probe-", 0) == 0) file = e.path();
        return !file.empty();
      },
      5s));
  Lease lease(file);
  ASSERT_TRUE(lease.held()) << lease.error();
  const std::string stuck =
      JsonProblem("storage", probe_dir.string(), "probe_stuck", "check_storage");
  ASSERT_TRUE(Eventually(
      [&] {
        auto r = health();
        return r && r->status == 503 && r->body.find(stuck) != std::string::npos;
      },
      15s))
      << (health() ? health()->body : "no answer");
  EXPECT_EQ(health()->headers["nodewatch-node-status"], "unhealthy");
  auto json = ask("json");
  EXPECT_EQ(json.rc, 1) << json.out << json.log;
  EXPECT_NE(json.out.find(stuck), std::string::npos) << json.out;
  auto table = ask("table");
  EXPECT_EQ(table.rc, 1);
  EXPECT_TRUE(std::regex_search(
      table.out,
      std::regex("\nstorage +unhealthy +" + probe_dir.string() + " +probe_stuck +check_storage ")))
      << table.out;
  auto line = ask("line");
  EXPECT_EQ(line.rc, 1);
  EXPECT_NE(
      line.out.find("unhealthy: storage/probe_stuck " + probe_dir.string() + " -> check_storage"),
      std::string::npos)
      << line.out;
  metrics = Request(*port, "GET", "/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("nodewatch_node_problem_info{subsystem=\"storage\",component=\"" +
                               probe_dir.string() +
                               "\",problem=\"probe_stuck\",action=\"check_storage\"} 1\n"),
            std::string::npos);
  EXPECT_NE(metrics->body.find("nodewatch_node_healthy{subsystem=\"storage\"} 0\n"),
            std::string::npos);
  EXPECT_EQ(ReadFile(inits), before) << "--check opened NVML although the daemon runs";
  lease.release();
  d.signal(SIGTERM);
  EXPECT_TRUE(d.wait(10s));
}

// While no daemon runs, anyone may bind its port and answer "healthy":
// --check never asks the port, only the check socket, and collects itself
// where no daemon serves that.
TEST(NodeVerdict, CheckNeverBelievesWhateverListensOnThePort) {
  VerdictNode node("", std::regex_replace(std::string(kExpected), std::regex("nvlinks_active = 18"),
                                          "nvlinks_active = 19"));
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::listen(listener, 8), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::uint16_t port = ntohs(addr.sin_port);
  std::atomic<int> asked{0};
  std::thread impostor([&] {
    for (;;) {
      pollfd p{listener, POLLIN, 0};
      if (::poll(&p, 1, 200) != 1) {
        if (asked.load() < 0) return;
        continue;
      }
      int c = ::accept(listener, nullptr, nullptr);
      if (c < 0) return;
      ++asked;
      const std::string body = "healthy\x1b[2J\n";
      const std::string res =
          "HTTP/1.1 200 OK\r\nNodewatch-Node-Status: healthy\r\n"
          "Content-Length: " +
          std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
      char buf[4096];
      (void)!::read(c, buf, sizeof buf);
      (void)!::write(c, res.data(), res.size());
      ::close(c);
    }
  });
  auto r = node.run({"--check", "--listen", "127.0.0.1:" + std::to_string(port)});
  const int impostor_asked = asked.load();
  asked = -1000;
  impostor.join();
  ::close(listener);
  EXPECT_EQ(impostor_asked, 0);
  EXPECT_EQ(r.rc, 1) << r.out << r.log;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\nnvlink +unhealthy +[^\n]*links_inactive")))
      << r.out;
  EXPECT_NE(r.out.find("source: one collection round in this process"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);
}

// A reload reads the expect file again: a new expectation changes the
// verdict at once; a broken file is rejected and the verdict stays.
TEST(NodeVerdict, AReloadReadsTheExpectFileAgain) {
  VerdictNode node;
  DaemonProcess::Options o;
  o.args = node.args();
  o.args.insert(o.args.end(), {"--listen", "127.0.0.1:0"});
  o.env = {"FAKE_NVML_SCENARIO=" + node.scenario().string()};
  DaemonProcess d(o, node.dir().path() / "daemon.log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  auto status = [&] {
    auto r = Request(*port, "GET", "/-/node-health");
    return r ? r->status : 0;
  };
  ASSERT_TRUE(Eventually([&] { return status() == 200; }, 10s)) << d.log();
  const std::filesystem::path expect = node.dir().path() / "expect.toml";
  std::string more = std::regex_replace(std::string(kExpected), std::regex("nvlinks_active = 18"),
                                        "nvlinks_active = 19");
  std::ofstream(expect) << more;
  d.signal(SIGHUP);
  ASSERT_TRUE(Eventually([&] { return status() == 503; }, 10s)) << d.log();
  auto r = Request(*port, "GET", "/-/node-health?format=line");
  ASSERT_TRUE(r);
  EXPECT_NE(r->body.find("nvlink/links_inactive 0000:1a:00.0 -> reset_gpu"), std::string::npos)
      << r->body;
  auto m = Request(*port, "GET", "/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("nodewatch_node_expected{subsystem=\"nvlink\",component=\"\",what=\"links_"
                         "active\"} 19\n"),
            std::string::npos);
  // A broken file: rejected whole; the running expectations stay.
  std::ofstream(expect) << "[expect.accelerator]\ncount = \"eight\"\n";
  d.signal(SIGHUP);
  ASSERT_TRUE(d.wait_log("reload rejected: .*expect.toml:2:9: expect.accelerator.count", 10s))
      << d.log();
  EXPECT_EQ(status(), 503);
  std::ofstream(expect) << kExpected;
  d.signal(SIGHUP);
  ASSERT_TRUE(Eventually([&] { return status() == 200; }, 10s)) << d.log();
  d.signal(SIGTERM);
  EXPECT_TRUE(d.wait(10s));
}

}  // namespace
}  // namespace nodewatch
