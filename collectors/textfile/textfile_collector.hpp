#pragma once
// The textfile collector: burn-in jobs, inventory scripts and health checks
// publish their own results next to the hardware metrics by writing
// Prometheus text-format files (*.prom) into one directory.
//
// Each file is parsed strictly (textfile_parse.hpp) and taken whole or
// refused whole: a malformed file, one over the size limit, one that is not a
// regular file, one that would redefine a family of another file with another
// type or repeat one of its series, or one that uses a name nodewatch exports
// itself, is skipped and counted (nodewatch_collector_errors_total{collector=
// "textfile",reason}), and nodewatch_textfile_file_valid{file} is 0 for it;
// the other files are unaffected. Write files atomically (to a temporary name
// that does not end in .prom, then rename): a half-written file without its
// final newline is refused anyway.
//
// The daemon may run as root and anyone who may write the directory can
// put a link in it: a file is opened without following a link at its own
// name (wherever the link leads: out of the directory, or to another file
// of it, which is read under its own name), and such a link is refused as
// not a regular file. The configured directory itself may be a link (the
// operator's). A refusal is logged with the file's name escaped
// (text::escaped) and what was wrong, never the file's content
// (textfile_parse.hpp).
//
// Families with the same name in several files are merged (one file per GPU
// writing the same metric with a different label is the usual pattern).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nodewatch/collector.hpp"
#include "nodewatch/fs_helper.hpp"
#include "nodewatch/sources/fs.hpp"
#include "nodewatch/sources/mount_watch.hpp"
#include "nodewatch/unique_fd.hpp"

namespace nodewatch {

// The catalog entry: name "textfile", on by default (the directory may sit
// on a network file system: it is read through helper::Fs unless the mount
// table shows it on local file systems only).
const CollectorSpec& textfile_collector_spec();

namespace textfile {

inline constexpr std::string_view kDefaultDirectory = "/var/lib/nodewatch/textfile";

struct TextfileOptions {
  std::string directory{kDefaultDirectory};  // absolute
  std::int64_t max_file_bytes = 1 << 20;
  std::int64_t max_files = 256;
  // All files together: past this many bytes, later files (in name order)
  // are refused ("budget"), so the daemon's memory stays bounded.
  std::int64_t max_total_bytes = 16 << 20;
  bool operator==(const TextfileOptions&) const = default;
};

// Reads [collectors.textfile]; a relative directory is a configuration error.
TextfileOptions read_textfile_options(OptionReader& r);

// The directory is listed and its files read by a helper process
// (nodewatch/fs_helper.hpp, key "textfile:" and the directory), because it may
// sit on a network or user-space file system that can hang: the reads are
// the sources layer's (FsRoot::read_regular: O_NONBLOCK, fstat on the
// descriptor read) made there. A directory that does not answer within the
// collection's deadline abandons its helper and the collection fails
// ("stuck": the collector is down and its series are withdrawn); while the
// kernel holds that helper, nothing is read and every collection fails at
// once, until it is gone. Tests inject errnos through `faults` as on sysfs
// (Roots::faults). Refusals are counted with the file as the subject and
// why as the detail (the scheduler logs them when they start and stop).
//
// A directory on local file systems is read in the daemon itself, without
// the helper's round trip (two process wake-ups a collection): when every
// mount on its path, from mountinfo of this process, is of a local disk or
// memory file system (on_local_mounts), the directory is opened without
// following a symlink (openat2 RESOLVE_NO_SYMLINKS: a link may lead
// anywhere) and each file beneath it without a symlink or a mount crossed
// (RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV). What cannot be opened so (a
// directory reached through a link, a mount inside the directory, a kernel
// without openat2) is read by the helper, which opens each file with
// O_NOFOLLOW; a link in the directory is refused by both. The mount table
// is read again when mountinfo's poll() says it changed. Injected faults
// (tests) always take the helper.
class TextfileCollector final : public Collector {
 public:
  explicit TextfileCollector(TextfileOptions options,
                             std::shared_ptr<sources::Faults> faults = nullptr);

  const MetricTable& metrics() const override;
  void collect(const CollectContext& ctx, MetricSink& out) override;

  // For tests: the last collection read the directory in the daemon.
  bool read_in_process() const { return in_process_; }
  // For tests: the helper's pid, 0 when none runs.
  pid_t helper_pid() const { return fs_.pid(); }

 private:
  // Whether every mount on dir_'s path is local, as the mount table says
  // now (read again when it changed).
  bool local();
  // The names in the directory: listed in the daemon through `dirfd`
  // (opened here, -1 when not) when its mounts are local, else by the
  // helper. Throws CollectError when the helper does not answer.
  sources::Listing list_directory(const helper::Deadline& deadline, UniqueFd& dirfd);
  // The *.prom names in `listing`, at most max_files of them (the rest
  // counted as too_many_files).
  std::vector<std::string> select_inputs(sources::Listing& listing, MetricSink& out) const;

  TextfileOptions options_;
  std::string dir_;  // without trailing slashes
  helper::Fs fs_;
  sources::MountWatch mounts_;  // this process's mountinfo
  bool use_local_;              // no injected faults
  bool local_ = false;
  bool in_process_ = false;
};

// True when every mount whose mount point is `dir` or above it, in the
// text of a mountinfo file (proc(5)), is of a local disk or memory file
// system (ext2/3/4, xfs, btrfs, f2fs, tmpfs, ramfs, overlay): a path that
// no network, FUSE or automount file system can make hang. False for a
// line that cannot be read.
bool on_local_mounts(std::string_view mountinfo, std::string_view dir);

}  // namespace textfile
}  // namespace nodewatch
