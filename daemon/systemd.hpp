#pragma once
// systemd integration: notifications, the watchdog interval and socket
// activation. Each is a no-op outside systemd.
//
// These are systemd's documented, stable interfaces between a service and
// its manager (sd_notify(3), sd_watchdog_enabled(3), sd_listen_fds(3): an
// environment variable and a datagram socket each), spoken here without
// libsystemd: linking it brought seven libraries (libsystemd, libgcrypt,
// libgpg-error, liblzma, libzstd, liblz4, libcap) and 1.1 MiB of resident
// memory to every node for three calls (docs/cost.md). The journal's
// priorities come the same way, from a "<N>" prefix on stderr
// (logging.hpp).

#include <chrono>
#include <optional>
#include <string_view>
#include <vector>

namespace nodewatch::systemd {

// Sends `state` ("READY=1", "STATUS=...") to $NOTIFY_SOCKET, if set: an
// absolute path, or "@name" for an abstract socket. False when it is set
// and the datagram could not be sent (an address of another kind, a
// manager gone); the caller has nothing else to do about it.
bool notify(std::string_view state);
// Announces a reload: RELOADING=1 with the monotonic timestamp systemd asks for.
bool notify_reloading();
// Half of WATCHDOG_USEC when the watchdog is enabled for this process
// (WATCHDOG_PID, where set, names it).
std::optional<std::chrono::microseconds> watchdog_period();
// Descriptors passed by socket activation (LISTEN_FDS from fd 3, when
// LISTEN_PID names this process), made close-on-exec and unset from the
// environment so that children do not inherit them.
std::vector<int> listen_fds();

}  // namespace nodewatch::systemd
