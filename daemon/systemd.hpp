#pragma once
// systemd integration: sd_notify messages, the watchdog interval and
// socket activation. Each is a no-op outside systemd.

#include <chrono>
#include <optional>
#include <string_view>
#include <vector>

namespace nodewatch::systemd {

// Sends `state` ("READY=1", "STATUS=...") to $NOTIFY_SOCKET, if set.
void notify(std::string_view state);
// Announces a reload: RELOADING=1 with the monotonic timestamp systemd asks for.
void notify_reloading();
// Half of WATCHDOG_USEC when the watchdog is enabled for this process.
std::optional<std::chrono::microseconds> watchdog_period();
// Descriptors passed by socket activation (LISTEN_FDS), unset from the
// environment so that children do not inherit them.
std::vector<int> listen_fds();

}  // namespace nodewatch::systemd
