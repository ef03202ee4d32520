// nodewatch-hangfs: a FUSE file system for the tests that stops answering on
// demand, the way a hard NFS or Lustre mount behaves once its server is gone
// (see README.md). A pass-through of one flat backing directory, served by a
// single-threaded loop of its own:
//
//   SIGUSR1  hang: requests are still read from /dev/fuse, then held unanswered
//            (the callers stay in the kernel's request_wait_answer)
//   SIGUSR2  answer: the held requests are processed in the order they came
//   SIGTERM, SIGINT  unmount and exit 0
//
// Usage: nodewatch-hangfs [--status FILE] [--hold OP]... BACKING_DIR MOUNTPOINT
// --hold OP (lookup, getattr, setattr, open, read, write, release, fsync,
// flush, readdir, create; repeatable): while hung, hold only requests of
// these operations and serve the others (a mount whose writes-back hang
// while its metadata still answers).
// It prints "ready" once the kernel's INIT is answered and the connection is
// primed (callers wait in state D; see Server); FILE is rewritten (a
// temporary, then rename) on every change: "state=hung held=2".

#define FUSE_USE_VERSION 35
#include <dirent.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "nodewatch/unique_fd.hpp"

namespace {

using nodewatch::UniqueFd;

std::string fd_path(int fd) {
  return "/proc/self/fd/" + std::to_string(fd);
}

// One file or directory the kernel knows: an O_PATH descriptor keeps it
// reachable through renames and unlinks, as the kernel's inode does.
struct Node {
  UniqueFd fd;
  dev_t dev = 0;
  ino_t ino = 0;
  std::uint64_t nlookup = 0;
};

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};

// A directory listing, taken when the kernel reads from offset 0; an
// entry's offset is its index plus one.
struct DirEntry {
  std::string name;
  ino_t ino;
  mode_t type;
};

class PassThrough {
 public:
  explicit PassThrough(UniqueFd root) {
    auto node = std::make_unique<Node>();
    struct stat st {};
    if (::fstat(root.get(), &st) == 0) {
      node->dev = st.st_dev;
      node->ino = st.st_ino;
    }
    node->fd = std::move(root);
    node->nlookup = 1;  // the root is never forgotten
    nodes_.emplace(FUSE_ROOT_ID, std::move(node));
  }

  bool initialized() const { return initialized_; }

  static fuse_lowlevel_ops ops() {
    fuse_lowlevel_ops o{};
    o.init = [](void* self, fuse_conn_info* conn) {
      // Every request must arrive as a memory buffer, so that a held one can
      // be copied and processed later.
      conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
      conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
      static_cast<PassThrough*>(self)->initialized_ = true;
    };
    o.lookup = [](fuse_req_t r, fuse_ino_t p, const char* n) { of(r).lookup(r, p, n); };
    o.forget = [](fuse_req_t r, fuse_ino_t i, std::uint64_t n) {
      of(r).forget(i, n);
      fuse_reply_none(r);
    };
    o.forget_multi = [](fuse_req_t r, std::size_t count, fuse_forget_data* f) {
      for (std::size_t k = 0; k < count; ++k) of(r).forget(f[k].ino, f[k].nlookup);
      fuse_reply_none(r);
    };
    o.getattr = [](fuse_req_t r, fuse_ino_t i, fuse_file_info*) { of(r).getattr(r, i); };
    o.setattr = [](fuse_req_t r, fuse_ino_t i, struct stat* a, int s, fuse_file_info* fi) {
      of(r).setattr(r, i, a, s, fi);
    };
    o.opendir = [](fuse_req_t r, fuse_ino_t i, fuse_file_info* fi) { of(r).opendir(r, i, fi); };
    o.readdir = [](fuse_req_t r, fuse_ino_t i, std::size_t s, off_t off, fuse_file_info* fi) {
      of(r).readdir(r, i, s, off, fi);
    };
    o.releasedir = [](fuse_req_t r, fuse_ino_t, fuse_file_info* fi) {
      of(r).dirs_.erase(fi->fh);
      fuse_reply_err(r, 0);
    };
    o.open = [](fuse_req_t r, fuse_ino_t i, fuse_file_info* fi) { of(r).open(r, i, fi); };
    o.create = [](fuse_req_t r, fuse_ino_t p, const char* n, mode_t m, fuse_file_info* fi) {
      of(r).create(r, p, n, m, fi);
    };
    o.read = [](fuse_req_t r, fuse_ino_t, std::size_t s, off_t off, fuse_file_info* fi) {
      of(r).read(r, s, off, fi);
    };
    o.write = [](fuse_req_t r, fuse_ino_t, const char* b, std::size_t s, off_t off,
                 fuse_file_info* fi) { of(r).write(r, b, s, off, fi); };
    o.flush = [](fuse_req_t r, fuse_ino_t, fuse_file_info* fi) { of(r).flush(r, fi); };
    o.release = [](fuse_req_t r, fuse_ino_t, fuse_file_info* fi) {
      of(r).files_.erase(fi->fh);
      fuse_reply_err(r, 0);
    };
    o.fsync = [](fuse_req_t r, fuse_ino_t, int datasync, fuse_file_info* fi) {
      of(r).fsync(r, datasync, fi);
    };
    o.unlink = [](fuse_req_t r, fuse_ino_t p, const char* n) { of(r).unlink(r, p, n); };
    o.rename = [](fuse_req_t r, fuse_ino_t p, const char* n, fuse_ino_t np, const char* nn,
                  unsigned int flags) { of(r).rename(r, p, n, np, nn, flags); };
    o.statfs = [](fuse_req_t r, fuse_ino_t i) { of(r).statfs(r, i); };
    o.access = [](fuse_req_t r, fuse_ino_t i, int mask) { of(r).access(r, i, mask); };
    return o;
  }

 private:
  static PassThrough& of(fuse_req_t req) {
    return *static_cast<PassThrough*>(fuse_req_userdata(req));
  }

  Node* node(fuse_ino_t ino) {
    auto it = nodes_.find(ino);
    return it == nodes_.end() ? nullptr : it->second.get();
  }

  // The node for an O_PATH descriptor, counted as one more lookup: the one
  // already known for that inode, or a new one that keeps `fd`.
  fuse_ino_t intern(UniqueFd fd, const struct stat& st) {
    auto key = std::make_pair(st.st_dev, st.st_ino);
    auto it = by_inode_.find(key);
    if (it != by_inode_.end()) {
      ++nodes_.at(it->second)->nlookup;
      return it->second;
    }
    auto n = std::make_unique<Node>();
    n->fd = std::move(fd);
    n->dev = st.st_dev;
    n->ino = st.st_ino;
    n->nlookup = 1;
    fuse_ino_t id = next_id_++;
    nodes_.emplace(id, std::move(n));
    by_inode_.emplace(key, id);
    return id;
  }

  void forget(fuse_ino_t ino, std::uint64_t count) {
    if (ino == FUSE_ROOT_ID) return;
    auto it = nodes_.find(ino);
    if (it == nodes_.end()) return;
    Node& n = *it->second;
    n.nlookup -= std::min(n.nlookup, count);
    if (n.nlookup > 0) return;
    by_inode_.erase(std::make_pair(n.dev, n.ino));
    nodes_.erase(it);
  }

  static int stat_of(int fd, struct stat* st) {
    return ::fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 ? 0 : errno;
  }

  // Answers a lookup or create with `fd` (O_PATH) as the entry; 0 or an errno.
  int entry(UniqueFd fd, fuse_entry_param* e) {
    struct stat st {};
    if (int err = stat_of(fd.get(), &st)) return err;
    *e = fuse_entry_param{};
    e->ino = intern(std::move(fd), st);
    e->attr = st;
    e->attr_timeout = 0;
    e->entry_timeout = 0;
    return 0;
  }

  void lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    Node* p = node(parent);
    if (!p) return void(fuse_reply_err(req, ESTALE));
    UniqueFd fd(::openat(p->fd.get(), name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (fd.get() < 0) return void(fuse_reply_err(req, errno));
    fuse_entry_param e;
    if (int err = entry(std::move(fd), &e)) return void(fuse_reply_err(req, err));
    if (fuse_reply_entry(req, &e) == -ENOENT) forget(e.ino, 1);  // the caller is gone
  }

  void getattr(fuse_req_t req, fuse_ino_t ino) {
    Node* n = node(ino);
    if (!n) return void(fuse_reply_err(req, ESTALE));
    struct stat st {};
    if (int err = stat_of(n->fd.get(), &st)) return void(fuse_reply_err(req, err));
    fuse_reply_attr(req, &st, 0);
  }

  void setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
    Node* n = node(ino);
    if (!n) return void(fuse_reply_err(req, ESTALE));
    // An open file's own descriptor where the kernel names one (ftruncate,
    // fchmod); else the node's, reopened through /proc.
    int fd = fi ? file(fi) : -1;
    std::string path = fd_path(n->fd.get());
    int rc = 0;
    if (to_set & FUSE_SET_ATTR_MODE) {
      rc = fd >= 0 ? ::fchmod(fd, attr->st_mode) : ::chmod(path.c_str(), attr->st_mode);
    }
    if (rc == 0 && (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) {
      uid_t uid = (to_set & FUSE_SET_ATTR_UID) ? attr->st_uid : static_cast<uid_t>(-1);
      gid_t gid = (to_set & FUSE_SET_ATTR_GID) ? attr->st_gid : static_cast<gid_t>(-1);
      rc = ::fchownat(n->fd.get(), "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
    }
    if (rc == 0 && (to_set & FUSE_SET_ATTR_SIZE)) {
      rc = fd >= 0 ? ::ftruncate(fd, attr->st_size) : ::truncate(path.c_str(), attr->st_size);
    }
    if (rc == 0 && (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
      timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
      if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
        times[0].tv_nsec = UTIME_NOW;
      } else if (to_set & FUSE_SET_ATTR_ATIME) {
        times[0] = attr->st_atim;
      }
      if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
        times[1].tv_nsec = UTIME_NOW;
      } else if (to_set & FUSE_SET_ATTR_MTIME) {
        times[1] = attr->st_mtim;
      }
      rc = fd >= 0 ? ::futimens(fd, times) : ::utimensat(AT_FDCWD, path.c_str(), times, 0);
    }
    if (rc != 0) return void(fuse_reply_err(req, errno));
    getattr(req, ino);
  }

  void opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    Node* n = node(ino);
    if (!n) return void(fuse_reply_err(req, ESTALE));
    struct stat st {};
    if (int err = stat_of(n->fd.get(), &st)) return void(fuse_reply_err(req, err));
    if (!S_ISDIR(st.st_mode)) return void(fuse_reply_err(req, ENOTDIR));
    std::uint64_t handle = next_dir_++;
    dirs_.emplace(handle, std::vector<DirEntry>{});
    fi->fh = handle;
    fi->keep_cache = 0;
    fi->cache_readdir = 0;
    if (fuse_reply_open(req, fi) == -ENOENT) dirs_.erase(handle);
  }

  void readdir(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off, fuse_file_info* fi) {
    auto it = dirs_.find(fi->fh);
    Node* n = node(ino);
    if (it == dirs_.end() || !n) return void(fuse_reply_err(req, EBADF));
    std::vector<DirEntry>& entries = it->second;
    if (off == 0) {
      if (int err = list(n->fd.get(), &entries)) return void(fuse_reply_err(req, err));
    }
    std::vector<char> buf(size);
    std::size_t used = 0;
    for (std::size_t i = static_cast<std::size_t>(std::max<off_t>(off, 0)); i < entries.size();
         ++i) {
      struct stat st {};
      st.st_ino = entries[i].ino;
      st.st_mode = entries[i].type;
      std::size_t want = fuse_add_direntry(req, buf.data() + used, size - used,
                                           entries[i].name.c_str(), &st, static_cast<off_t>(i + 1));
      if (want > size - used) break;
      used += want;
    }
    fuse_reply_buf(req, buf.data(), used);
  }

  static int list(int dir_fd, std::vector<DirEntry>* out) {
    std::unique_ptr<DIR, DirCloser> d(::opendir(fd_path(dir_fd).c_str()));
    if (!d) return errno;
    out->clear();
    errno = 0;
    while (dirent* e = ::readdir(d.get())) {
      out->push_back({e->d_name, e->d_ino, static_cast<mode_t>(DTTOIF(e->d_type))});
    }
    return errno;
  }

  void open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    Node* n = node(ino);
    if (!n) return void(fuse_reply_err(req, ESTALE));
    // The kernel has done the O_NOFOLLOW and O_CREAT work; O_DIRECT is the
    // kernel's business too (it sends such reads and writes uncached), and
    // the backing file system need not support it.
    int flags = fi->flags & ~(O_CREAT | O_EXCL | O_NOCTTY | O_NOFOLLOW | O_DIRECT);
    UniqueFd fd(::open(fd_path(n->fd.get()).c_str(), flags | O_CLOEXEC));
    if (fd.get() < 0) return void(fuse_reply_err(req, errno));
    fi->fh = keep(std::move(fd));
    fi->keep_cache = 0;
    if (fuse_reply_open(req, fi) == -ENOENT) files_.erase(fi->fh);  // no release will come
  }

  void create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
              fuse_file_info* fi) {
    Node* p = node(parent);
    if (!p) return void(fuse_reply_err(req, ESTALE));
    int flags = (fi->flags | O_CREAT) & ~(O_NOCTTY | O_DIRECT);
    UniqueFd file(::openat(p->fd.get(), name, flags | O_CLOEXEC, mode));
    if (file.get() < 0) return void(fuse_reply_err(req, errno));
    UniqueFd path(::open(fd_path(file.get()).c_str(), O_PATH | O_CLOEXEC));
    if (path.get() < 0) return void(fuse_reply_err(req, errno));
    fuse_entry_param e;
    if (int err = entry(std::move(path), &e)) return void(fuse_reply_err(req, err));
    fi->fh = keep(std::move(file));
    fi->keep_cache = 0;
    if (fuse_reply_create(req, &e, fi) == -ENOENT) {  // the caller is gone: no release will come
      forget(e.ino, 1);
      files_.erase(fi->fh);
    }
  }

  // The descriptor of an open file (the kernel's file handle), -1 if unknown.
  int file(const fuse_file_info* fi) const {
    auto it = files_.find(fi->fh);
    return it == files_.end() ? -1 : it->second.get();
  }

  std::uint64_t keep(UniqueFd fd) {
    std::uint64_t handle = next_file_++;
    files_.emplace(handle, std::move(fd));
    return handle;
  }

  void read(fuse_req_t req, std::size_t size, off_t off, fuse_file_info* fi) {
    int fd = file(fi);
    if (fd < 0) return void(fuse_reply_err(req, EBADF));
    std::vector<char> buf(size);
    std::size_t got = 0;
    while (got < size) {
      ssize_t n = ::pread(fd, buf.data() + got, size - got, off + static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return void(fuse_reply_err(req, errno));
      if (n == 0) break;
      got += static_cast<std::size_t>(n);
    }
    fuse_reply_buf(req, buf.data(), got);
  }

  void write(fuse_req_t req, const char* data, std::size_t size, off_t off, fuse_file_info* fi) {
    int fd = file(fi);
    if (fd < 0) return void(fuse_reply_err(req, EBADF));
    std::size_t done = 0;
    while (done < size) {
      ssize_t n = ::pwrite(fd, data + done, size - done, off + static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && done == 0) return void(fuse_reply_err(req, errno));
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    fuse_reply_write(req, done);
  }

  void flush(fuse_req_t req, fuse_file_info* fi) {
    int fd = file(fi);
    if (fd < 0) return void(fuse_reply_err(req, EBADF));
    // Closing a duplicate reports what closing the file would (write-back
    // errors) and leaves it open.
    int dup = ::dup(fd);
    fuse_reply_err(req, dup < 0 ? errno : (::close(dup) == 0 ? 0 : errno));
  }

  void fsync(fuse_req_t req, int datasync, fuse_file_info* fi) {
    int fd = file(fi);
    if (fd < 0) return void(fuse_reply_err(req, EBADF));
    fuse_reply_err(req, (datasync ? ::fdatasync(fd) : ::fsync(fd)) == 0 ? 0 : errno);
  }

  void unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
    Node* p = node(parent);
    if (!p) return void(fuse_reply_err(req, ESTALE));
    fuse_reply_err(req, ::unlinkat(p->fd.get(), name, 0) == 0 ? 0 : errno);
  }

  void rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t new_parent,
              const char* new_name, unsigned int flags) {
    Node* p = node(parent);
    Node* np = node(new_parent);
    if (!p || !np) return void(fuse_reply_err(req, ESTALE));
    int rc = ::renameat2(p->fd.get(), name, np->fd.get(), new_name, flags);
    fuse_reply_err(req, rc == 0 ? 0 : errno);
  }

  void statfs(fuse_req_t req, fuse_ino_t ino) {
    Node* n = node(ino);
    if (!n) n = node(FUSE_ROOT_ID);
    struct statvfs sv {};
    if (::fstatvfs(n->fd.get(), &sv) != 0) return void(fuse_reply_err(req, errno));
    fuse_reply_statfs(req, &sv);
  }

  void access(fuse_req_t req, fuse_ino_t ino, int mask) {
    Node* n = node(ino);
    if (!n) return void(fuse_reply_err(req, ESTALE));
    int rc = ::faccessat(AT_FDCWD, fd_path(n->fd.get()).c_str(), mask, 0);
    fuse_reply_err(req, rc == 0 ? 0 : errno);
  }

  bool initialized_ = false;
  std::unordered_map<fuse_ino_t, std::unique_ptr<Node>> nodes_;
  std::map<std::pair<dev_t, ino_t>, fuse_ino_t> by_inode_;
  fuse_ino_t next_id_ = FUSE_ROOT_ID + 1;
  std::unordered_map<std::uint64_t, std::vector<DirEntry>> dirs_;  // open directories
  std::uint64_t next_dir_ = 1;
  std::unordered_map<std::uint64_t, UniqueFd> files_;  // open files
  std::uint64_t next_file_ = 1;
};

// The parts of a request's header (struct fuse_in_header in
// include/uapi/linux/fuse.h: len, opcode, unique, nodeid, uid, gid, pid) and
// of a reply's (fuse_out_header: len, error, unique) that the loop reads and
// writes itself. The kernel header is not included: it clashes with
// libfuse's macros.
struct RequestHeader {
  std::uint32_t opcode = 0;
  std::uint64_t unique = 0;
  std::uint32_t pid = 0;
  std::uint64_t interrupted = 0;  // of an INTERRUPT: the unique of the request it is about
};
constexpr std::uint32_t kFuseInterrupt = 36;  // FUSE_INTERRUPT
constexpr std::size_t kInHeaderSize = 40;

RequestHeader parse_header(const char* mem, std::size_t size) {
  RequestHeader h;
  if (size < kInHeaderSize) return h;
  std::memcpy(&h.opcode, mem + 4, sizeof h.opcode);
  std::memcpy(&h.unique, mem + 8, sizeof h.unique);
  std::memcpy(&h.pid, mem + 32, sizeof h.pid);
  if (h.opcode == kFuseInterrupt && size >= kInHeaderSize + sizeof h.interrupted) {
    std::memcpy(&h.interrupted, mem + kInHeaderSize, sizeof h.interrupted);  // fuse_interrupt_in
  }
  return h;
}

#pragma pack(push, 1)
struct OutHeader {
  std::uint32_t len;
  std::int32_t error;
  std::uint64_t unique;
};
#pragma pack(pop)
static_assert(sizeof(OutHeader) == 16);

// The session's loop: reads every request, and either processes it or, while
// hung, keeps a copy of it.
//
// Before it says "ready" it primes the connection, so that a caller waits
// in state D from the start, as on a hard NFS mount: a child of its own
// stats the root, is sent SIGKILL while that request is held, and the
// kernel's INTERRUPT for it is answered ENOSYS. The kernel then records that
// this server does not take interrupts (fc->no_interrupt) and from then on
// waits for every answer killably (D), never interruptibly (S). Every later
// INTERRUPT is answered ENOSYS too (there are none once that is recorded).
// FUSE opcodes by name (linux/fuse.h, enum fuse_opcode; stable ABI).
const std::map<std::string, std::uint32_t>& opcodes() {
  static const std::map<std::string, std::uint32_t> kOps = {
      {"lookup", 1}, {"getattr", 3},  {"setattr", 4},  {"open", 14},
      {"read", 15},  {"write", 16},   {"release", 18}, {"fsync", 20},
      {"flush", 25}, {"readdir", 28}, {"create", 35},
  };
  return kOps;
}

class Server {
 public:
  // `hold`: the opcodes held while hung; empty: all of them.
  Server(fuse_session* se, PassThrough* fs, std::string mountpoint, std::string status_file,
         std::vector<std::uint32_t> hold)
      : se_(se),
        fs_(fs),
        mountpoint_(std::move(mountpoint)),
        status_file_(std::move(status_file)),
        hold_(std::move(hold)) {}
  ~Server() { std::free(buf_.mem); }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Runs until SIGTERM or SIGINT (0) or until the kernel ends the session
  // (unmounted elsewhere, aborted: 0); 1 on an error.
  int run(int signal_fd) {
    fuse_fd_ = fuse_session_fd(se_);
    // Non-blocking: a request seen by poll() may be gone before the read
    // (its caller was killed before the server took it).
    ::fcntl(fuse_fd_, F_SETFL, ::fcntl(fuse_fd_, F_GETFL) | O_NONBLOCK);
    write_status();
    while (!fuse_session_exited(se_)) {
      int timeout_ms = -1;
      if (priming_) {
        auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(prime_deadline_ - Clock::now());
        if (left.count() <= 0) {
          end_priming("no INTERRUPT came");
          continue;
        }
        timeout_ms = static_cast<int>(left.count());
      }
      pollfd fds[2] = {{fuse_fd_, POLLIN, 0}, {signal_fd, POLLIN, 0}};
      if (::poll(fds, 2, timeout_ms) < 0) {
        if (errno == EINTR) continue;
        std::perror("nodewatch-hangfs: poll");
        return 1;
      }
      if (fds[1].revents & POLLIN) {
        if (!on_signals(signal_fd)) return 0;
      }
      if (fds[0].revents & (POLLIN | POLLERR | POLLHUP)) {
        int rc = fuse_session_receive_buf(se_, &buf_);
        if (rc == -EAGAIN || rc == -EINTR) continue;
        if (rc < 0) {
          std::fprintf(stderr, "nodewatch-hangfs: reading /dev/fuse: %s\n", std::strerror(-rc));
          return 1;
        }
        if (rc == 0) break;  // the session ended
        on_request();
      }
    }
    return 0;
  }

 private:
  using Clock = std::chrono::steady_clock;

  // False when asked to exit.
  bool on_signals(int signal_fd) {
    signalfd_siginfo si;
    while (::read(signal_fd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
      switch (si.ssi_signo) {
        case SIGUSR1: hung_ = true; break;
        case SIGUSR2: release_held(); break;
        case SIGCHLD: reap(); continue;
        default: return false;
      }
      write_status();
    }
    return true;
  }

  void on_request() {
    if (buf_.flags & FUSE_BUF_IS_FD) {
      // Splice is refused at INIT; should a kernel splice anyway, the request
      // is served, as it cannot be held.
      std::fprintf(stderr, "nodewatch-hangfs: a request arrived in a pipe; served, not held\n");
      fuse_session_process_buf(se_, &buf_);
      return;
    }
    const char* mem = static_cast<const char*>(buf_.mem);
    RequestHeader h = parse_header(mem, buf_.size);
    if (h.opcode == kFuseInterrupt) {
      refuse_interrupt(h);
      if (priming_ && !prime_request_.empty() && h.interrupted == prime_unique_) {
        end_priming(nullptr);
      }
      return;
    }
    if (priming_ && prime_request_.empty() && static_cast<pid_t>(h.pid) == prime_pid_) {
      prime_request_.assign(mem, mem + buf_.size);
      prime_unique_ = h.unique;
      ::kill(prime_pid_, SIGKILL);
      return;
    }
    if (hung_ &&
        (hold_.empty() || std::find(hold_.begin(), hold_.end(), h.opcode) != hold_.end())) {
      held_.emplace_back(mem, mem + buf_.size);
      write_status();
      return;
    }
    fuse_session_process_buf(se_, &buf_);
    if (fs_->initialized() && !prime_started_ && !priming_) start_priming();
  }

  void refuse_interrupt(const RequestHeader& h) {
    OutHeader out{sizeof(OutHeader), -ENOSYS, h.unique};
    // ENOENT: the interrupted request was answered meanwhile.
    if (::write(fuse_fd_, &out, sizeof out) < 0 && errno != ENOENT) {
      std::fprintf(stderr, "nodewatch-hangfs: answering an INTERRUPT: %s\n", std::strerror(errno));
    }
  }

  void start_priming() {
    prime_started_ = true;
    pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "nodewatch-hangfs: fork: %s; callers will wait in state S\n",
                   std::strerror(errno));
      announce();
      return;
    }
    if (pid == 0) {
      // Without the server's /dev/fuse descriptor, so that the server's death
      // still aborts the connection (and frees this child).
      ::close(fuse_fd_);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      struct stat st {};
      ::stat(mountpoint_.c_str(), &st);
      ::_exit(0);
    }
    prime_pid_ = pid;
    priming_ = true;
    prime_deadline_ = Clock::now() + std::chrono::seconds(5);
  }

  // Answers the priming request; `failure` says why priming did not work.
  void end_priming(const char* failure) {
    if (failure) {
      std::fprintf(stderr, "nodewatch-hangfs: priming: %s; callers will wait in state S\n",
                   failure);
      if (prime_pid_ > 0) ::kill(prime_pid_, SIGKILL);
    }
    priming_ = false;
    if (!prime_request_.empty()) {
      process(&prime_request_);
      prime_request_.clear();
    }
    announce();
  }

  void reap() {
    int st = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &st, WNOHANG)) > 0) {
      if (pid != prime_pid_) continue;
      prime_pid_ = -1;
      if (priming_) end_priming("the priming child exited before its request was held");
    }
  }

  void process(std::vector<char>* request) {
    fuse_buf b{};
    b.size = request->size();
    b.mem = request->data();
    b.fd = -1;
    fuse_session_process_buf(se_, &b);
  }

  void release_held() {
    hung_ = false;
    while (!held_.empty()) {
      std::vector<char> request = std::move(held_.front());
      held_.pop_front();
      process(&request);
    }
  }

  // "ready" once the kernel's INIT has been answered and the connection
  // primed: from then on a caller is served (or held), not left waiting for
  // the connection.
  void announce() {
    if (announced_) return;
    announced_ = true;
    std::fputs("ready\n", stdout);
    std::fflush(stdout);
  }

  void write_status() {
    if (status_file_.empty()) return;
    std::string line = std::string("state=") + (hung_ ? "hung" : "serving") +
                       " held=" + std::to_string(held_.size()) + "\n";
    std::string tmp = status_file_ + ".tmp";
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    bool ok = fd.get() >= 0 &&
              ::write(fd.get(), line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
              fd.close() == 0 && ::rename(tmp.c_str(), status_file_.c_str()) == 0;
    if (!ok) {
      std::fprintf(stderr, "nodewatch-hangfs: writing %s: %s\n", status_file_.c_str(),
                   std::strerror(errno));
    }
  }

  fuse_session* se_;
  PassThrough* fs_;
  std::string mountpoint_;
  std::string status_file_;
  int fuse_fd_ = -1;
  fuse_buf buf_{};
  std::vector<std::uint32_t> hold_;
  bool hung_ = false;
  bool announced_ = false;
  std::deque<std::vector<char>> held_;
  // Priming (see above): started once, after INIT.
  bool prime_started_ = false;
  bool priming_ = false;
  pid_t prime_pid_ = -1;
  std::vector<char> prime_request_;
  std::uint64_t prime_unique_ = 0;
  Clock::time_point prime_deadline_;
};

struct SessionDeleter {
  void operator()(fuse_session* se) const { fuse_session_destroy(se); }
};

int usage() {
  std::fputs("usage: nodewatch-hangfs [--status FILE] [--hold OP]... BACKING_DIR MOUNTPOINT\n",
             stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string status_file;
  std::vector<std::uint32_t> hold;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--status" && i + 1 < argc) {
      status_file = argv[++i];
    } else if (arg == "--hold" && i + 1 < argc) {
      auto it = opcodes().find(argv[++i]);
      if (it == opcodes().end()) return usage();
      hold.push_back(it->second);
    } else if (arg.starts_with("-")) {
      return usage();
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 2) return usage();
  const std::string& backing = positional[0];
  const std::string& mountpoint = positional[1];

  // The control signals are read from a signalfd, never delivered.
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGCHLD}) sigaddset(&mask, sig);
  if (::sigprocmask(SIG_BLOCK, &mask, nullptr) != 0) {
    std::perror("nodewatch-hangfs: sigprocmask");
    return 1;
  }
  ::signal(SIGPIPE, SIG_IGN);
  UniqueFd signal_fd(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  if (signal_fd.get() < 0) {
    std::perror("nodewatch-hangfs: signalfd");
    return 1;
  }

  UniqueFd root(::open(backing.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (root.get() < 0) {
    std::fprintf(stderr, "nodewatch-hangfs: %s: %s\n", backing.c_str(), std::strerror(errno));
    return 1;
  }
  PassThrough fs(std::move(root));

  std::vector<std::string> args_s = {
      "nodewatch-hangfs", "-o",
      "fsname=nodewatch-hangfs,subtype=nodewatch-hangfs,default_permissions"};
  std::vector<char*> args_v;
  for (auto& a : args_s) args_v.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(args_v.size()), args_v.data());
  fuse_lowlevel_ops ops = PassThrough::ops();
  std::unique_ptr<fuse_session, SessionDeleter> se(fuse_session_new(&args, &ops, sizeof ops, &fs));
  fuse_opt_free_args(&args);
  if (!se) {
    std::fputs("nodewatch-hangfs: fuse_session_new failed\n", stderr);
    return 1;
  }
  if (fuse_session_mount(se.get(), mountpoint.c_str()) != 0) {
    std::fprintf(stderr, "nodewatch-hangfs: cannot mount on %s\n", mountpoint.c_str());
    return 1;
  }
  int rc = Server(se.get(), &fs, mountpoint, status_file, std::move(hold)).run(signal_fd.get());
  // Closes /dev/fuse first (held requests end with an error) and detaches the
  // mount; a no-op when the kernel ended the session.
  fuse_session_unmount(se.get());
  return rc;
}
