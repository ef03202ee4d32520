#pragma once
// The records of /dev/kmsg (the kernel's Documentation/ABI/testing/dev-kmsg):
// each read() returns one record,
//
//   <prio>,<seq>,<ts_usec>,<flags>[,<more fields>];<message>\n
//    SUBSYSTEM=pci\n
//    DEVICE=+pci:0000:18:00.0\n
//
// prio is the syslog facility * 8 + level; seq the record's 64-bit sequence
// number (consecutive: a gap is records overwritten before they were read);
// ts_usec the monotonic time of the record in microseconds since boot;
// flags '-', or 'c' for a fragment of a line. Fields after the fourth are
// ignored (the ABI reserves them for extensions). The message ends at the
// first newline; non-printable bytes and '\' itself are escaped as \xHH.
// Continuation lines start with a space and carry KEY=value pairs; DEVICE=
// names the device: "b8:0" block dev_t, "c127:3" char dev_t, "n2" network
// interface index, "+pci:0000:18:00.0" subsystem:name.
//
// Only the kernel writes facility 0 (kern): a record written to /dev/kmsg
// from user space without a prefix is given facility 1 (user), and one that
// asks for facility 0 is given 1 as well (the same document). A matcher
// that counts hardware events therefore takes facility 0 records only, so
// that no process can forge an XID by writing one.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nodewatch::kernel {

struct KmsgRecord {
  int facility = 0;
  int level = 0;  // 0 emergency ... 7 debug
  std::uint64_t seq = 0;
  std::uint64_t ts_usec = 0;
  bool fragment = false;  // flags 'c'
  std::string message;    // unescaped: may hold any byte
  std::string subsystem;  // SUBSYSTEM=, "" when absent
  std::string device;     // DEVICE=, "" when absent
};

// The record in `raw` (one read()'s bytes), or nullopt when its prefix is
// malformed (no ';', a missing or non-numeric field): such a record is
// skipped and counted, never guessed at.
std::optional<KmsgRecord> parse_kmsg_record(std::string_view raw);

// The message text with its \xHH escapes decoded (a '\' not followed by
// 'x' and two hex digits is kept as it is).
std::string unescape_kmsg(std::string_view escaped);

}  // namespace nodewatch::kernel
