#pragma once
// Parsing of <procfs>/<pid>/mountstats for the storage collector's NFS part:
// pure functions over text already read, tested with captured content.
//
// One block per mount, written by show_vfsstat() (fs/proc_namespace.c); NFS
// mounts append their statistics (nfs_show_stats() in fs/nfs/super.c, then
// rpc_clnt_show_stats() in net/sunrpc/stats.c and the transport's
// print_stats: net/sunrpc/xprtsock.c, net/sunrpc/xprtrdma/transport.c):
//
// clang-format off
//   device 10.0.0.5:/export/data mounted on /mnt/data with fstype nfs4 statvers=1.1
//   	opts:	rw,vers=4.1,rsize=1048576,wsize=1048576,...,proto=tcp,...
//   	age:	86400
//   	caps:	caps=0x3ffbf,wtmult=512,dtsize=32768,bsize=0,namlen=255
//   	sec:	flavor=1,pseudoflavor=1
//   	events:	... (27 numbers)
//   	bytes:	... (8 numbers)
//   	RPC iostats version: 1.1  p/v: 100003/4 (nfs)
//   	xprt:	tcp 738 1 2 0 11 123456 123456 0 987654 0 2 0 3
//   	per-op statistics
//   	        NULL: 1 1 0 44 24 0 0 0 0
//   	        READ: 52112 52113 0 8546368 6834954240 1051 2123456 2130011 0
// clang-format on
//
// Per-op line: ops, transmissions, major timeouts, bytes sent, bytes
// received, queue ms, rtt ms, execute ms, and since Linux 5.3 a 9th number,
// the operations that ended in an error. The xprt line has a layout per
// transport and statvers:
//   tcp  1.0: port bind connect connect_time idle sends recvs bad_xids req_u bklog_u (10)
//   tcp  1.1: the same + max_slots sending_u pending_u (13)
//   udp  1.0: port bind sends recvs bad_xids req_u bklog_u (7)
//   udp  1.1: the same + max_slots sending_u pending_u (10)
//   rdma:     the tcp 1.0 layout (10), then RDMA counters (up to 27 in all)
//
// Failure contract: a block whose header, xprt line or counters cannot be
// parsed, or that ends before its per-op statistics (a truncated file), is
// dropped and counted in `malformed`; the other mounts are unaffected. A
// per-op line with fewer than 8 numbers (old kernels print a short NULL
// line) is skipped and counted in `skipped_op_lines`. Lines the parser does
// not know are ignored. Mounts of other file systems are ignored.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nodewatch::storage {

struct NfsOpStats {
  std::string_view name;  // "READ", points into the parsed text
  std::uint64_t operations = 0;
  std::uint64_t transmissions = 0;
  std::uint64_t major_timeouts = 0;
  std::uint64_t sent_bytes = 0;
  std::uint64_t received_bytes = 0;
  std::uint64_t queue_ms = 0;
  std::uint64_t rtt_ms = 0;
  std::uint64_t execute_ms = 0;
  bool has_errors = false;  // the 9th number (Linux 5.3+)
  std::uint64_t errors = 0;
};

struct NfsTransport {
  std::string protocol;        // "tcp", "udp", "rdma"
  std::uint64_t connects = 0;  // 0 for udp, which does not connect
  std::uint64_t sends = 0;
  std::uint64_t receives = 0;
  std::uint64_t bad_xids = 0;
};

struct NfsMount {
  std::string export_name;  // "server:/path", octal escapes (\040) decoded
  std::string mountpoint;   // decoded likewise
  std::string fstype;       // "nfs" or "nfs4"
  std::string statvers;     // "1.0", "1.1"
  std::string version;      // opts vers=, e.g. "3", "4.1"; "" when absent
  std::string server;       // export_name before ":/", IPv6 brackets removed
  NfsTransport transport;
  std::vector<NfsOpStats> ops;
};

struct MountstatsResult {
  std::vector<NfsMount> mounts;
  std::size_t malformed = 0;
  std::size_t skipped_op_lines = 0;
};

MountstatsResult parse_mountstats(std::string_view text);

// Decodes the octal escapes the kernel writes for ' ', '\t', '\n' and '\\'
// in device names and paths ("/mnt/my\040data" -> "/mnt/my data").
std::string unescape_mount_field(std::string_view field);

// The server of an export: "10.0.0.5:/export" -> "10.0.0.5",
// "[fd00::5]:/export" -> "fd00::5"; "" when there is no ":/".
std::string nfs_server(std::string_view export_name);

}  // namespace nodewatch::storage
