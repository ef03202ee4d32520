#include "textfile/textfile_collector.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "nodewatch/fs_helper.hpp"
#include "nodewatch/options.hpp"
#include "nodewatch/text.hpp"
#include "textfile/textfile_metrics.hpp"
#include "textfile/textfile_parse.hpp"

namespace nodewatch {
namespace textfile {
namespace {

const MetricTable& table() {
  static const MetricTable t({
      describe(families::kFileMtimeSeconds),
      describe(families::kFileValid),
  });
  return t;
}

// Names nodewatch exports itself: a file may not define them.
bool reserved(std::string_view name) {
  static const std::set<std::string_view> kProcess = {
      "process_cpu_seconds_total",
      "process_resident_memory_bytes",
      "process_virtual_memory_bytes",
      "process_open_fds",
      "process_max_fds",
      "process_start_time_seconds",
  };
  return name.rfind("nodewatch_", 0) == 0 || kProcess.count(name) != 0;
}

// "*.prom", and not a hidden file (an editor's or a writer's temporary).
std::string strip_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

bool is_input(std::string_view n) {
  return n.size() > 5 && n.substr(n.size() - 5) == ".prom" && n[0] != '.';
}

struct Input {
  std::string text;
  double mtime = 0;    // 0: not known
  std::string error;   // empty: read
  std::string reason;  // the errors_total reason when `error` is set
};

// A CollectError for a helper call that was not answered: the collector is
// down (its series withdrawn) until the directory answers again.
[[noreturn]] void unanswered(const std::string& dir, helper::Failure f) {
  using helper::Failure;
  switch (f) {
    case Failure::kTimeout:
    case Failure::kCancelled:
      throw CollectError("stuck", dir +
                                      " did not answer within the collection's timeout; its "
                                      "helper process was abandoned");
    case Failure::kBlocked:
      throw CollectError("stuck", dir +
                                      ": the helper process abandoned on it is still held by the "
                                      "kernel (a hung mount); nothing is read until it is gone");
    case Failure::kBusy:
      throw CollectError("stuck", dir + ": another collection's helper is still reading it");
    default:
      throw CollectError(
          "helper_" + std::string(helper::failure_name(f)),
          dir + ": no helper process to read it (" + std::string(helper::failure_name(f)) + ")");
  }
}

// What a read of one file gave, as the collector reports it.
Input input_of(sources::FsRoot::FileRead r, std::int64_t max_bytes) {
  Input in;
  if (r.info) in.mtime = r.info->mtime_seconds;
  if (r.ok()) {
    in.text = std::move(r.text);
    return in;
  }
  if (r.info && !r.info->regular) {
    in.error = "not a regular file";
    in.reason = "not_regular_file";
  } else if (!r.info && r.err == ELOOP) {
    in.error = "a symbolic link (not followed)";  // opened with no link followed
    in.reason = "not_regular_file";
  } else if (r.info && r.err == EFBIG && r.info->size > static_cast<std::uint64_t>(max_bytes)) {
    in.error = "larger than max_file_bytes (" + std::to_string(max_bytes) + ")";
    in.reason = "too_large";
  } else if (r.info && r.err == EFBIG) {
    in.error = "changed while being read";  // it grew: refuse, it is being written
    in.reason = "read_error";
  } else {
    in.error = std::string("cannot read: ") + std::strerror(r.err);
    in.reason = "read_error";
  }
  return in;
}

Input read_input(helper::Fs& fs, const std::string& dir, const std::string& name,
                 std::int64_t max_bytes, const helper::Deadline& d) {
  helper::Answer a;
  sources::FsRoot::FileRead r = fs.read_regular(
      dir + "/" + name, static_cast<std::size_t>(max_bytes), d, &a, /*follow_links=*/false);
  if (!a.answered()) unanswered(dir, a.failure);
  return input_of(std::move(r), max_bytes);
}

int open_resolved(int dirfd, const char* path, std::uint64_t flags, std::uint64_t resolve) {
  open_how how{};
  how.flags = flags | O_CLOEXEC;
  how.resolve = resolve;
  return static_cast<int>(::syscall(SYS_openat2, dirfd, path, &how, sizeof how));
}

// An openat2 that refused what the helper may do: a symlink, a mount
// crossed, a kernel without openat2 (or a filter that denies it).
bool helper_may(int err) {
  return err == ELOOP || err == EXDEV || err == ENOSYS || err == EPERM || err == EAGAIN;
}

std::string unescape_mount_path(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out.push_back(
          static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

bool local_fstype(std::string_view t) {
  static constexpr std::array<std::string_view, 9> kLocal = {
      "ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "tmpfs", "ramfs", "overlay"};
  return std::find(kLocal.begin(), kLocal.end(), t) != kLocal.end();
}

bool at_or_above(std::string_view mount_point, std::string_view dir) {
  if (mount_point == "/") return true;
  return dir == mount_point || (dir.size() > mount_point.size() && dir.starts_with(mount_point) &&
                                dir[mount_point.size()] == '/');
}

// One file of the directory: read in the daemon beneath `dirfd` when it
// is open, else (or for a mount in the directory, or a kernel without
// openat2) by the helper. Neither follows a link: the file's name is
// the directory's own entry, and a link there, wherever it leads, is
// refused (ELOOP).
Input read_file(helper::Fs& fs, const std::string& dir, int dirfd, const std::string& name,
                std::int64_t max_bytes, const helper::Deadline& deadline) {
  int fd = -1;
  if (dirfd >= 0) {
    fd = open_resolved(dirfd, name.c_str(), O_RDONLY | O_NONBLOCK,
                       RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV);
  }
  if (fd >= 0) {
    return input_of(sources::FsRoot::read_regular_fd(fd, static_cast<std::size_t>(max_bytes)),
                    max_bytes);
  }
  if (dirfd >= 0 && (errno == ELOOP || !helper_may(errno))) {
    sources::FsRoot::FileRead failed;
    failed.err = errno;
    failed.status = sources::classify_errno(errno);
    return input_of(std::move(failed), max_bytes);
  }
  return read_input(fs, dir, name, max_bytes, deadline);
}

// Why a file was refused whole; an empty `error` when it was taken.
struct Verdict {
  std::string error;
  std::string reason;  // the errors_total reason
};

// The files taken so far, merged into one exposition: a family that
// several files define is one family, and no series may repeat.
class Merge {
 public:
  explicit Merge(std::int64_t max_total_bytes) : max_total_bytes_(max_total_bytes) {}

  // Takes the families of `in`, or refuses the whole file. A file that was
  // read counts toward max_total_bytes even when it does not parse.
  Verdict take(Input& in) {
    if (!in.error.empty()) return {std::move(in.error), std::move(in.reason)};
    if (total_bytes_ + static_cast<std::int64_t>(in.text.size()) > max_total_bytes_) {
      return {"over max_total_bytes (" + std::to_string(max_total_bytes_) +
                  ") with the files before it",
              "budget"};
    }
    total_bytes_ += static_cast<std::int64_t>(in.text.size());
    ParseResult parsed = parse(in.text);
    if (!parsed.ok()) return {parsed.error, "parse_error"};
    Verdict v = conflicts(parsed);
    if (v.error.empty()) add(parsed);
    return v;
  }

  // Emits what was taken, as one external block.
  void emit(MetricSink& out) const {
    std::size_t samples = 0;
    for (const Family& f : merged_) samples += f.samples.size();
    if (samples > 0) out.add_external(render(merged_), samples);
  }

 private:
  // The first of `parsed`'s families that nodewatch exports itself, that
  // has another type in an earlier file, or that repeats a series of an
  // earlier file.
  Verdict conflicts(const ParseResult& parsed) const {
    for (const Family& f : parsed.families) {
      if (reserved(f.name))
        return {"defines " + f.name + ", a name nodewatch exports itself", "reserved_name"};
      auto it = by_name_.find(f.name);
      if (it != by_name_.end() && merged_[it->second].type != f.type) {
        return {f.name + " is a " + type_name(f.type) + " here but a " +
                    type_name(merged_[it->second].type) + " in an earlier file",
                "conflict"};
      }
      for (const Sample& s : f.samples) {
        if (series_.count(series_key(s)) != 0)
          return {"repeats a series of an earlier file (" + s.name + ")", "conflict"};
      }
    }
    return {};
  }

  void add(ParseResult& parsed) {
    for (Family& f : parsed.families) {
      for (const Sample& s : f.samples) series_.insert(series_key(s));
      auto it = by_name_.find(f.name);
      if (it == by_name_.end()) {
        by_name_.emplace(f.name, merged_.size());
        merged_.push_back(std::move(f));
      } else {
        Family& into = merged_[it->second];
        if (!into.has_help && f.has_help) {
          into.help = f.help;
          into.has_help = true;
        }
        for (Sample& s : f.samples) into.samples.push_back(std::move(s));
      }
    }
  }

  std::int64_t max_total_bytes_;
  std::vector<Family> merged_;
  std::map<std::string, std::size_t, std::less<>> by_name_;  // index in merged_
  std::set<std::string> series_;
  std::int64_t total_bytes_ = 0;
};

}  // namespace

TextfileOptions read_textfile_options(OptionReader& r) {
  TextfileOptions o;
  o.directory = r.get_string("directory", o.directory,
                             "absolute directory whose *.prom files are exported (a missing "
                             "default directory is not an error)");
  if (o.directory.empty() || o.directory[0] != '/')
    r.error("directory", "must be an absolute path");
  o.max_file_bytes = r.get_int("max_file_bytes", o.max_file_bytes, 1, 64 << 20,
                               "larger files are refused (too_large)");
  o.max_files = r.get_int("max_files", o.max_files, 1, 10000,
                          "files beyond this many, in name order, are not read (too_many_files)");
  o.max_total_bytes =
      r.get_int("max_total_bytes", o.max_total_bytes, 1, std::int64_t{1} << 30,
                "bytes of all files together; a file that would pass it is refused (budget)");
  return o;
}

bool on_local_mounts(std::string_view mountinfo, std::string_view dir) {
  bool any = false;
  while (!mountinfo.empty()) {
    std::size_t eol = mountinfo.find('\n');
    std::string_view line = mountinfo.substr(0, eol);
    mountinfo = eol == std::string_view::npos ? std::string_view{} : mountinfo.substr(eol + 1);
    if (line.empty()) continue;
    // "ID PARENT MAJ:MIN ROOT MOUNT-POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER"
    std::vector<std::string_view> f;
    std::size_t pos = 0;
    while (pos <= line.size()) {
      std::size_t sp = line.find(' ', pos);
      if (sp == std::string_view::npos) sp = line.size();
      if (sp > pos) f.push_back(line.substr(pos, sp - pos));
      pos = sp + 1;
    }
    auto dash = std::find(f.begin() + std::min<std::size_t>(f.size(), 6), f.end(), "-");
    if (f.size() < 6 || dash == f.end() || dash + 1 == f.end()) return false;
    if (!at_or_above(unescape_mount_path(f[4]), dir)) continue;
    any = true;
    if (!local_fstype(*(dash + 1))) return false;
  }
  return any;
}

TextfileCollector::TextfileCollector(TextfileOptions options,
                                     std::shared_ptr<sources::Faults> faults)
    : options_(std::move(options)),
      dir_(strip_slashes(options_.directory)),
      fs_("textfile:" + dir_, faults),
      mounts_("/proc/self/mountinfo"),
      use_local_(faults == nullptr) {}

bool TextfileCollector::local() {
  if (!use_local_) return false;
  if (!mounts_.changed()) return local_;
  if (!mounts_.watching()) return local_ = false;
  // The table, read after the poll that said it changed: a change made
  // while it is read shows at the next poll.
  constexpr std::size_t kMaxBytes = std::size_t{8} << 20;
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = ::pread(mounts_.fd(), buf, sizeof buf, static_cast<off_t>(text.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || text.size() + static_cast<std::size_t>(n) > kMaxBytes) {
      local_ = false;
      return false;
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  local_ = on_local_mounts(text, dir_);
  return local_;
}

const MetricTable& TextfileCollector::metrics() const {
  return table();
}

sources::Listing TextfileCollector::list_directory(const helper::Deadline& deadline,
                                                   UniqueFd& dirfd) {
  in_process_ = false;
  sources::Listing listing;
  if (local()) {
    dirfd.reset(open_resolved(AT_FDCWD, dir_.c_str(), O_RDONLY | O_DIRECTORY, RESOLVE_NO_SYMLINKS));
    if (dirfd.get() >= 0) {
      listing = sources::FsRoot::list_fd(dirfd.get());
      in_process_ = true;
    } else if (!helper_may(errno)) {
      listing.err = errno;  // the helper would answer the same
      listing.status = sources::classify_errno(errno);
      in_process_ = true;
    }
  }
  if (!in_process_) {
    helper::Answer a;
    listing = fs_.list(dir_, deadline, &a);
    if (!a.answered()) unanswered(options_.directory, a.failure);
  }
  return listing;
}

std::vector<std::string> TextfileCollector::select_inputs(sources::Listing& listing,
                                                          MetricSink& out) const {
  std::vector<std::string> files;
  for (std::string& name : listing.names) {
    if (is_input(name)) files.push_back(std::move(name));
  }
  if (files.size() > static_cast<std::size_t>(options_.max_files)) {
    for (std::size_t i = static_cast<std::size_t>(options_.max_files); i < files.size(); ++i)
      out.error("too_many_files", files[i],
                "past max_files (" + std::to_string(options_.max_files) + ") in name order");
    files.resize(static_cast<std::size_t>(options_.max_files));
  }
  return files;
}

void TextfileCollector::collect(const CollectContext& ctx, MetricSink& out) {
  const helper::Deadline deadline{ctx.deadline, ctx.cancelled};
  UniqueFd dirfd;
  sources::Listing listing = list_directory(deadline, dirfd);
  if (!listing.ok()) {
    // The default directory not existing is the normal case of a node
    // without inputs; anything else is worth counting.
    if (listing.err != ENOENT || options_.directory != kDefaultDirectory)
      out.error("read_error", options_.directory,
                std::string("cannot list: ") + std::strerror(listing.err));
    return;
  }
  const std::vector<std::string> files = select_inputs(listing, out);
  Merge merge(options_.max_total_bytes);
  for (const std::string& name : files) {
    if (ctx.should_stop()) break;
    Input in = read_file(fs_, dir_, dirfd.get(), name, options_.max_file_bytes, deadline);
    const double mtime = in.mtime;
    const Verdict v = merge.take(in);
    // The scheduler logs a refusal when it starts and when it ends.
    if (!v.error.empty()) out.error(v.reason, text::escaped(name), v.error);
    if (mtime > 0) out.add(families::kFileMtimeSeconds, {name}, mtime);
    out.add(families::kFileValid, {name}, v.error.empty() ? 1 : 0);
  }
  merge.emit(out);
}

}  // namespace textfile

const CollectorSpec& textfile_collector_spec() {
  static const CollectorSpec spec = [] {
    CollectorSpec s;
    s.name = "textfile";
    s.description = "Prometheus text files (*.prom) that burn-in jobs and scripts write";
    s.enabled_by_default = true;
    s.default_interval = std::chrono::seconds(15);
    s.default_timeout = std::chrono::seconds(10);
    s.read_options = typed_options<textfile::TextfileOptions>(textfile::read_textfile_options);
    s.metrics = textfile::table;
    s.create = [](const CollectorEnv& env) -> std::unique_ptr<Collector> {
      return std::make_unique<textfile::TextfileCollector>(
          env.options_as<textfile::TextfileOptions>(), env.roots.faults);
    };
    return s;
  }();
  return spec;
}

}  // namespace nodewatch
