#include "kernel/kmsg_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "kernel/kernel_log.hpp"

namespace nodewatch::kernel {

KmsgReader::KmsgReader(std::string path) : path_(std::move(path)) {}

int KmsgReader::open() {
  int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno;
  fd_.reset(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    fd_.reset();
    return err;
  }
  device_ = S_ISCHR(st.st_mode);
  buf_.resize(kRecordMax);
  return 0;
}

int KmsgReader::read_available(const std::function<void(std::string_view)>& on_record,
                               std::size_t max_records, bool* more) {
  if (more != nullptr) *more = false;
  if (!is_open()) {
    if (int err = open(); err != 0) return err;
  }
  if (!device_) {
    // A file of records: read whole from its start, every time.
    std::string text;
    for (off_t off = 0;;) {
      ssize_t n = ::pread(fd_.get(), buf_.data(), buf_.size(), off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int err = errno;
        fd_.reset();
        return err;
      }
      if (n == 0) break;
      text.append(buf_.data(), static_cast<std::size_t>(n));
      off += n;
    }
    for (const std::string& r : split_records(text)) on_record(r);
    return 0;
  }
  for (std::size_t records = 0;;) {
    if (records == max_records) {
      if (more != nullptr) *more = true;
      return 0;
    }
    ssize_t n = ::read(fd_.get(), buf_.data(), buf_.size());
    if (n > 0) {
      on_record(std::string_view(buf_.data(), static_cast<std::size_t>(n)));
      ++records;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EPIPE) {
      ++overruns_;  // overwritten before read: the sequence gap says how many
      continue;
    }
    if (n < 0 && errno == EAGAIN) return 0;
    int err = n == 0 ? EIO : errno;  // a device never ends
    fd_.reset();
    return err;
  }
}

}  // namespace nodewatch::kernel
