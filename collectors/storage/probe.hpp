#pragma once
// Active latency probes of the storage collector: each configured directory
// gets a thread of its own that times real file-system operations on a
// small file of its own, every `interval`.
//
// The probe file is <path>/.nodewatch-probe-<hostname>: probes from many
// nodes on one shared file system never collide. It is created once with
// `size` bytes and afterwards rewritten in place at offset 0 (it never grows
// past `size`), and removed when the probe stops; nothing else under the
// path is touched.
//
// The name is predictable and the directory is often writable by many (a
// shared scratch space), so the probe opens only the file it made: it
// creates with O_EXCL (never a file found there), keeps the file's device
// and inode, and every later open looks the name up without opening what
// it names (O_PATH, no link followed), checks that it is that file, and
// only then opens it (helper::Fs::open_same). A FIFO, a directory, a link
// or another file at the name is neither opened nor changed: it is logged
// with its type and owner, and the probe goes on at
// <path>/.nodewatch-probe-<hostname>.<16 random hex digits> (an operation
// that found it is not counted, and is run once more on the new file).
// The exception is a leftover of an earlier run at the first name (an
// unclean stop, or a version that never removed its file): a regular file
// of the daemon's own user with one link and at most `size` bytes is
// removed (unlink_same) and made afresh, logged at info level; so is such
// a file at whichever name the probe has after a creation that did not
// answer in time (its helper, abandoned, may have made it).
//
// One cycle runs the configured operations in this order:
//   stat   lstat() of the probe file (a LOOKUP/GETATTR on NFS);
//   write  open(O_WRONLY) and pwrite() of `size` bytes at offset 0 (and
//          close(), unless fsync is probed too);
//   fsync  fsync() of the written file, then close() (an open of its own
//          when write is not probed);
//   read   open(O_RDONLY | O_DIRECT), pread() of the file, close(). Where the
//          file system refuses O_DIRECT (EINVAL, e.g. tmpfs) the file is
//          opened normally and posix_fadvise(DONTNEED) drops its cached
//          pages first, so that the read still goes to the storage where
//          the file system allows it.
// Creating the file is not timed; its failures are counted under the
// operation "create" and the cycle's other operations are skipped.
//
// Every system call on the path is made by a helper process
// (nodewatch/fs_helper.hpp; its key is "probe:" and the probe file's path), so
// that a hung mount can never hold the daemon: the probe's thread only
// waits on the helper's socket, for at most `timeout` per operation. The
// duration observed is the one the helper measured around the system calls
// (no round trip in it). An operation that has not returned by `timeout`
// counts as a failure with errno "ETIMEDOUT", is observed at `timeout` (a
// lower bound of how long it took), and its helper is abandoned: sent
// SIGKILL and left to the kernel.
//
// snapshot().stuck is true from such a timeout until that operation
// answers again (success or errno): a stat answered from the client's
// attribute cache does not clear a read that hangs. Where the wait is killable (NFS's
// RPC waits, a lease held on the file), the SIGKILL ends the helper at
// once and each cycle starts a new one, which times out again while the
// mount hangs. Where it is not (a FUSE request the server has read: state
// D), the kernel holds the abandoned helper; meanwhile nothing else is
// started on the path (the helper key is blocked). Either way the probe
// recovers by itself.
//
// Failures of the helper machinery itself (no launcher, the helper bound
// reached, a helper that died) are not the path's: the rest of the cycle is
// skipped and the failure is counted for take_helper_failures().
//
// The probe's thread never holds the state's mutex while it waits on the
// helper, so snapshot() never waits. Destruction (or request_stop())
// interrupts a wait within a few tens of milliseconds, abandoning the
// helper if it was in a call; the thread then ends.
//
// The probes of the process are handed out by a ProbeRegistry (below),
// which the storage collectors share through the daemon's services: a
// rebuilt collector gets the running probe of an unchanged path (its thread,
// histograms and counts go on), and a probe of a changed one continues the
// path's histograms and counts. One call of a path is in flight at a time
// (the helper's key): a replacement that starts while its predecessor is
// still in a call waits for it, and one that starts while the path's helper
// is held by the kernel reports stuck, so that reloads during a hang never
// pile up helpers.

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "nodewatch/metric.hpp"

namespace nodewatch::storage {

enum class ProbeOp : std::size_t { kStat = 0, kWrite, kFsync, kRead, kCreate, kCount };
inline constexpr std::size_t kProbeOpCount = static_cast<std::size_t>(ProbeOp::kCount);

// "stat", "write", "fsync", "read", "create".
std::string_view probe_op_name(ProbeOp op);
// The configurable operations ("create" is not one); nullopt when unknown.
std::optional<ProbeOp> parse_probe_op(std::string_view name);

// Histogram upper bounds, 100 us to 30 s in 1-2.5-5 steps.
const std::vector<double>& probe_buckets();

inline constexpr std::size_t kMaxProbeSize = std::size_t{1} << 20;

struct ProbeConfig {
  std::string path;                 // absolute directory
  std::vector<ProbeOp> operations;  // in the cycle's order, without duplicates
  std::chrono::milliseconds interval{10000};
  std::chrono::milliseconds timeout{5000};
  std::size_t size = 4096;
  bool operator==(const ProbeConfig&) const = default;
};

struct ProbeOpState {
  bool observed = false;  // at least one attempt finished
  bool success = false;   // the last attempt
  double last_success_unix = 0;
  std::optional<Histogram> histogram;           // configured operations only
  std::map<std::string, std::uint64_t> errors;  // by errno name
};

struct ProbeSnapshot {
  // An operation's last attempt was abandoned at its timeout and it has
  // not answered since, or the path's abandoned helper is still held by
  // the kernel.
  bool stuck = false;
  std::array<ProbeOpState, kProbeOpCount> ops;
};

// The state one probe file's probes report, kept across the probes that
// replace each other on the path (defined in probe.cpp).
struct ProbeRecord;

class Probe {
 public:
  struct Shared;

  // Starts a probe of its own (no registry): no predecessor, a fresh record.
  // `file_name` is the probe file's name under the path.
  Probe(ProbeConfig config, std::string file_name);
  ~Probe();
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;

  const ProbeConfig& config() const { return config_; }
  const std::string& file_name() const { return file_name_; }
  // The probe file's first name under the path (the one it uses unless
  // something else is there).
  std::string file_path() const;

  // A copy of the state of the configured operations and of "create",
  // taken under the mutexes (never waits on the file system).
  ProbeSnapshot snapshot() const;
  // The helper failures ("unavailable", "limit", "broken") counted since the
  // last call, and forgets them.
  std::map<std::string, std::uint64_t> take_helper_failures();

  // Asks the thread to stop, without waiting.
  void request_stop();
  bool stop_requested() const;
  // Waits until `deadline` for the thread to end; joins it if it did and
  // detaches it otherwise. Returns true when it ended.
  bool finish(std::chrono::steady_clock::time_point deadline);

  // The helper key of the probe's path ("probe:" and file_path()).
  std::string helper_key() const;

  // Only a ProbeRegistry makes the probes of a lineage.
  class Lineage {
    friend class Probe;
    friend class ProbeRegistry;
    Lineage() = default;
  };
  // `record`: the path's state, continued.
  Probe(Lineage, ProbeConfig config, std::string file_name, std::shared_ptr<ProbeRecord> record);

 private:
  friend class ProbeRegistry;

  ProbeConfig config_;
  std::string file_name_;
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<ProbeRecord> record_;
  std::thread thread_;
};

// The probes of the process by probe file: the state that outlives one
// storage collector (DESIGN.md, "Layers"), held as a service. Thread-safe.
class ProbeRegistry : public std::enable_shared_from_this<ProbeRegistry> {
 public:
  ProbeRegistry() = default;
  ProbeRegistry(const ProbeRegistry&) = delete;
  ProbeRegistry& operator=(const ProbeRegistry&) = delete;

  // The running probe of `config` (same path, operations, interval,
  // timeout, size and file), shared with the collector it was made for; or
  // a new one, which continues the path's record.
  std::shared_ptr<Probe> acquire(const ProbeConfig& config, const std::string& file_name);
  // Gives `probes` back: those no other holder shares are stopped, all at
  // once, and waited for until `deadline` in all. Empties `probes`.
  void release(std::vector<std::shared_ptr<Probe>>& probes,
               std::chrono::steady_clock::time_point deadline);
  // Probe files with a probe or record alive (tests).
  std::size_t paths() const;

 private:
  struct Path {
    std::weak_ptr<Probe> current;  // the probe handed out last
    std::weak_ptr<ProbeRecord> record;
  };
  mutable std::mutex mu_;
  std::map<std::string, Path, std::less<>> paths_;
};

// The probe file's first name for this host: ".nodewatch-probe-<hostname>",
// with characters other than [A-Za-z0-9._-] replaced by '_'.
std::string probe_file_name(std::string_view hostname);

}  // namespace nodewatch::storage
