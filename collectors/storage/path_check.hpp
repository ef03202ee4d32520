#pragma once
// The configuration's check of a probe path (it must exist and be a
// directory), which a path on a hung mount cannot hang: stat() runs on a
// helper thread and is given at most `limit`; a path on a hung mount is
// accepted, and its probe will report stuck.
//
// A path whose stat() has not returned yet is not stat()ed again: the next
// check of it waits on the same call, so that reloads (and --check-config
// runs in one process) during a hang do not pile up blocked threads: at
// most one per path. That memory belongs to the checker, not to a static:
// the storage collector's catalog entry owns one for its read_options (it
// runs at configuration time, before any collector or service exists), and
// tests make their own with a stat of their choosing.
//
// Thread-safe.

#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace nodewatch::storage {

class DirectoryCheck {
 public:
  // Answers 0 for a directory, ENOTDIR for anything else, or the errno of
  // the failed call; may block in the kernel.
  using StatFn = std::function<int(const std::string& path)>;

  // `stat` null: stat(2).
  explicit DirectoryCheck(StatFn stat = nullptr);
  DirectoryCheck(const DirectoryCheck&) = delete;
  DirectoryCheck& operator=(const DirectoryCheck&) = delete;

  // The answer for `path`, or nullopt when the call did not return within
  // `limit` (the helper thread is left to finish on its own) or no thread
  // could be started.
  std::optional<int> check(const std::string& path, std::chrono::milliseconds limit);

  // Calls that have not returned yet (tests).
  std::size_t in_flight() const;

 private:
  std::shared_ptr<const StatFn> stat_;  // shared with the helper threads
  mutable std::mutex mu_;
  std::map<std::string, std::shared_future<int>> calls_;
};

}  // namespace nodewatch::storage
