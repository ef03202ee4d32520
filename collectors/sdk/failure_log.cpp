#include "nodewatch/failure_log.hpp"

#include <spdlog/spdlog.h>

namespace nodewatch {

void FailureLog::failed(const std::string& key, const std::string& message) {
  std::lock_guard lock(mu_);
  auto it = failing_.find(key);
  if (it == failing_.end()) {
    failing_.emplace(key, State{message, 1});
    spdlog::warn("{}: {}", key, message);
    return;
  }
  ++it->second.count;
  if (it->second.message != message) {
    spdlog::warn("{}: {} (failing {} times in a row)", key, message, it->second.count);
    it->second.message = message;
  }
}

void FailureLog::succeeded(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = failing_.find(key);
  if (it == failing_.end()) return;
  spdlog::info("{}: recovered after {} failures in a row (last: {})", key, it->second.count,
               it->second.message);
  failing_.erase(it);
}

bool FailureLog::is_failing(const std::string& key) const {
  std::lock_guard lock(mu_);
  return failing_.count(key) != 0;
}

}  // namespace nodewatch
