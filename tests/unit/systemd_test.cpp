#include "systemd.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace nodewatch {
namespace {

TEST(SystemdTest, NotifySendsDatagramsToNotifySocket) {
  auto path = std::filesystem::temp_directory_path() / ("nw-notify-" + std::to_string(::getpid()));
  std::filesystem::remove(path);
  int fd = ::socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  systemd::notify("READY=1\nSTATUS=collectors up 1/1");
  systemd::notify_reloading();
  char buf[512];
  ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<std::size_t>(n)), "READY=1\nSTATUS=collectors up 1/1");
  n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<std::size_t>(n)).rfind("RELOADING=1\nMONOTONIC_USEC=", 0),
            0u);
  ::unsetenv("NOTIFY_SOCKET");
  ::close(fd);
  std::filesystem::remove(path);
}

TEST(SystemdTest, NotifyReachesAnAbstractSocket) {
  const std::string name = "nw-notify-abstract-" + std::to_string(::getpid());
  int fd = ::socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr),
                   static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size())),
            0);
  ::setenv("NOTIFY_SOCKET", ("@" + name).c_str(), 1);
  EXPECT_TRUE(systemd::notify("WATCHDOG=1"));
  char buf[64];
  const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<std::size_t>(n)), "WATCHDOG=1");
  // An address of a kind not spoken here is a failed notification, not a crash.
  ::setenv("NOTIFY_SOCKET", "vsock:2:1234", 1);
  EXPECT_FALSE(systemd::notify("READY=1"));
  ::unsetenv("NOTIFY_SOCKET");
  ::close(fd);
}

TEST(SystemdTest, NoNotifySocketIsANoOp) {
  ::unsetenv("NOTIFY_SOCKET");
  systemd::notify("READY=1");  // must not crash or block
  SUCCEED();
}

TEST(SystemdTest, WatchdogPeriodIsHalfOfWatchdogUsec) {
  ::setenv("WATCHDOG_USEC", "3000000", 1);
  ::setenv("WATCHDOG_PID", std::to_string(::getpid()).c_str(), 1);
  auto p = systemd::watchdog_period();
  ASSERT_TRUE(p);
  EXPECT_EQ(p->count(), 1500000);
  // A watchdog meant for another process is not ours.
  ::setenv("WATCHDOG_PID", "1", 1);
  EXPECT_FALSE(systemd::watchdog_period());
  ::unsetenv("WATCHDOG_USEC");
  ::unsetenv("WATCHDOG_PID");
  EXPECT_FALSE(systemd::watchdog_period());
}

TEST(SystemdTest, ListenFdsForAnotherPidAreIgnored) {
  ::setenv("LISTEN_FDS", "1", 1);
  ::setenv("LISTEN_PID", "1", 1);
  EXPECT_TRUE(systemd::listen_fds().empty());
  // Unset all the same, so that no child takes them for its own.
  EXPECT_EQ(std::getenv("LISTEN_FDS"), nullptr);
  EXPECT_EQ(std::getenv("LISTEN_PID"), nullptr);
}

TEST(SystemdTest, ListenFdsOfThisProcessAreMadeCloseOnExec) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  // Fd 3 as socket activation passes it (the test's fd 3, whatever it is,
  // is put back after).
  const int saved = ::dup(3);
  ASSERT_EQ(::dup2(fds[0], 3), 3);
  ::fcntl(3, F_SETFD, 0);
  ::setenv("LISTEN_FDS", "1", 1);
  ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
  EXPECT_EQ(systemd::listen_fds(), std::vector<int>{3});
  EXPECT_EQ(::fcntl(3, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  EXPECT_EQ(std::getenv("LISTEN_FDS"), nullptr);
  ::setenv("LISTEN_FDS", "x", 1);
  ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
  EXPECT_TRUE(systemd::listen_fds().empty());  // not a number
  if (saved >= 0) {
    ::dup2(saved, 3);
    ::close(saved);
  } else {
    ::close(3);
  }
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace nodewatch
