#include "worker_pool.hpp"

#include <pthread.h>
#include <spdlog/spdlog.h>

namespace nodewatch {

WorkerPool::WorkerPool(std::size_t threads, std::string name)
    : state_(std::make_shared<State>()), name_(std::move(name)) {
  state_->running = threads;
  for (std::size_t i = 0; i < threads; ++i) {
    threads_.emplace_back(&WorkerPool::run, state_);
    std::string tname = name_.substr(0, 15);
    pthread_setname_np(threads_.back().native_handle(), tname.c_str());
  }
}

WorkerPool::~WorkerPool() {
  if (!shut_down_) shutdown(std::chrono::milliseconds(0));
}

void WorkerPool::post(std::function<void()> job) {
  {
    std::lock_guard lock(state_->mu);
    if (state_->stopping) return;
    state_->queue.push_back(std::move(job));
  }
  state_->cv.notify_one();
}

std::size_t WorkerPool::busy() const {
  std::lock_guard lock(state_->mu);
  return state_->busy;
}

void WorkerPool::run(std::shared_ptr<State> state) {
  std::unique_lock lock(state->mu);
  for (;;) {
    state->cv.wait(lock, [&] { return state->stopping || !state->queue.empty(); });
    if (state->stopping) break;
    auto job = std::move(state->queue.front());
    state->queue.pop_front();
    ++state->busy;
    lock.unlock();
    try {
      job();
    } catch (const std::exception& e) {
      spdlog::error("worker job threw: {}", e.what());
    } catch (...) {
      spdlog::error("worker job threw an unknown exception");
    }
    job = nullptr;  // release captures outside the lock
    lock.lock();
    --state->busy;
  }
  --state->running;
  state->idle_cv.notify_all();
}

bool WorkerPool::shutdown(std::chrono::milliseconds grace) {
  shut_down_ = true;
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
    state_->queue.clear();
  }
  state_->cv.notify_all();
  bool all_done;
  {
    std::unique_lock lock(state_->mu);
    all_done = state_->idle_cv.wait_for(lock, grace, [&] { return state_->running == 0; });
  }
  for (auto& t : threads_) {
    if (!t.joinable()) continue;
    if (all_done)
      t.join();
    else
      t.detach();
  }
  threads_.clear();
  return all_done;
}

}  // namespace nodewatch
