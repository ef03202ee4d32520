#pragma once
// The configuration's check of a probe path (it must exist and be a
// directory), which a path on a hung mount cannot hang: the stat() is made
// by a helper process (nodewatch/fs_helper.hpp) and given at most `limit`; a
// path that does not answer is accepted, and its probe will report stuck.
//
// A path whose last check's helper is still held by the kernel is not
// stat()ed again: the next check of it (a reload, or a --check-config run)
// answers "no answer" at once, so that checks during a hang never pile up
// helpers: at most one per path. The storage collector's catalog entry owns
// one for its read_options (it runs at configuration time, before any
// collector or service exists).
//
// Thread-safe.

#include <chrono>
#include <optional>
#include <string>

namespace nodewatch::storage {

class DirectoryCheck {
 public:
  // `key_prefix` starts the helper keys ("check:" and the path); tests use
  // their own.
  explicit DirectoryCheck(std::string key_prefix = "check:");
  DirectoryCheck(const DirectoryCheck&) = delete;
  DirectoryCheck& operator=(const DirectoryCheck&) = delete;

  // 0 for a directory, ENOTDIR for anything else, the errno of the failed
  // stat(); nullopt when it did not answer within `limit` (its helper is
  // abandoned), when the path's previous helper is still held, or when no
  // helper could be started.
  std::optional<int> check(const std::string& path, std::chrono::milliseconds limit);

  // Abandoned check helpers still alive (tests).
  std::size_t in_flight() const;

 private:
  std::string prefix_;
};

}  // namespace nodewatch::storage
