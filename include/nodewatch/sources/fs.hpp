#pragma once
// The sources layer's file-system side: every sysfs and procfs read of
// every collector goes through an FsRoot (DESIGN.md, "Layers").
//
// One read rule: a whole file, at most `max_bytes` (larger is an error, not
// a truncation), EINTR retried, opened with O_NONBLOCK and read only if it
// is a regular file (a FIFO or device node in an attribute's place is error
// EINVAL at once, a directory EISDIR: neither can block the collection). One error rule, four
// answers:
//   ok      the bytes;
//   absent  the file is not there (ENOENT, ENOTDIR): the driver does not
//           create that attribute, or the device has no such port; not an
//           error;
//   gone    the device went away under the read (ENODEV, ENXIO, ESTALE): a
//           hot-unplug, not an error either; the caller drops the device;
//   error   any other errno (EIO, EACCES, EINVAL, EBUSY, EFBIG for a file
//           over the limit): skipped and counted by the caller.
//
// Values read every cycle are read through a HeldFile: the descriptor is
// kept and each read is one pread() at offset 0, which makes sysfs and
// seq_file procfs files produce their content afresh (0.6 us against 7.4 us
// for open/read/close per value, measured on this machine's /sys). A held
// descriptor whose device went away (ENODEV) is closed and the path opened
// again at once, so a device re-created under the same name is picked up;
// if the path is gone too, the read answers gone or absent.
//
// Tests move the root to a fixture tree and inject any errno on any path
// through Faults, which every read (open, pread, listing, readlink) asks
// first.

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace nodewatch::sources {

enum class Status { kOk, kAbsent, kGone, kError };

// The answer an errno gives (see above); 0 is ok.
Status classify_errno(int err);
// "EIO", "ENODEV", ...; "E<number>" for one glibc does not name.
std::string errno_name(int err);

// Errnos to fail reads with, by path suffix: a test says "fail
// class/infiniband/mlx5_0/ports/1/state with EIO twice" and the next two
// reads of any path ending so fail, whatever the root. Thread-safe.
class Faults {
 public:
  // `times` < 0: until cleared.
  void inject(std::string path_suffix, int err, int times = -1);
  // Runs `action` once, just before the next read of a path ending in
  // `path_suffix`: what an errno cannot say, a test does at that point of
  // a collection (removes the device's directory, cancels the collection).
  // The action runs without the lock held and may call inject().
  void on_read(std::string path_suffix, std::function<void()> action);
  void clear();
  // The errno to fail `path` with, if any (consumes one of its times),
  // after running the action waiting for `path`, if any.
  std::optional<int> take(std::string_view path);
  // Reads failed so far.
  std::uint64_t hits() const;

 private:
  struct Rule {
    std::string suffix;
    int err;
    int times;
  };
  struct Action {
    std::string suffix;
    std::function<void()> run;
  };
  mutable std::mutex mu_;
  std::vector<Rule> rules_;
  std::vector<Action> actions_;
  std::uint64_t hits_ = 0;
};

inline constexpr std::size_t kMaxAttributeBytes = 64 * 1024;

struct Read {
  Status status = Status::kOk;
  int err = 0;       // the errno, when not ok
  std::string text;  // the content, when ok

  bool ok() const { return status == Status::kOk; }
  // Not ok and not a missing file or departed device: worth counting.
  bool failed() const { return status == Status::kError; }
  // The content without trailing blanks, newlines and NULs ("1023\n" -> "1023").
  std::string_view value() const;
  // "EIO", or "" when ok.
  std::string error_name() const { return ok() ? std::string() : errno_name(err); }
};

struct Listing {
  Status status = Status::kOk;
  int err = 0;
  std::vector<std::string> names;  // sorted, without "." and ".."
  bool ok() const { return status == Status::kOk; }
};

class HeldFile;

// One file-system root (/sys, /proc, or a fixture tree standing in for
// one). Cheap to copy; thread-safe (it holds no state but the faults).
class FsRoot {
 public:
  FsRoot() = default;
  explicit FsRoot(std::filesystem::path root, std::shared_ptr<Faults> faults = nullptr);

  const std::filesystem::path& path() const { return root_; }
  // root / rel as a string ("" rel: the root itself).
  std::string full(std::string_view rel) const;

  // The whole file at `rel`, at most `max_bytes`.
  Read read(std::string_view rel, std::size_t max_bytes = kMaxAttributeBytes) const;
  // The entries of the directory at `rel`.
  Listing list(std::string_view rel) const;
  // The target of the symbolic link at `rel` (as stored, not resolved).
  Read readlink(std::string_view rel) const;
  // Where the symbolic link at `rel` leads, as a path below the root, from
  // the link's own text: "bus/pci/devices/0000:17:00.0" ->
  // "../../../devices/pci0000:16/0000:16:02.0/0000:17:00.0" gives
  // "devices/pci0000:16/0000:16:02.0/0000:17:00.0". sysfs links are
  // relative and lead through real directories, so one readlink() does what
  // canonical() does with an lstat() per component. Not a link: error
  // EINVAL. A link that is absolute or climbs out of the root: error EXDEV
  // (nothing outside the configured root is read).
  Read resolve(std::string_view rel) const;
  // A file that another program writes (a textfile input), for which the
  // type, size and modification time matter: opened with O_NONBLOCK (a FIFO
  // under the name cannot block the read), fstat()ed on the same descriptor
  // (the facts are those of the content read), read only if it is a regular
  // file of at most `max_bytes`. Beyond read()'s answers: not a regular
  // file, error EINVAL; over `max_bytes`, or grown past its fstat() size
  // while read (being written), error EFBIG. `info` is set whenever fstat()
  // answered. Not for sysfs or procfs, whose sizes are not their content's.
  struct FileInfo {
    bool regular = false;
    std::uint64_t size = 0;
    double mtime_seconds = 0;  // with the nanoseconds
  };
  struct FileRead : Read {
    std::optional<FileInfo> info;
  };
  FileRead read_regular(std::string_view rel, std::size_t max_bytes) const;
  // read_regular's checks and read on a descriptor its caller opened
  // (O_NONBLOCK: a FIFO must not block the open); closes `fd`.
  static FileRead read_regular_fd(int fd, std::size_t max_bytes);
  // list()'s answer for a directory its caller opened, from the
  // descriptor's position (a fresh descriptor: the whole directory); left
  // open, at its end.
  static Listing list_fd(int dirfd);
  // A held descriptor for `rel`, opened on its first read.
  HeldFile hold(std::string_view rel, std::size_t max_bytes = kMaxAttributeBytes) const;

  // Runs the fault check for an absolute path (HeldFile uses it).
  std::optional<int> fault(const std::string& full_path) const;

 private:
  std::filesystem::path root_;
  std::shared_ptr<Faults> faults_;
};

// A file read every cycle: one descriptor, one pread per read. Not
// thread-safe; movable, not copyable.
class HeldFile {
 public:
  HeldFile() = default;
  HeldFile(FsRoot root, std::string full_path, std::size_t max_bytes);
  ~HeldFile();
  HeldFile(HeldFile&& o) noexcept;
  HeldFile& operator=(HeldFile&& o) noexcept;
  HeldFile(const HeldFile&) = delete;
  HeldFile& operator=(const HeldFile&) = delete;

  Read read();
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  void close();
  FsRoot root_;
  std::string path_;
  std::size_t max_bytes_ = kMaxAttributeBytes;
  int fd_ = -1;
  bool whole_ = false;  // one pread reads it all (not procfs): fs.cpp
};

// Held files by relative path for one collector: read() opens on first
// use and keeps the descriptor; end_cycle() closes those not read since
// begin_cycle() (a departed device's files). At most `max_held` are held;
// past that, reads fall back to open/read/close (counted in fallbacks()).
// `max_bytes` is the first read's for a held file (a whole /proc/diskstats
// or mountstats is larger than an attribute: 150 bytes a device).
class HeldFiles {
 public:
  explicit HeldFiles(FsRoot root, std::size_t max_held = 4096);
  Read read(const std::string& rel, std::size_t max_bytes = kMaxAttributeBytes);
  void begin_cycle();
  // Counts the files held below `prefix` (a directory and its "/") as read
  // this cycle: those of a device whose values are read less often than
  // it is collected.
  void keep_under(std::string_view prefix);
  // Closes files not read this cycle; returns how many.
  std::size_t end_cycle();
  // Descriptors open now (a file whose open failed is remembered without one).
  std::size_t size() const;
  std::uint64_t fallbacks() const { return fallbacks_; }
  const FsRoot& root() const { return root_; }

 private:
  struct Entry {
    HeldFile file;
    std::uint64_t cycle = 0;
  };
  FsRoot root_;
  std::size_t max_held_;
  std::unordered_map<std::string, Entry> files_;
  std::uint64_t cycle_ = 0;
  std::uint64_t fallbacks_ = 0;
};

}  // namespace nodewatch::sources
