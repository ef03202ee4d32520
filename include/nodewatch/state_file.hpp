#pragma once
// A collector's state kept across restarts (the kernel log's counts, the
// BMC's SEL counts): one small file, replaced whole.

#include <string>
#include <string_view>

namespace nodewatch {

// Writes `text` to `path` atomically; 0 or the errno of the step that
// failed (the old file is then left as it was); EEXIST when `path` is there
// and is not a regular file. That is looked at (lstat) before the rename,
// not atomically with it: a user who can write to the directory could
// still put something else under the name between the two. Makes the
// path's last directory when it is missing (never more).
int write_state_text(const std::string& path, std::string_view text);

// Why the state cannot be kept at `path`, or "": it is renamed over its
// path, so a device, a FIFO or a link there would be replaced by a regular
// file. Asked through a helper (fs_helper.hpp): a state directory on a
// hung mount costs the configuration's check a timeout, never a hang.
std::string state_path_problem(const std::string& path);

}  // namespace nodewatch
