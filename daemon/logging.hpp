#pragma once
// Logging: spdlog, to the journal (with priorities) when stderr is connected
// to it, else to stderr.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace nodewatch {

// True when stderr is the journal stream systemd set up (JOURNAL_STREAM
// names stderr's device and inode).
bool stderr_is_journal();

// Installs the default logger. Safe to call more than once.
void setup_logging(std::string_view level);
// Changes the level; false if the name is not a level.
bool set_log_level(std::string_view level);

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
