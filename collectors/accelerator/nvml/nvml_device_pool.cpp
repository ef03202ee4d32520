#include "accelerator/nvml/nvml_device_pool.hpp"

#include <algorithm>
#include <array>
#include <deque>
#include <exception>
#include <string>
#include <thread>
#include <utility>

#include "accelerator/nvml/nvml_thread.hpp"

namespace nodewatch::accelerator {
namespace {

constexpr std::size_t slot_of(NvmlQuestions q) {
  return q == NvmlQuestions::kDevice ? 0 : 1;
}

}  // namespace

// One GPU's thread and what it keeps (see the top of nvml_device_pool.hpp).
class NvmlDevicePool::Worker {
 public:
  explicit Worker(unsigned index) : state_(std::make_shared<State>()) {
    state_->index = index;
    state_->identity.index = index;
    thread_ = std::thread(&Worker::run, state_);
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() {
    nodewatch::accelerator::request_stop(*state_);
    release_thread(*state_, thread_, Clock::now() + kNvmlStopGrace);
  }

  // Queues `questions`. False, and nothing queued, while the GPU is stuck
  // or the previous ask of the same questions has not returned.
  bool post(NvmlQuestions questions, std::shared_ptr<const NvmlSession> session) {
    std::lock_guard lock(state_->mu);
    Slot& slot = state_->slots[slot_of(questions)];
    if (state_->stuck || slot.busy) return false;
    slot.busy = true;
    slot.result.reset();
    state_->queue.emplace_back(questions, std::move(session));
    state_->cv.notify_all();
    return true;
  }

  // The posted questions' answer, or nullopt if it has not come by `until`
  // (the GPU is then stuck until its call returns) or the caller was
  // cancelled first.
  std::optional<NvmlDeviceResult> wait(NvmlQuestions questions, Clock::time_point until,
                                       const std::atomic<bool>* cancelled) {
    std::unique_lock lock(state_->mu);
    Slot& slot = state_->slots[slot_of(questions)];
    while (slot.busy) {
      if (cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) return std::nullopt;
      const auto now = Clock::now();
      if (now >= until) {
        state_->stuck = true;
        return std::nullopt;
      }
      // Wakes at least every 50 ms to notice cancellation.
      state_->cv.wait_until(lock, std::min(until, now + std::chrono::milliseconds(50)));
    }
    return std::exchange(slot.result, std::nullopt);
  }

  DeviceSample identity() const {
    std::lock_guard lock(state_->mu);
    return state_->identity;
  }

  NvmlThreadState& thread_state() { return *state_; }
  std::thread& thread() { return thread_; }

 private:
  struct Slot {
    bool busy = false;  // queued or running
    std::optional<NvmlDeviceResult> result;
  };
  struct State : NvmlThreadState {
    unsigned index = 0;
    std::array<Slot, 2> slots;  // by slot_of(questions)
    std::deque<std::pair<NvmlQuestions, std::shared_ptr<const NvmlSession>>> queue;
    bool stuck = false;       // a caller gave up waiting; cleared when the call returns
    DeviceSample identity;    // the last good value of each identity field
    NvmlDeviceMemory memory;  // only the worker thread touches it
  };

  static void run(std::shared_ptr<State> st) {
    name_nvml_thread(("gpu" + std::to_string(st->index)).c_str());
    std::unique_lock lock(st->mu);
    for (;;) {
      st->cv.wait(lock, [&] { return st->stop || !st->queue.empty(); });
      if (st->stop) break;
      auto [questions, session] = std::move(st->queue.front());
      st->queue.pop_front();
      lock.unlock();
      auto publish = [&st](const DeviceSample& d) {
        std::lock_guard g(st->mu);
        merge_identity(d, st->identity);
      };
      NvmlDeviceResult r;
      try {
        r = query_nvml_device(*session, st->index, questions, st->memory, publish);
      } catch (const std::exception& e) {
        // Out of memory, in practice: count it and keep the thread alive.
        r = NvmlDeviceResult{};
        r.sample.index = st->index;
        r.sample.errors = {DeviceError("exception", e.what())};
      }
      // Released outside the lock: when the service is gone this may be the
      // last owner, and then it runs nvmlShutdown and dlclose.
      session.reset();
      lock.lock();
      Slot& slot = st->slots[slot_of(questions)];
      slot.result = std::move(r);
      slot.busy = false;
      st->stuck = false;
      st->cv.notify_all();
    }
    st->exited = true;
    st->cv.notify_all();
  }

  std::shared_ptr<State> state_;
  std::thread thread_;
};

// Out of line: Worker is complete only here.
NvmlDevicePool::NvmlDevicePool() = default;

NvmlDevicePool::~NvmlDevicePool() {
  request_stop();
  release(Clock::now() + kNvmlStopGrace);
}

std::vector<NvmlDevicePool::Answer> NvmlDevicePool::ask(
    const std::shared_ptr<const NvmlSession>& session, unsigned count, NvmlQuestions questions,
    Clock::time_point until, const std::atomic<bool>* cancelled) {
  // The workers are never removed before the pool goes, so the pointers
  // stay good outside the lock.
  std::vector<Worker*> workers;
  {
    std::lock_guard lock(mu_);
    while (workers_.size() < count)
      workers_.push_back(std::make_unique<Worker>(static_cast<unsigned>(workers_.size())));
    for (unsigned i = 0; i < count; ++i) workers.push_back(workers_[i].get());
  }
  std::vector<bool> posted(count);
  for (unsigned i = 0; i < count; ++i) posted[i] = workers[i]->post(questions, session);
  std::vector<Answer> out(count);
  for (unsigned i = 0; i < count; ++i) {
    if (posted[i]) out[i].result = workers[i]->wait(questions, until, cancelled);
    out[i].identity = workers[i]->identity();
  }
  return out;
}

std::size_t NvmlDevicePool::threads() const {
  std::lock_guard lock(mu_);
  return workers_.size();
}

void NvmlDevicePool::request_stop() {
  std::lock_guard lock(mu_);
  for (auto& w : workers_) nodewatch::accelerator::request_stop(w->thread_state());
}

void NvmlDevicePool::release(Clock::time_point deadline) {
  std::lock_guard lock(mu_);
  for (auto& w : workers_) release_thread(w->thread_state(), w->thread(), deadline);
}

}  // namespace nodewatch::accelerator
