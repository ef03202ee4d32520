#pragma once
// The protocol part of the nic collector: node-level TCP/IP health from
// <procfs>/net/snmp and <procfs>/net/netstat, read every collection through
// held descriptors (single_open seq_files: one pread at offset 0 generates
// them afresh; the descriptor stays in the network namespace it was opened
// in, the daemon's).
//
// Failure contract (nodewatch/collector.hpp):
//  - a file absent (a kernel without it, a test root) or gone: its series
//    are left out, not an error;
//  - one that answers an error (EIO, EACCES):
//    sink.error("read_error", "net/snmp", "EACCES"), its series left out;
//  - a malformed pair of lines: sink.error("parse_error"), the rest kept;
//  - a field this kernel does not have (TCPRcvQDrop before 5.x): its
//    series is left out.

#include <cstddef>
#include <vector>

#include "nodewatch/collector.hpp"
#include "nodewatch/sources/fs.hpp"

namespace nodewatch::nic {

class Protocols {
 public:
  // `max_held` bounds the held descriptors (0: none).
  Protocols(const Roots& roots, std::size_t max_held);

  // The declarations of every metric this part emits.
  static std::vector<MetricDesc> metric_descs();

  void collect(MetricSink& out);

  // Descriptors held open (tests).
  std::size_t held_descriptors() const { return files_.size(); }

 private:
  sources::HeldFiles files_;
};

}  // namespace nodewatch::nic
