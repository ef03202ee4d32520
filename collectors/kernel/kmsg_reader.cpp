#include "kernel/kmsg_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "nodewatch/kernel_log_fd.hpp"

namespace nodewatch::kernel {

namespace {

// The kernel log's device: drivers/char/mem.c, MEM_MAJOR 1, minor 11
// ("kmsg"), the same in every kernel since /dev/kmsg was added (2.6.x).
constexpr unsigned kKmsgMajor = 1;
constexpr unsigned kKmsgMinor = 11;

int g_inherited = -1;  // written once, before any thread (adopt_inherited_log)

}  // namespace

bool adopt_inherited_log() {
  struct stat st {};
  if (g_inherited >= 0 || ::fstat(STDIN_FILENO, &st) != 0 || !S_ISCHR(st.st_mode) ||
      major(st.st_rdev) != kKmsgMajor || minor(st.st_rdev) != kKmsgMinor)
    return false;
  const int fd = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
  if (fd < 0) return false;
  const int flags = ::fcntl(fd, F_GETFL);
  // Opened for writing only: no log to read through it (kmsg_path is
  // opened as before).
  if (flags < 0 || (flags & O_ACCMODE) == O_WRONLY ||
      ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    ::close(fd);
    return false;
  }
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null < 0 || ::dup2(null, STDIN_FILENO) < 0) {
    if (null >= 0) ::close(null);
    ::close(fd);
    return false;
  }
  ::close(null);
  g_inherited = fd;
  return true;
}

int inherited_log_fd() {
  return g_inherited;
}

KmsgReader::KmsgReader(std::string path) : path_(std::move(path)) {}

void KmsgReader::close() {
  fd_.reset();
  offset_ = 0;
  line_.clear();
  line_bytes_ = 0;
  record_.clear();
  too_long_ = false;
}

int KmsgReader::open() {
  close();
  int fd = -1;
  if (inherited_log_fd() >= 0 && path_ == kKernelLogPath) {
    // The log opened for this process: a descriptor of its own, at the
    // first record as a new open would be (the position is the open
    // file's, shared with the adopted descriptor, which nothing else reads).
    fd = ::fcntl(inherited_log_fd(), F_DUPFD_CLOEXEC, 3);
    if (fd < 0) return errno;
    if (::lseek(fd, 0, SEEK_SET) < 0) {
      int err = errno;
      ::close(fd);
      return err;
    }
  } else {
    fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return errno;
  }
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

bool KmsgReader::end_record(const std::function<void(std::string_view)>& on_record) {
  const bool ended = too_long_ || !record_.empty();
  if (too_long_) {
    ++refused_;
  } else if (!record_.empty()) {
    on_record(record_);
  }
  too_long_ = false;
  record_.clear();
  return ended;
}

bool KmsgReader::end_line(const std::function<void(std::string_view)>& on_record) {
  const bool continuation = !line_.empty() && line_.front() == ' ';
  bool ended = false;
  if (!continuation || (record_.empty() && !too_long_)) {
    ended = end_record(on_record);  // a line that does not start with a space starts a record
  }
  if (line_bytes_ > kRecordLimit || record_.size() + line_.size() > kRecordLimit) {
    too_long_ = true;
    record_.clear();
  } else if (!too_long_ && line_ != "\n") {
    record_ += line_;
  }
  line_.clear();
  line_bytes_ = 0;
  return ended;
}

int KmsgReader::read_file(const std::function<void(std::string_view)>& on_record,
                          std::size_t max_records, bool* more) {
  struct stat st {};
  if (::fstat(fd_.get(), &st) == 0 && st.st_size < offset_) {
    // Shorter than what was read: rewritten. Read again from its start.
    UniqueFd keep = std::move(fd_);
    close();
    fd_ = std::move(keep);
  }
  std::size_t records = 0;
  for (std::size_t bytes = 0; bytes < kFileBytesPerCall && records < max_records;) {
    ssize_t n = ::pread(fd_.get(), buf_.data(), buf_.size(), offset_);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close();
      return err;
    }
    if (n == 0) {
      // The end: the last record is whole unless a line of it is being
      // written.
      if (line_.empty() || line_.front() != ' ') end_record(on_record);
      return 0;
    }
    std::string_view chunk(buf_.data(), static_cast<std::size_t>(n));
    std::size_t used = 0;
    while (used < chunk.size() && records < max_records) {
      const std::size_t nl = chunk.find('\n', used);
      const std::size_t end = nl == std::string_view::npos ? chunk.size() : nl + 1;
      const std::string_view piece = chunk.substr(used, end - used);
      // Past the limit only the line's first byte is kept: a continuation?
      if (line_bytes_ + piece.size() <= kRecordLimit + 1) {
        line_.append(piece);
      } else if (line_.empty()) {
        line_.push_back(piece.front());
      }
      line_bytes_ += piece.size();
      used = end;
      if (nl != std::string_view::npos && end_line(on_record)) ++records;
    }
    offset_ += static_cast<off_t>(used);
    bytes += used;
  }
  if (more != nullptr) *more = true;
  return 0;
}

int KmsgReader::read_available(const std::function<void(std::string_view)>& on_record,
                               std::size_t max_records, bool* more) {
  if (more != nullptr) *more = false;
  if (!is_open()) {
    if (int err = open(); err != 0) return err;
  }
  if (!device_) return read_file(on_record, max_records, more);
  for (std::size_t records = 0;;) {
    if (records == max_records) {
      if (more != nullptr) *more = true;
      return 0;
    }
    ssize_t n = ::read(fd_.get(), buf_.data(), buf_.size());
    if (n > 0) {
      if (static_cast<std::size_t>(n) > kRecordLimit) {
        ++refused_;  // no record of the kernel's (/dev/zero named by mistake)
      } else {
        on_record(std::string_view(buf_.data(), static_cast<std::size_t>(n)));
      }
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
