#include "file_reader.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace nodewatch {
namespace {

// Reads from `fd` at offset 0 until EOF or max_bytes.
std::optional<std::string> pread_all(int fd, std::size_t max_bytes, int* err) {
  std::string out;
  char buf[8192];
  off_t off = 0;
  while (out.size() < max_bytes) {
    std::size_t want = std::min(sizeof(buf), max_bytes - out.size());
    ssize_t n = ::pread(fd, buf, want, off);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (err != nullptr) *err = errno;
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    off += n;
  }
  return out;
}

}  // namespace

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::optional<std::string> read_file(const std::filesystem::path& path, std::size_t max_bytes, int* err) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (err != nullptr) *err = errno;
    return std::nullopt;
  }
  auto out = pread_all(fd, max_bytes, err);
  ::close(fd);
  return out;
}

std::optional<std::string> read_attribute(const std::filesystem::path& path) {
  auto s = read_file(path, 64 * 1024);
  if (!s) return std::nullopt;
  return std::string(trim(*s));
}

HeldFile::HeldFile(HeldFile&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_) { o.fd_ = -1; }

HeldFile& HeldFile::operator=(HeldFile&& o) noexcept {
  if (this != &o) {
    close();
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

HeldFile::~HeldFile() { close(); }

void HeldFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::optional<std::string> HeldFile::read(std::size_t max_bytes, int* err) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (fd_ < 0) {
      fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
      if (fd_ < 0) {
        if (err != nullptr) *err = errno;
        return std::nullopt;
      }
    }
    auto out = pread_all(fd_, max_bytes, err);
    if (out) return out;
    close();  // ENODEV after a hot-unplug: reopen once
  }
  return std::nullopt;
}

}  // namespace nodewatch
