#include "systemd.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace nodewatch::systemd {
namespace {

// The first fd socket activation passes (SD_LISTEN_FDS_START).
constexpr int kListenFdsStart = 3;

// A whole decimal number from the environment; nullopt when unset or not one.
std::optional<std::uint64_t> env_number(const char* name) {
  const char* s = std::getenv(name);
  if (s == nullptr || *s == '\0') return std::nullopt;
  std::uint64_t v = 0;
  const char* end = s + std::strlen(s);
  auto [p, ec] = std::from_chars(s, end, v);
  if (ec != std::errc() || p != end) return std::nullopt;
  return v;
}

// Whether the variable `name` is unset or names this process.
bool for_this_process(const char* name) {
  if (std::getenv(name) == nullptr) return true;
  const auto pid = env_number(name);
  return pid && *pid == static_cast<std::uint64_t>(::getpid());
}

}  // namespace

bool notify(std::string_view state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || *path == '\0') return true;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::size_t n = std::strlen(path);
  // A path, or an abstract name; other kinds (vsock:) are not spoken here.
  if ((path[0] != '/' && path[0] != '@') || n >= sizeof(addr.sun_path)) return false;
  std::memcpy(addr.sun_path, path, n);
  if (path[0] == '@') addr.sun_path[0] = '\0';
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + n);
  const ssize_t sent = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                                reinterpret_cast<const sockaddr*>(&addr), len);
  ::close(fd);
  return sent == static_cast<ssize_t>(state.size());
}

bool notify_reloading() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  unsigned long long usec = static_cast<unsigned long long>(ts.tv_sec) * 1000000ULL +
                            static_cast<unsigned long long>(ts.tv_nsec) / 1000;
  return notify("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec));
}

std::optional<std::chrono::microseconds> watchdog_period() {
  const auto usec = env_number("WATCHDOG_USEC");
  if (!usec || *usec == 0 || !for_this_process("WATCHDOG_PID")) return std::nullopt;
  return std::chrono::microseconds(*usec / 2);
}

std::vector<int> listen_fds() {
  std::vector<int> out;
  const auto pid = env_number("LISTEN_PID");
  const auto count = env_number("LISTEN_FDS");
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  if (!pid || *pid != static_cast<std::uint64_t>(::getpid()) || !count) return out;
  // At most what a process could hold; fds that are not open are not ours.
  for (std::uint64_t i = 0; i < *count && i < 4096; ++i) {
    const int fd = kListenFdsStart + static_cast<int>(i);
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags < 0) break;
    ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    out.push_back(fd);
  }
  return out;
}

}  // namespace nodewatch::systemd
