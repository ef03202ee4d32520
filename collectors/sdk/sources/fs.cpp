#include "nodewatch/sources/fs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace nodewatch::sources {
namespace {

constexpr std::size_t kChunk = 4096;

int open_ro(const std::string& path, int extra_flags = 0) {
  for (;;) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | extra_flags);
    if (fd >= 0 || errno != EINTR) return fd >= 0 ? fd : -errno;
  }
}

// An attribute's descriptor, or -errno. O_NONBLOCK and a type check on the
// same descriptor: a FIFO (or a device node) put where an attribute should
// be cannot block the collector in open() or read(), and is refused as
// EINVAL (a directory: EISDIR, as read() would say), one value lost rather
// than the collection. sysfs and procfs
// attributes are regular files; O_NONBLOCK changes nothing for them.
int open_attribute(const std::string& path) {
  int fd = open_ro(path, O_NONBLOCK);
  if (fd < 0) return fd;
  struct ::stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return -err;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
  }
  return fd;
}

// Reads from offset 0 to the end (pread: the descriptor's offset is never
// used, so a held descriptor needs no lseek). 0 or an errno.
int read_all(int fd, std::size_t max_bytes, std::string& out) {
  out.clear();
  off_t off = 0;
  for (;;) {
    std::size_t want = std::min(kChunk, max_bytes + 1 - out.size());
    std::size_t had = out.size();
    out.resize(had + want);
    ssize_t n = ::pread(fd, out.data() + had, want, off);
    if (n < 0) {
      out.resize(had);
      if (errno == EINTR) continue;
      return errno;
    }
    out.resize(had + static_cast<std::size_t>(n));
    if (n == 0) return 0;
    if (out.size() > max_bytes) {
      out.clear();
      return EFBIG;
    }
    off += n;
  }
}

// A held file's read: one pread into a buffer the thread keeps, when a
// short read means the end of the file (sysfs attributes, regular files:
// everything but procfs, whose seq_files hand out a page at a time); else,
// or when the buffer filled, the loop of read_all.
int read_held(int fd, std::size_t max_bytes, bool short_read_is_end, std::string& out) {
  if (!short_read_is_end) return read_all(fd, max_bytes, out);
  thread_local std::string scratch;
  const std::size_t want = std::min(kChunk, max_bytes + 1);
  if (scratch.size() < want) scratch.resize(want);
  ssize_t n;
  do {
    n = ::pread(fd, scratch.data(), want, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno;
  if (static_cast<std::size_t>(n) == want) return read_all(fd, max_bytes, out);
  out.assign(scratch.data(), static_cast<std::size_t>(n));
  return 0;
}

// Whether a short read from `fd` is the end of its file: true but on procfs.
bool short_read_is_end(int fd) {
  struct ::statfs fs {};
  if (::fstatfs(fd, &fs) != 0) return false;
  return fs.f_type != PROC_SUPER_MAGIC;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Read answer(int err, std::string text = {}) {
  Read r;
  r.status = classify_errno(err);
  r.err = err;
  if (r.ok()) r.text = std::move(text);
  return r;
}

}  // namespace

Status classify_errno(int err) {
  switch (err) {
    case 0: return Status::kOk;
    case ENOENT:
    case ENOTDIR: return Status::kAbsent;
    case ENODEV:
    case ENXIO:
    case ESTALE: return Status::kGone;
    default: return Status::kError;
  }
}

std::string errno_name(int err) {
  if (const char* name = strerrorname_np(err)) return name;
  // Appended, not "E" + to_string(): GCC 12 at -O3 warns (-Wrestrict, a
  // false positive) on the operator+ form, which fails a -Werror build.
  std::string out = "E";
  out += std::to_string(err);
  return out;
}

std::string_view Read::value() const {
  std::string_view v = text;
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ' || v.back() == '\t' ||
                        v.back() == '\0' || v.back() == '\r'))
    v.remove_suffix(1);
  return v;
}

void Faults::inject(std::string path_suffix, int err, int times) {
  std::lock_guard lock(mu_);
  rules_.push_back(Rule{std::move(path_suffix), err, times});
}

void Faults::on_read(std::string path_suffix, std::function<void()> action) {
  std::lock_guard lock(mu_);
  actions_.push_back(Action{std::move(path_suffix), std::move(action)});
}

void Faults::clear() {
  std::lock_guard lock(mu_);
  rules_.clear();
  actions_.clear();
}

std::optional<int> Faults::take(std::string_view path) {
  std::function<void()> action;
  {
    std::lock_guard lock(mu_);
    for (auto it = actions_.begin(); it != actions_.end(); ++it) {
      if (!ends_with(path, it->suffix)) continue;
      action = std::move(it->run);
      actions_.erase(it);
      break;
    }
  }
  if (action) action();
  std::lock_guard lock(mu_);
  for (auto it = rules_.begin(); it != rules_.end(); ++it) {
    if (!ends_with(path, it->suffix)) continue;
    int err = it->err;
    if (it->times > 0 && --it->times == 0) rules_.erase(it);
    ++hits_;
    return err;
  }
  return std::nullopt;
}

std::uint64_t Faults::hits() const {
  std::lock_guard lock(mu_);
  return hits_;
}

FsRoot::FsRoot(std::filesystem::path root, std::shared_ptr<Faults> faults)
    : root_(std::move(root)), faults_(std::move(faults)) {}

std::string FsRoot::full(std::string_view rel) const {
  std::string p = root_.string();
  if (rel.empty()) return p;
  if (p.empty() || p.back() != '/') p.push_back('/');
  while (!rel.empty() && rel.front() == '/') rel.remove_prefix(1);
  p.append(rel);
  return p;
}

std::optional<int> FsRoot::fault(const std::string& full_path) const {
  if (!faults_) return std::nullopt;
  return faults_->take(full_path);
}

Read FsRoot::read(std::string_view rel, std::size_t max_bytes) const {
  std::string path = full(rel);
  if (auto err = fault(path)) return answer(*err);
  int fd = open_attribute(path);
  if (fd < 0) return answer(-fd);
  std::string text;
  int err = read_all(fd, max_bytes, text);
  ::close(fd);
  return answer(err, std::move(text));
}

namespace {
// The names in a directory open for reading, from its position on
// (a fresh descriptor: all of them), sorted, without "." and "..". Returns
// the errno of the listing (0: complete). getdents64 straight into a
// buffer on the stack, not through a DIR: opendir() would add an fstat
// (and fdopendir() on a caller's descriptor a dup, an fstat and two
// fcntl), and a 32 KiB buffer from the heap, to every listing.
int read_names(int fd, std::vector<std::string>& names) {
  alignas(struct dirent64) char buf[32768];
  for (;;) {
    const ssize_t n = ::getdents64(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    // A directory removed while it is read answers ENOENT: the end of it,
    // as readdir() takes it.
    if (n < 0 && errno == ENOENT) break;
    if (n < 0) return errno;
    if (n == 0) break;
    for (ssize_t off = 0; off < n;) {
      const auto* e = reinterpret_cast<const struct dirent64*>(buf + off);
      // Never from a kernel; no endless loop, no read past the buffer.
      if (e->d_reclen == 0 || e->d_reclen > n - off) return EIO;
      off += e->d_reclen;
      if (e->d_ino == 0) continue;  // a deleted entry, which readdir() skips too
      const std::string_view name(e->d_name);
      if (name != "." && name != "..") names.emplace_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  return 0;
}

Listing listing_of(int err, std::vector<std::string> names) {
  Listing l;
  l.status = classify_errno(err);
  l.err = err;
  if (l.ok()) l.names = std::move(names);
  return l;
}
}  // namespace

Listing FsRoot::list(std::string_view rel) const {
  std::string path = full(rel);
  std::vector<std::string> names;
  int err = 0;
  if (auto f = fault(path)) {
    err = *f;
  } else {
    const int fd = open_ro(path, O_DIRECTORY | O_NONBLOCK);
    if (fd >= 0) {
      err = read_names(fd, names);
      ::close(fd);
    } else {
      err = -fd;
    }
  }
  return listing_of(err, std::move(names));
}

Listing FsRoot::list_fd(int dirfd) {
  std::vector<std::string> names;
  const int err = read_names(dirfd, names);
  return listing_of(err, std::move(names));
}

Read FsRoot::readlink(std::string_view rel) const {
  std::string path = full(rel);
  if (auto err = fault(path)) return answer(*err);
  std::string buf(4096, '\0');
  ssize_t n = ::readlink(path.c_str(), buf.data(), buf.size());
  if (n < 0) return answer(errno);
  if (static_cast<std::size_t>(n) >= buf.size()) return answer(ENAMETOOLONG);
  buf.resize(static_cast<std::size_t>(n));
  return answer(0, std::move(buf));
}

Read FsRoot::resolve(std::string_view rel) const {
  Read link = readlink(rel);
  if (!link.ok()) return link;
  std::string_view target = link.text;
  if (target.empty() || target.front() == '/') return answer(EXDEV);
  // The link's directory, then the target's components over it.
  std::vector<std::string_view> parts;
  auto walk = [&parts](std::string_view path) {
    while (!path.empty()) {
      std::size_t slash = path.find('/');
      std::string_view part = path.substr(0, slash);
      path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
      if (part.empty() || part == ".") continue;
      if (part != "..") {
        parts.push_back(part);
      } else if (parts.empty()) {
        return false;
      } else {
        parts.pop_back();
      }
    }
    return true;
  };
  std::string_view dir = rel;
  std::size_t slash = dir.rfind('/');
  dir = slash == std::string_view::npos ? std::string_view() : dir.substr(0, slash);
  if (!walk(dir) || !walk(target) || parts.empty()) return answer(EXDEV);
  std::string out;
  for (std::string_view p : parts) {
    if (!out.empty()) out.push_back('/');
    out.append(p);
  }
  return answer(0, std::move(out));
}

FsRoot::FileRead FsRoot::read_regular(std::string_view rel, std::size_t max_bytes) const {
  std::string path = full(rel);
  if (auto err = fault(path)) {
    FileRead r;
    static_cast<Read&>(r) = answer(*err);
    return r;
  }
  int fd = open_ro(path, O_NONBLOCK);
  if (fd < 0) {
    FileRead r;
    static_cast<Read&>(r) = answer(-fd);
    return r;
  }
  return read_regular_fd(fd, max_bytes);
}

FsRoot::FileRead FsRoot::read_regular_fd(int fd, std::size_t max_bytes) {
  FileRead r;
  struct ::stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    static_cast<Read&>(r) = answer(err);
    return r;
  }
  r.info = FileInfo{S_ISREG(st.st_mode), static_cast<std::uint64_t>(st.st_size),
                    static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec / 1e9};
  int err = 0;
  std::string text;
  if (!r.info->regular) {
    err = EINVAL;
  } else if (r.info->size > max_bytes) {
    err = EFBIG;
  } else {
    err = read_all(fd, static_cast<std::size_t>(r.info->size), text);
  }
  ::close(fd);
  static_cast<Read&>(r) = answer(err, std::move(text));
  return r;
}

HeldFile FsRoot::hold(std::string_view rel, std::size_t max_bytes) const {
  return HeldFile(*this, full(rel), max_bytes);
}

HeldFile::HeldFile(FsRoot root, std::string full_path, std::size_t max_bytes)
    : root_(std::move(root)), path_(std::move(full_path)), max_bytes_(max_bytes) {}

HeldFile::~HeldFile() {
  close();
}

HeldFile::HeldFile(HeldFile&& o) noexcept
    : root_(std::move(o.root_)),
      path_(std::move(o.path_)),
      max_bytes_(o.max_bytes_),
      fd_(std::exchange(o.fd_, -1)),
      whole_(o.whole_) {}

HeldFile& HeldFile::operator=(HeldFile&& o) noexcept {
  if (this != &o) {
    close();
    root_ = std::move(o.root_);
    path_ = std::move(o.path_);
    max_bytes_ = o.max_bytes_;
    fd_ = std::exchange(o.fd_, -1);
    whole_ = o.whole_;
  }
  return *this;
}

void HeldFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Read HeldFile::read() {
  if (auto err = root_.fault(path_)) {
    // As the kernel's answer would be: a gone file drops its descriptor.
    if (classify_errno(*err) == Status::kGone) close();
    return answer(*err);
  }
  // Two tries: a descriptor held across a hot-unplug answers ENODEV; the
  // path may name a new device by now.
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool reopened = false;
    if (fd_ < 0) {
      int fd = open_attribute(path_);
      if (fd < 0) return answer(-fd);
      fd_ = fd;
      whole_ = short_read_is_end(fd);
      reopened = true;
    }
    std::string text;
    int err = read_held(fd_, max_bytes_, whole_, text);
    if (err == 0) return answer(0, std::move(text));
    if (classify_errno(err) != Status::kGone || reopened) {
      // A file that answers an error keeps its descriptor (EIO from a
      // wedged device, EINVAL from an attribute a mode refuses); a gone
      // one is closed so that the next read opens the path afresh.
      if (classify_errno(err) == Status::kGone) close();
      return answer(err);
    }
    close();
  }
  return answer(ENODEV);
}

HeldFiles::HeldFiles(FsRoot root, std::size_t max_held)
    : root_(std::move(root)), max_held_(max_held) {}

Read HeldFiles::read(const std::string& rel, std::size_t max_bytes) {
  auto it = files_.find(rel);
  if (it == files_.end()) {
    if (files_.size() >= max_held_) {
      ++fallbacks_;
      return root_.read(rel, max_bytes);
    }
    it = files_.emplace(rel, Entry{root_.hold(rel, max_bytes), cycle_}).first;
  }
  it->second.cycle = cycle_;
  Read r = it->second.file.read();
  // A file that is not there holds no descriptor; forget it so that a
  // node with many absent attributes does not fill the table.
  if (r.status == Status::kAbsent) files_.erase(it);
  return r;
}

std::size_t HeldFiles::size() const {
  std::size_t n = 0;
  for (const auto& [path, e] : files_) n += e.file.is_open() ? 1 : 0;
  return n;
}

void HeldFiles::begin_cycle() {
  ++cycle_;
}

void HeldFiles::keep_under(std::string_view prefix) {
  for (auto& [path, e] : files_) {
    if (path.starts_with(prefix)) e.cycle = cycle_;
  }
}

std::size_t HeldFiles::end_cycle() {
  std::size_t closed = 0;
  for (auto it = files_.begin(); it != files_.end();) {
    if (it->second.cycle != cycle_) {
      it = files_.erase(it);
      ++closed;
    } else {
      ++it;
    }
  }
  return closed;
}

}  // namespace nodewatch::sources
