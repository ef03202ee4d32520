#include "accelerator/pod_resources.hpp"

#include <sys/stat.h>

#include <utility>

namespace nodewatch::accelerator {

namespace {

bool socket_at(const std::string& path, struct stat* st) {
  return ::stat(path.c_str(), st) == 0 && S_ISSOCK(st->st_mode);
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
    // pays one stat per collection and nothing else.
    struct stat st {};
    if (!socket_at(options_.socket, &st)) return snapshot_;
    thread_ = std::thread([this] { run(); });
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
  const bool present = socket_at(options_.socket, &st);
  PodResourcesClient::Answer answer;
  if (present) {
    const auto inode = static_cast<std::uint64_t>(st.st_ino);
    if (!client_ || inode != client_inode_) {
      client_.reset();
      try {
        client_ = options_.make_client ? options_.make_client(options_.socket)
                                       : make_grpc_pod_resources_client(options_.socket);
      } catch (const std::exception& e) {
        answer.error = std::string("cannot make a client: ") + e.what();
      }
      client_inode_ = inode;
    }
    if (client_) answer = client_->list(options_.timeout);
  } else {
    client_.reset();
    client_inode_ = 0;
  }

  const Clock::time_point now = Clock::now();
  std::lock_guard lock(mu_);
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
