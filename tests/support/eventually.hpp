#pragma once
// Waiting in the tests for something another thread or process does.

#include <chrono>
#include <thread>

namespace nodewatch::testing {

// Polls `pred` every `every` until it holds or `limit` passes; the last
// answer.
template <class Pred>
bool Eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(10),
                std::chrono::milliseconds every = std::chrono::milliseconds(10)) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(every);
  }
  return pred();
}

}  // namespace nodewatch::testing
