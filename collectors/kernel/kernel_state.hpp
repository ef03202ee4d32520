#pragma once
// What the kernel collector keeps across restarts (collectors.kernel.
// state_file): the boot it counted, the sequence number of the last record
// it counted, and its counts. After a restart in the same boot the counts
// go on and only records after `last_seq` are counted, so that a record is
// counted once whether it was logged while nodewatch ran or while it was
// down; a different boot id starts afresh.
//
// The file is text, one fact a line, and ends with a checksum line (FNV-1a,
// 64 bits, of everything before it):
//
//   nodewatch-kernel-state 1
//   boot_id 3f0c8f8e-7a61-4d5e-9a39-0b1c2d3e4f50
//   last_seq 48113
//   lost 0
//   event nvidia_xid 0000:18:00.0 2
//   event oom_kill - 1            ("-": no device)
//   xid 0000:18:00.0 79 2
//   sxid 0000:05:00.0 12028 1
//   checksum 5c1d0e4b9a7f3e21
//
// A file that does not parse whole (another version, a line of another
// shape, a name with characters outside [A-Za-z0-9:._+-], a repeated fact,
// a checksum that does not match: a torn or edited file) is refused whole:
// never trusted in part. What parses is checked before it is trusted (the
// service: kernel_service.hpp; sanitize_state in kernel_log.hpp). Written atomically: a temporary
// file of its own in the same directory (<path>.XXXXXX), fsync, rename, fsync of the directory. A
// missing directory is made (its last component only, mode 0755). A path that is there and is not a
// regular file (a device, a FIFO, a symbolic link, a directory) is never replaced.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace nodewatch::kernel {

struct KernelCounts {
  using Key = std::pair<std::string, std::string>;
  std::map<Key, std::uint64_t> events;  // (event, device), device "" for none
  std::map<Key, std::uint64_t> xids;    // (pci_bus_id, xid)
  std::map<Key, std::uint64_t> sxids;   // (pci_bus_id, sxid)
  std::uint64_t lost = 0;               // records overwritten before they were read
  bool operator==(const KernelCounts&) const = default;
};

struct KernelState {
  std::string boot_id;
  std::optional<std::uint64_t> last_seq;  // none before the first record
  KernelCounts counts;
  bool operator==(const KernelState&) const = default;
};

std::string serialize_state(const KernelState& state);

// The state in `text`, or nullopt with why in `*why`.
std::optional<KernelState> parse_state(std::string_view text, std::string* why);

// Writes `state` to `path` atomically; 0 or the errno of the step that
// failed (the old file is then left as it was); EEXIST when `path` is there
// and is not a regular file. That is looked at (lstat) before the rename,
// not atomically with it: a user who can write to the directory could
// still put something else under the name between the two.
int write_state_file(const std::string& path, const KernelState& state);

}  // namespace nodewatch::kernel
