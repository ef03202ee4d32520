#include "nodewatch/helper_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "nodewatch/command.hpp"

namespace nodewatch {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kFirstBackoff = 1s;
constexpr auto kMaxBackoff = 60s;

int ms_until(Clock::time_point t) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left + 1, 0, 60'000));
}

std::uint32_t length_of(const char* head) {
  std::uint32_t len = 0;
  for (int i = 0; i < 4; ++i)
    len |= static_cast<std::uint32_t>(static_cast<unsigned char>(head[i])) << (8 * i);
  return len;
}

bool read_exact(int fd, char* out, std::size_t n) {
  while (n > 0) {
    ssize_t got = ::read(fd, out, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

std::string helper_path(std::string_view name) {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    std::filesystem::path beside = self.parent_path() / std::string(name);
    if (::access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  return "/usr/libexec/nodewatch/" + std::string(name);
}

std::string helper_frame(std::string_view payload) {
  std::string out(4, '\0');
  const auto n = static_cast<std::uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.append(payload);
  return out;
}

HelperProcess::HelperProcess(std::string what, std::vector<std::string> argv, std::size_t max_frame,
                             std::shared_ptr<HelperBackoff> state)
    : what_(std::move(what)),
      argv_(std::move(argv)),
      max_frame_(max_frame),
      state_(std::move(state)) {
  if (!state_) state_ = std::make_shared<HelperBackoff>();
}

HelperProcess::~HelperProcess() {
  stop();
  for (pid_t z : zombies_) ::waitpid(z, nullptr, WNOHANG);
}

HelperProcess::Answer HelperProcess::ask(std::string_view request, Clock::time_point deadline) {
  std::erase_if(zombies_, [](pid_t z) { return ::waitpid(z, nullptr, WNOHANG) != 0; });
  Answer a;
  if (pid_ <= 0) {
    if (Clock::now() < state_->next_start) {
      a.why =
          what_ + " is started again in " + std::to_string(ms_until(state_->next_start)) + " ms";
      return a;
    }
    if (!start(&a.why)) {
      delay_next_start();
      return a;
    }
  }
  std::string payload;
  if (!send_all(helper_frame(request), deadline, &a.why) ||
      !read_frame(deadline, &payload, &a.why, &a.timed_out)) {
    discard();
    return a;
  }
  state_->backoff = kFirstBackoff;
  a.payload = std::move(payload);
  return a;
}

bool HelperProcess::start(std::string* why) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    *why = std::string("socketpair: ") + std::strerror(errno);
    return false;
  }
  UniqueFd ours(sv[0]), theirs(sv[1]);
  std::vector<std::string> argv = argv_;
  argv.insert(argv.end(), {"--parent", std::to_string(::getpid())});
  pid_t pid = 0;
  int rc = command::spawn(argv, {theirs.get(), theirs.get(), -1}, false, &pid);
  if (rc != 0) {
    *why = "cannot start " + argv_.front() + ": " + std::strerror(rc);
    return false;
  }
  ::fcntl(ours.get(), F_SETFL, ::fcntl(ours.get(), F_GETFL) | O_NONBLOCK);
  pid_ = pid;
  fd_ = std::move(ours);
  ++state_->starts;
  return true;
}

bool HelperProcess::send_all(std::string_view data, Clock::time_point deadline, std::string* why) {
  while (!data.empty()) {
    ssize_t n = ::send(fd_.get(), data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{fd_.get(), POLLOUT, 0};
      if (::poll(&p, 1, ms_until(deadline)) > 0) continue;
      *why = what_ + " takes no request";
      return false;
    }
    *why = what_ + " is gone";
    return false;
  }
  return true;
}

bool HelperProcess::read_frame(Clock::time_point deadline, std::string* payload, std::string* why,
                               bool* timed_out) {
  std::string buf;
  std::size_t want = 4;
  bool have_length = false;
  char chunk[65536];
  while (buf.size() < want) {
    ssize_t n = ::recv(fd_.get(), chunk, sizeof chunk, 0);
    if (n > 0) {
      buf.append(chunk, static_cast<std::size_t>(n));
    } else if (n == 0) {
      *why = what_ + " exited";
      return false;
    } else if (errno == EAGAIN) {
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, ms_until(deadline)) <= 0 && Clock::now() >= deadline) {
        *timed_out = true;
        *why = what_ + " did not answer in time";
        return false;
      }
    } else if (errno != EINTR) {
      *why = "reading " + what_ + ": " + std::strerror(errno);
      return false;
    }
    if (!have_length && buf.size() >= 4) {
      const std::uint32_t len = length_of(buf.data());
      if (len > max_frame_) {
        *why = what_ + " sent a frame of " + std::to_string(len) + " bytes";
        return false;
      }
      want = 4 + len;
      have_length = true;
    }
  }
  if (buf.size() != want) {
    *why = what_ + " sent more than one frame";
    return false;
  }
  *payload = buf.substr(4);
  return true;
}

// The helper is killed (it may be stuck) and reaped, now or later.
void HelperProcess::stop() {
  if (pid_ <= 0) return;
  fd_.reset();
  ::kill(pid_, SIGKILL);
  bool reaped = false;
  for (int i = 0; i < 20 && !(reaped = ::waitpid(pid_, nullptr, WNOHANG) != 0); ++i) ::usleep(5000);
  if (!reaped) zombies_.push_back(pid_);
  pid_ = 0;
}

void HelperProcess::discard() {
  stop();
  ++state_->restarts;
  delay_next_start();
}

void HelperProcess::delay_next_start() {
  state_->next_start = Clock::now() + state_->backoff;
  state_->backoff = std::min<Clock::duration>(state_->backoff * 2, kMaxBackoff);
}

std::string helper_arg(int argc, char** argv, std::string_view name) {
  const std::string flag = "--" + std::string(name);
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == flag) return argv[i + 1];
  return "";
}

int serve_frames(int argc, char** argv, std::size_t max_request,
                 const std::function<std::optional<std::string>(std::string_view)>& answer) {
  const long parent = std::strtol(helper_arg(argc, argv, "parent").c_str(), nullptr, 10);
  if (parent <= 0) {
    std::fprintf(stderr, "%s: started by nodewatchd only (--parent PID)\n", argv[0]);
    return 2;
  }
  // Dies with the daemon; a parent already gone before the flag was set is
  // seen as another parent.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) return 0;
  ::signal(SIGPIPE, SIG_IGN);
  for (;;) {
    char head[4];
    if (!read_exact(0, head, sizeof head)) return 0;
    const std::uint32_t len = length_of(head);
    if (len > max_request) return 2;
    std::string request(len, '\0');
    if (!read_exact(0, request.data(), len)) return 0;
    std::optional<std::string> reply = answer(request);
    if (!reply) return 2;
    if (!write_all(1, helper_frame(*reply))) return 0;
  }
}

}  // namespace nodewatch
