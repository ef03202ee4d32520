// TLS and basic authentication end to end: the real nodewatchd with an
// exporter-toolkit web configuration, certificates made by Debian's openssl
// command, and curl as the client (as an SRE would check it).

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/paths.hpp"
#include "support/tls.hpp"

namespace nodewatch {
namespace {

using namespace std::chrono_literals;
using testing::ConnectLoopback;
using testing::Curl;
using testing::DaemonProcess;
using testing::SampleValue;
using testing::TempDir;
using testing::TestPki;

// Only the daemon's own metrics: the collectors play no part here.
std::string QuietCollectors() {
  std::string s;
  for (const char* c : {"accelerator", "pcie", "nic", "interconnect", "storage", "textfile"})
    s += "[collectors." + std::string(c) + "]\nenabled = false\n";
  return s + "[collectors.kernel]\nstate_file = \"\"\nkmsg_path = \"" +
         (std::filesystem::path(NODEWATCH_FIXTURES_DIR) / "kernel" / "kmsg-node.txt").string() +
         "\"\n";
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v openssl >/dev/null && command -v curl >/dev/null") != 0)
      FAIL() << "openssl and curl are needed: run packaging/install-deps.sh --test";
    ASSERT_TRUE(pki_.ok()) << "openssl could not make the test CA and server certificate";
    hash_ = testing::BcryptHash("correct horse");
    ASSERT_FALSE(hash_.empty());
  }

  // A daemon serving with `web` as its web configuration.
  std::unique_ptr<DaemonProcess> Start(const std::string& web, const std::string& server_extra = "",
                                       std::vector<std::string> extra_args = {}) {
    dir_.write("web.yml", web);
    auto config = dir_.write("nw.toml",
                             "[server]\nlisten = [\"127.0.0.1:0\"]\n"
                             "web_config_file = \"web.yml\"\n" +
                                 server_extra + QuietCollectors());
    DaemonProcess::Options o;
    o.args = {"--config", config.string()};
    o.args.insert(o.args.end(), extra_args.begin(), extra_args.end());
    auto d = std::make_unique<DaemonProcess>(o, dir_.path() / "log");
    return d;
  }

  std::string TlsWeb(const std::string& tls_extra = "", bool users = true) const {
    std::string s = "tls_server_config:\n  cert_file: " + pki_.Path("server.crt").string() +
                    "\n  key_file: " + pki_.Path("server.key").string() + "\n" + tls_extra;
    if (users) s += "basic_auth_users:\n  alice: '" + hash_ + "'\n";
    return s;
  }

  std::string Ca() const { return "--cacert '" + pki_.Path("ca.crt").string() + "'"; }

  // `nodewatchd --check` on the configuration Start() wrote (which
  // AddTestSections() gave a check socket in dir_).
  struct Check {
    std::optional<int> rc;
    std::string out, log;
  };
  Check RunCheck() {
    DaemonProcess::Options o;
    o.args = {"--config", (dir_.path() / "nw.toml").string(), "--check"};
    o.stdout_file = dir_.path() / "check.out";
    DaemonProcess check(o, dir_.path() / "check.log");
    Check c;
    c.rc = check.wait(10s);
    c.out = testing::ReadFile(o.stdout_file);
    c.log = check.log();
    return c;
  }
  std::string Alice() const { return Ca() + " -u 'alice:correct horse'"; }
  double Counter(std::uint16_t port, const std::string& series) {
    auto r = Curl(port, "/metrics", Alice(), dir_.path());
    return SampleValue(r.body, series).value_or(-1);
  }

  TempDir dir_;
  TestPki pki_{dir_.path()};
  std::string hash_;
};

TEST_F(TlsTest, BasicAuthenticationOverTls) {
  auto d = Start(TlsWeb());
  auto port = d->port();
  ASSERT_TRUE(port) << d->log();
  EXPECT_NE(d->log().find("scrape https://127.0.0.1:"), std::string::npos) << d->log();

  auto none =
      Curl(*port, "/metrics", Ca() + " -D '" + (dir_.path() / "h").string() + "'", dir_.path());
  EXPECT_EQ(none.exit, 0);
  EXPECT_EQ(none.status, 401);
  EXPECT_NE(testing::ReadFile(dir_.path() / "h").find("WWW-Authenticate: Basic"),
            std::string::npos);
  EXPECT_EQ(Curl(*port, "/metrics", Ca() + " -u alice:wrong", dir_.path()).status, 401);
  EXPECT_EQ(Curl(*port, "/metrics", Ca() + " -u mallory:correct\\ horse", dir_.path()).status, 401);
  auto ok = Curl(*port, "/metrics", Alice(), dir_.path());
  ASSERT_EQ(ok.status, 200);
  EXPECT_NE(ok.body.find("nodewatch_build_info"), std::string::npos);
  // The 401s are counted with the rest.
  EXPECT_GE(SampleValue(ok.body, "nodewatch_http_requests_total{path=\"/metrics\",code=\"401\"}")
                .value_or(0),
            3);
  // Health is behind the credentials too unless exempted.
  EXPECT_EQ(Curl(*port, "/-/healthy", Ca(), dir_.path()).status, 401);
  // The landing page says how the server is reached.
  auto landing = Curl(*port, "/", Alice(), dir_.path());
  EXPECT_NE(landing.body.find("Access: TLS 1.2-1.3"), std::string::npos) << landing.body;
  EXPECT_NE(landing.body.find("basic authentication (1 users)"), std::string::npos);
  // Plain HTTP on the TLS port is a failed handshake, counted.
  auto plain = Curl(*port, "/metrics", "", dir_.path(), "http");
  EXPECT_NE(plain.status, 200);
  EXPECT_GE(Counter(*port, "nodewatch_http_tls_handshake_errors_total{reason=\"failed\"}"), 1);
  // A server certificate no CA of the client vouches for: refused by curl.
  EXPECT_NE(Curl(*port, "/metrics", "-u 'alice:correct horse'", dir_.path()).exit, 0);
  d->signal(SIGTERM);
  EXPECT_EQ(d->wait(5s), 0);
}

TEST_F(TlsTest, HealthMayBeExemptedFromAuthentication) {
  auto d = Start(TlsWeb(), "healthy_without_auth = true\n");
  auto port = d->port();
  ASSERT_TRUE(port) << d->log();
  auto healthy = Curl(*port, "/-/healthy", Ca(), dir_.path());
  EXPECT_EQ(healthy.status, 200) << "curl exit " << healthy.exit << "\n" << d->log();
  EXPECT_EQ(Curl(*port, "/-/ready", Ca(), dir_.path()).status, 401);
  EXPECT_EQ(Curl(*port, "/metrics", Ca(), dir_.path()).status, 401);
  // The node verdict too, for a load balancer or a script over TLS,
  // without credentials. (The modelled node's kernel log has an XID 79:
  // unhealthy, 503.)
  ASSERT_TRUE(testing::Eventually(
      [&] {
        auto r = Curl(*port, "/-/node-health", Ca(), dir_.path());
        return r.status == 503 && r.body.find("xid_79") != std::string::npos;
      },
      10s));
}

// --check asks the daemon on its check socket, which needs neither TLS nor
// credentials: the kernel says who listens (check_socket.hpp).
TEST_F(TlsTest, CheckAsksTheDaemonOnItsSocketWhateverTheWebAuthentication) {
  auto d = Start(TlsWeb());
  auto port = d->port();
  ASSERT_TRUE(port) << d->log();
  EXPECT_EQ(Curl(*port, "/-/node-health", Ca(), dir_.path()).status, 401);
  Check check = RunCheck();
  EXPECT_EQ(check.rc, 1) << check.out << check.log;
  EXPECT_NE(check.out.find("xid_79"), std::string::npos);
  EXPECT_NE(
      check.out.find("source: the running daemon on " + (dir_.path() / "check.sock").string()),
      std::string::npos)
      << check.out << check.log;
}

TEST_F(TlsTest, ClientCertificatesAreRequiredVerifiedAndMatchedBySan) {
  ASSERT_TRUE(pki_.Issue("scraper", "DNS:scraper.example"));
  ASSERT_TRUE(pki_.Issue("other", "DNS:other.example"));
  ASSERT_TRUE(pki_.IssueSelfSigned("stranger"));
  auto d = Start(TlsWeb("  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: " +
                            pki_.Path("ca.crt").string() +
                            "\n  client_allowed_sans: [scraper.example]\n",
                        /*users=*/false));
  auto port = d->port();
  ASSERT_TRUE(port) << d->log();
  auto with = [&](const std::string& who) {
    return Curl(*port, "/metrics",
                Ca() + " --cert '" + pki_.Path(who + ".crt").string() + "' --key '" +
                    pki_.Path(who + ".key").string() + "'",
                dir_.path());
  };
  auto good = with("scraper");
  EXPECT_EQ(good.status, 200) << "curl exit " << good.exit << "\n" << d->log();
  EXPECT_NE(Curl(*port, "/metrics", Ca(), dir_.path()).status, 200) << "no client certificate";
  EXPECT_NE(with("other").status, 200) << "a SAN not allowed";
  EXPECT_NE(with("stranger").status, 200) << "a certificate our CA did not sign";
  auto m = with("scraper");
  EXPECT_GE(SampleValue(m.body, "nodewatch_http_tls_handshake_errors_total{reason=\"failed\"}")
                .value_or(0),
            3);
}

// Without verification (RequireAnyClientCert) the allowed SANs still hold:
// a certificate of any issuer passes only with one of them.
TEST_F(TlsTest, AllowedSansHoldWithoutVerification) {
  ASSERT_TRUE(pki_.Issue("scraper", "DNS:scraper.example"));
  ASSERT_TRUE(pki_.Issue("other", "DNS:other.example"));
  auto d =
      Start(TlsWeb("  client_auth_type: RequireAnyClientCert\n"
                   "  client_allowed_sans: [scraper.example]\n",
                   /*users=*/false));
  auto port = d->port();
  ASSERT_TRUE(port) << d->log();
  auto with = [&](const std::string& who) {
    return Curl(*port, "/metrics",
                Ca() + " --cert '" + pki_.Path(who + ".crt").string() + "' --key '" +
                    pki_.Path(who + ".key").string() + "'",
                dir_.path());
  };
  EXPECT_EQ(with("scraper").status, 200) << d->log();
  EXPECT_NE(with("other").status, 200) << "a SAN not allowed";
  EXPECT_NE(Curl(*port, "/metrics", Ca(), dir_.path()).status, 200) << "no client certificate";
}

TEST_F(TlsTest, ARotatedCertificateIsServedToTheNextConnection) {
  auto d = Start(TlsWeb("", /*users=*/false));
  auto port = d->port();
  ASSERT_TRUE(port) << d->log();
  const std::string before = pki_.ServedSerial(*port);
  ASSERT_EQ(before, pki_.Serial("server"));
  // The renewal a certificate manager makes: a new file renamed over the old.
  ASSERT_TRUE(pki_.Issue("renewed", "DNS:localhost,IP:127.0.0.1"));
  std::filesystem::rename(pki_.Path("renewed.crt"), pki_.Path("server.crt"));
  std::filesystem::rename(pki_.Path("renewed.key"), pki_.Path("server.key"));
  std::string after;
  for (int i = 0; i < 50 && after != pki_.Serial("server"); ++i) {
    std::this_thread::sleep_for(100ms);
    after = pki_.ServedSerial(*port);
  }
  EXPECT_NE(after, before);
  EXPECT_EQ(after, pki_.Serial("server")) << d->log();
  EXPECT_TRUE(d->wait_log("changed on disk and taken")) << d->log();
  // A broken file in its place is refused: the running certificate stays.
  dir_.write("server.crt.new", "-----BEGIN CERTIFICATE-----\nhalf written\n");
  std::filesystem::rename(dir_.path() / "server.crt.new", pki_.Path("server.crt"));
  std::this_thread::sleep_for(1200ms);
  EXPECT_EQ(pki_.ServedSerial(*port), after);
  EXPECT_TRUE(d->wait_log("changed on disk and refused, the running one kept")) << d->log();
}

TEST_F(TlsTest, AStalledHandshakeIsDroppedAtTheReadTimeout) {
  auto d = Start(TlsWeb("", /*users=*/false), "read_timeout = \"500ms\"\n");
  auto port = d->port();
  ASSERT_TRUE(port) << d->log();
  int fd = ConnectLoopback(*port);
  ASSERT_GE(fd, 0);
  const char hello_start[] = "\x16\x03\x01";  // a ClientHello that never finishes
  ASSERT_EQ(::write(fd, hello_start, 3), 3);
  const auto start = std::chrono::steady_clock::now();
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1) << "the server kept the stalled connection";
  char buf[64];
  EXPECT_LE(::read(fd, buf, sizeof buf), 0) << "closed, not answered";
  const auto took = std::chrono::steady_clock::now() - start;
  ::close(fd);
  EXPECT_GE(took, 400ms);
  EXPECT_LT(took, 3s);
  auto m = Curl(*port, "/metrics", Ca(), dir_.path());
  EXPECT_EQ(SampleValue(m.body, "nodewatch_http_tls_handshake_errors_total{reason=\"timeout\"}"),
            1);
}

// nodewatch_http_tls_handshake_errors_total counts handshakes that did not
// complete, once each: a TLS 1.3 client that closes right after a good
// handshake (before the server's session tickets are written) is not one,
// and a handshake closed for a new connection's slot counts as evicted
// only.
TEST_F(TlsTest, HandshakeErrorsAreOnlyThoseThatFailedAndCountedOnce) {
  auto d = Start(TlsWeb("", /*users=*/false), "max_connections = 2\n");
  auto port = d->port();
  ASSERT_TRUE(port) << d->log();
  // TLS 1.3 clients that reset the connection as soon as their handshake
  // is done, before reading the server's session tickets.
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  ASSERT_NE(ctx, nullptr);
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  ASSERT_EQ(SSL_CTX_load_verify_locations(ctx, pki_.Path("ca.crt").c_str(), nullptr), 1);
  for (int i = 0; i < 10; ++i) {
    int fd = ConnectLoopback(*port);
    ASSERT_GE(fd, 0);
    SSL* ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    EXPECT_EQ(SSL_connect(ssl), 1);
    linger reset{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    ::close(fd);
    SSL_free(ssl);
  }
  SSL_CTX_free(ctx);
  std::this_thread::sleep_for(200ms);
  // Two handshakes that stall, then a scrape that takes the slot of one.
  // (From other addresses than the scrape's, each within its share.)
  auto stall = [&](std::uint32_t from) {
    int fd = ConnectLoopback(*port, from);
    EXPECT_GE(fd, 0) << "from " << from;
    EXPECT_EQ(::write(fd, "\x16\x03\x01", 3), 3);
    return fd;
  };
  int s1 = stall(0x7f000002), s2 = stall(0x7f000003);
  std::this_thread::sleep_for(400ms);
  auto healthy = Curl(*port, "/-/healthy", Ca(), dir_.path());
  EXPECT_EQ(healthy.status, 200) << "curl exit " << healthy.exit << "\n" << d->log();
  std::this_thread::sleep_for(200ms);
  auto m = Curl(*port, "/metrics", Ca(), dir_.path());
  ::close(s1);
  ::close(s2);
  EXPECT_EQ(SampleValue(m.body, "nodewatch_http_connections_dropped_total{reason=\"evicted\"}"), 1)
      << m.body;
  EXPECT_EQ(SampleValue(m.body, "nodewatch_http_tls_handshake_errors_total{reason=\"failed\"}"), 0)
      << m.body;
}

TEST_F(TlsTest, ABrokenWebConfigurationIsRefusedAtStartAndAtReload) {
  {
    auto d = Start("tls_server_config:\n  cert_file: a.crt\n  cert_filse: b.crt\n");
    ASSERT_EQ(d->wait(10s), 1) << d->log();
    EXPECT_NE(d->log().find("web.yml:3:3: tls_server_config.cert_filse: unknown key"),
              std::string::npos)
        << d->log();
  }
  {
    auto d = Start("basic_auth_users:\n  alice: not-a-hash\n");
    ASSERT_EQ(d->wait(10s), 1) << d->log();
    EXPECT_NE(d->log().find("web.yml:2:10: basic_auth_users.alice: is not a bcrypt hash"),
              std::string::npos)
        << d->log();
  }
  {
    // --check-config says the same, and what a good one gives.
    dir_.write("web.yml", TlsWeb());
    DaemonProcess::Options o;
    o.args = {"--check-config", "--config", dir_.write("c.toml", QuietCollectors()).string(),
              "--web.config.file", (dir_.path() / "web.yml").string()};
    o.stdout_file = dir_.path() / "check.out";
    DaemonProcess check(o, dir_.path() / "check.log");
    ASSERT_EQ(check.wait(10s), 0) << check.log();
    EXPECT_NE(
        testing::ReadFile(dir_.path() / "check.out")
            .find("web configuration OK (" + (dir_.path() / "web.yml").string() + ": TLS 1.2-1.3"),
        std::string::npos)
        << testing::ReadFile(dir_.path() / "check.out");
  }
  auto d = Start(TlsWeb());
  auto port = d->port();
  ASSERT_TRUE(port) << d->log();
  dir_.write("web.yml", "basic_auth_users:\n  alice: not-a-hash\n");
  d->signal(SIGHUP);
  ASSERT_TRUE(d->wait_log("reload rejected: .*basic_auth_users.alice: is not a bcrypt hash"))
      << d->log();
  // The running configuration still serves, TLS and credentials alike.
  EXPECT_EQ(Curl(*port, "/metrics", Alice(), dir_.path()).status, 200);
  EXPECT_EQ(Curl(*port, "/metrics", Ca(), dir_.path()).status, 401);
}

}  // namespace
}  // namespace nodewatch
