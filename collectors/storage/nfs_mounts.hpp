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
//
// A node without NFS reads nothing: the kernel prints every mount of the
// namespace into mountstats at each read (hundreds on a Kubernetes node),
// so after a read that found no NFS mount, mountstats is read again only
// when the mount table changed. That is what mountinfo's poll() says
// (POLLPRI, fs/proc_namespace.c; mountstats has no poll of its own): the
// part holds mountinfo of the same process open for it, opened before the
// read it guards. Off procfs (a fixture tree) every collection reads.

#include <cstdint>
#include <string>
#include <vector>

#include "nodewatch/collector.hpp"
#include "nodewatch/sources/fs.hpp"
#include "nodewatch/sources/mount_watch.hpp"

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

  // For tests: descriptors held open (0 or 1; the mountinfo watch aside).
  std::size_t held_descriptors() const { return files_.size(); }
  // For tests: reads of mountstats so far.
  std::uint64_t reads() const { return reads_; }

 private:
  sources::HeldFiles files_;
  std::string mountstats_;
  std::vector<std::string> operations_;  // sorted
  sources::MountWatch mounts_;           // mountinfo beside mountstats
  bool watch_;                           // false with injected faults
  bool none_ = false;                    // the last read found no NFS mount and no error
  std::uint64_t reads_ = 0;
};

}  // namespace nodewatch::storage
