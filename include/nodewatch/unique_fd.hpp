#pragma once
// An owned file descriptor, closed when it goes out of scope. Collectors
// open sysfs/procfs files with open(2) directly (no iostreams on the
// collection path); this keeps every such descriptor from leaking on an
// early return.

#include <unistd.h>

namespace nodewatch {

class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace nodewatch
