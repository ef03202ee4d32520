// The exporter-toolkit web configuration: what parses, what is refused and
// where (line, column, key), and the pieces of authentication (Basic
// credentials, the bcrypt check and its cache, the rate limit).

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

#include "support/daemon_process.hpp"
#include "support/http_client.hpp"
#include "support/tls.hpp"
#include "web_config.hpp"
#include "web_security.hpp"

namespace nodewatch {
namespace {

using namespace std::chrono_literals;

const std::string kHash = "$2y$10$abcdefghijklmnopqrstuuQ9q0cZ7k0lQ0m0Yy8zE7mE3f5O2a1a2";

WebConfigResult Parse(const std::string& text) {
  return parse_web_config(text, "/etc/nodewatch/web.yml");
}

// The one error of `text`: "line:column: key: message".
std::string OneError(const std::string& text) {
  WebConfigResult r = Parse(text);
  EXPECT_FALSE(r.config);
  if (r.errors.size() != 1) {
    std::string all;
    for (const auto& e : r.errors) all += e.str() + "\n";
    ADD_FAILURE() << r.errors.size() << " errors:\n" << all;
    return {};
  }
  const ConfigError& e = r.errors[0];
  return std::to_string(e.line) + ":" + std::to_string(e.column) + ": " + e.key + ": " + e.message;
}

TEST(WebConfig, TheToolkitsKeysParse) {
  WebConfigResult r = Parse(
      "tls_server_config:\n"
      "  cert_file: server.crt\n"
      "  key_file: /etc/ssl/private/server.key\n"
      "  client_auth_type: RequireAndVerifyClientCert\n"
      "  client_ca_file: ca.crt\n"
      "  client_allowed_sans: [prometheus.example, 10.0.0.1]\n"
      "  min_version: TLS13\n"
      "  max_version: TLS13\n"
      "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]\n"
      "  curve_preferences: [X25519, CurveP256]\n"
      "  prefer_server_cipher_suites: true\n"
      "http_server_config:\n"
      "  http2: true\n"
      "  headers:\n"
      "    Strict-Transport-Security: max-age=31536000\n"
      "    X-Frame-Options: deny\n"
      "basic_auth_users:\n"
      "  alice: " +
      kHash +
      "\n"
      "rate_limit:\n"
      "  interval: 100ms\n"
      "  burst: 20\n");
  ASSERT_TRUE(r.config) << r.errors[0].str();
  const WebConfig& c = *r.config;
  ASSERT_TRUE(c.tls);
  EXPECT_EQ(c.tls->cert_file, "/etc/nodewatch/server.crt");  // relative to the file
  EXPECT_EQ(c.tls->key_file, "/etc/ssl/private/server.key");
  EXPECT_EQ(c.tls->client_auth, ClientAuth::kRequireAndVerify);
  EXPECT_EQ(c.tls->client_ca_file, "/etc/nodewatch/ca.crt");
  EXPECT_EQ(c.tls->client_allowed_sans,
            (std::vector<std::string>{"prometheus.example", "10.0.0.1"}));
  EXPECT_EQ(c.tls->min_version, 0x0304);
  // TLS 1.3's suites are not configurable (as in Go): only the 1.2 one is kept.
  EXPECT_EQ(c.tls->cipher_suites,
            std::vector<std::string>{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"});
  EXPECT_EQ(c.tls->curve_preferences, (std::vector<std::string>{"X25519", "P-256"}));
  EXPECT_TRUE(c.http2_asked);
  ASSERT_EQ(c.headers.size(), 2u);
  EXPECT_EQ(c.headers[1], (std::pair<std::string, std::string>{"X-Frame-Options", "deny"}));
  EXPECT_EQ(c.basic_auth_users.at("alice"), kHash);
  EXPECT_EQ(c.rate_interval, 100ms);
  EXPECT_EQ(c.rate_burst, 20);
}

TEST(WebConfig, AnEmptyFileOrSectionIsPlainHttp) {
  for (const char* text : {"", "# nothing\n", "tls_server_config:\n", "tls_server_config: {}\n"}) {
    WebConfigResult r = Parse(text);
    ASSERT_TRUE(r.config) << text;
    EXPECT_FALSE(r.config->tls) << text;
    EXPECT_TRUE(r.config->basic_auth_users.empty());
  }
}

TEST(WebConfig, EveryMistakeIsNamedWithItsPlace) {
  EXPECT_EQ(OneError("tls_server_config:\n  cert_file: a\n  key_file: b\n  cert_filse: c\n"),
            "4:3: tls_server_config.cert_filse: unknown key");
  EXPECT_EQ(OneError("tls_servr_config: {}\n"), "1:1: tls_servr_config: unknown key");
  EXPECT_EQ(OneError("basic_auth_users:\n  alice: secret\n"),
            "2:10: basic_auth_users.alice: is not a bcrypt hash ($2a$, $2b$ or $2y$, a cost "
            "04-31, 53 characters; e.g. htpasswd -nBC 10 USER)");
  EXPECT_EQ(OneError("tls_server_config:\n  cert_file: a\n  key_file: b\n"
                     "  client_auth_type: RequireClientCertPlease\n"),
            "4:21: tls_server_config.client_auth_type: \"RequireClientCertPlease\" is not one of "
            "NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven, "
            "RequireAndVerifyClientCert");
  EXPECT_EQ(
      OneError("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS14\n"),
      "4:16: tls_server_config.min_version: \"TLS14\" is not one of TLS10, TLS11, TLS12, TLS13");
  EXPECT_EQ(OneError("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS13\n"
                     "  max_version: TLS12\n"),
            "5:16: tls_server_config.max_version: is below min_version");
  EXPECT_EQ(OneError("tls_server_config:\n  cert_file: a\n  key_file: b\n"
                     "  cipher_suites: [TLS_RSA_WITH_CAMELLIA_128_CBC_SHA]\n"),
            "4:18: tls_server_config.cipher_suites: \"TLS_RSA_WITH_CAMELLIA_128_CBC_SHA\" is not a "
            "cipher suite");
  EXPECT_EQ(OneError("tls_server_config:\n  cert_file: a\n  key_file: b\n"
                     "  curve_preferences: [P-256]\n"),
            "4:22: tls_server_config.curve_preferences: \"P-256\" is not one of CurveP256, "
            "CurveP384, CurveP521, X25519");
  EXPECT_EQ(OneError("tls_server_config:\n  key_file: b\n"),
            "2:3: tls_server_config: missing one of cert or cert_file");
  EXPECT_EQ(OneError("tls_server_config:\n  cert_file: a\n"),
            "2:3: tls_server_config: missing one of key or key_file");
  EXPECT_EQ(OneError("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_ca_file: c\n"),
            "2:3: tls_server_config.client_auth_type: client CAs are configured but client "
            "certificates are not asked for (NoClientCert)");
  EXPECT_EQ(OneError("http_server_config:\n  headers:\n    Server: nodewatch\n"),
            "3:5: http_server_config.headers.Server: not a header that may be set "
            "(Strict-Transport-Security, X-Content-Type-Options, X-Frame-Options, "
            "X-XSS-Protection, Content-Security-Policy)");
  EXPECT_EQ(OneError("http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n"),
            "3:29: http_server_config.headers.X-Content-Type-Options: must be nosniff");
  EXPECT_EQ(OneError("rate_limit:\n  interval: 1 second\n  burst: 1\n"),
            "2:13: rate_limit.interval: \"1 second\" is not a duration (\"1s\", \"500ms\")");
  EXPECT_EQ(OneError("tls_server_config: [a, b]\n"), "1:20: tls_server_config: must be a mapping");
  EXPECT_EQ(OneError("basic_auth_users:\n  a:b: " + kHash + "\n"),
            "2:3: basic_auth_users.a:b: a user name cannot hold ':' (basic authentication splits "
            "on it)");
  EXPECT_EQ(OneError("tls_server_config: {cert_file: [a\n").find(": : not valid YAML: "), 3u);
}

TEST(WebConfig, AllMistakesAreReportedAtOnce) {
  WebConfigResult r = Parse("bogus: 1\nbasic_auth_users:\n  a: x\n  b: y\n");
  EXPECT_FALSE(r.config);
  EXPECT_EQ(r.errors.size(), 3u);
}

TEST(WebConfig, BcryptHashesAreRecognised) {
  EXPECT_TRUE(is_bcrypt_hash(kHash));
  EXPECT_TRUE(is_bcrypt_hash(testing::BcryptHash("pw", 4)));
  EXPECT_FALSE(is_bcrypt_hash("$2y$03$abcdefghijklmnopqrstuuQ9q0cZ7k0lQ0m0Yy8zE7mE3f5O2a1a2"));
  EXPECT_FALSE(is_bcrypt_hash("$2x$10$abcdefghijklmnopqrstuuQ9q0cZ7k0lQ0m0Yy8zE7mE3f5O2a1a2"));
  EXPECT_FALSE(is_bcrypt_hash("$2y$10$abcdefghijklmnopqrstuuQ9q0cZ7k0lQ0m0Yy8zE7mE3f5O2a1a"));
  EXPECT_FALSE(is_bcrypt_hash("$6$salt$sha512crypt"));
}

TEST(WebConfig, GoDurations) {
  EXPECT_EQ(parse_go_duration("1s"), std::chrono::nanoseconds(1s));
  EXPECT_EQ(parse_go_duration("1m30s"), std::chrono::nanoseconds(90s));
  EXPECT_EQ(parse_go_duration("250ms"), std::chrono::nanoseconds(250ms));
  EXPECT_EQ(parse_go_duration("0"), std::chrono::nanoseconds(0));
  EXPECT_FALSE(parse_go_duration("1"));
  EXPECT_FALSE(parse_go_duration("1d"));
  EXPECT_FALSE(parse_go_duration(""));
}

TEST(BasicAuthorization, CredentialsAreDecoded) {
  auto c = parse_basic_authorization("Basic YWxpY2U6Y29ycmVjdDpob3JzZQ==");  // alice:correct:horse
  ASSERT_TRUE(c);
  EXPECT_EQ(c->first, "alice");
  EXPECT_EQ(c->second, "correct:horse");                 // the first ':' splits
  EXPECT_TRUE(parse_basic_authorization("basic YTo="));  // scheme case-insensitive; "a:"
  EXPECT_FALSE(parse_basic_authorization("Bearer abc"));
  EXPECT_FALSE(parse_basic_authorization("Basic not*base64"));
  EXPECT_FALSE(parse_basic_authorization("Basic YWxpY2U="));  // "alice": no ':'
  EXPECT_FALSE(parse_basic_authorization(""));
  // Control characters are refused (RFC 7617 §2), a NUL above all: bcrypt
  // would read "prom:goodpass\0junk" as the password "goodpass".
  EXPECT_FALSE(parse_basic_authorization("Basic cHJvbTpnb29kcGFzcwBqdW5r"));
  EXPECT_FALSE(parse_basic_authorization("Basic cHJvbTpnb29kCnBhc3M="));  // "prom:good\npass"
  EXPECT_TRUE(parse_basic_authorization("Basic cHJvbTpnb29kIHBhc3M="));   // "prom:good pass"
}

// The authenticator over a web configuration with two users (bcrypt cost
// 4: about a millisecond a check).
struct AuthFixture {
  testing::TempDir dir;
  std::shared_ptr<const WebSecurity> security;
  asio::io_context io;
  Authenticator auth;
  explicit AuthFixture(const std::string& password, const std::string& bob_password = "bob's") {
    dir.write("web.yml", "basic_auth_users:\n  alice: '" + testing::BcryptHash(password, 4) +
                             "'\n  bob: '" + testing::BcryptHash(bob_password, 4) + "'\n");
    WebSecurity::Built b = WebSecurity::build((dir.path() / "web.yml").string());
    EXPECT_TRUE(b.security);
    security = b.security;
  }
  // The verdict for `authorization`, and whether it came before check() returned.
  std::pair<Authenticator::Verdict, bool> Check(const std::string& authorization,
                                                const std::string& client = "127.0.0.1") {
    bool returned = false, at_once = false;
    std::optional<Authenticator::Verdict> verdict;
    auth.check(security, authorization, asio::ip::make_address(client), io.get_executor(),
               [&](Authenticator::Verdict v) {
                 verdict = v;
                 at_once = !returned;
               });
    returned = true;
    Run([&] { return verdict.has_value(); });
    EXPECT_TRUE(verdict) << "no verdict within 10 s";
    return {verdict.value_or(Authenticator::Verdict::kDenied), at_once};
  }
  // Queues a check from `client` whose answer appends `name` to `answered`.
  std::shared_ptr<Authenticator::Pending> Queue(const std::string& authorization,
                                                const std::string& client, std::string name) {
    return auth.check(
        security, authorization, asio::ip::make_address(client), io.get_executor(),
        [this, name = std::move(name)](Authenticator::Verdict) { answered.push_back(name); });
  }
  // Runs the answers posted to `io` until `done` holds (10 s at most).
  template <class Done>
  void Run(Done done) {
    // Work kept on the context: a run before the post would otherwise stop it.
    auto guard = asio::make_work_guard(io);
    io.restart();
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!done() && std::chrono::steady_clock::now() < until) io.run_one_for(100ms);
  }
  std::vector<std::string> answered;
};

std::string Basic(const std::string& user, const std::string& password) {
  return "Basic " + testing::Base64(user + ":" + password);
}

TEST(Authenticator, ASuccessIsRememberedAFailureIsNot) {
  AuthFixture f("correct horse");
  auto [v1, at_once1] = f.Check(Basic("alice", "correct horse"));
  EXPECT_EQ(v1, Authenticator::Verdict::kAllowed);
  EXPECT_FALSE(at_once1) << "the first check runs bcrypt off the caller's thread";
  EXPECT_EQ(f.auth.cached(), 1u);
  auto [v2, at_once2] = f.Check(Basic("alice", "correct horse"));
  EXPECT_EQ(v2, Authenticator::Verdict::kAllowed);
  EXPECT_TRUE(at_once2) << "a remembered success needs no bcrypt";
  for (int i = 0; i < 2; ++i) {
    auto [v, at_once] = f.Check(Basic("alice", "wrong"));
    EXPECT_EQ(v, Authenticator::Verdict::kDenied);
    EXPECT_FALSE(at_once) << "a failure is checked again each time";
  }
  EXPECT_EQ(f.auth.cached(), 1u);
  // An unknown user runs bcrypt all the same (its timing tells nothing) and
  // is refused even with a password that would match the dummy.
  auto [v3, at_once3] = f.Check(Basic("mallory", "correct horse"));
  EXPECT_EQ(v3, Authenticator::Verdict::kDenied);
  EXPECT_FALSE(at_once3);
  // No credentials: refused at once, no bcrypt.
  auto [v4, at_once4] = f.Check("");
  EXPECT_EQ(v4, Authenticator::Verdict::kDenied);
  EXPECT_TRUE(at_once4);
}

TEST(Authenticator, ANewHashForTheUserForgetsTheOldSuccess) {
  AuthFixture f("old password");
  EXPECT_EQ(f.Check(Basic("alice", "old password")).first, Authenticator::Verdict::kAllowed);
  // The web configuration changes the user's password.
  f.dir.write("web.yml", "basic_auth_users:\n  alice: '" + testing::BcryptHash("new", 4) + "'\n");
  f.security = WebSecurity::build((f.dir.path() / "web.yml").string()).security;
  ASSERT_TRUE(f.security);
  EXPECT_EQ(f.Check(Basic("alice", "old password")).first, Authenticator::Verdict::kDenied);
  EXPECT_EQ(f.Check(Basic("alice", "new")).first, Authenticator::Verdict::kAllowed);
}

// The place of `name` among the answers, or -1.
long Place(const std::vector<std::string>& answered, const std::string& name) {
  auto it = std::find(answered.begin(), answered.end(), name);
  return it == answered.end() ? -1 : it - answered.begin();
}

// 20 addresses that have each failed once queue 100 wrong passwords; a
// login from an address that has not failed is checked next, not after
// them (first come, first served made it wait for all 100).
TEST(Authenticator, AnAddressThatHasNotFailedGoesBeforeOnesThatHave) {
  AuthFixture f("correct horse");
  auto attacker = [](int i) { return "127.0.1." + std::to_string(1 + i % 20); };
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(f.Check(Basic("alice", "wrong"), attacker(i)).first, Authenticator::Verdict::kDenied);
  EXPECT_NEAR(f.auth.failures(asio::ip::make_address(attacker(0))), 1.0, 0.01);
  f.auth.hold(true);
  for (int i = 0; i < 100; ++i) f.Queue(Basic("alice", "wrong"), attacker(i), "attacker");
  f.Queue(Basic("alice", "correct horse"), "127.0.2.1", "first login");
  f.auth.hold(false);
  f.Run([&] { return f.answered.size() == 101; });
  ASSERT_EQ(f.answered.size(), 101u);
  EXPECT_EQ(Place(f.answered, "first login"), 0);
  EXPECT_NEAR(f.auth.failures(asio::ip::make_address(attacker(0))), 6.0, 0.05);
}

// An address that has logged in goes before addresses that have not yet
// failed, until it has failed three times or more since.
TEST(Authenticator, AnAddressThatLoggedInGoesFirst) {
  AuthFixture f("correct horse");
  EXPECT_EQ(f.Check(Basic("alice", "correct horse"), "127.0.3.1").first,
            Authenticator::Verdict::kAllowed);
  f.auth.hold(true);
  for (int i = 0; i < 60; ++i)
    f.Queue(Basic("alice", "wrong"), "127.0.4." + std::to_string(1 + i), "new address");
  f.Queue(Basic("bob", "bob's"), "127.0.3.1", "known address");
  f.auth.hold(false);
  f.Run([&] { return f.answered.size() == 61; });
  EXPECT_EQ(Place(f.answered, "known address"), 0);
  // Four failures since (each decays a little) and it queues as any
  // address with failures does.
  for (int i = 0; i < 4; ++i) f.Check(Basic("alice", "wrong"), "127.0.3.1");
  f.answered.clear();
  f.auth.hold(true);
  for (int i = 0; i < 60; ++i)
    f.Queue(Basic("alice", "wrong"), "127.0.5." + std::to_string(1 + i), "new address");
  f.Queue(Basic("bob", "not bob's"), "127.0.3.1", "known address");
  f.auth.hold(false);
  f.Run([&] { return f.answered.size() == 61; });
  EXPECT_EQ(Place(f.answered, "known address"), 60);
}

// A withdrawn check (its connection lost the slot) runs no bcrypt and is
// answered kDenied on its executor.
TEST(Authenticator, AWithdrawnCheckCostsNoBcrypt) {
  AuthFixture f("correct horse");
  std::vector<std::shared_ptr<Authenticator::Pending>> pending;
  f.auth.hold(true);
  for (int i = 0; i < 30; ++i)
    pending.push_back(f.Queue(Basic("alice", "wrong"), "127.0.6.1", "x"));
  pending.push_back(f.Queue(Basic("alice", "wrong"), "127.0.6.1", "kept"));
  int withdrawn = 0;
  for (int i = 0; i < 30; ++i) withdrawn += pending[i]->withdraw() ? 1 : 0;
  f.auth.hold(false);
  f.Run([&] { return f.answered.size() == 31; });
  EXPECT_EQ(f.answered.size(), 31u);
  EXPECT_EQ(withdrawn, 30);
  EXPECT_EQ(f.auth.hashed(), 1u) << "only the check not withdrawn ran bcrypt";
  for (auto& p : pending) EXPECT_FALSE(p->queued());
}

// An IPv6 host holds its /64 whole: its failures are the prefix's.
TEST(Authenticator, AnIpv6ClientIsItsSlash64) {
  AuthFixture f("correct horse");
  f.Check(Basic("alice", "wrong"), "2001:db8:0:1::1");
  f.Check(Basic("alice", "wrong"), "2001:db8:0:1::2");
  EXPECT_NEAR(f.auth.failures(asio::ip::make_address("2001:db8:0:1::ffff")), 2.0, 0.01);
  EXPECT_EQ(f.auth.failures(asio::ip::make_address("2001:db8:0:2::1")), 0.0);
  // An IPv4 client seen through a dual-stack socket is its IPv4 address.
  f.Check(Basic("alice", "wrong"), "::ffff:127.0.7.1");
  EXPECT_NEAR(f.auth.failures(asio::ip::make_address("127.0.7.1")), 1.0, 0.01);
  EXPECT_EQ(f.auth.failures(asio::ip::make_address("127.0.7.2")), 0.0);
}

// A web configuration that grows while it is read is refused as changed
// (a procfs file stands for it: it stat()s as 0 bytes and reads as more).
TEST(WebConfig, AFileThatGrowsWhileReadIsRefusedAsChanged) {
  WebConfigResult r = load_web_config("/proc/self/status");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("changed while being read"), std::string::npos)
      << r.errors[0].message;
}

TEST(RateLimiter, ABurstThenOneAnInterval) {
  RateLimiter r;
  const auto a = asio::ip::make_address("192.0.2.1");
  EXPECT_TRUE(r.allow(a));  // off by default
  r.configure(std::chrono::nanoseconds(100ms), 3);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(r.allow(a, t0));
  EXPECT_TRUE(r.allow(a, t0));
  EXPECT_TRUE(r.allow(a, t0));
  EXPECT_FALSE(r.allow(a, t0));
  EXPECT_FALSE(r.allow(a, t0 + 50ms));
  EXPECT_TRUE(r.allow(a, t0 + 110ms));
  EXPECT_FALSE(r.allow(a, t0 + 120ms));
  EXPECT_TRUE(r.allow(a, t0 + 10s));  // never more than the burst saved up
  EXPECT_TRUE(r.allow(a, t0 + 10s));
  EXPECT_TRUE(r.allow(a, t0 + 10s));
  EXPECT_FALSE(r.allow(a, t0 + 10s));
}

// Each address has its bucket (an IPv6 /64 one between them); the table
// keeps kMaxClients addresses, forgetting the one heard from longest ago.
TEST(RateLimiter, ABucketPerAddressInABoundedTable) {
  RateLimiter r;
  r.configure(std::chrono::nanoseconds(1h), 1);
  const auto t0 = std::chrono::steady_clock::now();
  const auto scraper = asio::ip::make_address("192.0.2.1");
  EXPECT_TRUE(r.allow(scraper, t0));
  EXPECT_FALSE(r.allow(scraper, t0));
  EXPECT_TRUE(r.allow(asio::ip::make_address("192.0.2.2"), t0));
  EXPECT_TRUE(r.allow(asio::ip::make_address("2001:db8:0:1::1"), t0));
  EXPECT_FALSE(r.allow(asio::ip::make_address("2001:db8:0:1::2"), t0)) << "the same /64";
  EXPECT_FALSE(r.allow(asio::ip::make_address("::ffff:192.0.2.2"), t0)) << "the same IPv4 host";
  EXPECT_EQ(r.clients(), 3u);
  // A flood of new addresses: the table stays bounded; the scraper, heard
  // from again during it, keeps its (empty) bucket, and the address it
  // pushed out comes back with a full one.
  for (std::uint32_t i = 0; i < 2 * RateLimiter::kMaxClients; ++i) {
    EXPECT_TRUE(r.allow(asio::ip::address_v4(0x0a000000u + i), t0));
    if (i % 1000 == 0) {
      EXPECT_FALSE(r.allow(scraper, t0));
    }
    ASSERT_LE(r.clients(), RateLimiter::kMaxClients);
  }
  EXPECT_EQ(r.clients(), RateLimiter::kMaxClients);
  EXPECT_FALSE(r.allow(scraper, t0));
  EXPECT_TRUE(r.allow(asio::ip::make_address("192.0.2.2"), t0));
  // A new configuration starts every bucket afresh.
  r.configure(std::chrono::nanoseconds(1h), 2);
  EXPECT_EQ(r.clients(), 0u);
  EXPECT_TRUE(r.allow(scraper, t0));
}

}  // namespace
}  // namespace nodewatch
