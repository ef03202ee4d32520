// The imex collector: IMEX's files and nvidia-imex-ctl's answers parsed
// (tests/fixtures/imex/README.md says what each fixture models), hostile
// answers refused, and the collector over a node of its own: nothing at
// all, and nothing run, where IMEX is not configured; the daemon's and the
// domain's state where it is, through the fake ctl; a ctl that hangs,
// fails or is missing, a command service turned off, a ComputeDomain's
// socket.

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "config.hpp"
#include "imex/imex_collector.hpp"
#include "imex/imex_metrics.hpp"
#include "imex/imex_parse.hpp"
#include "nodewatch/command.hpp"
#include "support/collector_test.hpp"
#include "support/daemon_process.hpp"

namespace nodewatch::imex {
namespace {

using namespace std::chrono_literals;
using nodewatch::testing::CollectOnce;
using nodewatch::testing::ErrorCount;
using nodewatch::testing::HasSeries;
using nodewatch::testing::ReadFile;
using nodewatch::testing::TempDir;
using nodewatch::testing::Value;
namespace fs = std::filesystem;

fs::path Fixture(const std::string& name) {
  return nodewatch::testing::fixtures_dir() / "imex" / name;
}

// --- parsing

TEST(ImexParse, ConfigTakesTheKeysThatSayWhereIMEXIs) {
  Config c = parse_config(ReadFile(Fixture("config.cfg")));
  EXPECT_EQ(c.nodes_file, "@NODES@");
  EXPECT_TRUE(c.command_enabled);
  EXPECT_EQ(c.command_port, "50005");
  EXPECT_EQ(c.command_socket, "");
  EXPECT_EQ(c.bind_ip, "");

  Config d = parse_config(
      "# nothing set\n\n IMEX_CMD_ENABLED = 0 \nIMEX_CMD_UNIX_DOMAIN_PATH=/run/imex.sock # ours\n"
      "BIND_INTERFACE_IP=198.18.0.1\nIMEX_NODE_CONFIG_FILE=\nnot a line\n=1\n");
  EXPECT_EQ(d.nodes_file, kDefaultNodesFile);  // empty: the default
  EXPECT_FALSE(d.command_enabled);
  EXPECT_EQ(d.command_socket, "/run/imex.sock");
  EXPECT_EQ(d.bind_ip, "198.18.0.1");
  EXPECT_FALSE(parse_config("").command_enabled);
}

TEST(ImexParse, NodesAreTheLinesThatAreNotCommentsOrBlank) {
  EXPECT_EQ(parse_nodes("## Please replace below fake IPs\n198.18.0.1\n\n  198.18.0.2  \n"
                        "compute-domain-daemon-0000 # a host name\n\t\n"),
            (std::vector<std::string>{"198.18.0.1", "198.18.0.2", "compute-domain-daemon-0000"}));
  EXPECT_TRUE(parse_nodes("# only a comment\n\n").empty());
  std::string many;
  for (int i = 0; i < 5000; ++i) many += "198.18.1." + std::to_string(i % 250) + "\n";
  EXPECT_EQ(parse_nodes(many).size(), kMaxMembers);
}

TEST(ImexParse, TheDaemonsStateOrWhyItGaveNone) {
  EXPECT_EQ(parse_state("READY\n", 0).state, "ready");
  EXPECT_EQ(parse_state("WAITING_FOR_PEERS\n", 0).state, "waiting_for_peers");
  EXPECT_EQ(parse_state("  INIT_GPU ", 0).state, "init_gpu");
  EXPECT_EQ(parse_state("UNAVAILABLE\n", 0).state, "unavailable");
  StateAnswer u = parse_state(ReadFile(Fixture("unreachable.txt")), 1);
  EXPECT_EQ(u.state, "unreachable");
  EXPECT_EQ(u.detail.rfind("Query Status returned error code: 14", 0), 0u) << u.detail;
  EXPECT_EQ(parse_state("", -1).state, "unreachable");  // no answer in time
  EXPECT_EQ(parse_state("connect: Permission denied\n", 1).state, "no_permission");
  // A word it does not know, even with exit 0, and NVIDIA's "not
  // configured" answer: not a state.
  StateAnswer q = parse_state("Failed to read node configuration file\n", 0);
  EXPECT_EQ(q.state, "query_failed");
  EXPECT_EQ(q.detail, "Failed to read node configuration file");
  EXPECT_EQ(parse_state("READY\n", 2).state, "query_failed");
  EXPECT_EQ(parse_state("", 255).detail, "exit status 255");
}

TEST(ImexParse, TheDomainItsMembersAndTheirConnections) {
  std::string why;
  std::optional<Domain> d = parse_domain(ReadFile(Fixture("domain-degraded.json")), &why);
  ASSERT_TRUE(d) << why;
  EXPECT_EQ(d->status, "degraded");
  ASSERT_EQ(d->members.size(), 3u);
  EXPECT_EQ(d->members[0].host, "198.18.0.1");
  EXPECT_EQ(d->members[0].status, "ready");
  EXPECT_EQ(d->members[0].version, "580.95.05");
  ASSERT_EQ(d->members[0].connections.size(), 3u);
  EXPECT_EQ(d->members[0].connections[2].host, "198.18.0.3");
  EXPECT_EQ(d->members[0].connections[2].status, "INVALID");
  EXPECT_EQ(d->members[2].status, "unavailable");

  // Members in the order of their index, as numbers; a status nodewatch
  // does not know is "unknown"; escapes decoded.
  d = parse_domain(R"({"nodes":{"10":{"status":"READY","host":"a"},)"
                   R"("9":{"status":"NEW_STATE","host":"b","hostName":"n\u00e9\ud83d\ude00\/x"}},)"
                   R"("status":"up"})",
                   &why);
  ASSERT_TRUE(d) << why;
  EXPECT_EQ(d->status, "up");
  ASSERT_EQ(d->members.size(), 2u);
  EXPECT_EQ(d->members[0].index, "9");
  EXPECT_EQ(d->members[0].status, "unknown");
  EXPECT_EQ(d->members[0].host_name, "n\xc3\xa9\xf0\x9f\x98\x80/x");
  EXPECT_EQ(d->members[1].index, "10");
}

// The largest domain it is built for: 144 members, each connected to
// every other (1.5 MB, about 84,000 values).
TEST(ImexParse, ADomainOf144MembersIsRead) {
  std::string json = "{\"nodes\":{";
  auto host = [](int i) {
    return "198.18." + std::to_string(i / 200) + "." + std::to_string(i % 200 + 1);
  };
  for (int i = 0; i < 144; ++i) {
    json += (i ? ",\"" : "\"") + std::to_string(i) + "\":{\"status\":\"READY\",\"host\":\"" +
            host(i) + "\",\"connections\":{";
    for (int j = 0; j < 144; ++j)
      json += (j ? ",\"" : "\"") + std::to_string(j) + "\":{\"host\":\"" + host(j) +
              "\",\"status\":\"CONNECTED\",\"changed\":false}";
    json += "},\"changed\":false,\"version\":\"580.95.05\",\"hostName\":\"node-" +
            std::to_string(i) + "\"}";
  }
  json += "},\"timestamp\":\"12/6/2026 17:40:02.118\",\"status\":\"UP\"}";
  std::string why;
  std::optional<Domain> d = parse_domain(json, &why);
  ASSERT_TRUE(d) << why;
  ASSERT_EQ(d->members.size(), 144u);
  EXPECT_EQ(d->members[143].connections.size(), 144u);
  EXPECT_EQ(d->members[143].host_name, "node-143");
  // A flood of small values is refused before it costs more.
  std::string flood = "[";
  for (int i = 0; i < 200000; ++i) flood += i ? ",0" : "0";
  EXPECT_FALSE(parse_domain(flood + "]", &why));
  EXPECT_NE(why.find("too many values"), std::string::npos) << why;
}

TEST(ImexParse, AnythingElseIsRefusedWithAReason) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "unexpected end"},
      {"READY\n", "bad number"},
      {R"({"status":"UP"} x)", "trailing bytes"},
      {R"({"status":"UP")", "unexpected end"},
      {R"({"status":"UP","nodes":{}})", ""},  // accepted: an empty domain
      {R"({"nodes":{}})", "no domain status"},
      {R"({"nodes":{},"status":"TOP_LEVEL"})", "no domain status"},
      {R"({"status":"UP"})", "no \"nodes\" object"},
      {R"({"status":"UP","nodes":[]})", "no \"nodes\" object"},
      {R"(["status","UP"])", "not a JSON object"},
      {R"({"status":"U\P","nodes":{}})", "bad escape"},
      {R"({"status":"\ud800","nodes":{}})", "lone surrogate"},
      {"{\"status\":\"a\x01\",\"nodes\":{}}", "control character"},
      {R"({"status":"UP","nodes":{"0":{"status":tru}}})", "unexpected word"},
      {R"({"status":"UP","nodes":{"0" 1}})", "expected ':'"},
      {R"({"status":"UP","nodes":{"0":1 "1":2}})", "expected ',' or '}'"},
      {R"({"a":1e99999,"status":"UP","nodes":{}})", "bad number"},
  };
  for (const auto& [json, reason] : cases) {
    std::string why;
    std::optional<Domain> d = parse_domain(json, &why);
    if (reason.empty()) {
      EXPECT_TRUE(d) << json << ": " << why;
    } else {
      EXPECT_FALSE(d) << json;
      EXPECT_NE(why.find(reason), std::string::npos) << json << ": " << why;
    }
  }
  std::string why;
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_FALSE(parse_domain(deep, &why));
  EXPECT_NE(why.find("nested too deep"), std::string::npos) << why;
  std::string wide = R"({"status":"UP","nodes":{)";
  for (std::size_t i = 0; i <= kMaxMembers; ++i)
    wide += (i ? "," : "") + ("\"" + std::to_string(i) + "\":{}");
  EXPECT_FALSE(parse_domain(wide + "}}", &why));
  EXPECT_NE(why.find("more than 1024"), std::string::npos) << why;
}

TEST(ImexParse, TheLocalMemberByItsAddress) {
  std::string why;
  std::optional<Domain> d = parse_domain(ReadFile(Fixture("domain-up.json")), &why);
  ASSERT_TRUE(d) << why;
  EXPECT_EQ(local_member(*d, "198.18.0.2", {})->index, "1");
  EXPECT_EQ(local_member(*d, " 198.18.0.3 ", {"198.18.0.1"})->index, "2");  // the bind address wins
  EXPECT_EQ(local_member(*d, "198.18.0.9", {"198.18.0.1"}), nullptr);
  EXPECT_EQ(local_member(*d, "", {"127.0.0.1", "::ffff:198.18.0.2"})->index, "1");
  EXPECT_EQ(local_member(*d, "", {"127.0.0.1", "fe80::1"}), nullptr);
  // A host with a NUL in it is no address, whatever comes before the NUL.
  std::optional<Domain> nul = parse_domain(
      R"({"nodes":{"0":{"status":"READY","host":"198.18.0.1\u0000junk"}},"status":"UP"})", &why);
  ASSERT_TRUE(nul) << why;
  EXPECT_EQ(local_member(*nul, "", {"198.18.0.1"}), nullptr);
}

// --- the collector over a node of its own

class ImexNode {
 public:
  ImexNode() {
    fs::create_directories(dir_.path() / "etc/systemd/system");
    fs::create_directories(dir_.path() / "lib/systemd/system");
    fs::create_directories(dir_.path() / "bin");
    fs::copy_file(Fixture("nvidia-imex-ctl"), ctl());
    options_.config_file = (dir_.path() / "etc/nvidia-imex/config.cfg").string();
    options_.ctl = ctl().string();
    options_.socket = (dir_.path() / "run/imex_ctrl.sock").string();
    options_.systemd_dir = (dir_.path() / "etc/systemd/system").string();
    options_.systemd_lib = {(dir_.path() / "lib/systemd/system").string()};
  }

  fs::path ctl() const { return dir_.path() / "bin/nvidia-imex-ctl"; }
  fs::path nodes() const { return dir_.path() / "etc/nvidia-imex/nodes_config.cfg"; }
  ImexOptions& options() { return options_; }

  // config.cfg from the fixture, with `extra` lines after it (later keys win).
  void configure(const std::string& extra = "") {
    std::string cfg = ReadFile(Fixture("config.cfg"));
    cfg.replace(cfg.find("@NODES@"), 7, nodes().string());
    dir_.write("etc/nvidia-imex/config.cfg", cfg + extra);
  }
  void members(const std::string& text) { dir_.write("etc/nvidia-imex/nodes_config.cfg", text); }
  void unit(const std::string& state) {
    fs::path etc = dir_.path() / "etc/systemd/system";
    dir_.write("lib/systemd/system/nvidia-imex.service", "[Service]\n");
    if (state == "enabled") {
      fs::create_directories(etc / "multi-user.target.wants");
      fs::create_symlink(dir_.path() / "lib/systemd/system/nvidia-imex.service",
                         etc / "multi-user.target.wants/nvidia-imex.service");
    } else if (state == "masked") {
      fs::create_symlink("/dev/null", etc / "nvidia-imex.service");
    }
  }
  // What the fake ctl answers.
  void answer(const std::string& query, const std::string& out, int rc = 0) {
    dir_.write("bin/" + query + ".out", out);
    dir_.write("bin/" + query + ".rc", std::to_string(rc) + "\n");
  }
  void hang(const std::string& query) { dir_.write("bin/" + query + ".hang", ""); }
  std::string calls() const { return ReadFile(dir_.path() / "bin/calls"); }

  // A ready daemon in a healthy three-node domain, this node the first.
  void healthy() {
    configure("BIND_INTERFACE_IP=198.18.0.1\n");
    members("198.18.0.1\n198.18.0.2\n198.18.0.3\n");
    unit("enabled");
    answer("q", "READY\n");
    answer("N", ReadFile(Fixture("domain-up.json")));
  }

  MetricSink collect(std::chrono::milliseconds timeout = 5s) {
    ImexCollector c(options_);
    MetricSink sink(c.metrics());
    CollectOnce(c, sink, timeout);
    return sink;
  }

 private:
  TempDir dir_;
  ImexOptions options_;
};

double State(const MetricSink& s, const std::string& state) {
  return Value(s, families::kDaemonState.name, {state});
}
double Domain(const MetricSink& s, const std::string& state) {
  return Value(s, families::kDomainState.name, {state});
}

TEST(ImexCollector, TableIsWellFormed) {
  nodewatch::testing::ExpectWellFormedTable(imex_metric_table(), "nodewatch_imex_");
}

// Where IMEX is not configured, nothing is exported and nothing is run,
// whatever else is installed: DCGM's check failed exactly there.
TEST(ImexCollector, NothingAndNoQueryWhereIMEXIsNotConfigured) {
  struct Case {
    const char* name;
    void (*setup)(ImexNode&);
  };
  const Case cases[] = {
      {"nothing installed", [](ImexNode&) {}},
      {"a config and an enabled unit, no nodes file",
       [](ImexNode& n) {
         n.configure();
         n.unit("enabled");
       }},
      {"a nodes file of comments only",
       [](ImexNode& n) {
         n.configure();
         n.members("# Please replace below fake IPs\n\n");
         n.unit("enabled");
       }},
      {"members, the unit masked (IMEX in ComputeDomain pods)",
       [](ImexNode& n) {
         n.configure();
         n.members("198.18.0.1\n198.18.0.2\n");
         n.unit("masked");
       }},
      {"a regular file where the socket would be",
       [](ImexNode& n) {
         n.configure();
         std::ofstream(n.options().socket) << "";
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ImexNode node;
    fs::create_directories(fs::path(node.options().socket).parent_path());
    c.setup(node);
    node.answer("q", "UNAVAILABLE\n");
    MetricSink s = node.collect();
    EXPECT_EQ(s.sample_count(), 0u);
    EXPECT_TRUE(s.errors().empty());
    EXPECT_EQ(node.calls(), "") << "the ctl was run";
  }
}

TEST(ImexCollector, AReadyDaemonInAHealthyDomain) {
  ImexNode node;
  node.healthy();
  MetricSink s = node.collect();
  EXPECT_EQ(Value(s, families::kUp.name, {}), 1);
  EXPECT_EQ(State(s, "ready"), 1);
  EXPECT_EQ(State(s, "waiting_for_peers"), 0);
  EXPECT_EQ(State(s, "unreachable"), 0);
  EXPECT_EQ(Domain(s, "up"), 1);
  EXPECT_EQ(Domain(s, "degraded"), 0);
  EXPECT_EQ(Domain(s, "unknown"), 0);
  EXPECT_EQ(Value(s, families::kNodesConfigured.name, {}), 3);
  EXPECT_EQ(Value(s, families::kDomainNodes.name, {}), 3);
  EXPECT_EQ(Value(s, families::kDomainNodesReady.name, {}), 3);
  EXPECT_EQ(Value(s, families::kPeerConnected.name, {"198.18.0.2"}), 1);
  EXPECT_EQ(Value(s, families::kPeerConnected.name, {"198.18.0.3"}), 1);
  EXPECT_FALSE(HasSeries(s, families::kPeerConnected.name, {"198.18.0.1"}));  // itself
  EXPECT_EQ(Value(s, families::kInfo.name,
                  {"nodes_file", node.options().config_file, "enabled", "580.95.05"}),
            1);
  EXPECT_TRUE(s.errors().empty());
  const std::string cfg = node.options().config_file;
  EXPECT_EQ(node.calls(), "-c " + cfg + " -q\n-c " + cfg + " -N -j\n");
}

TEST(ImexCollector, ADegradedDomainNamesThePeerItLost) {
  ImexNode node;
  node.healthy();
  node.answer("N", ReadFile(Fixture("domain-degraded.json")));
  MetricSink s = node.collect();
  EXPECT_EQ(State(s, "ready"), 1);
  EXPECT_EQ(Domain(s, "degraded"), 1);
  EXPECT_EQ(Domain(s, "up"), 0);
  EXPECT_EQ(Value(s, families::kDomainNodesReady.name, {}), 2);
  EXPECT_EQ(Value(s, families::kPeerConnected.name, {"198.18.0.2"}), 1);
  EXPECT_EQ(Value(s, families::kPeerConnected.name, {"198.18.0.3"}), 0);
}

TEST(ImexCollector, ThisNodeFoundByItsOwnAddressWithoutABindAddress) {
  ImexNode node;
  node.healthy();
  node.configure();  // BIND_INTERFACE_IP empty
  std::string json = ReadFile(Fixture("domain-up.json"));
  for (std::size_t at; (at = json.find("198.18.0.2")) != std::string::npos;)
    json.replace(at, 10, "127.0.0.1");
  node.answer("N", json);
  MetricSink s = node.collect();
  EXPECT_EQ(Value(s, families::kPeerConnected.name, {"198.18.0.1"}), 1);
  EXPECT_EQ(Value(s, families::kPeerConnected.name, {"198.18.0.3"}), 1);
  EXPECT_FALSE(HasSeries(s, families::kPeerConnected.name, {"127.0.0.1"}));

  // None of this node's addresses: no peer series, counted.
  node.answer("N", ReadFile(Fixture("domain-up.json")));
  MetricSink t = node.collect();
  EXPECT_EQ(Domain(t, "up"), 1);
  EXPECT_FALSE(HasSeries(t, families::kPeerConnected.name, {"198.18.0.2"}));
  EXPECT_EQ(ErrorCount(t, "imex_local_member_unknown"), 1u);
}

TEST(ImexCollector, ADaemonStillWaitingForItsPeers) {
  ImexNode node;
  node.healthy();
  node.answer("q", "WAITING_FOR_PEERS\n");
  node.answer("N", ReadFile(Fixture("domain-degraded.json")));
  MetricSink s = node.collect();
  EXPECT_EQ(Value(s, families::kUp.name, {}), 1);
  EXPECT_EQ(State(s, "waiting_for_peers"), 1);
  EXPECT_EQ(State(s, "ready"), 0);
}

TEST(ImexCollector, ADaemonThatDoesNotAnswerIsUnreachableAndTheDomainUnknown) {
  ImexNode node;
  node.healthy();
  node.answer("q", ReadFile(Fixture("unreachable.txt")), 1);
  MetricSink s = node.collect();
  EXPECT_EQ(Value(s, families::kUp.name, {}), 0);
  EXPECT_EQ(State(s, "unreachable"), 1);
  EXPECT_EQ(State(s, "ready"), 0);
  EXPECT_EQ(Domain(s, "unknown"), 1);
  EXPECT_FALSE(HasSeries(s, families::kDomainNodes.name, {}));
  EXPECT_EQ(ErrorCount(s, "imex_unreachable"), 1u);
  EXPECT_EQ(node.calls(), "-c " + node.options().config_file + " -q\n");  // the domain not asked
  // The info series stays, with the unit's state the verdict reads.
  EXPECT_EQ(
      Value(s, families::kInfo.name, {"nodes_file", node.options().config_file, "enabled", ""}), 1);
}

TEST(ImexCollector, ACtlThatHangsIsKilledAtTheDeadline) {
  ImexNode node;
  node.healthy();
  node.hang("q");
  auto start = std::chrono::steady_clock::now();
  MetricSink s = node.collect(500ms);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, 1500ms);
  EXPECT_EQ(State(s, "unreachable"), 1);
  EXPECT_EQ(ErrorCount(s, "imex_unreachable"), 1u);
  auto& failures = s.failures();
  ASSERT_EQ(failures.count({"imex_unreachable", "imex"}), 1u);
  EXPECT_EQ(failures.at({"imex_unreachable", "imex"}), "no answer in time");

  // The domain's answer hanging: the daemon's state stands, the domain unknown.
  ImexNode other;
  other.healthy();
  other.hang("N");
  MetricSink t = other.collect(500ms);
  EXPECT_EQ(State(t, "ready"), 1);
  EXPECT_EQ(Domain(t, "unknown"), 1);
  EXPECT_EQ(ErrorCount(t, "imex_domain_unparsable"), 1u);
  EXPECT_EQ(command::unreaped(), 0u);
}

// A ctl that crashes says nothing of the daemon: query_failed, never
// unreachable (which, with the unit enabled, drains the node).
TEST(ImexCollector, ACtlThatCrashesIsAFailedQueryNotAnUnreachableDaemon) {
  ImexNode node;
  node.healthy();
  fs::remove(node.ctl());
  std::ofstream(node.ctl()) << "#!/bin/sh\nkill -SEGV $$\n";
  fs::permissions(node.ctl(), fs::perms::owner_all);
  MetricSink s = node.collect();
  EXPECT_EQ(State(s, "query_failed"), 1);
  EXPECT_EQ(State(s, "unreachable"), 0);
  ASSERT_EQ(s.failures().count({"imex_query_failed", "imex"}), 1u);
  EXPECT_EQ(s.failures().at({"imex_query_failed", "imex"}), "killed by signal 11");
}

TEST(ImexCollector, ADomainAnswerItCannotReadIsCounted) {
  ImexNode node;
  node.healthy();
  node.answer("N", "{\"nodes\":{\"0\":");
  MetricSink s = node.collect();
  EXPECT_EQ(State(s, "ready"), 1);
  EXPECT_EQ(Domain(s, "unknown"), 1);
  EXPECT_EQ(ErrorCount(s, "imex_domain_unparsable"), 1u);
  node.answer("N", "", 1);
  EXPECT_EQ(ErrorCount(node.collect(), "imex_domain_unparsable"), 1u);
}

TEST(ImexCollector, NothingAskedWithoutTheCommandServiceOrTheCtl) {
  ImexNode off;
  off.healthy();
  off.configure("IMEX_CMD_ENABLED=0\n");
  MetricSink s = off.collect();
  EXPECT_EQ(State(s, "command_off"), 1);
  EXPECT_EQ(Value(s, families::kUp.name, {}), 0);
  EXPECT_EQ(Value(s, families::kNodesConfigured.name, {}), 3);
  EXPECT_TRUE(s.errors().empty());
  EXPECT_EQ(off.calls(), "");

  ImexNode missing;
  missing.healthy();
  fs::remove(missing.ctl());
  MetricSink t = missing.collect();
  EXPECT_EQ(State(t, "ctl_missing"), 1);
  EXPECT_TRUE(t.errors().empty());

  ImexNode odd;
  odd.healthy();
  odd.answer("q", "Failed to read node configuration file\n");
  MetricSink u = odd.collect();
  EXPECT_EQ(State(u, "query_failed"), 1);
  EXPECT_EQ(ErrorCount(u, "imex_query_failed"), 1u);
}

TEST(ImexCollector, AComputeDomainsCommandSocketIsAskedThroughIt) {
  ImexNode node;
  node.unit("masked");  // IMEX is not the host unit's
  fs::create_directories(fs::path(node.options().socket).parent_path());
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", node.options().socket.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  node.answer("q", "READY\n");
  node.answer("N", ReadFile(Fixture("domain-up.json")));
  MetricSink s = node.collect();
  ::close(fd);
  EXPECT_EQ(State(s, "ready"), 1);
  EXPECT_EQ(Value(s, families::kInfo.name, {"socket", node.options().config_file, "masked", ""}),
            1);
  EXPECT_EQ(Value(s, families::kNodesConfigured.name, {}), 0);
  const std::string u = "--u=" + node.options().socket;
  EXPECT_EQ(node.calls(), u + " -q\n" + u + " -N -j\n");
}

TEST(ImexCollector, FilesItCannotReadAreCounted) {
  ImexNode node;
  node.healthy();
  auto faults = std::make_shared<sources::Faults>();
  faults->inject("nvidia-imex/nodes_config.cfg", EIO);
  ImexCollector c(node.options(), faults);
  MetricSink s(c.metrics());
  CollectOnce(c, s);
  EXPECT_EQ(ErrorCount(s, "nodes_unreadable"), 1u);
  EXPECT_EQ(s.sample_count(), 0u);  // no members known: not configured
  faults->clear();
  faults->inject("nvidia-imex/config.cfg", EACCES);
  MetricSink t(c.metrics());
  CollectOnce(c, t);
  EXPECT_EQ(ErrorCount(t, "config_unreadable"), 1u);
}

TEST(ImexCollector, PathsMustBeAbsolute) {
  std::vector<CollectorSpec> catalog = {imex_collector_spec()};
  ConfigResult r = parse_config(
      "[collectors.imex]\nconfig_file = \"etc/imex.cfg\"\nctl = \"nvidia-imex-ctl\"\n"
      "socket = \"\"\nsystemd_dir = \"\"\n",
      "t.toml", catalog);
  ASSERT_EQ(r.errors.size(), 3u);
  EXPECT_EQ(r.errors[0].key, "collectors.imex.config_file");
  EXPECT_EQ(r.errors[1].key, "collectors.imex.ctl");
  EXPECT_EQ(r.errors[2].key, "collectors.imex.systemd_dir");
  EXPECT_EQ(r.errors[2].message, "must be an absolute path");
  EXPECT_TRUE(parse_config("[collectors.imex]\nctl = \"/opt/nvidia/imex/bin/nvidia-imex-ctl\"\n",
                           "t.toml", catalog)
                  .errors.empty());
}

}  // namespace
}  // namespace nodewatch::imex
