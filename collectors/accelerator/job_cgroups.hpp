#pragma once
// A process's cgroup found from the cgroup file system rather than from
// /proc/PID/cgroup: where the daemon's /proc hides other users' processes
// (the unit's ProtectProc=invisible), the cgroup tree under /sys/fs/cgroup
// still lists every process in its cgroup.procs files. Only the parts of
// the tree that jobs live in are walked: the directories named for Slurm
// (slurmstepd.scope, <node>_slurmstepd.scope, slurm, slurm_<node>) or for
// the kubelet (kubepods...) within three levels of a hierarchy's root, and
// everything below them, at most `max_dirs` directories per call.

#include <cstddef>
#include <functional>
#include <map>
#include <set>

#include "accelerator/jobs.hpp"
#include "nodewatch/sources/fs.hpp"

namespace nodewatch::accelerator {

struct CgroupScan {
  std::map<unsigned, JobOwner> owners;  // the wanted PIDs found in a job's cgroup
  std::size_t dirs = 0;                 // directories read
  bool truncated = false;               // stopped at max_dirs
};

// Looks for `pids` under `sys`/fs/cgroup: the unified hierarchy (cgroup v2,
// or "unified" on a hybrid host) first, then each v1 hierarchy. A PID in a
// cgroup that names no job is not reported (it is "none" only when its
// /proc entry says so).
// `stop()` is asked before each directory: true ends the walk (the
// collection's deadline), with what was found so far.
CgroupScan scan_job_cgroups(const sources::FsRoot& sys, const std::set<unsigned>& pids,
                            const std::function<bool()>& stop = {}, std::size_t max_dirs = 4096);

}  // namespace nodewatch::accelerator
