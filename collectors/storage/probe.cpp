#include "storage/probe.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "nodewatch/unique_fd.hpp"

#include "nodewatch/sources/fs.hpp"

namespace nodewatch::storage {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kAlignment = 4096;  // O_DIRECT: a multiple of every logical block size

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<char, FreeDeleter>;

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int retry_eintr_open(const char* path, int flags, mode_t mode = 0) {
  int fd = -1;
  do {
    fd = ::open(path, flags, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// Writes all of buf at `offset`; 0 or an errno (EIO for a short write that made no progress).
int pwrite_all(int fd, const char* buf, std::size_t n, off_t offset) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd, buf, n, offset);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;
    buf += w;
    n -= static_cast<std::size_t>(w);
    offset += w;
  }
  return 0;
}

}  // namespace

// One thread's control block.
struct Probe::Shared {
  mutable std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool done = false;
  // The operation in the file system right now, if any.
  bool in_op = false;
  Clock::time_point op_started;
};

// What the probes of one file report; locked apart from Shared (never both
// at once), and never while a thread is in the file system.
struct ProbeRecord {
  mutable std::mutex mu;
  std::array<ProbeOpState, kProbeOpCount> ops;
};

namespace {

// The probe's thread: everything it touches is either its own (config, file
// name, buffer) or `shared` and `record`, which it locks only around
// bookkeeping.
class Runner {
 public:
  Runner(std::shared_ptr<Probe::Shared> shared, std::shared_ptr<ProbeRecord> record,
         ProbeConfig config, std::string file, std::shared_ptr<Probe::Shared> predecessor,
         std::shared_ptr<const void> keepalive)
      : shared_(std::move(shared)),
        record_(std::move(record)),
        config_(std::move(config)),
        file_(std::move(file)),
        predecessor_(std::move(predecessor)),
        keepalive_(std::move(keepalive)) {
    capacity_ = round_up(std::max<std::size_t>(config_.size, 1), kAlignment);
    buffer_.reset(static_cast<char*>(std::aligned_alloc(kAlignment, capacity_)));
    if (buffer_) std::memset(buffer_.get(), 'n', capacity_);
    for (ProbeOp op : config_.operations) {
      if (op == ProbeOp::kFsync) fsync_probed_ = true;
    }
  }

  void run() {
    if (wait_for_predecessor()) {
      for (;;) {
        Clock::time_point cycle = Clock::now();
        {
          std::lock_guard lock(shared_->mu);
          if (shared_->stop) break;
        }
        run_cycle();
        std::unique_lock lock(shared_->mu);
        shared_->cv.wait_until(lock, cycle + config_.interval, [&] { return shared_->stop; });
        if (shared_->stop) break;
      }
    }
    std::lock_guard lock(shared_->mu);
    shared_->done = true;
    shared_->cv.notify_all();
  }

 private:
  // The probe of the same file before a reload may still be blocked in the
  // kernel (its thread was detached). Nothing is started on the path until
  // it returns, and its operation is reported as this probe's meanwhile, so
  // reloads during a hang never pile up blocked threads. False when asked to
  // stop first.
  bool wait_for_predecessor() {
    while (predecessor_) {
      Clock::time_point started;
      {
        std::lock_guard lock(predecessor_->mu);
        if (predecessor_->done || !predecessor_->in_op) break;
        started = predecessor_->op_started;
      }
      std::unique_lock lock(shared_->mu);
      shared_->in_op = true;
      shared_->op_started = started;
      shared_->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return shared_->stop; });
      if (shared_->stop) {
        shared_->in_op = false;
        return false;
      }
    }
    predecessor_.reset();
    std::lock_guard lock(shared_->mu);
    shared_->in_op = false;
    return true;
  }

  bool stopping() {
    std::lock_guard lock(shared_->mu);
    return shared_->stop;
  }

  void begin() {
    std::lock_guard lock(shared_->mu);
    shared_->in_op = true;
    shared_->op_started = Clock::now();
  }

  void end(ProbeOp op, int err, bool timed) {
    Clock::time_point now = Clock::now();
    Clock::duration took;
    {
      std::lock_guard lock(shared_->mu);
      took = now - shared_->op_started;
      shared_->in_op = false;
    }
    if (err == 0 && took > config_.timeout) err = ETIMEDOUT;
    std::string errno_label = err == 0 ? std::string() : sources::errno_name(err);
    std::lock_guard lock(record_->mu);
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

  // Creates the file with `size` bytes once (not timed).
  bool ensure_file() {
    if (created_) return true;
    begin();
    int err = 0;
    int fd = retry_eintr_open(file_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
      err = errno;
    } else {
      // Truncating keeps a file left by a run with a larger size from staying larger.
      if (::ftruncate(fd, static_cast<off_t>(config_.size)) != 0) err = errno;
      if (err == 0) err = pwrite_all(fd, buffer_.get(), config_.size, 0);
      if (::close(fd) != 0 && err == 0) err = errno;
    }
    end(ProbeOp::kCreate, err, false);
    created_ = err == 0;
    return created_;
  }

  void fill_buffer() {
    // Different content every cycle, so that no layer can skip the write.
    ++generation_;
    std::uint64_t g = generation_;
    std::memcpy(buffer_.get(), &g, std::min(sizeof(g), config_.size));
  }

  int do_stat() {
    struct stat st {};
    return ::stat(file_.c_str(), &st) == 0 ? 0 : errno;
  }

  int do_write() {
    fill_buffer();
    int fd = retry_eintr_open(file_.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return errno;
    fd_.reset(fd);
    int err = pwrite_all(fd, buffer_.get(), config_.size, 0);
    if (err != 0 || !fsync_probed_) {
      int close_err = fd_.close();
      if (err == 0) err = close_err;
    }
    return err;
  }

  int do_fsync() {
    if (fd_.get() < 0) {
      int fd = retry_eintr_open(file_.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0) return errno;
      fd_.reset(fd);
    }
    int err = ::fsync(fd_.get()) == 0 ? 0 : errno;
    int close_err = fd_.close();
    return err != 0 ? err : close_err;
  }

  int do_read() {
    int fd = -1;
    if (direct_) {
      fd = retry_eintr_open(file_.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_DIRECT);
      if (fd < 0 && errno == EINVAL)
        direct_ = false;  // the file system refuses O_DIRECT
      else if (fd < 0)
        return errno;
    }
    if (!direct_) {
      fd = retry_eintr_open(file_.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0) return errno;
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    }
    UniqueFd owned(fd);
    std::size_t got = 0;
    for (;;) {
      ssize_t n = ::pread(fd, buffer_.get() + got, capacity_ - got, static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EINVAL && direct_ && got == 0) {
        // Some file systems accept O_DIRECT at open and refuse the read.
        direct_ = false;
        owned.reset();
        return do_read();
      }
      if (n < 0) return errno;
      if (n == 0) break;
      got += static_cast<std::size_t>(n);
      if (got >= config_.size) break;
    }
    if (got < config_.size) {
      created_ = false;  // shorter than written: made again next cycle
      return EIO;
    }
    return owned.close();
  }

  void run_cycle() {
    if (!buffer_) return;
    if (!ensure_file()) return;
    for (ProbeOp op : config_.operations) {
      if (stopping()) break;
      begin();
      int err = 0;
      switch (op) {
        case ProbeOp::kStat: err = do_stat(); break;
        case ProbeOp::kWrite: err = do_write(); break;
        case ProbeOp::kFsync: err = do_fsync(); break;
        case ProbeOp::kRead: err = do_read(); break;
        case ProbeOp::kCreate:
        case ProbeOp::kCount: break;
      }
      end(op, err, true);
      if (err == ENOENT) created_ = false;  // removed under us: created again next cycle
    }
    fd_.reset();
  }

  std::shared_ptr<Probe::Shared> shared_;
  std::shared_ptr<ProbeRecord> record_;
  ProbeConfig config_;
  std::string file_;
  std::shared_ptr<Probe::Shared> predecessor_;  // until it is no longer blocked
  std::shared_ptr<const void> keepalive_;
  AlignedBuffer buffer_;
  std::size_t capacity_ = 0;
  UniqueFd fd_;  // the write and fsync steps share one
  bool created_ = false;
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
    : Probe(Lineage{}, std::move(config), std::move(file_name), nullptr, nullptr, nullptr) {}

Probe::Probe(Lineage, ProbeConfig config, std::string file_name,
             std::shared_ptr<Shared> predecessor, std::shared_ptr<ProbeRecord> record,
             std::shared_ptr<const void> keepalive)
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
  thread_ = std::thread([runner = std::make_shared<Runner>(
                             shared_, record_, config_, file_path(), std::move(predecessor),
                             std::move(keepalive))] { runner->run(); });
}

Probe::~Probe() {
  request_stop();
  finish(Clock::now() + std::chrono::milliseconds(200));
}

std::string Probe::file_path() const {
  std::string p = config_.path;
  if (p.empty() || p.back() != '/') p.push_back('/');
  return p + file_name_;
}

ProbeSnapshot Probe::snapshot() const {
  ProbeSnapshot out;
  {
    std::lock_guard lock(shared_->mu);
    out.stuck = shared_->in_op && Clock::now() - shared_->op_started > config_.timeout;
  }
  // The record may hold operations an earlier probe of the path had: only
  // this one's are reported.
  std::lock_guard lock(record_->mu);
  for (ProbeOp op : config_.operations) {
    out.ops[static_cast<std::size_t>(op)] = record_->ops[static_cast<std::size_t>(op)];
  }
  const auto create = static_cast<std::size_t>(ProbeOp::kCreate);
  out.ops[create] = record_->ops[create];
  return out;
}

void Probe::request_stop() {
  std::lock_guard lock(shared_->mu);
  shared_->stop = true;
  shared_->cv.notify_all();
}

bool Probe::stop_requested() const {
  std::lock_guard lock(shared_->mu);
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
    thread_.detach();
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
    return e.second.newest.expired() && e.second.blocked.expired() && e.second.record.expired() &&
           e.second.current.expired();
  });
  Path& path = paths_[file];
  if (std::shared_ptr<Probe> current = path.current.lock()) {
    if (current->config() == config && current->file_name() == file_name &&
        !current->stop_requested()) {
      return current;
    }
  }
  // The thread this one waits for: the one the last probe waited for, if it
  // is still not done (blocked in the kernel), else the last probe's.
  std::shared_ptr<Probe::Shared> predecessor = path.blocked.lock();
  if (predecessor) {
    std::lock_guard plock(predecessor->mu);
    if (predecessor->done) predecessor.reset();
  }
  if (!predecessor) predecessor = path.newest.lock();
  std::shared_ptr<ProbeRecord> record = path.record.lock();
  if (!record) record = std::make_shared<ProbeRecord>();
  auto probe = std::make_shared<Probe>(Probe::Lineage{}, config, file_name, predecessor, record,
                                       weak_from_this().lock());
  path.current = probe;
  path.newest = probe->shared_;
  path.blocked = predecessor;
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
