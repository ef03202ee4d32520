#pragma once
// Tells when a mount table changed: poll() on a procfs mountinfo file
// reports POLLPRI once after each mount or umount in that file's mount
// namespace (fs/proc_namespace.c; mountstats has no poll of its own, and
// a regular file, a fixture's, never reports it).
//
// Not thread-safe: one owner (a collector) calls it.

#include <string>

namespace nodewatch::sources {

class MountWatch {
 public:
  // `mountinfo`: the absolute path of a mountinfo file, opened at the
  // first changed().
  explicit MountWatch(std::string mountinfo);
  ~MountWatch();
  MountWatch(const MountWatch&) = delete;
  MountWatch& operator=(const MountWatch&) = delete;

  // Whether the table may have changed since the last call: true at the
  // first call (it opens the file, which is the reference from then on),
  // and at every call when the file is not the kernel's or cannot be
  // polled.
  bool changed();
  // The file is open and its poll() says when the table changes.
  bool watching() const { return fd_ >= 0; }
  // Its descriptor, for reading the table (pread at 0 makes it anew);
  // -1 when not watching.
  int fd() const { return fd_; }

 private:
  std::string path_;
  int fd_ = -1;
  bool opened_ = false;
};

}  // namespace nodewatch::sources
