#pragma once
// File-system work on paths that may hang, done in helper processes
// (DESIGN.md, "Shape of the process").
//
// A thread that calls into a hard NFS, Lustre, GPFS or FUSE mount whose
// server stopped answering waits in the kernel, and once the server has
// read the request not even SIGKILL lets it out. In the daemon, such a
// thread keeps the whole process (and its listening socket) alive after
// SIGTERM, so a restart cannot serve while the storage is hung. Every
// system call on a configured path that may be such a mount (the storage
// probes, the textfile directory, the configuration's check of probe
// paths) is therefore made by a helper process, which the daemon abandons
// when it does not answer in time. (A textfile directory that the mount
// table shows on local file systems only is read in the daemon:
// textfile_collector.hpp.)
//
// The process tree:
//   nodewatchd                 the daemon; asks the launcher for helpers
//   └─ nwd-launcher            forked by start_launcher() before any thread
//      └─ nwd-fs-helper        one per key (a path and its user), forked
//                              by the launcher on demand
// The launcher is forked while the daemon has one thread and no descriptor
// but its standard ones: it holds no listening socket, no device, no
// library handle, and it closes everything but its channel to the daemon.
// It never touches a configured path, so it always answers. A helper is a
// fork of the launcher holding one stream socket to the daemon (and
// /dev/null as its standard streams); it dies with the launcher
// (PR_SET_PDEATHSIG), and the launcher reaps it on SIGCHLD whenever the
// kernel lets it go. The daemon holds a pidfd of each helper: signals go
// to that exact process (never to a reused pid), and its exit is seen by
// poll().
//
// The wire: each request and each answer is one frame, a 32-bit length
// followed by that many bytes (an operation code and its fields); frames
// are bounded (kMaxFrameBytes) and every field is checked on both sides: a
// helper that sends nonsense is discarded (Failure::kBroken).
//
// Abandoning: a call that has no answer by its deadline (or whose caller
// stops waiting) sends the helper SIGKILL and forgets it; nothing ever
// waits on a helper synchronously. Until the kernel lets the helper go, it
// is counted as abandoned and its key is blocked: no other helper is
// started for that key (at most one helper in flight per path), and the
// caller reports the path stuck. One call of a key is in flight at a time,
// whichever Fs makes it (a collector and its replacement during a reload
// share the path): another is refused with kBusy. At most kMaxHelpers
// helpers (running and abandoned together) exist in a process.
//
// Thread-safety: the launcher and the abandoned-helper bookkeeping are
// process-wide and thread-safe; one Fs is used by one thread at a time.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "nodewatch/sources/fs.hpp"

namespace nodewatch::helper {

using Clock = std::chrono::steady_clock;

inline constexpr std::size_t kMaxHelpers = 32;
// A frame's largest payload: a textfile input of the largest allowed size
// (64 MiB) and its fields.
inline constexpr std::size_t kMaxFrameBytes = (std::size_t{64} << 20) + 4096;
// A directory listing's largest answer, in bytes of names.
inline constexpr std::size_t kMaxListingBytes = std::size_t{4} << 20;

// Forks the launcher. Call it first thing in main(), while the process has
// one thread: a fork of a process with several threads may copy a lock
// another thread holds. Returns "" when the launcher runs, else why not
// (the process then starts no helper: every call fails with kUnavailable).
// Calling it again while the launcher runs does nothing.
std::string start_launcher();
bool launcher_running();
// The launcher's pid, 0 when none runs (tests).
pid_t launcher_pid();

// Call first thing in main(), before start_launcher(): when this process is
// a replacement launcher (below), it runs the launcher and never returns;
// otherwise it does nothing.
//
// A launcher that dies (killed, or chosen by the OOM killer) takes its
// helpers with it. The next helper that is asked for starts a replacement:
// the process has threads by then and cannot fork one, so it execs its own
// binary (/proc/self/exe) with a flag that launcher_entry() recognizes, at
// most once every 10 s.
void launcher_entry(int argc, char** argv);

// Why a call has no answer from the file system.
enum class Failure {
  kNone,         // answered (the answer may still be an errno)
  kTimeout,      // no answer by the deadline: the helper was abandoned
  kCancelled,    // the caller stopped waiting: the helper was abandoned
  kBlocked,      // an abandoned helper of the key is still alive: nothing was started
  kBusy,         // another call of the key is in flight (another Fs): nothing was started
  kLimit,        // kMaxHelpers are alive
  kUnavailable,  // no launcher, or it could not start a helper
  kBroken,       // the helper died or answered nonsense: it was discarded
};
// "timeout", "cancelled", "blocked", "busy", "limit", "unavailable", "broken";
// "" for kNone.
std::string_view failure_name(Failure f);

// How long a call may wait: until `at`, or until `*cancel` is set (checked
// every few tens of milliseconds while waiting).
struct Deadline {
  Clock::time_point at;
  const std::atomic<bool>* cancel = nullptr;
};

// Abandoned helpers still alive whose key starts with `key_prefix`.
std::size_t abandoned(std::string_view key_prefix = {});
// True while an abandoned helper of exactly `key` is alive.
bool blocked(std::string_view key);
// True while a call of `key` is in flight.
bool busy(std::string_view key);
// Helpers running now (started, not abandoned, not closed), all keys.
std::size_t running();

// The answer of one call.
struct Answer {
  Failure failure = Failure::kNone;
  int err = 0;  // the call's errno when it was answered
  // The time the helper spent in the system calls, measured there (no
  // round trip in it).
  std::chrono::nanoseconds took{0};
  bool answered() const { return failure == Failure::kNone; }
  bool ok() const { return answered() && err == 0; }
};

struct StatInfo {
  mode_t mode = 0;
  std::uint64_t size = 0;
  double mtime_seconds = 0;
  // Which file it is and whose: a caller that made a file tells it from
  // one put in its place.
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  uid_t uid = 0;
  std::uint64_t nlink = 0;  // its hard links
  bool same_file(const StatInfo& o) const { return dev == o.dev && ino == o.ino; }
};

// The file-system calls of one key, made by one helper process started on
// first use and kept while it answers. A failed call other than an errno
// ends the helper (abandoned or discarded); the next call starts another
// unless the key is blocked. Handles from open() are the helper's and die
// with it (generation() changes).
//
// `faults` (tests): an injected errno for a path answers the call at once,
// without the helper, as the sources layer's reads do.
class Fs {
 public:
  explicit Fs(std::string key, std::shared_ptr<sources::Faults> faults = nullptr);
  // Closes the running helper, if any (it exits when it reads the end of
  // its socket); never waits.
  ~Fs();
  Fs(const Fs&) = delete;
  Fs& operator=(const Fs&) = delete;

  const std::string& key() const { return key_; }

  // stat(), or lstat() when `follow_links` is false.
  Answer stat(const std::string& path, const Deadline& d, StatInfo* out = nullptr,
              bool follow_links = true);
  // O_CLOEXEC is added; `handle` is the helper's descriptor; `opened`, when
  // given, gets the fstat() of the file opened.
  Answer open(const std::string& path, int flags, mode_t mode, const Deadline& d, int* handle,
              StatInfo* opened = nullptr);
  // Opens `path` (`flags` without O_CREAT or O_EXCL) only if it still names
  // the regular file `file` (same device and inode), without following a
  // link or opening anything else there first: a FIFO, a device or a
  // directory put at the name is neither opened nor waited on. Something
  // else at the name answers ESTALE; `found` gets what the name led to
  // (zeros when the lookup failed).
  Answer open_same(const std::string& path, int flags, const StatInfo& file, const Deadline& d,
                   int* handle, StatInfo* found);
  // Removes `path` if it names the regular file `file`; ESTALE, with
  // `found` (if given) saying what is there, otherwise. The check (lstat)
  // and the unlink() are two calls, not one: what is at the name may be
  // swapped between them, and then that is removed. Such a swap needs write
  // access to the directory; in a sticky directory (a shared scratch space)
  // no other user can swap a file of this process's user.
  Answer unlink_same(const std::string& path, const StatInfo& file, const Deadline& d,
                     StatInfo* found = nullptr);
  Answer close(int handle, const Deadline& d);
  // All of `data` at `offset` (a short write that makes no progress: EIO).
  Answer pwrite(int handle, std::string_view data, off_t offset, const Deadline& d);
  // Up to `len` bytes from `offset`, fewer at the end of the file; the
  // helper's buffer is aligned for O_DIRECT.
  Answer pread(int handle, std::size_t len, off_t offset, const Deadline& d, std::string* out);
  Answer fsync(int handle, const Deadline& d);
  Answer ftruncate(int handle, off_t len, const Deadline& d);
  Answer fadvise_dontneed(int handle, const Deadline& d);
  // The sources layer's listing and regular-file read (fs.hpp), made by the
  // helper; `answer` says whether it was answered at all. With
  // `follow_links` false, a link at the path's last component is not
  // followed: the read answers ELOOP, with no info.
  sources::Listing list(const std::string& dir, const Deadline& d, Answer* answer);
  sources::FsRoot::FileRead read_regular(const std::string& path, std::size_t max_bytes,
                                         const Deadline& d, Answer* answer,
                                         bool follow_links = true);

  // Abandons the running helper now (a caller that stops for good while it
  // may be in the kernel).
  void abandon();
  // True while this key's abandoned helper is alive.
  bool blocked() const;
  // The running helper's pid, 0 when none (tests).
  pid_t pid() const;
  // Changes each time a helper is started or abandoned: a handle of
  // another generation is dead.
  std::uint64_t generation() const { return generation_; }

 private:
  struct Process;
  Answer call(std::string_view request, const Deadline& d, std::string* reply);
  Answer opened(const Answer& a, const std::string& reply, int* handle, StatInfo* st);
  std::optional<int> fault(const std::string& path) const;

  std::string key_;
  std::shared_ptr<sources::Faults> faults_;
  std::unique_ptr<Process> proc_;
  std::uint64_t generation_ = 0;
};

// A file the operator names and the daemon reads itself (the
// configuration, the expect file, the web configuration): read whole by a
// helper of key "file:<absolute path>", and only if it is a regular file of
// at most `max_bytes`, within `timeout`. A configuration on a hung mount
// costs a reload `timeout` and an error, never the daemon's io thread or
// its exit; while that helper is held, later reads of the path are refused
// at once. Without a launcher the file is read here (O_NONBLOCK, type
// checked), which a local file allows. A file that grows while it is read
// is read again, up to three times, then refused as "changed while being
// read" (not as larger than `max_bytes`, which it need not be).
struct OperatorFile {
  bool ok = false;
  bool absent = false;  // ENOENT (or ENOTDIR): there is no such file
  std::string text;     // when ok
  std::string error;    // when not ok: why, as a sentence for the operator
};
inline constexpr std::chrono::milliseconds kOperatorFileTimeout{5000};
OperatorFile read_operator_file(const std::string& path, std::size_t max_bytes,
                                std::chrono::milliseconds timeout = kOperatorFileTimeout);

// What is at a path the operator names (lstat(), or stat() with
// `follow_links`), asked the way read_operator_file() reads: by a helper of
// key "file:<absolute path>" within `timeout`, here without a launcher.
struct OperatorPath {
  bool answered = false;  // false: `error` says why there is no answer
  int err = 0;            // the call's errno when answered (ENOENT: nothing there)
  StatInfo info;          // when answered with err 0
  std::string error;      // when not answered: a sentence for the operator
};
OperatorPath stat_operator_path(const std::string& path, bool follow_links,
                                std::chrono::milliseconds timeout = kOperatorFileTimeout);

}  // namespace nodewatch::helper
