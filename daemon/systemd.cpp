#include "systemd.hpp"

#include <systemd/sd-daemon.h>
#include <time.h>

#include <string>

namespace nodewatch::systemd {

void notify(std::string_view state) {
  std::string s(state);
  sd_notify(0, s.c_str());
}

void notify_reloading() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  unsigned long long usec = static_cast<unsigned long long>(ts.tv_sec) * 1000000ULL +
                            static_cast<unsigned long long>(ts.tv_nsec) / 1000;
  notify("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec));
}

std::optional<std::chrono::microseconds> watchdog_period() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return std::nullopt;
  return std::chrono::microseconds(usec / 2);
}

std::vector<int> listen_fds() {
  int n = sd_listen_fds(1);
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(SD_LISTEN_FDS_START + i);
  return out;
}

}  // namespace nodewatch::systemd
