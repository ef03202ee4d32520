#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "http_server.hpp"
#include "router.hpp"
#include "self_metrics.hpp"
#include "snapshot_store.hpp"
#include "support/daemon_process.hpp"
#include "support/http_client.hpp"
#include "support/tls.hpp"
#include "web_security.hpp"

namespace nodewatch {
namespace {

using namespace std::chrono_literals;
using testing::Request;
using testing::TestConnection;

// A server on 127.0.0.1:0 over a store with two collectors' snapshots,
// its io_context running on a thread of its own.
class HttpTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(HttpLimits{}); }

  void Start(HttpLimits limits) {
    store_.publish("alpha", make_rendered("# TYPE nodewatch_alpha_x gauge\nnodewatch_alpha_x 1\n"));
    store_.publish("beta", make_rendered("# TYPE nodewatch_beta_y gauge\nnodewatch_beta_y 2\n"));
    for (const char* n : {"alpha", "beta"}) {
      CollectorStatus s;
      s.name = n;
      s.up = true;
      s.ran = true;
      s.interval = 15s;
      statuses_.push_back(s);
    }
    router_ = std::make_unique<Router>(Router::Sources{&store_, [this] { return statuses_; },
                                                       &self_, [this] { return ready_.load(); }});
    server_ = std::make_unique<HttpServer>(
        io_, [this](const HttpRequest& r) { return router_->handle(r); },
        [this](std::string_view t, unsigned c) { self_.count_request(t, c); });
    server_->set_limits(limits);
    server_->set_first_round([this] { return ready_.load(); });
    ASSERT_EQ(server_->listen({"127.0.0.1:0"}), "");
    port_ = server_->local_endpoints().at(0).port();
    work_.emplace(asio::make_work_guard(io_));
    thread_ = std::thread([this] { io_.run(); });
  }

  void TearDown() override {
    asio::post(io_, [this] { server_->stop(); });
    work_.reset();
    io_.stop();
    thread_.join();
    server_.reset();
  }

  std::size_t ActiveConnections() {
    std::promise<std::size_t> p;
    asio::post(io_, [&] { p.set_value(server_->active_connections()); });
    return p.get_future().get();
  }

  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  SnapshotStore store_;
  SelfMetrics self_;
  std::vector<CollectorStatus> statuses_;
  std::atomic<bool> ready_{true};
  std::unique_ptr<Router> router_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::uint16_t port_ = 0;
};

// The part of a body that comes from collectors (the self-metrics that
// follow change between scrapes).
std::string CollectorPart(const std::string& body) {
  return body.substr(0, body.find("# HELP nodewatch_build_info"));
}

TEST_F(HttpTest, MetricsPlain) {
  auto r = Request(port_, "GET", "/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(r->headers.count("content-encoding"), 0u);
  EXPECT_EQ(CollectorPart(r->body),
            "# TYPE nodewatch_alpha_x gauge\nnodewatch_alpha_x 1\n"
            "# TYPE nodewatch_beta_y gauge\nnodewatch_beta_y 2\n");
  EXPECT_NE(r->body.find("nodewatch_collector_up{collector=\"alpha\"} 1"), std::string::npos);
  EXPECT_NE(r->body.find("process_open_fds "), std::string::npos);
  EXPECT_NE(r->body.find("nodewatch_build_info{version=\""), std::string::npos);
}

TEST_F(HttpTest, MetricsGzipRoundTrip) {
  auto gz = Request(port_, "GET", "/metrics", "Accept-Encoding: deflate, gzip;q=0.8\r\n");
  ASSERT_TRUE(gz);
  EXPECT_EQ(gz->status, 200);
  EXPECT_EQ(gz->headers["content-encoding"], "gzip");
  EXPECT_EQ(gz->headers["vary"], "Accept-Encoding");
  std::string body = gunzip(gz->body);
  auto plain = Request(port_, "GET", "/metrics");
  EXPECT_EQ(CollectorPart(body), CollectorPart(plain->body));
  EXPECT_NE(body.find("process_cpu_seconds_total"), std::string::npos);
  // q=0 refuses gzip.
  auto refused = Request(port_, "GET", "/metrics", "Accept-Encoding: gzip;q=0\r\n");
  EXPECT_EQ(refused->headers.count("content-encoding"), 0u);
}

TEST_F(HttpTest, CollectAndExcludeFilters) {
  auto only = Request(port_, "GET", "/metrics?collect[]=alpha");
  ASSERT_TRUE(only);
  EXPECT_EQ(only->status, 200);
  EXPECT_NE(only->body.find("nodewatch_alpha_x"), std::string::npos);
  EXPECT_EQ(only->body.find("nodewatch_beta_y"), std::string::npos);
  EXPECT_EQ(only->body.find("collector=\"beta\""), std::string::npos);
  auto encoded = Request(port_, "GET", "/metrics?exclude%5B%5D=alpha", "Accept-Encoding: gzip\r\n");
  std::string body = gunzip(encoded->body);
  EXPECT_EQ(body.find("nodewatch_alpha_x"), std::string::npos);
  EXPECT_NE(body.find("nodewatch_beta_y"), std::string::npos);
  // The gzip scrape of beta alone is what the workers will deflate for.
  const auto now = std::chrono::steady_clock::now();
  EXPECT_TRUE(store_.gzip_expected("beta", now, std::chrono::seconds(1)));
  EXPECT_FALSE(store_.gzip_expected("alpha", now, std::chrono::seconds(1)));
  auto both = Request(port_, "GET", "/metrics?collect[]=alpha&exclude[]=beta");
  EXPECT_EQ(both->status, 400);
  auto unknown = Request(port_, "GET", "/metrics?collect[]=gamma");
  EXPECT_EQ(unknown->status, 400);
  EXPECT_NE(unknown->body.find("gamma"), std::string::npos);
}

// A collector name the 400 echoes reaches the client with its control
// characters escaped (a CR LF, a NUL, a terminal's escape), and every
// response tells browsers not to sniff a type from what a client wrote.
TEST_F(HttpTest, AnEchoedCollectorNameIsEscapedAndNothingIsSniffed) {
  auto r = Request(port_, "GET", "/metrics?collect[]=a%0D%0AX-Injected:%201%00%1B%5B2J%22%5C");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(r->headers["x-content-type-options"], "nosniff");
  const std::string body = r->body.substr(0, r->body.size() - 1);  // the closing line feed
  for (char c : body)
    EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
        << "control character " << static_cast<int>(c) << " in " << body;
  EXPECT_NE(body.find("\"a\\r\\nX-Injected: 1\\u0000\\u001b[2J\\\"\\\\\""), std::string::npos)
      << body;
  for (const char* target : {"/metrics", "/", "/-/healthy", "/nowhere"}) {
    auto other = Request(port_, "GET", target);
    ASSERT_TRUE(other);
    EXPECT_EQ(other->headers["x-content-type-options"], "nosniff") << target;
  }
  auto big = Request(port_, "GET", "/", "X-Filler: " + std::string(9000, 'a') + "\r\n");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 431);
  EXPECT_EQ(big->headers["x-content-type-options"], "nosniff");
}

TEST_F(HttpTest, HeaderTooLargeIs431) {
  std::string big = "X-Filler: " + std::string(9000, 'a') + "\r\n";
  auto r = Request(port_, "GET", "/metrics", big);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 431);
  // Just under the limit is fine.
  auto ok = Request(port_, "GET", "/metrics", "X-Filler: " + std::string(7000, 'a') + "\r\n");
  EXPECT_EQ(ok->status, 200);
}

TEST_F(HttpTest, NotFoundAndMethodNotAllowed) {
  EXPECT_EQ(Request(port_, "GET", "/nope")->status, 404);
  EXPECT_EQ(Request(port_, "GET", "/metrics/")->status, 404);
  auto post = Request(port_, "POST", "/metrics");
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->headers["allow"], "GET, HEAD");
  EXPECT_EQ(Request(port_, "DELETE", "/")->status, 405);
}

TEST_F(HttpTest, HeadHasHeadersButNoBody) {
  TestConnection c(port_);
  ASSERT_TRUE(c.send(
      "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto head = c.read_response(/*head=*/true);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_GT(std::stoul(head->headers["content-length"]), 100u);
  // The next response follows at once: HEAD sent no body bytes.
  auto next = c.read_response();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->body, "OK\n");
}

TEST_F(HttpTest, HealthyReadyAndLanding) {
  EXPECT_EQ(Request(port_, "GET", "/-/healthy")->status, 200);
  ready_ = false;
  EXPECT_EQ(Request(port_, "GET", "/-/ready")->status, 503);
  ready_ = true;
  EXPECT_EQ(Request(port_, "GET", "/-/ready")->status, 200);
  auto landing = Request(port_, "GET", "/");
  EXPECT_EQ(landing->status, 200);
  EXPECT_EQ(landing->headers["content-type"], "text/html; charset=utf-8");
  EXPECT_NE(landing->body.find("<td>alpha</td>"), std::string::npos);
  EXPECT_NE(landing->body.find("href=\"metrics\""), std::string::npos);
}

TEST_F(HttpTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  TestConnection c(port_);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(c.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
    auto r = c.read_response();
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->status, 200);
  }
  ASSERT_TRUE(c.send("GET /-/healthy HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  EXPECT_EQ(c.read_response()->status, 200);
  EXPECT_TRUE(c.peer_closed());
}

TEST_F(HttpTest, GarbageGets400) {
  TestConnection c(port_);
  ASSERT_TRUE(c.send("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
}

// RFC 9112 §6.3: a request whose Transfer-Encoding does not end in
// "chunked" has no length the server can know: 400, and the connection
// closed. Answered as if it had no body, its body was read as a second
// request (smuggled past whatever proxy framed it otherwise).
TEST_F(HttpTest, ATransferEncodingNotEndingInChunkedIs400AndCloses) {
  for (const char* te : {"xchunked", "chunked, identity", "gzip"}) {
    TestConnection c(port_);
    const std::string smuggled = "GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_TRUE(
        c.send("POST /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + std::string(te) +
               "\r\nContent-Length: " + std::to_string(smuggled.size()) + "\r\n\r\n" + smuggled));
    auto r = c.read_response();
    ASSERT_TRUE(r) << te;
    EXPECT_EQ(r->status, 400) << te;
    EXPECT_EQ(r->headers["connection"], "close") << te;
    EXPECT_FALSE(c.read_response()) << te << ": the body was answered as a request";
  }
  // "chunked" last is framed by its chunks, as ever.
  TestConnection c(port_);
  ASSERT_TRUE(
      c.send("GET /-/healthy HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked"
             "\r\n\r\n0\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_NE(r->status, 400);
}

// RFC 9110 §10.1.1: a client that asks for 100-continue waits for it
// before it sends the body (curl for a second, others for good); the
// final answer follows the body. An HTTP/1.0 request's expectation is
// ignored.
TEST_F(HttpTest, ABodyExpectingContinueGetsAnInterim100) {
  TestConnection c(port_, 2s);
  ASSERT_TRUE(
      c.send("POST /metrics HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
             "Content-Length: 5\r\n\r\n"));
  auto interim = c.read_response();
  ASSERT_TRUE(interim) << "no 100 Continue before the body";
  EXPECT_EQ(interim->status, 100);
  ASSERT_TRUE(c.send("hello"));
  auto final_answer = c.read_response();
  ASSERT_TRUE(final_answer);
  EXPECT_EQ(final_answer->status, 405);
  // Without a body to wait for, only the final answer.
  ASSERT_TRUE(c.send("GET /-/healthy HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n"));
  auto healthy = c.read_response();
  ASSERT_TRUE(healthy);
  EXPECT_EQ(healthy->status, 200);
  TestConnection old(port_, 2s);
  ASSERT_TRUE(
      old.send("POST /metrics HTTP/1.0\r\nExpect: 100-continue\r\n"
               "Content-Length: 5\r\n\r\nhello"));
  auto r = old.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
}

// Before the first round of collection has finished, a scrape waits for
// it (within its scrape timeout, at most kFirstRoundWait), and one it does
// not finish for gets 503: never a 200 whose every collector reads down.
TEST_F(HttpTest, AScrapeBeforeTheFirstRoundWaitsForIt) {
  ready_ = false;
  const auto t0 = std::chrono::steady_clock::now();
  auto scrape = std::async(std::launch::async, [&] { return Request(port_, "GET", "/metrics"); });
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(scrape.wait_for(0s), std::future_status::timeout) << "answered before the round";
  ready_ = true;
  auto r = scrape.get();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 300ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  // Other paths do not wait.
  ready_ = false;
  auto healthy = Request(port_, "GET", "/-/healthy");
  ASSERT_TRUE(healthy);
  EXPECT_EQ(healthy->status, 200);
}

TEST_F(HttpTest, AScrapeTheFirstRoundDoesNotFinishForGets503) {
  ready_ = false;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = Request(port_, "GET", "/metrics", "X-Prometheus-Scrape-Timeout-Seconds: 1\r\n");
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->body, "not ready: first collection round in progress\n");
  // Within the scrape's own timeout, less the margin it leaves.
  EXPECT_GE(took, 400ms);
  EXPECT_LT(took, 1s);
}

TEST_F(HttpTest, RequestsAreCountedByPathAndCode) {
  Request(port_, "GET", "/nope?x=1");
  Request(port_, "GET", "/other");
  Request(port_, "GET", "/-/healthy");
  auto r = Request(port_, "GET", "/metrics");
  EXPECT_NE(r->body.find("nodewatch_http_requests_total{path=\"other\",code=\"404\"} 2"),
            std::string::npos)
      << r->body;
  EXPECT_NE(r->body.find("nodewatch_http_requests_total{path=\"/-/healthy\",code=\"200\"} 1"),
            std::string::npos);
}

class HttpLimitsTest : public HttpTest {
 protected:
  void SetUp() override {
    HttpLimits l;
    l.max_connections = 2;
    l.read_timeout = 300ms;
    l.idle_timeout = 400ms;
    Start(l);
  }
};

TEST_F(HttpLimitsTest, SlowClientIsDropped) {
  TestConnection c(port_, 3s);
  auto t0 = std::chrono::steady_clock::now();
  std::string req =
      "GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
  bool dropped = false;
  for (char ch : req) {
    if (!c.send(std::string_view(&ch, 1))) {
      dropped = true;
      break;
    }
    std::this_thread::sleep_for(50ms);
    if (std::chrono::steady_clock::now() - t0 > 1s) break;
  }
  // Whatever was sent, the server closed the connection at its deadline
  // without answering the request.
  std::string rest = c.read_all();
  auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(rest.find("200 OK"), std::string::npos);
  EXPECT_LT(elapsed, 2s);
  (void)dropped;
}

TEST_F(HttpLimitsTest, IdleKeepAliveConnectionIsClosed) {
  TestConnection c(port_, 3s);
  ASSERT_TRUE(c.send("GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_EQ(c.read_response()->status, 200);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(c.peer_closed());
  auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(elapsed, 300ms);
  EXPECT_LT(elapsed, 2s);
}

// All slots taken by clients that send nothing: a new connection takes the
// slot of the one waiting longest, which is closed; the other stays.
TEST_F(HttpLimitsTest, ANewConnectionTakesTheSlotOfTheOneWaitingLongest) {
  TestConnection a(port_);
  ASSERT_TRUE(a.connected());
  for (int i = 0; i < 100 && ActiveConnections() < 1; ++i) std::this_thread::sleep_for(5ms);
  std::this_thread::sleep_for(20ms);
  TestConnection b(port_);
  ASSERT_TRUE(b.connected());
  for (int i = 0; i < 100 && ActiveConnections() < 2; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(ActiveConnections(), 2u);
  auto ok = Request(port_, "GET", "/-/healthy");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(a.read_all(), "");  // closed without an answer
  ASSERT_TRUE(b.send("GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto still = b.read_response();
  ASSERT_TRUE(still);
  EXPECT_EQ(still->status, 200);
}

// Every slot held by a scrape that waits for the first round (which may
// take a collector's timeout): a new connection takes the slot of the one
// waiting longest, which is closed unanswered; the other is answered when
// the round ends. (Before, such a scrape counted as being served: every
// new connection got 503 until the round ended.)
TEST_F(HttpLimitsTest, AScrapeWaitingForTheFirstRoundGivesUpItsSlot) {
  ready_ = false;
  TestConnection a(port_, 5s);
  ASSERT_TRUE(a.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::this_thread::sleep_for(20ms);
  TestConnection b(port_, 5s);
  ASSERT_TRUE(b.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
  for (int i = 0; i < 100 && ActiveConnections() < 2; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(ActiveConnections(), 2u);
  std::this_thread::sleep_for(50ms);  // both past reading, waiting for the round
  auto healthy = Request(port_, "GET", "/-/healthy");
  ASSERT_TRUE(healthy);
  EXPECT_EQ(healthy->status, 200);
  EXPECT_EQ(a.read_all(), "") << "the longest waiting is closed without an answer";
  ready_ = true;
  auto scraped = b.read_response();
  ASSERT_TRUE(scraped);
  EXPECT_EQ(scraped->status, 200);
}

// One address past max_connections_per_client: refused at once with 503,
// and served again once one of its connections closes.
class HttpPerClientTest : public HttpTest {
 protected:
  void SetUp() override {
    HttpLimits l;
    l.max_connections = 8;
    l.max_connections_per_client = 2;
    l.read_timeout = 2s;
    l.idle_timeout = 2s;
    Start(l);
  }
};

TEST_F(HttpPerClientTest, ConnectionsPastTheClientsShareAreRefusedAtOnce) {
  TestConnection a(port_), b(port_);
  ASSERT_TRUE(a.connected() && b.connected());
  for (int i = 0; i < 100 && ActiveConnections() < 2; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(ActiveConnections(), 2u);
  auto t0 = std::chrono::steady_clock::now();
  TestConnection third(port_);
  ASSERT_TRUE(third.connected());
  std::string reply = third.read_all();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_EQ(reply.rfind("HTTP/1.1 503", 0), 0u) << reply;
  EXPECT_NE(reply.find("\r\nX-Content-Type-Options: nosniff\r\n"), std::string::npos) << reply;
  a.send("GET /-/healthy HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  a.read_all();
  for (int i = 0; i < 100 && ActiveConnections() > 1; ++i) std::this_thread::sleep_for(5ms);
  auto ok = Request(port_, "GET", "/-/healthy");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// A long idle timeout must not become the deadline of a request that has
// started to arrive: that one gets read_timeout.
class HttpLongIdleTest : public HttpTest {
 protected:
  void SetUp() override {
    HttpLimits l;
    l.read_timeout = 300ms;
    l.idle_timeout = 5s;
    Start(l);
  }
};

TEST_F(HttpLongIdleTest, TricklingAfterAKeepAliveResponseIsDroppedAtTheReadTimeout) {
  TestConnection c(port_, 8s);
  ASSERT_TRUE(c.send("GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_EQ(c.read_response()->status, 200);
  auto t0 = std::chrono::steady_clock::now();
  std::string req =
      "GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
  for (char ch : req) {
    if (!c.send(std::string_view(&ch, 1))) break;
    std::this_thread::sleep_for(50ms);
    if (std::chrono::steady_clock::now() - t0 > 2s) break;
  }
  std::string rest = c.read_all();
  EXPECT_EQ(rest.find("200 OK"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2500ms);
}

// rate_limit with basic authentication: a bucket per client address, so
// that clients without credentials spend their own tokens, not those of
// the scraper that has them. (With one bucket for the server, the 401s of
// five such clients took every token and the scraper got 429.)
class HttpRateLimitTest : public HttpTest {
 protected:
  void SetUp() override {
    dir_.write("web.yml", "basic_auth_users:\n  prom: '" + testing::BcryptHash("scrape", 4) +
                              "'\nrate_limit:\n  interval: 1h\n  burst: 3\n");
    Start(HttpLimits{});
    WebSecurity::Built b = WebSecurity::build((dir_.path() / "web.yml").string());
    ASSERT_TRUE(b.security) << (b.errors.empty() ? "" : b.errors[0]);
    std::promise<void> set;
    asio::post(io_, [&] {
      server_->set_security(b.security);
      set.set_value();
    });
    set.get_future().get();
  }

  // One GET /metrics from the loopback address 127.0.0.`host`.
  int Get(int host, const std::string& extra_headers = "") {
    TestConnection c(port_, 5s, (127u << 24) | static_cast<std::uint32_t>(host));
    if (!c.connected() || !c.send("GET /metrics HTTP/1.1\r\nHost: x\r\n" + extra_headers +
                                  "Connection: close\r\n\r\n"))
      return 0;
    auto r = c.read_response();
    return r ? r->status : 0;
  }

  testing::TempDir dir_;
};

TEST_F(HttpRateLimitTest, ClientsWithoutCredentialsSpendOnlyTheirOwnTokens) {
  for (int host = 2; host <= 6; ++host) {
    std::vector<int> got;
    for (int i = 0; i < 4; ++i) got.push_back(Get(host));
    EXPECT_EQ(got, (std::vector<int>{401, 401, 401, 429})) << "from 127.0.0." << host;
  }
  const std::string auth = "Authorization: Basic " + testing::Base64("prom:scrape") + "\r\n";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Get(1, auth), 200) << "scrape " << i;
  EXPECT_EQ(Get(1, auth), 429) << "the scraper has its own burst, no more";
}

TEST(HttpParsingTest, AcceptEncoding) {
  EXPECT_TRUE(accepts_gzip("gzip"));
  EXPECT_TRUE(accepts_gzip("deflate, GZIP"));
  EXPECT_TRUE(accepts_gzip("gzip;q=0.5"));
  EXPECT_TRUE(accepts_gzip("*"));
  EXPECT_FALSE(accepts_gzip(""));
  EXPECT_FALSE(accepts_gzip("gzip;q=0"));
  EXPECT_FALSE(accepts_gzip("br, deflate"));
  EXPECT_FALSE(accepts_gzip("xgzip"));
  // An explicit gzip entry wins over the wildcard, either way.
  EXPECT_FALSE(accepts_gzip("*;q=0.5, gzip;q=0"));
  EXPECT_FALSE(accepts_gzip("gzip;q=0, *"));
  EXPECT_TRUE(accepts_gzip("*;q=0, gzip"));
  EXPECT_TRUE(accepts_gzip("x-gzip"));
}

TEST(HttpParsingTest, MetricsQuery) {
  MetricsFilter f;
  EXPECT_EQ(parse_metrics_query("collect%5B%5D=a&collect[]=b&other=1&", &f), "");
  EXPECT_EQ(f.collect, (std::vector<std::string>{"a", "b"}));
  MetricsFilter g;
  EXPECT_NE(parse_metrics_query("collect[]=a&exclude[]=b", &g), "");
  EXPECT_EQ(url_decode("a%2Fb+c%zz%4"), "a/b c%zz%4");
}

TEST(HttpServerTest, ListenIsAllOrNothing) {
  asio::io_context io;
  HttpServer s(io, [](const HttpRequest&) { return HttpResponse{}; });
  ASSERT_EQ(s.listen({"127.0.0.1:0"}), "");
  auto port = s.local_endpoints().at(0).port();
  // The second address is taken by someone else: nothing changes.
  asio::ip::tcp::acceptor other(io,
                                asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  std::string taken = "127.0.0.1:" + std::to_string(other.local_endpoint().port());
  std::string err = s.listen({"127.0.0.1:0", taken});
  EXPECT_NE(err, "");
  ASSERT_EQ(s.local_endpoints().size(), 1u);
  EXPECT_EQ(s.local_endpoints()[0].port(), port);
  EXPECT_NE(s.listen({"bogus"}), "");
  // A reload that keeps an address and adds one keeps the first socket.
  std::string fixed = "127.0.0.1:" + std::to_string(port);
  ASSERT_EQ(s.listen({fixed}), "");
  ASSERT_EQ(s.listen({fixed, "127.0.0.1:0"}), "");
  ASSERT_EQ(s.local_endpoints().size(), 2u);
  EXPECT_EQ(s.local_endpoints()[0].port(), port);
  // And one that drops an address closes it.
  ASSERT_EQ(s.listen({"127.0.0.1:0"}), "");
  ASSERT_EQ(s.local_endpoints().size(), 1u);
  EXPECT_NE(s.local_endpoints()[0].port(), port);
}

}  // namespace
}  // namespace nodewatch
