#pragma once
// The kernel log opened for nodewatchd by whoever started it.
//
// Opening /dev/kmsg is checked once, at open(): where
// kernel.dmesg_restrict=1 (Debian's default) the opener needs CAP_SYSLOG,
// and reading a descriptor already open needs nothing. The unit
// (packaging/nodewatch.service) therefore has systemd open the log as
// nodewatchd's standard input (StandardInput=file:/dev/kmsg), as root,
// before it drops to the unit's user and hides the device
// (ProtectKernelLogs=yes): the daemon reads the kernel log with no
// capability at all.

namespace nodewatch::kernel {

// Takes standard input when it is the kernel log's device (/dev/kmsg,
// character device 1:11): moved to a descriptor of its own (close-on-exec,
// non-blocking), with /dev/null put in its place, so that nothing started
// from here inherits it. True when it did. Called once, at startup, before
// any thread; anything else on standard input is left as it is.
bool adopt_inherited_log();

// The adopted descriptor, or -1. The kernel collector reads it where its
// kmsg_path is /dev/kmsg (kKernelLogPath), through descriptors of its own
// (dup), rewound to the first record each time it opens the log.
int inherited_log_fd();

inline constexpr const char* kKernelLogPath = "/dev/kmsg";

}  // namespace nodewatch::kernel
