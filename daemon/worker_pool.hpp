#pragma once
// A small pool of worker threads for collect() calls.
//
// Unlike asio::thread_pool, it can be abandoned: a collector stuck in the
// kernel (a hung NFS mount) must not keep the daemon from exiting, so
// shutdown() waits a bounded time and then detaches what is still running.
// The threads hold only shared state, so detaching is safe.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nodewatch {

class WorkerPool {
 public:
  WorkerPool(std::size_t threads, std::string name);
  ~WorkerPool();  // shutdown(0s) if not done yet
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void post(std::function<void()> job);
  // Stops taking jobs, drops queued ones, waits up to `grace` for running
  // ones. Returns true when every thread has ended; else they are detached.
  bool shutdown(std::chrono::milliseconds grace);
  std::size_t busy() const;

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::condition_variable idle_cv;
    std::deque<std::function<void()>> queue;
    bool stopping = false;
    std::size_t running = 0;  // threads still alive
    std::size_t busy = 0;     // jobs executing
  };
  static void run(std::shared_ptr<State> state);

  std::shared_ptr<State> state_;
  std::vector<std::thread> threads_;
  std::string name_;
  bool shut_down_ = false;
};

}  // namespace nodewatch
