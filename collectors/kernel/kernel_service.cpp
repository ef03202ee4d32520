#include "kernel/kernel_service.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "kernel/kernel_events.hpp"
#include "kernel/kmsg.hpp"
#include "nodewatch/sources/fs.hpp"

namespace nodewatch::kernel {
namespace {

double clock_seconds(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// A state file is a few hundred bytes a device; anything larger is not ours.
constexpr std::size_t kMaxStateBytes = 4 << 20;

// Why a state file is not to be trusted where it lies, "" when it is: in a
// directory others can write to without the sticky bit, anyone could have
// put it there.
std::string untrusted_directory(const std::filesystem::path& file) {
  const std::string dir = file.parent_path().string();
  struct ::stat st {};
  if (::stat(dir.c_str(), &st) != 0) return {};
  if ((st.st_mode & S_IWOTH) == 0 || (st.st_mode & S_ISVTX) != 0) return {};
  return "its directory " + dir + " is writable by others, without the sticky bit";
}

// The saved state, or nullopt with why in `*why` ("" when there is none).
// Opened without following a link, with O_NONBLOCK and O_NOCTTY: a FIFO,
// a terminal or a directory under the name is refused at once, never
// waited on nor made this process's terminal; so is a
// file that a user other than this process's or root owns (root's is
// trusted: root could write this process's file anyway; and a file of the
// daemon's, run under a dynamic uid, is root's when `--once` ran as root
// beside it). `*keep` is set when the file is refused for its owner or its
// directory: it is not this process's to write over.
std::optional<KernelState> load_state(const std::string& path, std::string* why, bool* keep) {
  why->clear();
  *keep = false;
  if (path.empty()) return std::nullopt;
  auto refuse = [&](const std::string& reason) -> std::optional<KernelState> {
    *why = path + " refused, counting afresh: " + reason;
    return std::nullopt;
  };
  if (std::string bad = untrusted_directory(path); !bad.empty()) {
    *keep = true;
    return refuse(bad);
  }
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | O_NOFOLLOW);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno != ENOENT)
      *why = path + ": " +
             (errno == ELOOP ? std::string("not a regular file (a symbolic link)")
                             : std::strerror(errno));
    return std::nullopt;
  }
  struct ::stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid != ::geteuid() && st.st_uid != 0) {
    ::close(fd);
    *keep = true;
    return refuse("owned by uid " + std::to_string(st.st_uid) + ", not by this process's uid " +
                  std::to_string(::geteuid()) + " or root");
  }
  sources::FsRoot::FileRead r = sources::FsRoot::read_regular_fd(fd, kMaxStateBytes);
  if (!r.ok()) {
    *why =
        path + ": " + (r.err == EINVAL ? std::string("not a regular file") : std::strerror(r.err));
    return std::nullopt;
  }
  std::string reason;
  auto s = parse_state(r.text, &reason);
  if (!s) return refuse(reason);
  return s;
}

// What sanitize_state() dropped, as one line.
std::string dropped_text(const std::vector<std::string>& dropped) {
  std::string out = std::to_string(dropped.size()) + " saved count(s) dropped: ";
  for (std::size_t i = 0; i < dropped.size() && i < 3; ++i) out += (i ? "; " : "") + dropped[i];
  if (dropped.size() > 3) out += "; ...";
  return out;
}

// Why the log cannot be read, with what to do where the kernel refused.
std::string read_error_text(int err) {
  std::string why = std::strerror(err);
  if (err == EPERM || err == EACCES)
    why +=
        " (where kernel.dmesg_restrict=1, reading it needs CAP_SYSLOG or the log opened as "
        "standard input, as the unit's StandardInput=file:/dev/kmsg does)";
  return why;
}

}  // namespace

std::string read_boot_id(const std::string& path) {
  const std::filesystem::path p(path);
  const sources::Read r = sources::FsRoot(p.parent_path()).read(p.filename().string(), 4096);
  const std::string id(r.ok() ? r.value() : std::string_view());
  // A UUID as the kernel prints it; anything else is not trusted.
  const bool ok = !id.empty() && id.size() <= 64 &&
                  id.find_first_not_of("0123456789abcdef-") == std::string::npos;
  return ok ? id : std::string();
}

KernelLogService::KernelLogService(KernelLogOptions options)
    : options_(std::move(options)),
      boot_id_(read_boot_id(options_.boot_id_path)),
      log_(load_saved(), boot_id_, match_kernel_record, options_.max_devices) {
  counters_.continued = log_.continued();
  boot_unix_ = clock_seconds(CLOCK_REALTIME) - clock_seconds(CLOCK_MONOTONIC);
  // Without an eventfd (out of descriptors) the thread polls for stop_
  // every 100 ms instead: the stop is never lost.
  stop_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  thread_ = std::thread([this] { run(); });
}

std::optional<KernelState> KernelLogService::load_saved() {
  if (options_.state_file.empty()) return std::nullopt;
  if (boot_id_.empty()) {
    // Without the boot id a restart cannot be told from a reboot: a saved
    // state could be another boot's, and this one's would mislead the next
    // start. Counts are kept in memory only.
    counters_.state_refused =
        options_.boot_id_path + ": no boot id to be read; the counts are not kept across restarts";
    refusal_news_ = counters_.state_refused;
    return std::nullopt;
  }
  std::string why;
  bool keep = false;
  auto s = load_state(options_.state_file, &why, &keep);
  if (keep) kept_file_ = options_.state_file;
  counters_.state_refused = refusal_news_ = why;
  if (s && s->boot_id == boot_id_) {
    const std::vector<std::string> dropped =
        sanitize_state(*s, kernel_event_names(), options_.max_devices);
    if (!dropped.empty()) dropped_news_ = dropped_text(dropped);
    saved_seq_ = s->last_seq;
  }
  return s;
}

void KernelLogService::distrust_saved_seq(std::optional<std::uint64_t> newest) {
  std::lock_guard lock(mu_);
  counters_.state_refused = options_.state_file + " refused, counting afresh: its last_seq " +
                            std::to_string(*saved_seq_) + " is ahead of the newest record in " +
                            options_.kmsg_path + " (" +
                            (newest ? std::to_string(*newest) : std::string("none")) + ")";
  refusal_news_ = counters_.state_refused;
  dropped_news_.clear();  // of the state now refused as a whole: one report, the refusal
  log_ = KernelLog(std::nullopt, boot_id_, match_kernel_record, options_.max_devices);
  counters_.continued = false;
  counters_.last_record_unix.reset();
  saved_seq_.reset();
  dirty_ = true;
}

KernelLogService::~KernelLogService() {
  stop_.store(true);
  std::uint64_t one = 1;
  if (stop_fd_.get() >= 0 && ::write(stop_fd_.get(), &one, sizeof one) < 0) {
    // The eventfd cannot be full after one write: nothing to do.
  }
  if (thread_.joinable()) thread_.join();
  // No collection is left to count a failure of this last save: said here,
  // in the words the scheduler logs a periodic one with.
  save();
  std::lock_guard lock(mu_);
  if (!counters_.state_error.empty() && dirty_)
    spdlog::warn(
        "kernel: state_write_error: {}: {} (at stop: the counts since the last save are lost)",
        options_.state_file, counters_.state_error);
}

void KernelLogService::apply(const std::string& state_file, std::size_t max_devices) {
  std::lock_guard lock(mu_);
  log_.set_max_devices(max_devices);
  options_.max_devices = max_devices;
  if (state_file != options_.state_file) {
    options_.state_file = state_file;
    counters_.state_error.clear();
    dirty_ = true;  // the new file gets this state at the next save
  }
}

KernelLogOptions KernelLogService::options() const {
  std::lock_guard lock(mu_);
  return options_;
}

KernelLogService::Snapshot KernelLogService::snapshot() const {
  std::lock_guard lock(mu_);
  Snapshot s = counters_;
  s.state = log_.state();
  return s;
}

KernelLogService::News KernelLogService::take_news() {
  std::lock_guard lock(mu_);
  News n;
  n.malformed = counters_.malformed - malformed_told_;
  malformed_told_ = counters_.malformed;
  n.state_refused = std::exchange(refusal_news_, std::string());
  n.state_dropped = std::exchange(dropped_news_, std::string());
  return n;
}

bool KernelLogService::wait_first_pass(std::chrono::steady_clock::time_point until) const {
  std::unique_lock lock(mu_);
  return passed_.wait_until(lock, until, [&] { return counters_.passes > 0; });
}

void KernelLogService::save() {
  KernelState copy;
  std::string file;
  {
    std::lock_guard lock(mu_);
    if (!dirty_ || options_.state_file.empty() || boot_id_.empty()) return;
    if (options_.state_file == kept_file_) {
      // Refused at start for its owner or its directory: left as it is
      // (another user's counts, or not ours to replace).
      if (!kept_told_)
        spdlog::warn(
            "kernel: {}: refused at start, so never written over; the counts are kept "
            "in memory only",
            kept_file_);
      kept_told_ = true;
      dirty_ = false;
      return;
    }
    copy = log_.state();
    file = options_.state_file;
    dirty_ = false;
  }
  int err = write_state_file(file, copy);
  std::lock_guard lock(mu_);
  if (file != options_.state_file) return;  // a reload moved it meanwhile: dirty_ is set
  if (err != 0) {
    counters_.state_error = err == EEXIST ? std::string("not a regular file: never written over")
                                          : "cannot be written: " + std::string(std::strerror(err));
    dirty_ = true;  // tried again at the next save
  } else {
    counters_.state_error.clear();
  }
}

void KernelLogService::take_record(std::string_view raw, Pass* pass) {
  std::optional<KmsgRecord> r = parse_kmsg_record(raw);
  std::lock_guard lock(mu_);
  if (!r) {
    ++counters_.malformed;
    ++pass->malformed;
    return;
  }
  pass->newest = std::max(pass->newest.value_or(0), r->seq);
  std::uint64_t before = log_.state().last_seq.value_or(0);
  bool had = log_.state().last_seq.has_value();
  const std::uint64_t malformed = log_.malformed();
  log_.feed(*r);
  counters_.malformed += log_.malformed() - malformed;
  pass->malformed += log_.malformed() - malformed;
  pass->good += 1 - (log_.malformed() - malformed);
  if (!had || log_.state().last_seq.value_or(0) != before) dirty_ = true;
  if (log_.last_ts_usec())
    counters_.last_record_unix = boot_unix_ + static_cast<double>(*log_.last_ts_usec()) / 1e6;
}

void KernelLogService::log_malformed(const Pass& pass) {
  malformed_unlogged_ += pass.malformed;
  good_unlogged_ += pass.good;
  const auto now = std::chrono::steady_clock::now();
  if (malformed_unlogged_ == 0 ||
      (malformed_logged_ && now - *malformed_logged_ < kMalformedLogEvery))
    return;
  spdlog::warn("kernel: malformed_record: {}: {} record(s) refused{}{}", options_.kmsg_path,
               malformed_unlogged_, malformed_logged_ ? " in the last minute" : "",
               good_unlogged_ == 0 ? ", and none read well-formed: is it the kernel log?" : "");
  malformed_logged_ = now;
  malformed_unlogged_ = 0;
  good_unlogged_ = 0;
}

bool KernelLogService::wait_for_records(const KmsgReader& reader, bool junk,
                                        std::string* poll_error) {
  // A device is polled; a file, or a source of malformed records alone (not
  // the kernel log: /dev/zero), is read again every file_poll.
  const bool device = reader.poll_fd() >= 0 && !junk;
  pollfd p[2] = {{stop_fd_.get(), POLLIN, 0}, {reader.poll_fd(), POLLIN, 0}};
  auto wait = device ? options_.save_interval : options_.file_poll;
  if (stop_fd_.get() < 0)
    wait = std::min<std::chrono::milliseconds>(wait, std::chrono::milliseconds(100));
  int n = ::poll(p, device ? 2 : 1, static_cast<int>(wait.count()));
  if (stop_.load() || (n > 0 && (p[0].revents & POLLIN) != 0)) return true;
  if (n < 0 && errno != EINTR) {
    // Not expected of poll on two descriptors; said, then a pause, and on.
    *poll_error = std::string("poll: ") + std::strerror(errno);
    ::poll(nullptr, 0, 100);
  } else {
    poll_error->clear();
  }
  return false;
}

void KernelLogService::run() {
  KmsgReader reader(options_.kmsg_path);  // kmsg_path never changes (the service's key)
  auto last_save = std::chrono::steady_clock::now();
  std::string poll_error;
  std::optional<std::uint64_t> newest;  // the newest record read
  for (;;) {
    bool more = false;
    Pass pass;
    pass.newest = newest;
    const std::uint64_t refused = reader.refused();
    int err = reader.read_available([&](std::string_view raw) { take_record(raw, &pass); },
                                    kRecordsPerPass, &more);
    pass.malformed += reader.refused() - refused;
    newest = pass.newest;
    // Read through once: a saved last_seq past the newest record is no
    // record of this log; what was skipped by it is read again, afresh.
    if (saved_seq_ && err == 0 && !more) {
      if (!newest || *newest < *saved_seq_) {
        distrust_saved_seq(newest);
        reader.close();
        continue;
      }
      saved_seq_.reset();
    }
    // Not announced while the first read-through that checks last_seq goes
    // on: the first collection never sees counts that are about to go.
    const bool checking = saved_seq_ && err == 0 && more;
    {
      std::lock_guard lock(mu_);
      if (!checking) ++counters_.passes;
      counters_.malformed += reader.refused() - refused;
      counters_.overruns = reader.overruns();
      counters_.read_error = err != 0 ? read_error_text(err) : poll_error;
    }
    passed_.notify_all();
    log_malformed(pass);
    if (stop_.load()) return;
    auto now = std::chrono::steady_clock::now();
    if (now - last_save >= options_.save_interval) {
      save();
      last_save = now;
    }
    // A storm: the next records at once, stop and save looked at between;
    // but never a source of nothing but malformed records.
    const bool junk = pass.good == 0 && pass.malformed > 0;
    if (more && !junk) continue;
    if (wait_for_records(reader, junk, &poll_error)) return;
  }
}

}  // namespace nodewatch::kernel
