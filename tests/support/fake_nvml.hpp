#pragma once
// The test hooks of the fake libnvidia-ml.so.1 (tests/fakes/fake_nvml), from
// the very copy the code under test loaded: dlopen of the same path with
// RTLD_NOLOAD returns it. Holding the hooks also keeps the library mapped.

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

namespace nodewatch::testing {

class FakeNvmlHooks {
 public:
  explicit FakeNvmlHooks(const char* library) : handle_(dlopen(library, RTLD_NOW | RTLD_NOLOAD)) {
    if (!handle_) {
      ADD_FAILURE() << library << " is not loaded";
      return;
    }
    script_ = reinterpret_cast<ScriptFn>(dlsym(handle_.get(), "fake_nvml_script"));
    calls_ = reinterpret_cast<CallsFn>(dlsym(handle_.get(), "fake_nvml_calls"));
    blocked_ = reinterpret_cast<BlockedFn>(dlsym(handle_.get(), "fake_nvml_blocked"));
    inits_ = reinterpret_cast<InitsFn>(dlsym(handle_.get(), "fake_nvml_inits"));
    gpm_samples_ = reinterpret_cast<GpmSamplesFn>(dlsym(handle_.get(), "fake_nvml_gpm_samples"));
  }
  // Applies one more scenario line now (tests/fixtures/nvml/README.md).
  void Script(const char* line) {
    ASSERT_NE(script_, nullptr);
    ASSERT_EQ(script_(line), 0) << line;
  }
  // Calls of `function` on `device` (-1: all) since the last nvmlInit.
  unsigned long long Calls(const char* function, int device = -1) {
    return calls_ != nullptr ? calls_(function, device) : ~0ull;
  }
  // nvmlInit calls since the library was loaded.
  unsigned long long Inits() { return inits_ != nullptr ? inits_() : ~0ull; }
  // GPM samples allocated and not yet freed (all sessions).
  long GpmSamples() { return gpm_samples_ != nullptr ? gpm_samples_() : -1; }
  // Calls sleeping in a `block` now.
  int Blocked() { return blocked_ != nullptr ? blocked_() : -1; }
  // Waits (bounded) until at least one call sleeps in a `block`.
  bool WaitBlocked(std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (blocked_ != nullptr && blocked_() <= 0) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return blocked_ != nullptr;
  }
  // Waits (bounded) until no call sleeps in a `block`, so that no thread
  // of this test is left inside the library.
  bool WaitUnblocked(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (blocked_ != nullptr && blocked_() > 0) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return blocked_ != nullptr;
  }

 private:
  using ScriptFn = int (*)(const char*);
  using CallsFn = unsigned long long (*)(const char*, int);
  using BlockedFn = int (*)();
  using InitsFn = unsigned long long (*)();
  using GpmSamplesFn = long (*)();
  struct Close {
    void operator()(void* h) const { dlclose(h); }
  };
  std::unique_ptr<void, Close> handle_;
  ScriptFn script_ = nullptr;
  CallsFn calls_ = nullptr;
  BlockedFn blocked_ = nullptr;
  InitsFn inits_ = nullptr;
  GpmSamplesFn gpm_samples_ = nullptr;
};

}  // namespace nodewatch::testing
