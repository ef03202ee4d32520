#pragma once
// A write lease on a file (fcntl F_SETLEASE): while the test holds it, an
// open() of the file by another process waits for the lease to be given
// back, in a wait that SIGKILL ends (the kernel's break_lease). The storage
// probe's stand-in for a killable hang, as NFS's RPC waits are; a FUSE
// request the server has read is not killable (hangfs.hpp).
//
//   Lease lease(file);                 // waits until no one has the file open
//   ASSERT_TRUE(lease.held()) << lease.error();
//   ... another process's open() of `file` waits ...
//   lease.release();                   // the waiting open() goes on
//
// The kernel ends the wait by itself after /proc/sys/fs/lease-break-time
// seconds (45 by default): a test holds a lease for less. The holder is sent
// SIGIO when a break starts; SIGIO is ignored while a Lease exists. Only the
// file's owner (or CAP_LEASE) may take one, on a local file system.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

namespace nodewatch::testing {

class Lease {
 public:
  // Tries until `limit`: a write lease is refused (EAGAIN) while anyone
  // else has the file open.
  explicit Lease(const std::filesystem::path& file,
                 std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    previous_ = ::signal(SIGIO, SIG_IGN);
    fd_ = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      error_ = file.string() + ": " + std::strerror(errno);
      return;
    }
    auto until = std::chrono::steady_clock::now() + limit;
    for (;;) {
      if (::fcntl(fd_, F_SETLEASE, F_WRLCK) == 0) {
        held_ = true;
        return;
      }
      if (errno != EAGAIN || std::chrono::steady_clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    error_ = "F_SETLEASE on " + file.string() + ": " + std::strerror(errno);
  }
  ~Lease() {
    release();
    ::signal(SIGIO, previous_);
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

  bool held() const { return held_; }
  // Whether the file leased is the one at `file` now (not one removed and
  // made again under its name meanwhile).
  bool on(const std::filesystem::path& file) const {
    struct stat a {
    }, b{};
    return fd_ >= 0 && ::fstat(fd_, &a) == 0 && ::stat(file.c_str(), &b) == 0 &&
           a.st_dev == b.st_dev && a.st_ino == b.st_ino;
  }
  const std::string& error() const { return error_; }
  void release() {
    if (fd_ >= 0) {
      if (held_) ::fcntl(fd_, F_SETLEASE, F_UNLCK);
      ::close(fd_);
    }
    fd_ = -1;
    held_ = false;
  }

 private:
  int fd_ = -1;
  bool held_ = false;
  std::string error_;
  sighandler_t previous_ = SIG_DFL;
};

}  // namespace nodewatch::testing
