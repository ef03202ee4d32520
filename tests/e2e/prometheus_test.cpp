// The ecosystem side: Debian's Prometheus server scrapes the real daemon
// (plain negotiation of content type and gzip as Prometheus does it) and
// the samples arrive with the right values.

#include <gtest/gtest.h>

#include "support/daemon_process.hpp"
#include "support/http_client.hpp"
#include "support/paths.hpp"
#include "support/tls.hpp"

namespace nodewatch {
namespace {

using namespace std::chrono_literals;
using testing::DaemonProcess;
using testing::Request;
using testing::TempDir;

const std::filesystem::path kFixtures = NODEWATCH_FIXTURES_DIR;

// Prometheus runs as a plain child process, like the daemon.
pid_t StartPrometheus(const TempDir& dir, std::uint16_t port) {
  pid_t prom = ::fork();
  if (prom == 0) {
    int log = ::open((dir.path() / "prom.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(log, 1);
    ::dup2(log, 2);
    std::string cfg = "--config.file=" + (dir.path() / "prometheus.yml").string();
    std::string data = "--storage.tsdb.path=" + (dir.path() / "data").string();
    std::string listen = "--web.listen-address=127.0.0.1:" + std::to_string(port);
    ::execlp("prometheus", "prometheus", cfg.c_str(), data.c_str(), listen.c_str(),
             static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return prom;
}

TEST(PrometheusTest, RealPrometheusScrapesTheDaemon) {
  if (std::system("command -v prometheus >/dev/null 2>&1") != 0) {
    FAIL() << "prometheus is not installed: run packaging/install-deps.sh --test";
  }
  TempDir dir;
  DaemonProcess::Options o;
  o.args = {"--config", dir.write("nw.toml", "").string(),
            "--listen", "127.0.0.1:0",
            "--sysfs",  (kFixtures / "storage" / "sys").string(),
            "--procfs", (kFixtures / "storage" / "proc").string()};
  DaemonProcess d(o, dir.path() / "nw.log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();

  std::uint16_t prom_port = nodewatch::testing::FreeLoopbackPort();
  dir.write("prometheus.yml",
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: nodewatch\n    static_configs:\n"
            "      - targets: ['127.0.0.1:" +
                std::to_string(*port) + "']\n");
  pid_t prom = StartPrometheus(dir, prom_port);
  auto query = [&](const std::string& q) -> std::string {
    auto r = Request(prom_port, "GET", "/api/v1/query?query=" + q);
    return r ? r->body : std::string();
  };
  // up == 1 and a storage sample with the fixture's value, within 30 s.
  std::string up, reads;
  for (int i = 0; i < 300; ++i) {
    up = query("up");
    reads = query("nodewatch_storage_reads_completed_total%7Bdevice%3D%22nvme0n1%22%7D");
    if (up.find("\"1\"]") != std::string::npos && reads.find("1834512") != std::string::npos) break;
    std::this_thread::sleep_for(100ms);
  }
  std::string health;
  auto targets = Request(prom_port, "GET", "/api/v1/targets");
  if (targets) health = targets->body;
  ::kill(prom, SIGTERM);
  int st;
  ::waitpid(prom, &st, 0);
  EXPECT_NE(up.find("\"1\"]"), std::string::npos) << up << "\n"
                                                  << health << "\n"
                                                  << testing::ReadFile(dir.path() / "prom.log");
  EXPECT_NE(reads.find("\"1834512\""), std::string::npos) << reads;
  EXPECT_NE(health.find("\"health\":\"up\""), std::string::npos) << health;
  EXPECT_NE(health.find("\"lastError\":\"\""), std::string::npos) << health;
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0);
}

// Over TLS with basic authentication, as a security team would have it:
// Prometheus's https scrape with the test CA and the right password is up;
// the same target with a wrong password is down, and says 401.
TEST(PrometheusTest, RealPrometheusScrapesOverTlsWithBasicAuthentication) {
  if (std::system("command -v prometheus >/dev/null 2>&1") != 0) {
    FAIL() << "prometheus is not installed: run packaging/install-deps.sh --test";
  }
  TempDir dir;
  testing::TestPki pki(dir.path());
  ASSERT_TRUE(pki.ok()) << "openssl could not make the test CA";
  const std::string hash = testing::BcryptHash("scrape me", 10);
  dir.write("web.yml",
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
            "basic_auth_users:\n  prometheus: '" +
                hash + "'\n");
  DaemonProcess::Options o;
  o.args = {"--config",          dir.write("nw.toml", "").string(),
            "--listen",          "127.0.0.1:0",
            "--web.config.file", (dir.path() / "web.yml").string(),
            "--sysfs",           (kFixtures / "storage" / "sys").string(),
            "--procfs",          (kFixtures / "storage" / "proc").string()};
  DaemonProcess d(o, dir.path() / "nw.log");
  auto port = d.port();
  ASSERT_TRUE(port) << d.log();
  dir.write("password", "scrape me");
  dir.write("wrong", "guess");
  const std::string target = "localhost:" + std::to_string(*port);
  auto job = [&](const std::string& name, const std::string& password_file) {
    return "  - job_name: " + name +
           "\n    scheme: https\n    tls_config:\n      ca_file: " + pki.Path("ca.crt").string() +
           "\n    basic_auth:\n      username: prometheus\n      password_file: " +
           (dir.path() / password_file).string() + "\n    static_configs:\n      - targets: ['" +
           target + "']\n";
  };
  dir.write("prometheus.yml",
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n" +
                job("good", "password") + job("bad", "wrong"));
  std::uint16_t prom_port = nodewatch::testing::FreeLoopbackPort();
  pid_t prom = StartPrometheus(dir, prom_port);
  auto query = [&](const std::string& q) -> std::string {
    auto r = Request(prom_port, "GET", "/api/v1/query?query=" + q);
    return r ? r->body : std::string();
  };
  std::string good, bad, targets;
  for (int i = 0; i < 300; ++i) {
    good = query("up%7Bjob%3D%22good%22%7D");
    bad = query("up%7Bjob%3D%22bad%22%7D");
    auto t = Request(prom_port, "GET", "/api/v1/targets");
    targets = t ? t->body : "";
    if (good.find("\"1\"]") != std::string::npos && bad.find("\"0\"]") != std::string::npos &&
        targets.find("401") != std::string::npos)
      break;
    std::this_thread::sleep_for(100ms);
  }
  ::kill(prom, SIGTERM);
  int st;
  ::waitpid(prom, &st, 0);
  EXPECT_NE(good.find("\"1\"]"), std::string::npos) << good << "\n"
                                                    << targets << "\n"
                                                    << testing::ReadFile(dir.path() / "prom.log");
  EXPECT_NE(bad.find("\"0\"]"), std::string::npos) << bad;
  EXPECT_NE(targets.find("server returned HTTP status 401 Unauthorized"), std::string::npos)
      << targets;
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait(5s), 0);
}

}  // namespace
}  // namespace nodewatch
