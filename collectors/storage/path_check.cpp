#include "storage/path_check.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <utility>

#include "nodewatch/fs_helper.hpp"

namespace nodewatch::storage {

DirectoryCheck::DirectoryCheck(std::string key_prefix) : prefix_(std::move(key_prefix)) {}

std::optional<int> DirectoryCheck::check(const std::string& path, std::chrono::milliseconds limit) {
  helper::Fs fs(prefix_ + path);
  helper::StatInfo st;
  helper::Answer a = fs.stat(path, helper::Deadline{helper::Clock::now() + limit}, &st);
  if (!a.answered()) return std::nullopt;
  if (a.err != 0) return a.err;
  return S_ISDIR(st.mode) ? 0 : ENOTDIR;
}

std::size_t DirectoryCheck::in_flight() const {
  return helper::abandoned(prefix_);
}

}  // namespace nodewatch::storage
