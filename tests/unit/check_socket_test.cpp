// The check socket (daemon/check_socket.hpp): what it serves to whom, how
// it bounds its clients, what it replaces on the path, and when a client
// trusts what listens there.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <stdexcept>
#include <thread>

#include "check_socket.hpp"
#include "support/daemon_process.hpp"
#include "support/eventually.hpp"
#include "support/shell.hpp"

namespace nodewatch {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using testing::RunCommand;
using testing::TempDir;

// A connected AF_UNIX stream socket to `path`; -1 when none.
int ConnectTo(const fs::path& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Everything `fd` gives until its peer closes it, or nothing more comes
// within `wait`; `closed` says which.
std::string ReadAll(int fd, std::chrono::milliseconds wait, bool* closed = nullptr) {
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) != 1) {
      if (closed) *closed = false;
      return out;
    }
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) {
      if (closed) *closed = true;
      return out;
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
}

// A request's raw answer from the socket at `path`.
std::string Ask(const fs::path& path, const std::string& request) {
  int fd = ConnectTo(path);
  if (fd < 0) return "";
  (void)!::write(fd, request.data(), request.size());
  std::string out = ReadAll(fd, 5s);
  ::close(fd);
  return out;
}

// A check socket over a handler that answers every request with its
// target, on an io_context of its own thread.
class CheckSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    socket_ = std::make_unique<CheckSocket>(io_, [](const HttpRequest& req) {
      if (req.target().find("throw") != std::string_view::npos)
        throw std::runtime_error("the handler failed");
      HttpResponse res{http::status::ok, 11};
      res.body() = "asked " + std::string(req.target()) + "\n";
      return res;
    });
    work_.emplace(asio::make_work_guard(io_));
    thread_ = std::thread([this] { io_.run(); });
  }
  // `f` on the io thread, waited for.
  template <class F>
  auto Run(F f) {
    std::packaged_task<decltype(f())()> task(f);
    auto result = task.get_future();
    asio::post(io_, [&task] { task(); });
    return result.get();
  }
  void TearDown() override {
    Run([this] { socket_->close(); });
    work_.reset();
    io_.stop();
    thread_.join();
  }
  std::string Open(const fs::path& path, std::string* warning = nullptr) {
    return Run([&] { return socket_->open(path.string(), warning); });
  }

  TempDir dir_;
  fs::path path_ = dir_.path() / "run" / "check.sock";
  asio::io_context io_;
  std::unique_ptr<CheckSocket> socket_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::thread thread_;
};

TEST_F(CheckSocketTest, ServesTheVerdictToEveryoneAndTheMetricsToItsOwnUser) {
  std::string warning = "unset";
  ASSERT_EQ(Open(path_, &warning), "");
  EXPECT_EQ(warning, "") << "a socket in a test's own directory is one a client trusts";
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0666u) << "every local user may connect";
  ASSERT_EQ(::stat(path_.parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u) << "the directory it made";

  std::string health = Ask(path_, "GET /-/node-health?format=line HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(health.rfind("HTTP/1.1 200", 0), 0u) << health;
  EXPECT_NE(health.find("asked /-/node-health?format=line\n"), std::string::npos) << health;
  EXPECT_NE(health.find("Connection: close"), std::string::npos) << health;
  EXPECT_NE(health.find("X-Content-Type-Options: nosniff"), std::string::npos) << health;
  std::string metrics = Ask(path_, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(metrics.find("asked /metrics\n"), std::string::npos) << metrics;
  std::string other = Ask(path_, "GET /-/reload HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(other.rfind("HTTP/1.1 404", 0), 0u) << other;
  std::string post = Ask(path_, "POST /-/node-health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(post.rfind("HTTP/1.1 405", 0), 0u) << post;
  std::string body = Ask(path_, "GET /-/node-health HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
  EXPECT_EQ(body.find("asked"), std::string::npos) << "a request with a body: " << body;
  // A handler that throws costs its answer (500), not the io thread.
  std::string failed = Ask(path_, "GET /-/node-health?throw HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(failed.rfind("HTTP/1.1 500", 0), 0u) << failed;
  EXPECT_NE(Ask(path_, "GET /-/node-health HTTP/1.1\r\n\r\n").find("asked"), std::string::npos);

  if (::geteuid() != 0) GTEST_SKIP() << "asking as another user needs root (setpriv)";
  if (RunCommand("command -v curl && command -v setpriv").status != 0)
    GTEST_SKIP() << "curl or setpriv is not installed";
  fs::permissions(dir_.path(),
                  fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  const std::string as_nobody =
      "setpriv --reuid=65534 --regid=65534 --clear-groups curl -s --max-time 5 --unix-socket '" +
      path_.string() + "' -w ' %{http_code}' http://localhost";
  auto verdict = RunCommand(as_nobody + "/-/node-health");
  EXPECT_EQ(verdict.output, "asked /-/node-health\n 200");
  auto refused = RunCommand(as_nobody + "/metrics");
  EXPECT_NE(refused.output.find("to root and the daemon's user only\n 403"), std::string::npos)
      << refused.output;
}

// A client that sends nothing holds its connection until kDeadline; past
// kMaxSessions at once, a new connection is closed at once, and once the
// idle ones are dropped a request is answered again.
TEST_F(CheckSocketTest, IdleClientsAreDroppedAndCannotHoldMoreThanTheirSessions) {
  ASSERT_EQ(Open(path_), "");
  std::vector<int> idle;
  for (std::size_t i = 0; i < CheckSocket::kMaxSessions; ++i) idle.push_back(ConnectTo(path_));
  ASSERT_TRUE(testing::Eventually(
      [&] { return Run([this] { return socket_->sessions(); }) == CheckSocket::kMaxSessions; },
      5s));
  int extra = ConnectTo(path_);
  ASSERT_GE(extra, 0);
  bool closed = false;
  ReadAll(extra, 1s, &closed);
  EXPECT_TRUE(closed) << "a connection past kMaxSessions is closed at once";
  ::close(extra);
  for (int fd : idle) {
    ReadAll(fd, CheckSocket::kDeadline + 3s, &closed);
    EXPECT_TRUE(closed) << "an idle client is dropped at the deadline";
    ::close(fd);
  }
  EXPECT_NE(Ask(path_, "GET /-/node-health HTTP/1.1\r\n\r\n").find("asked /-/node-health"),
            std::string::npos);
}

TEST_F(CheckSocketTest, ReplacesOnlyASocketThatAnEarlierInstanceLeft) {
  fs::create_directories(path_.parent_path());
  // A file that is not a socket is left as it is.
  std::ofstream(path_) << "someone's";
  std::string err = Open(path_);
  EXPECT_NE(err.find("exists and is not a socket; it is left as it is"), std::string::npos) << err;
  EXPECT_EQ(testing::ReadFile(path_), "someone's");
  fs::remove(path_);
  // A socket something listens on is kept.
  asio::io_context other_io;
  {
    asio::local::stream_protocol::acceptor other(other_io,
                                                 asio::local::stream_protocol::endpoint(path_));
    err = Open(path_);
    EXPECT_NE(err.find("another process serves"), std::string::npos) << err;
    EXPECT_TRUE(fs::is_socket(path_));
  }
  // Its listener gone (killed: the file stays), the socket is taken over.
  ASSERT_TRUE(fs::is_socket(path_));
  EXPECT_EQ(Open(path_), "");
  EXPECT_NE(Ask(path_, "GET /-/node-health HTTP/1.1\r\n\r\n").find("asked"), std::string::npos);
  // Closing removes its own socket, and only its own.
  Run([this] { socket_->close(); });
  EXPECT_FALSE(fs::exists(path_));
  ASSERT_EQ(Open(path_), "");
  fs::remove(path_);
  std::ofstream(path_) << "planted after";
  Run([this] { socket_->close(); });
  EXPECT_EQ(testing::ReadFile(path_), "planted after");
}

// What a client trusts: a socket of the listener's user, on a way no one
// else can change.
TEST_F(CheckSocketTest, AClientTrustsOnlyASocketNoOtherUserCanHavePutThere) {
  ASSERT_EQ(Open(path_), "");
  const uid_t me = ::geteuid();
  EXPECT_EQ(untrusted_socket(path_.string(), me), "");
  // The listener is someone else than the socket's owner.
  EXPECT_EQ(untrusted_socket(path_.string(), me + 1),
            path_.string() + " is owned by uid " + std::to_string(me) + ", not by uid " +
                std::to_string(me + 1) + " that listens on it");
  // A directory on the way that anyone may write: anyone could have
  // replaced the socket.
  const fs::path run = path_.parent_path();
  fs::permissions(run, fs::perms::all);
  EXPECT_EQ(untrusted_socket(path_.string(), me),
            run.string() + " may be written by others than its owner");
  // Sticky (as /tmp): others may write it but not replace what they do
  // not own.
  fs::permissions(run, fs::perms::all | fs::perms::sticky_bit);
  EXPECT_EQ(untrusted_socket(path_.string(), me), "");
  fs::permissions(run, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec);
  // A symbolic link on the way is checked, and where it leads.
  const fs::path open_dir = dir_.path() / "open";
  fs::create_directories(open_dir);
  fs::create_directory_symlink(run, dir_.path() / "link");
  EXPECT_EQ(untrusted_socket((dir_.path() / "link" / "check.sock").string(), me), "");
  fs::rename(run, open_dir / "run");
  fs::remove(dir_.path() / "link");
  fs::create_directory_symlink(open_dir / "run", dir_.path() / "link");
  fs::permissions(open_dir, fs::perms::all);
  EXPECT_EQ(untrusted_socket((dir_.path() / "link" / "check.sock").string(), me),
            open_dir.string() + " may be written by others than its owner");
  fs::permissions(open_dir, fs::perms::owner_all);
  EXPECT_EQ(untrusted_socket((dir_.path() / "link" / "check.sock").string(), me), "");
  // Not a socket, not there.
  std::ofstream(dir_.path() / "file") << "";
  EXPECT_EQ(untrusted_socket((dir_.path() / "file").string(), me),
            (dir_.path() / "file").string() + " is not a socket");
  EXPECT_NE(untrusted_socket((dir_.path() / "none").string(), me).find("No such file"),
            std::string::npos);

  if (me != 0) GTEST_SKIP() << "a directory of another user needs root (chown)";
  ASSERT_EQ(::chown(open_dir.c_str(), 65534, 65534), 0);
  EXPECT_EQ(untrusted_socket((dir_.path() / "link" / "check.sock").string(), 0),
            open_dir.string() + " is owned by uid 65534, neither root nor uid 0");
}

// fetch_check_socket(): asks only what it trusts; says when nothing listens.
TEST_F(CheckSocketTest, AFetchAsksOnlyAListenerItTrusts) {
  FetchResult none = fetch_check_socket(path_.string(), "/-/node-health", 2s);
  EXPECT_FALSE(none.connected);
  EXPECT_NE(none.error.find("connecting to"), std::string::npos) << none.error;
  ASSERT_EQ(Open(path_), "");
  FetchResult ok = fetch_check_socket(path_.string(), "/-/node-health?format=json", 2s);
  EXPECT_TRUE(ok.connected);
  EXPECT_EQ(ok.untrusted, "");
  EXPECT_EQ(ok.status, 200u) << ok.error;
  EXPECT_EQ(ok.body, "asked /-/node-health?format=json\n");
  fs::permissions(path_.parent_path(), fs::perms::all);
  FetchResult refused = fetch_check_socket(path_.string(), "/-/node-health", 2s);
  EXPECT_TRUE(refused.connected);
  EXPECT_EQ(refused.status, 0u) << "nothing is asked of an untrusted listener";
  EXPECT_EQ(refused.untrusted,
            path_.parent_path().string() + " may be written by others than its owner");
}

// What --check prints of a body: its lines, and no control character
// that a terminal would act on.
TEST(CheckOutputTest, ABodyIsPrintedWithoutControlCharacters) {
  EXPECT_EQ(printable_body("healthy\n\tgpu0 ok\n"), "healthy\n\tgpu0 ok\n");
  EXPECT_EQ(printable_body(std::string("a\x1b]0;owned\x07"
                                       "b\rc\0d\x7f",
                                       17)),
            "a\\x1b]0;owned\\x07b\\x0dc\\x00d\\x7f");
  EXPECT_EQ(printable_body("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 is text
}

}  // namespace
}  // namespace nodewatch
