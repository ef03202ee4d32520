#include "storage/path_check.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <system_error>
#include <thread>
#include <utility>

namespace nodewatch::storage {
namespace {

int stat_directory(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

bool ready(const std::shared_future<int>& f) {
  return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

}  // namespace

DirectoryCheck::DirectoryCheck(StatFn stat)
    : stat_(std::make_shared<const StatFn>(stat ? std::move(stat) : StatFn(stat_directory))) {}

std::optional<int> DirectoryCheck::check(const std::string& path, std::chrono::milliseconds limit) {
  std::shared_future<int> done;
  {
    std::lock_guard lock(mu_);
    // Calls that returned are forgotten: the map holds the hung ones only.
    std::erase_if(calls_, [](const auto& e) { return ready(e.second); });
    auto it = calls_.find(path);
    if (it != calls_.end()) {
      done = it->second;
    } else {
      auto result = std::make_shared<std::promise<int>>();
      done = result->get_future().share();
      try {
        std::thread([stat = stat_, path, result] { result->set_value((*stat)(path)); }).detach();
      } catch (const std::system_error&) {
        return std::nullopt;  // no thread to spare: treated as not answering
      }
      calls_.emplace(path, done);
    }
  }
  if (done.wait_for(limit) != std::future_status::ready) return std::nullopt;
  return done.get();
}

std::size_t DirectoryCheck::in_flight() const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto& [path, call] : calls_) n += ready(call) ? 0 : 1;
  return n;
}

}  // namespace nodewatch::storage
