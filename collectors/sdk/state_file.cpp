#include "nodewatch/state_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "nodewatch/fs_helper.hpp"
#include "nodewatch/unique_fd.hpp"

namespace nodewatch {

int write_state_text(const std::string& path, std::string_view text) {
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string(".")
                          : slash == 0               ? std::string("/")
                                                     : path.substr(0, slash);
  // Never over a device, a FIFO, a link or a directory (/dev/null named by
  // mistake would become a regular file for the whole node); looked at
  // first, so that such a path costs no temporary file at each save.
  struct ::stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return EEXIST;
  // A temporary name of this write's own (mkostemp: O_EXCL), so that two
  // writers of one path (a daemon and a --once beside it) never write into
  // the same temporary file: each renames a whole state into place.
  std::string tmp;
  auto open_tmp = [&] {
    tmp = path + ".XXXXXX";
    return UniqueFd(::mkostemp(tmp.data(), O_CLOEXEC));
  };
  UniqueFd fd = open_tmp();
  // Under systemd the unit's StateDirectory= makes the directory; run by
  // hand, the daemon makes its last component (never more: a missing
  // /var/lib is not ours to make).
  if (fd.get() < 0 && errno == ENOENT && ::mkdir(dir.c_str(), 0755) == 0) fd = open_tmp();
  if (fd.get() < 0) return errno;
  auto fail = [&](int err) {
    ::unlink(tmp.c_str());
    return err;
  };
  if (::fchmod(fd.get(), 0644) != 0) return fail(errno);
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t w = ::write(fd.get(), text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return fail(w < 0 ? errno : EIO);
    done += static_cast<std::size_t>(w);
  }
  if (::fsync(fd.get()) != 0 || fd.close() != 0) return fail(errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail(errno);
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.get() >= 0) ::fsync(d.get());
  return 0;
}

std::string state_path_problem(const std::string& path) {
  helper::OperatorPath at = helper::stat_operator_path(path, /*follow_links=*/false);
  if (!at.answered) return path + ": " + at.error;
  const mode_t m = at.info.mode;
  if (at.err != 0 || S_ISREG(m)) return {};
  const char* what = S_ISDIR(m)                 ? "a directory"
                     : S_ISLNK(m)               ? "a symbolic link"
                     : S_ISCHR(m) || S_ISBLK(m) ? "a device"
                     : S_ISFIFO(m)              ? "a FIFO"
                     : S_ISSOCK(m)              ? "a socket"
                                                : "something else";
  return path + " is " + what + ", not a regular file: the state would be written over it";
}

}  // namespace nodewatch
