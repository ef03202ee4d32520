#pragma once
// How the NVML service's threads (one per GPU, one for XID events) are
// stopped. Each owns its state through a shared_ptr and sets `exited` as its
// last act; the owner asks it to stop, waits a grace period for that flag,
// then joins it (it is about to return) or detaches it (it is stuck in the
// driver). Detaching is safe because the thread owns everything it touches:
// its state and the NvmlSession it calls (nvml_library.hpp).

#include <pthread.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

namespace nodewatch::accelerator {

// How long the owner waits for its threads before detaching them (one
// grace period for all of them together).
inline constexpr auto kNvmlStopGrace = std::chrono::seconds(1);

struct NvmlThreadState {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool exited = false;
};

inline void request_stop(NvmlThreadState& st) {
  std::lock_guard lock(st.mu);
  st.stop = true;
  st.cv.notify_all();
}

inline void release_thread(NvmlThreadState& st, std::thread& t,
                           std::chrono::steady_clock::time_point deadline) {
  if (!t.joinable()) return;
  bool exited = false;
  {
    std::unique_lock lock(st.mu);
    exited = st.cv.wait_until(lock, deadline, [&] { return st.exited; });
  }
  if (exited)
    t.join();
  else
    t.detach();
}

// Names the calling thread "nw-nvml-<what>" (ps, top and /proc/<pid>/task
// then tell the NVML threads from the collectors' own).
inline void name_nvml_thread(const char* what) {
  std::array<char, 16> name{};  // the kernel's limit, with the NUL
  // Cut to the limit on purpose: the return value is looked at, which
  // tells GCC's -Wformat-truncation (-O3) so.
  if (std::snprintf(name.data(), name.size(), "nw-nvml-%s", what) < 0) return;
  pthread_setname_np(pthread_self(), name.data());
}

}  // namespace nodewatch::accelerator
