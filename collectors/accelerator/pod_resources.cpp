#include "accelerator/pod_resources.hpp"

#include "accelerator/pod_resources_helper.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <utility>

namespace nodewatch::accelerator {

namespace {

// Whether the socket is there: 0 yes, ENOENT for nothing there (or not a
// socket: not a kubelet's), else the errno of the stat (EACCES where the
// kubelet's 0750 directory keeps the daemon out: worth saying, not absent).
int socket_at(const std::string& path, struct stat* st) {
  if (::stat(path.c_str(), st) != 0) return errno == ENOTDIR ? ENOENT : errno;
  return S_ISSOCK(st->st_mode) ? 0 : ENOENT;
}

}  // namespace

PodResourcesWatcher::PodResourcesWatcher(Options options) : options_(std::move(options)) {}

PodResourcesWatcher::~PodResourcesWatcher() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  // The call has a deadline (the timeout): the join is bounded by it.
  if (thread_.joinable()) thread_.join();
}

PodResourcesWatcher::Snapshot PodResourcesWatcher::get(Clock::time_point until) {
  std::unique_lock lock(mu_);
  if (!thread_.joinable()) {
    // No thread until the socket is first seen: a node without a kubelet
    // pays one stat per collection and nothing else (made without the lock).
    lock.unlock();
    struct stat st {};
    const bool absent = socket_at(options_.socket, &st) == ENOENT;
    lock.lock();
    if (absent) return snapshot_;
    if (!thread_.joinable() && !stop_) thread_ = std::thread([this] { run(); });
  }
  const std::uint64_t want = ++requested_;
  cv_.notify_all();
  // The call's own deadline, and a little for the look at the socket.
  const Clock::time_point bound = Clock::now() + options_.timeout + std::chrono::milliseconds(100);
  cv_.wait_until(lock, std::min(until, bound), [&] { return done_ >= want || stop_; });
  return snapshot_;
}

void PodResourcesWatcher::run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || done_ < requested_; });
    if (stop_) return;
    // Every request that came before this refresh starts is answered by it.
    const std::uint64_t serving = requested_;
    lock.unlock();
    refresh();
    lock.lock();
    done_ = serving;
    cv_.notify_all();
  }
}

void PodResourcesWatcher::refresh() {
  struct stat st {};
  const int err = socket_at(options_.socket, &st);
  const bool present = err != ENOENT;
  PodResourcesClient::Answer answer;
  if (err != 0 && present) {
    answer.error = "stat " + options_.socket + ": " + std::strerror(err);
    client_.reset();
  } else if (present) {
    const auto inode = static_cast<std::uint64_t>(st.st_ino);
    if (!client_ || inode != client_inode_) {
      client_.reset();
      try {
        if (options_.make_client) {
          client_ = options_.make_client(options_.socket);
        } else {
          if (!helper_state_) helper_state_ = std::make_shared<PodResourcesHelperState>();
          client_ = make_helper_pod_resources_client(
              options_.socket,
              options_.helper.empty() ? default_pod_resources_helper() : options_.helper,
              helper_state_);
        }
      } catch (const std::exception& e) {
        answer.error = std::string("cannot make a client: ") + e.what();
      }
      client_inode_ = inode;
    }
    if (client_) {
      try {
        answer = client_->list(options_.timeout);
      } catch (const std::exception& e) {  // bad_alloc: a reply too large to hold
        answer = {};
        answer.error = std::string("List: ") + e.what();
      }
      // A failed call gets a new channel next time: gRPC's own reconnect
      // backoff (up to 2 min) would outlast a restarted kubelet whose new
      // socket reused the old inode number.
      if (!answer.ok) client_.reset();
    }
  } else {
    client_.reset();
    client_inode_ = 0;
  }

  const Clock::time_point now = Clock::now();
  std::lock_guard lock(mu_);
  if (helper_state_) snapshot_.helper_restarts = helper_state_->restarts;
  if (!present) {
    snapshot_.state = Snapshot::State::kAbsent;
    snapshot_.error.clear();
  } else if (answer.ok) {
    snapshot_.state = Snapshot::State::kUp;
    snapshot_.error.clear();
    snapshot_.devices = std::move(answer.devices);
    ++snapshot_.answers;
    good_at_ = now;
    return;
  } else {
    snapshot_.state = Snapshot::State::kDown;
    snapshot_.error = std::move(answer.error);
    ++snapshot_.failures;
  }
  // No fresh answer: the last good one, while it is young enough.
  if (!snapshot_.devices.empty() && now - good_at_ > options_.keep) snapshot_.devices.clear();
}

}  // namespace nodewatch::accelerator
