#include "accelerator/job_cgroups.hpp"

#include <algorithm>
#include <charconv>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nodewatch::accelerator {
namespace {

constexpr int kAnchorDepth = 3;    // how deep below a hierarchy's root a job's tree may start
constexpr int kSubtreeDepth = 12;  // how deep below it a process may sit

bool job_anchor(std::string_view name) {
  auto ends = [&](std::string_view s) {
    return name.size() >= s.size() && name.substr(name.size() - s.size()) == s;
  };
  return name == "slurmstepd.scope" || ends("_slurmstepd.scope") || name == "slurm" ||
         name.substr(0, 6) == "slurm_" || name.find("kubepods") != std::string_view::npos;
}

bool has(const sources::Listing& l, std::string_view name) {
  return std::binary_search(l.names.begin(), l.names.end(), std::string(name));
}

class Walker {
 public:
  Walker(const sources::FsRoot& sys, const std::set<unsigned>& pids,
         const std::function<bool()>& stop, std::size_t max_dirs)
      : sys_(sys), wanted_(pids), stop_(stop), max_dirs_(max_dirs) {}

  CgroupScan run() {
    const std::string top = "fs/cgroup";
    const sources::Listing l = sys_.list(top);
    if (!l.ok()) return std::move(scan_);
    if (has(l, "cgroup.procs")) {
      hierarchy(top);  // cgroup v2 only
    } else {
      // A hybrid or v1 host: the unified hierarchy first, then the others.
      std::vector<std::string> roots;
      if (has(l, "unified")) roots.push_back("unified");
      for (const std::string& n : l.names)
        if (n != "unified") roots.push_back(n);
      for (const std::string& n : roots) {
        if (done()) break;
        const sources::Listing h = sys_.list(top + "/" + n);
        ++scan_.dirs;
        if (h.ok() && has(h, "cgroup.procs")) hierarchy(top + "/" + n);
      }
    }
    return std::move(scan_);
  }

 private:
  bool done() const { return scan_.owners.size() == wanted_.size() || scan_.truncated || stopped_; }
  bool budget() {
    if (stop_ && stop_()) {
      stopped_ = true;
      return false;
    }
    if (scan_.dirs >= max_dirs_) {
      scan_.truncated = true;
      return false;
    }
    ++scan_.dirs;
    return true;
  }

  // Finds the job anchors within kAnchorDepth of `root`, and walks them.
  void hierarchy(const std::string& root) {
    root_ = root;
    anchors(root, 0);
  }
  void anchors(const std::string& dir, int depth) {
    if (depth >= kAnchorDepth || done() || !budget()) return;
    const sources::Listing l = sys_.list(dir);
    if (!l.ok()) return;
    for (const std::string& n : l.names) {
      if (done()) return;
      if (n.rfind("cgroup.", 0) == 0 || is_control_file(n)) continue;
      if (job_anchor(n))
        subtree(dir + "/" + n, 0);
      else
        anchors(dir + "/" + n, depth + 1);
    }
  }
  void subtree(const std::string& dir, int depth) {
    if (depth > kSubtreeDepth || done() || !budget()) return;
    const sources::Listing l = sys_.list(dir);
    if (!l.ok()) return;  // a file, or a cgroup removed under the walk
    if (has(l, "cgroup.procs")) procs(dir);
    for (const std::string& n : l.names) {
      if (done()) return;
      // Control files are not cgroups; every child cgroup is a directory
      // whose name is not a control file's ("<controller>.<key>").
      if (n.rfind("cgroup.", 0) == 0 || is_control_file(n)) continue;
      subtree(dir + "/" + n, depth + 1);
    }
  }
  static bool is_control_file(std::string_view n) {
    static constexpr std::string_view kPrefixes[] = {
        "cpu.",          "cpuset.",   "io.",         "memory.",
        "pids.",         "hugetlb.",  "rdma.",       "misc.",
        "irq.",          "blkio.",    "devices.",    "freezer.",
        "net_cls.",      "net_prio.", "perf_event.", "notify_on_release",
        "release_agent", "tasks",     "cpuacct."};
    for (std::string_view p : kPrefixes)
      if (n.substr(0, p.size()) == p) return true;
    return false;
  }
  void procs(const std::string& dir) {
    const sources::Read r = sys_.read(dir + "/cgroup.procs", 1 << 20);
    if (!r.ok()) return;
    std::string_view rest = r.text;
    std::optional<JobOwner> owner;
    bool parsed = false;
    while (!rest.empty()) {
      const auto nl = rest.find('\n');
      const std::string_view line = rest.substr(0, nl);
      rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
      unsigned pid = 0;
      const auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), pid);
      if (ec != std::errc() || p != line.data() + line.size() || wanted_.count(pid) == 0) continue;
      if (!parsed) {
        owner = job_owner_from_cgroup_path(std::string_view(dir).substr(root_.size()));
        parsed = true;
      }
      if (owner) scan_.owners.emplace(pid, *owner);
    }
  }

  const sources::FsRoot& sys_;
  const std::set<unsigned>& wanted_;
  const std::function<bool()>& stop_;
  const std::size_t max_dirs_;
  bool stopped_ = false;
  std::string root_;
  CgroupScan scan_;
};

}  // namespace

CgroupScan scan_job_cgroups(const sources::FsRoot& sys, const std::set<unsigned>& pids,
                            const std::function<bool()>& stop, std::size_t max_dirs) {
  if (pids.empty()) return {};
  return Walker(sys, pids, stop, max_dirs).run();
}

}  // namespace nodewatch::accelerator
