#pragma once
// The NFS part of the storage collector: per-mount, per-operation RPC
// counters of the NFS client from <procfs>/<mountstats> (self/mountstats
// by default, see StorageOptions), read every collection through a held
// descriptor (a seq_file: one pread at offset 0 generates it afresh).
//
// Failure contract (nodewatch/collector.hpp):
//  - the file is absent (no such process, a fixture without NFS) or gone:
//    no NFS series, not an error;
//  - it answers an error (EIO, EACCES):
//    sink.error("mountstats_read_error", "self/mountstats", "EACCES"), no
//    NFS series in this collection;
//  - a malformed mount block: sink.error("mountstats_parse_error") and the
//    other mounts are exported; a short per-op line:
//    sink.error("mountstats_short_op_line");
//  - the part never stat()s a mount point: a hung NFS mount cannot block it
//    (reading mountstats only reads counters).

#include <string>
#include <vector>

#include "nodewatch/collector.hpp"
#include "nodewatch/sources/fs.hpp"

namespace nodewatch::storage {

class NfsMounts {
 public:
  // `mountstats` is relative to the procfs root; `operations` are the per-op
  // lines exported. `max_held` as for BlockDevices (0: no held descriptor).
  NfsMounts(const Roots& roots, std::string mountstats, std::vector<std::string> operations,
            std::size_t max_held);

  // The declarations of every metric this part emits.
  static std::vector<MetricDesc> metric_descs();

  void collect(const CollectContext& ctx, MetricSink& out);

  // For tests: descriptors held open (0 or 1).
  std::size_t held_descriptors() const { return files_.size(); }

 private:
  sources::HeldFiles files_;
  std::string mountstats_;
  std::vector<std::string> operations_;  // sorted
};

}  // namespace nodewatch::storage
