#include "accelerator/pod_resources_helper.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "accelerator/pod_resources_wire.hpp"
#include "nodewatch/command.hpp"
#include "nodewatch/unique_fd.hpp"

namespace nodewatch::accelerator {
namespace {

namespace wire = pod_resources_wire;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kFirstBackoff = 1s;
constexpr auto kMaxBackoff = 60s;
constexpr auto kAnswerMargin = 500ms;

int ms_until(Clock::time_point t) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left + 1, 0, 60'000));
}

class HelperClient final : public PodResourcesClient {
 public:
  HelperClient(std::string socket, std::string helper,
               std::shared_ptr<PodResourcesHelperState> state)
      : socket_(std::move(socket)), helper_(std::move(helper)), state_(std::move(state)) {
    if (!state_) state_ = std::make_shared<PodResourcesHelperState>();
  }
  ~HelperClient() override {
    stop();
    for (pid_t z : zombies_) ::waitpid(z, nullptr, WNOHANG);
  }
  HelperClient(const HelperClient&) = delete;
  HelperClient& operator=(const HelperClient&) = delete;

  Answer list(std::chrono::milliseconds timeout) override {
    std::erase_if(zombies_, [](pid_t z) { return ::waitpid(z, nullptr, WNOHANG) != 0; });
    Answer a;
    if (pid_ <= 0) {
      if (Clock::now() < state_->next_start) {
        a.error = "UNAVAILABLE: the pod-resources helper is started again in " +
                  std::to_string(ms_until(state_->next_start)) + " ms";
        return a;
      }
      if (!start(&a.error)) {
        delay_next_start();
        return a;
      }
    }
    const Clock::time_point deadline = Clock::now() + timeout + kAnswerMargin;
    const std::string request = wire::frame(wire::encode_request(timeout));
    std::string payload, why;
    bool timed_out = false;
    if (!send_all(request, deadline, &why) || !read_frame(deadline, &payload, &why, &timed_out)) {
      lose();
      a.error = (timed_out ? "DEADLINE_EXCEEDED: " : "UNAVAILABLE: ") + why;
      return a;
    }
    std::optional<Answer> answer = wire::decode_answer(payload, &why);
    if (!answer) {
      lose();
      a.error = "INTERNAL: the pod-resources helper answered " + why;
      return a;
    }
    state_->backoff = kFirstBackoff;
    return *answer;
  }

 private:
  bool start(std::string* why) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      *why = std::string("UNAVAILABLE: socketpair: ") + std::strerror(errno);
      return false;
    }
    UniqueFd ours(sv[0]), theirs(sv[1]);
    const std::string parent = std::to_string(::getpid());
    pid_t pid = 0;
    int rc = command::spawn({helper_, "--socket", socket_, "--parent", parent},
                            {theirs.get(), theirs.get(), -1}, false, &pid);
    if (rc != 0) {
      *why = "UNAVAILABLE: cannot start " + helper_ + ": " + std::strerror(rc);
      return false;
    }
    ::fcntl(ours.get(), F_SETFL, ::fcntl(ours.get(), F_GETFL) | O_NONBLOCK);
    pid_ = pid;
    fd_ = std::move(ours);
    ++state_->starts;
    return true;
  }

  bool send_all(std::string_view data, Clock::time_point deadline, std::string* why) {
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
        *why = "the pod-resources helper takes no request";
        return false;
      }
      *why = "the pod-resources helper is gone";
      return false;
    }
    return true;
  }

  // One frame into `payload`, by `deadline`.
  bool read_frame(Clock::time_point deadline, std::string* payload, std::string* why,
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
        *why = "the pod-resources helper exited";
        return false;
      } else if (errno == EAGAIN) {
        pollfd p{fd_.get(), POLLIN, 0};
        if (::poll(&p, 1, ms_until(deadline)) <= 0 && Clock::now() >= deadline) {
          *timed_out = true;
          *why = "the pod-resources helper did not answer in time";
          return false;
        }
      } else if (errno != EINTR) {
        *why = std::string("reading the pod-resources helper: ") + std::strerror(errno);
        return false;
      }
      if (!have_length && buf.size() >= 4) {
        std::uint32_t len = 0;
        for (int i = 0; i < 4; ++i)
          len |= static_cast<std::uint32_t>(static_cast<unsigned char>(buf[i])) << (8 * i);
        if (len > wire::kMaxFrameBytes) {
          *why = "a frame of " + std::to_string(len) + " bytes";
          return false;
        }
        want = 4 + len;
        have_length = true;
      }
    }
    if (buf.size() != want) {
      *why = "more than one frame";
      return false;
    }
    *payload = buf.substr(4);
    return true;
  }

  // The helper is killed (it may be stuck) and reaped, now or later.
  void stop() {
    if (pid_ <= 0) return;
    fd_.reset();
    ::kill(pid_, SIGKILL);
    bool reaped = false;
    for (int i = 0; i < 20 && !(reaped = ::waitpid(pid_, nullptr, WNOHANG) != 0); ++i)
      ::usleep(5000);
    if (!reaped) zombies_.push_back(pid_);
    pid_ = 0;
  }
  void lose() {
    stop();
    ++state_->restarts;
    delay_next_start();
  }
  void delay_next_start() {
    state_->next_start = Clock::now() + state_->backoff;
    state_->backoff = std::min<Clock::duration>(state_->backoff * 2, kMaxBackoff);
  }

  const std::string socket_;
  const std::string helper_;
  std::shared_ptr<PodResourcesHelperState> state_;
  pid_t pid_ = 0;
  UniqueFd fd_;
  std::vector<pid_t> zombies_;
};

}  // namespace

std::string default_pod_resources_helper() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    std::filesystem::path beside = self.parent_path() / "nwd-pod-resources";
    if (::access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  return "/usr/libexec/nodewatch/nwd-pod-resources";
}

std::unique_ptr<PodResourcesClient> make_helper_pod_resources_client(
    const std::string& socket, const std::string& helper,
    std::shared_ptr<PodResourcesHelperState> state) {
  return std::make_unique<HelperClient>(socket, helper, std::move(state));
}

}  // namespace nodewatch::accelerator
