#include "systemd.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

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
}

}  // namespace
}  // namespace nodewatch
