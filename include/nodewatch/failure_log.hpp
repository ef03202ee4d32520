#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace nodewatch {

// Logs a recurring failure when it starts and when it ends, with a count,
// never once per cycle. Keys are free-form ("storage", "nic:eth0").
// Thread-safe.
class FailureLog {
 public:
  // Reports a failure of `key`. Logs at warning level only when the key was
  // not failing before, or when the message changes.
  void failed(const std::string& key, const std::string& message);
  // Reports success of `key`; logs a recovery line if it was failing.
  void succeeded(const std::string& key);
  bool is_failing(const std::string& key) const;

 private:
  struct State {
    std::string message;
    std::uint64_t count = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, State, std::less<>> failing_;
};

}  // namespace nodewatch
