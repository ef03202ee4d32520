#include "nodewatch/sources/mount_watch.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <utility>

namespace nodewatch::sources {

MountWatch::MountWatch(std::string mountinfo) : path_(std::move(mountinfo)) {}

MountWatch::~MountWatch() {
  if (fd_ >= 0) ::close(fd_);
}

bool MountWatch::changed() {
  if (!opened_) {
    opened_ = true;
    int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return true;
    struct statfs fs {};
    if (::fstatfs(fd, &fs) != 0 || fs.f_type != PROC_SUPER_MAGIC) {
      ::close(fd);  // a file, not the kernel's: its poll() says nothing
      return true;
    }
    fd_ = fd;
    return true;  // opened now: what the caller reads next is the reference
  }
  if (fd_ < 0) return true;
  pollfd p{fd_, POLLPRI, 0};
  int n = ::poll(&p, 1, 0);
  if (n < 0) return true;
  return n > 0 && (p.revents & (POLLPRI | POLLERR | POLLNVAL)) != 0;
}

}  // namespace nodewatch::sources
