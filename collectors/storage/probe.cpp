#include "storage/probe.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <utility>

#include <spdlog/spdlog.h>

#include "nodewatch/fs_helper.hpp"
#include "nodewatch/sources/fs.hpp"

namespace nodewatch::storage {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kAlignment = 4096;  // O_DIRECT: a multiple of every logical block size
// How often a probe whose path has a call in flight from its predecessor
// (a reload) looks again, within the operation's timeout.
constexpr std::chrono::milliseconds kBusyRetry{50};
// How many names a creation tries when something else is at the name.
constexpr int kNameTries = 3;
// How many of the files a path's probes made are remembered (ProbeRecord::made).
constexpr std::size_t kMadeRemembered = 16;
// How long a stopping probe tries to remove its file (at most its timeout).
constexpr std::chrono::milliseconds kRemoveWithin{1000};

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// "a FIFO", "a directory", ...: what was found at a probe file's name.
std::string_view file_type(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFLNK: return "a symbolic link";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    default: return "a file of unknown type";
  }
}

}  // namespace

// One thread's control block.
struct Probe::Shared {
  mutable std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> stop{false};  // also the helper calls' cancel flag
  bool done = false;
};

// What the probes of one file report; locked apart from Shared (never both
// at once), and never while a thread waits on its helper.
struct ProbeRecord {
  mutable std::mutex mu;
  std::array<ProbeOpState, kProbeOpCount> ops;
  std::map<std::string, std::uint64_t> helper_failures;  // since last taken
  // By operation: its last attempt was abandoned at its timeout (it has
  // not answered since).
  std::array<bool, kProbeOpCount> timed_out{};
  // The last files the path's probes made (device, inode), newest last:
  // one found at a name a predecessor took is not reported as something
  // put there.
  std::deque<std::pair<std::uint64_t, std::uint64_t>> made;
};

namespace {

// What one probe operation came to: the errno and the helper-measured time
// of its system calls, or the helper failure that left it unanswered.
struct Outcome {
  int err = 0;
  Clock::duration took{};
  helper::Failure failure = helper::Failure::kNone;

  bool answered() const { return failure == helper::Failure::kNone; }
  // Adds one call's answer; false when the operation cannot go on.
  bool add(const helper::Answer& a) {
    took += a.took;
    failure = a.failure;
    if (a.answered()) err = a.err;
    return a.ok();
  }
};

// The probe's thread: everything it touches is either its own (config, file
// name, helper) or `shared` and `record`, which it locks only around
// bookkeeping.
class Runner {
 public:
  Runner(std::shared_ptr<Probe::Shared> shared, std::shared_ptr<ProbeRecord> record,
         ProbeConfig config, std::string file, std::string key)
      : shared_(std::move(shared)),
        record_(std::move(record)),
        config_(std::move(config)),
        base_(file),
        file_(std::move(file)),
        fs_(std::move(key)) {
    capacity_ = round_up(std::max<std::size_t>(config_.size, 1), kAlignment);
    content_.assign(config_.size, 'n');
    for (ProbeOp op : config_.operations) {
      if (op == ProbeOp::kFsync) fsync_probed_ = true;
    }
  }

  void run() {
    for (;;) {
      Clock::time_point cycle = Clock::now();
      if (shared_->stop) break;
      run_cycle();
      std::unique_lock lock(shared_->mu);
      shared_->cv.wait_until(lock, cycle + config_.interval, [&] { return shared_->stop.load(); });
      if (shared_->stop) break;
    }
    remove_file();
    std::lock_guard lock(shared_->mu);
    shared_->done = true;
    shared_->cv.notify_all();
  }

 private:
  helper::Deadline deadline() const {
    return helper::Deadline{op_started_ + config_.timeout, &shared_->stop};
  }

  void begin() { op_started_ = Clock::now(); }

  // Records the operation, unless nothing was learnt about the path (the
  // daemon is stopping, or the path's helper is held by the kernel).
  void end(ProbeOp op, const Outcome& o, bool timed) {
    using helper::Failure;
    if (o.failure == Failure::kCancelled || o.failure == Failure::kBlocked ||
        o.failure == Failure::kBusy)
      return;
    if (!o.answered() && o.failure != Failure::kTimeout) {
      std::lock_guard lock(record_->mu);
      ++record_->helper_failures[std::string(helper::failure_name(o.failure))];
      return;
    }
    int err = o.answered() ? o.err : ETIMEDOUT;
    Clock::duration took = o.answered() ? o.took : Clock::duration(config_.timeout);
    if (err == 0 && took > config_.timeout) err = ETIMEDOUT;
    std::string errno_label = err == 0 ? std::string() : sources::errno_name(err);
    std::lock_guard lock(record_->mu);
    record_->timed_out[static_cast<std::size_t>(op)] = !o.answered();
    ProbeOpState& s = record_->ops[static_cast<std::size_t>(op)];
    if (timed && s.histogram) s.histogram->observe(std::chrono::duration<double>(took).count());
    s.observed = true;
    s.success = err == 0;
    if (err == 0) {
      s.last_success_unix = unix_now();
    } else {
      ++s.errors[errno_label];
    }
  }

  // Closes the handle the write and fsync steps share, if any. A handle
  // whose helper is gone (abandoned or broken by the call that failed) died
  // with it; a close's own failure counts only for an operation that had
  // succeeded so far.
  void close_handle(Outcome* o) {
    if (handle_ < 0) return;
    int h = std::exchange(handle_, -1);
    if (handle_generation_ != fs_.generation() || fs_.pid() == 0) return;
    helper::Answer a = fs_.close(h, deadline());
    if (o != nullptr && o->answered() && o->err == 0) o->add(a);
  }

  // Opens the probe's own file again (never what was put in its place:
  // then replaced_ says what is there).
  bool open_handle(int flags, Outcome* o) {
    if (!own_) {
      o->err = ENOENT;
      return false;
    }
    int h = -1;
    helper::StatInfo found;
    bool ok = o->add(fs_.open_same(file_, flags | O_NOFOLLOW, *own_, deadline(), &h, &found));
    // ESTALE with something else there: not the file made. An NFS server's
    // ESTALE comes with nothing there or with the file made itself, and
    // counts as the operation's error.
    if (o->answered() && o->err == ESTALE && found.ino != 0 &&
        !(S_ISREG(found.mode) && found.same_file(*own_)))
      replaced_ = found;
    if (!ok) return false;
    handle_ = h;
    handle_generation_ = fs_.generation();
    return true;
  }

  // A name for the probe file when the one it had is taken by something
  // else: the first name and a random suffix.
  std::string other_name() const {
    std::random_device rd;
    std::uint64_t r = (std::uint64_t{rd()} << 32) | rd();
    char suffix[17];
    std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(r));
    return base_ + "." + suffix;
  }

  // Whether `found` is one of the last files the path's probes made. What
  // they made is a regular file of the daemon's user: anything else only
  // has the number of one made and removed (a file system that reuses
  // inode numbers).
  bool made_on_path(const helper::StatInfo& found) const {
    if (!S_ISREG(found.mode) || found.uid != ::geteuid()) return false;
    std::lock_guard lock(record_->mu);
    return std::find(record_->made.begin(), record_->made.end(), std::pair{found.dev, found.ino}) !=
           record_->made.end();
  }

  // `found` is at the probe file's name and the probe did not make it (a
  // FIFO, a directory, a link or a file someone put there): it is left
  // alone, said in the log (unless a predecessor on the path made it), and
  // the probe takes another name.
  void found_other(const helper::StatInfo& found) {
    std::string next = other_name();
    if (!made_on_path(found)) {
      spdlog::warn(
          "storage probe {}: {} owned by uid {} is at {}, not made by the probe: left alone; "
          "probing {} instead",
          config_.path, file_type(found.mode), found.uid, file_, next);
    }
    file_ = std::move(next);
    own_.reset();
    created_ = false;
    creation_unanswered_ = false;
  }

  // `found`, at the probe file's first name, is what an earlier run of the
  // daemon left there (it stopped without removing it, or predates the
  // check of what is at the name), or at a name the probe chose what its
  // unanswered creation made: a regular file of the daemon's own user, with
  // no other link and no more than a probe writes. At the first name, one a
  // predecessor on the path made in this process is its own, not a
  // leftover; a chosen name is no predecessor's (and a file system that
  // reuses inode numbers may give the file the number of one a predecessor
  // made and removed).
  bool leftover(const helper::StatInfo& found) const {
    if (!S_ISREG(found.mode) || found.uid != ::geteuid() || found.nlink != 1 ||
        found.size > config_.size)
      return false;
    if (file_ != base_) return creation_unanswered_;
    return !made_on_path(found);
  }

  // Removes the leftover `found` (only if it is still that file); false
  // when the removal failed (its errno is the creation's).
  bool remove_leftover(const helper::StatInfo& found, Outcome* o) {
    if (o->add(fs_.unlink_same(file_, found, deadline()))) {
      spdlog::info(
          "storage probe {}: removed {}, left by {}", config_.path, file_,
          creation_unanswered_ ? "its own creation that did not answer in time" : "an earlier run");
      creation_unanswered_ = false;
      return true;
    }
    // Gone or changed meanwhile: the next creation sees what is there.
    return o->answered() && (o->err == ENOENT || o->err == ESTALE);
  }

  // Holds the probe file open for writing in handle_: the one it made
  // before when it is still there, else a new one (O_EXCL: never a file
  // found at the name). A leftover of an earlier run at the first name is
  // removed first; something else at the name: found_other().
  bool open_file(Outcome* o) {
    for (int tries = 0; tries < kNameTries; ++tries) {
      *o = Outcome{};
      if (own_) {
        if (open_handle(O_WRONLY, o)) return true;
        if (!o->answered()) return false;
        if (o->err == ENOENT) {
          own_.reset();  // removed: made again
        } else if (replaced_) {
          found_other(*std::exchange(replaced_, std::nullopt));
        } else {
          return false;  // the file system's error
        }
        continue;
      }
      int h = -1;
      helper::StatInfo made;
      if (o->add(fs_.open(file_, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644, deadline(), &h,
                          &made))) {
        handle_ = h;
        handle_generation_ = fs_.generation();
        own_ = made;
        creation_unanswered_ = false;
        std::lock_guard lock(record_->mu);
        record_->made.emplace_back(made.dev, made.ino);
        if (record_->made.size() > kMadeRemembered) record_->made.pop_front();
        return true;
      }
      // Unanswered, the creation may still have made the file: what is at
      // the name next time may be the probe's own.
      if (!o->answered()) creation_unanswered_ = true;
      if (!o->answered() || o->err != EEXIST) return false;
      helper::StatInfo found;
      if (!o->add(fs_.stat(file_, deadline(), &found, false))) {
        if (o->answered() && o->err == ENOENT) continue;  // gone again: the name is free
        return false;
      }
      if (leftover(found)) {
        if (!remove_leftover(found, o)) return false;
        continue;
      }
      found_other(found);
    }
    o->err = EEXIST;
    return false;
  }

  // Makes the probe file hold `size` bytes (not timed).
  bool ensure_file() {
    if (created_) return true;
    begin();
    Outcome o;
    if (open_file(&o)) {
      // Truncating keeps a file left by a larger size from staying larger.
      if (o.add(fs_.ftruncate(handle_, static_cast<off_t>(config_.size), deadline())))
        o.add(fs_.pwrite(handle_, content_, 0, deadline()));
      close_handle(&o);
    }
    end(ProbeOp::kCreate, o, false);
    created_ = o.answered() && o.err == 0;
    return created_;
  }

  // The probe's file goes with it (a successor makes its own), unless the
  // path does not answer: then it stays, as after a crash.
  void remove_file() {
    if (!own_) return;
    auto until = Clock::now() + std::min<Clock::duration>(config_.timeout, kRemoveWithin);
    for (;;) {
      helper::Answer a = fs_.unlink_same(file_, *own_, helper::Deadline{until, nullptr});
      if (a.failure != helper::Failure::kBusy || Clock::now() + kBusyRetry >= until) return;
      std::this_thread::sleep_for(kBusyRetry);
    }
  }

  void fill_content() {
    // Different content every cycle, so that no layer can skip the write.
    ++generation_;
    std::uint64_t g = generation_;
    std::memcpy(content_.data(), &g, std::min(sizeof(g), config_.size));
  }

  // lstat(): a link put in place of the file is not followed.
  Outcome do_stat() {
    Outcome o;
    helper::StatInfo st;
    if (o.add(fs_.stat(file_, deadline(), &st, false)) &&
        !(S_ISREG(st.mode) && own_ && st.same_file(*own_)))
      replaced_ = st;
    return o;
  }

  Outcome do_write() {
    fill_content();
    Outcome o;
    if (!open_handle(O_WRONLY, &o)) return o;
    bool ok = o.add(fs_.pwrite(handle_, content_, 0, deadline()));
    if (!ok || !fsync_probed_) close_handle(&o);
    return o;
  }

  Outcome do_fsync() {
    Outcome o;
    if (handle_ < 0 && !open_handle(O_WRONLY, &o)) return o;
    o.add(fs_.fsync(handle_, deadline()));
    close_handle(&o);
    return o;
  }

  Outcome do_read() {
    Outcome o;
    if (direct_) {
      if (!open_handle(O_RDONLY | O_DIRECT, &o)) {
        if (!o.answered() || o.err != EINVAL) return o;
        direct_ = false;  // the file system refuses O_DIRECT
        o = Outcome{o.err == EINVAL ? 0 : o.err, o.took, o.failure};
      }
    }
    if (!direct_) {
      if (!open_handle(O_RDONLY, &o)) return o;
      if (!o.add(fs_.fadvise_dontneed(handle_, deadline()))) {
        close_handle(nullptr);
        return o;
      }
    }
    std::string got;
    helper::Answer a = fs_.pread(handle_, capacity_, 0, deadline(), &got);
    if (a.answered() && a.err == EINVAL && direct_) {
      // Some file systems accept O_DIRECT at open and refuse the read.
      o.took += a.took;
      direct_ = false;
      close_handle(nullptr);
      Outcome again = do_read();
      again.took += o.took;
      return again;
    }
    if (!o.add(a)) {
      close_handle(nullptr);
      return o;
    }
    if (got.size() < config_.size) {
      created_ = false;  // shorter than written: made again next cycle
      close_handle(nullptr);
      o.err = EIO;
      return o;
    }
    close_handle(&o);
    return o;
  }

  // Waits while the path's predecessor probe has a call in flight (a
  // reload replaced it a moment ago); false when it still has, or the path
  // is stuck.
  bool path_free() {
    auto until = Clock::now() + config_.timeout;
    for (;;) {
      if (fs_.blocked()) return false;
      if (!helper::busy(fs_.key())) return true;
      std::unique_lock lock(shared_->mu);
      if (shared_->cv.wait_for(lock, kBusyRetry, [&] { return shared_->stop.load(); }))
        return false;
      if (Clock::now() >= until) return false;
    }
  }

  Outcome run_op(ProbeOp op) {
    begin();
    switch (op) {
      case ProbeOp::kStat: return do_stat();
      case ProbeOp::kWrite: return do_write();
      case ProbeOp::kFsync: return do_fsync();
      case ProbeOp::kRead: return do_read();
      case ProbeOp::kCreate:
      case ProbeOp::kCount: break;
    }
    return Outcome{};
  }

  // The operation, on a new file once more when something was put in place
  // of the probe's (what it found was not measured); false when that
  // failed too.
  bool run_op_on_own_file(ProbeOp op, Outcome* o) {
    for (int tries = 0; tries < 2; ++tries) {
      *o = run_op(op);
      if (!replaced_) return true;
      close_handle(nullptr);
      found_other(*std::exchange(replaced_, std::nullopt));
      if (!ensure_file()) return false;
    }
    return false;
  }

  void run_cycle() {
    if (!path_free()) return;  // stuck: reported by snapshot(), nothing started
    if (!ensure_file()) return;
    for (ProbeOp op : config_.operations) {
      if (shared_->stop) break;
      Outcome o;
      if (!run_op_on_own_file(op, &o)) break;
      end(op, o, true);
      if (!o.answered()) break;  // the helper is gone: the rest waits for the next cycle
      if (o.err == ENOENT) created_ = false;  // removed under us: created again next cycle
    }
    begin();
    close_handle(nullptr);
  }

  std::shared_ptr<Probe::Shared> shared_;
  std::shared_ptr<ProbeRecord> record_;
  ProbeConfig config_;
  std::string base_;  // the probe file's first name
  std::string file_;  // its name now
  helper::Fs fs_;
  // The file the probe made (device and inode), when it made one.
  std::optional<helper::StatInfo> own_;
  // What an operation found at the name instead of the probe's file.
  std::optional<helper::StatInfo> replaced_;
  std::string content_;       // what the write step writes: `size` bytes
  std::size_t capacity_ = 0;  // what the read step asks for: `size`, aligned for O_DIRECT
  Clock::time_point op_started_;
  int handle_ = -1;  // the helper's descriptor the write and fsync steps share
  std::uint64_t handle_generation_ = 0;
  bool created_ = false;
  // The last creation of the file at its name had no answer (its helper
  // was abandoned): a file found there of the daemon's user, with no other
  // link and no more than a probe writes, is taken for that creation's and
  // removed, whichever name the probe has.
  bool creation_unanswered_ = false;
  bool direct_ = true;
  bool fsync_probed_ = false;
  std::uint64_t generation_ = 0;
};

}  // namespace

std::string_view probe_op_name(ProbeOp op) {
  switch (op) {
    case ProbeOp::kStat: return "stat";
    case ProbeOp::kWrite: return "write";
    case ProbeOp::kFsync: return "fsync";
    case ProbeOp::kRead: return "read";
    case ProbeOp::kCreate: return "create";
    case ProbeOp::kCount: break;
  }
  return "";
}

std::optional<ProbeOp> parse_probe_op(std::string_view name) {
  for (ProbeOp op : {ProbeOp::kStat, ProbeOp::kWrite, ProbeOp::kFsync, ProbeOp::kRead}) {
    if (probe_op_name(op) == name) return op;
  }
  return std::nullopt;
}

const std::vector<double>& probe_buckets() {
  static const std::vector<double> kBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                               0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                               1,      2.5,     5,      10,    30};
  return kBuckets;
}

std::string probe_file_name(std::string_view hostname) {
  std::string out = ".nodewatch-probe-";
  if (hostname.empty()) hostname = "unknown";
  for (char c : hostname) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    out.push_back(ok ? c : '_');
  }
  return out;
}

Probe::Probe(ProbeConfig config, std::string file_name)
    : Probe(Lineage{}, std::move(config), std::move(file_name), nullptr) {}

Probe::Probe(Lineage, ProbeConfig config, std::string file_name,
             std::shared_ptr<ProbeRecord> record)
    : config_(std::move(config)),
      file_name_(std::move(file_name)),
      shared_(std::make_shared<Shared>()),
      record_(record ? std::move(record) : std::make_shared<ProbeRecord>()) {
  {
    std::lock_guard lock(record_->mu);
    for (ProbeOp op : config_.operations) {
      auto& histogram = record_->ops[static_cast<std::size_t>(op)].histogram;
      if (!histogram) histogram.emplace(probe_buckets());
    }
  }
  thread_ = std::thread([runner = std::make_shared<Runner>(shared_, record_, config_, file_path(),
                                                           helper_key())] { runner->run(); });
}

Probe::~Probe() {
  request_stop();
  finish(Clock::now() + std::chrono::milliseconds(500));
}

std::string Probe::file_path() const {
  std::string p = config_.path;
  if (p.empty() || p.back() != '/') p.push_back('/');
  return p + file_name_;
}

std::string Probe::helper_key() const {
  return "probe:" + file_path();
}

ProbeSnapshot Probe::snapshot() const {
  ProbeSnapshot out;
  const bool held = helper::blocked(helper_key());
  // The record may hold operations an earlier probe of the path had: only
  // this one's are reported.
  std::lock_guard lock(record_->mu);
  out.stuck = held || record_->timed_out[static_cast<std::size_t>(ProbeOp::kCreate)];
  for (ProbeOp op : config_.operations)
    out.stuck = out.stuck || record_->timed_out[static_cast<std::size_t>(op)];
  for (ProbeOp op : config_.operations) {
    out.ops[static_cast<std::size_t>(op)] = record_->ops[static_cast<std::size_t>(op)];
  }
  const auto create = static_cast<std::size_t>(ProbeOp::kCreate);
  out.ops[create] = record_->ops[create];
  return out;
}

std::map<std::string, std::uint64_t> Probe::take_helper_failures() {
  std::lock_guard lock(record_->mu);
  return std::exchange(record_->helper_failures, {});
}

void Probe::request_stop() {
  std::lock_guard lock(shared_->mu);
  shared_->stop = true;
  shared_->cv.notify_all();
}

bool Probe::stop_requested() const {
  return shared_->stop;
}

bool Probe::finish(std::chrono::steady_clock::time_point deadline) {
  if (!thread_.joinable()) return true;
  bool ended = false;
  {
    std::unique_lock lock(shared_->mu);
    ended = shared_->cv.wait_until(lock, deadline, [&] { return shared_->done; });
  }
  if (ended) {
    thread_.join();
  } else {
    thread_.detach();  // it owns its state and ends once its wait is interrupted
  }
  return ended;
}

std::shared_ptr<Probe> ProbeRegistry::acquire(const ProbeConfig& config,
                                              const std::string& file_name) {
  std::string file = config.path;
  if (file.empty() || file.back() != '/') file.push_back('/');
  file += file_name;
  std::lock_guard lock(mu_);
  // Paths no probe or record is left on: forgotten (a path configured again
  // later starts afresh).
  std::erase_if(paths_, [](const auto& e) {
    return e.second.record.expired() && e.second.current.expired();
  });
  Path& path = paths_[file];
  if (std::shared_ptr<Probe> current = path.current.lock()) {
    if (current->config() == config && current->file_name() == file_name &&
        !current->stop_requested()) {
      return current;
    }
  }
  std::shared_ptr<ProbeRecord> record = path.record.lock();
  if (!record) record = std::make_shared<ProbeRecord>();
  auto probe = std::make_shared<Probe>(Probe::Lineage{}, config, file_name, record);
  path.current = probe;
  path.record = record;
  return probe;
}

void ProbeRegistry::release(std::vector<std::shared_ptr<Probe>>& probes,
                            std::chrono::steady_clock::time_point deadline) {
  std::vector<std::shared_ptr<Probe>> last;
  {
    // Under the lock no other collector can take one of these meanwhile: a
    // probe held here alone is this caller's to stop.
    std::lock_guard lock(mu_);
    for (std::shared_ptr<Probe>& p : probes) {
      if (p.use_count() == 1) {
        p->request_stop();
        last.push_back(std::move(p));
      }
    }
    probes.clear();
  }
  for (const std::shared_ptr<Probe>& p : last) p->finish(deadline);
}

std::size_t ProbeRegistry::paths() const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto& [file, path] : paths_) n += path.record.expired() ? 0 : 1;
  return n;
}

}  // namespace nodewatch::storage
