#pragma once
// A gate on every open() of the files in one directory (fanotify's
// FAN_OPEN_PERM on the directory, for its children): while the gate is
// shut, an open waits for the gate's answer, after the kernel has looked
// the name up and, for O_CREAT, made the file; SIGKILL ends the wait. It
// stands in for a storage server that made a file and never answered the
// creation: the caller abandons the call, and the file is there.
//
//   OpenGate gate(dir);
//   if (!gate.ok()) GTEST_SKIP() << gate.error();   // needs CAP_SYS_ADMIN
//   gate.shut();        // opens in dir wait (the test's own too)
//   ...
//   gate.open();        // those waiting go on; later ones are let through
//
// A thread of its own answers the kernel: allowed at once while the gate is
// open, held while it is shut. Opens by the test's own process are gated
// too: a test opens nothing in the directory while the gate is shut.

#include <fcntl.h>
#include <poll.h>
#include <sys/fanotify.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nodewatch::testing {

class OpenGate {
 public:
  explicit OpenGate(const std::filesystem::path& dir) {
    fan_ = ::fanotify_init(FAN_CLASS_CONTENT | FAN_CLOEXEC | FAN_NONBLOCK, O_RDONLY);
    if (fan_ < 0) {
      error_ = std::string("fanotify_init: ") + std::strerror(errno) +
               " (permission events need CAP_SYS_ADMIN)";
      return;
    }
    if (::fanotify_mark(fan_, FAN_MARK_ADD, FAN_OPEN_PERM | FAN_EVENT_ON_CHILD, AT_FDCWD,
                        dir.c_str()) != 0) {
      error_ = "fanotify_mark on " + dir.string() + ": " + std::strerror(errno);
      ::close(fan_);
      fan_ = -1;
      return;
    }
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
      error_ = std::string("pipe2: ") + std::strerror(errno);
      return;
    }
    thread_ = std::thread([this] { run(); });
  }
  ~OpenGate() {
    if (thread_.joinable()) {
      stop_ = true;
      wake();
      thread_.join();
    }
    answer_held();
    for (int fd : wake_)
      if (fd >= 0) ::close(fd);
    if (fan_ >= 0) ::close(fan_);
  }
  OpenGate(const OpenGate&) = delete;
  OpenGate& operator=(const OpenGate&) = delete;

  bool ok() const { return thread_.joinable(); }
  const std::string& error() const { return error_; }
  // Opens from now on wait.
  void shut() { shut_ = true; }
  // The waiting opens go on, and later ones are allowed at once.
  void open() {
    shut_ = false;
    wake();
  }
  // Opens that have waited at the gate so far.
  int held() const { return held_count_; }

 private:
  void wake() {
    char c = 1;
    (void)!::write(wake_[1], &c, 1);
  }
  void answer(int fd) {
    fanotify_response r{};
    r.fd = fd;
    r.response = FAN_ALLOW;
    (void)!::write(fan_, &r, sizeof r);
    ::close(fd);
  }
  void answer_held() {
    std::lock_guard lock(mu_);
    for (int fd : waiting_) answer(fd);
    waiting_.clear();
  }
  void run() {
    alignas(fanotify_event_metadata) char buf[4096];
    while (!stop_) {
      pollfd p[2] = {{fan_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      ::poll(p, 2, 100);
      char drain[64];
      while (::read(wake_[0], drain, sizeof drain) > 0) {
      }
      if (!shut_) answer_held();
      ssize_t n = ::read(fan_, buf, sizeof buf);
      if (n <= 0) continue;
      for (auto* m = reinterpret_cast<fanotify_event_metadata*>(buf); FAN_EVENT_OK(m, n);
           m = FAN_EVENT_NEXT(m, n)) {
        if (m->fd < 0) continue;
        if (!(m->mask & FAN_OPEN_PERM)) {
          ::close(m->fd);
          continue;
        }
        if (shut_) {
          std::lock_guard lock(mu_);
          waiting_.push_back(m->fd);
          ++held_count_;
        } else {
          answer(m->fd);
        }
      }
    }
  }

  int fan_ = -1;
  int wake_[2] = {-1, -1};
  std::string error_;
  std::atomic<bool> shut_{false};
  std::atomic<bool> stop_{false};
  std::atomic<int> held_count_{0};
  std::mutex mu_;
  std::vector<int> waiting_;
  std::thread thread_;
};

}  // namespace nodewatch::testing
