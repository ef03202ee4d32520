#include "accelerator/jobs.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "nodewatch/text.hpp"

namespace nodewatch::accelerator {
namespace {

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

bool all_of(std::string_view s, int (*pred)(int)) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
    return pred(static_cast<unsigned char>(c)) != 0;
  });
}
bool is_digits(std::string_view s) {
  return all_of(s, ::isdigit);
}
bool is_hex(std::string_view s) {
  return all_of(s, ::isxdigit);
}

std::vector<std::string_view> components(std::string_view path) {
  std::vector<std::string_view> out;
  while (!path.empty()) {
    const auto slash = path.find('/');
    const std::string_view c = path.substr(0, slash);
    if (!c.empty()) out.push_back(c);
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

// A pod UID: 8-4-4-4-12 hex digits, or 32 hex digits (a static pod's, the
// kubelet's hash of its manifest). `systemd`: '_' stands for '-'. Lower
// case, with dashes; "" when `s` is not one.
std::string pod_uid(std::string_view s, bool systemd) {
  std::string uid(s);
  if (systemd) std::replace(uid.begin(), uid.end(), '_', '-');
  for (char& c : uid) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (uid.size() == 32 && is_hex(uid)) return uid;
  if (uid.size() != 36) return "";
  for (std::size_t i = 0; i < uid.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? uid[i] != '-' : !std::isxdigit(static_cast<unsigned char>(uid[i]))) return "";
  }
  return uid;
}

// A container's cgroup name: "cri-containerd-<id>.scope", "crio-<id>.scope",
// "crio-conmon-<id>.scope", "docker-<id>.scope" (systemd), or "<id>",
// "crio-<id>" (cgroupfs). The id in lower case, "" when it is none.
std::string container_id(std::string_view c) {
  if (ends_with(c, ".scope")) c.remove_suffix(6);
  for (std::string_view prefix : {"cri-containerd-", "crio-conmon-", "crio-", "docker-"})
    if (starts_with(c, prefix)) {
      c.remove_prefix(prefix.size());
      break;
    }
  if (c.size() < 12 || c.size() > 128 || !is_hex(c)) return "";
  std::string id(c);
  for (char& ch : id) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return id;
}

// A Slurm Unique Job ID as Slurm 26.05's cgroup/v2 plugin names a job's
// directory by default: 's' and 13 characters of Crockford's base32.
bool is_sluid(std::string_view c) {
  static constexpr std::string_view kAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  return c.size() == 14 && c[0] == 's' && std::all_of(c.begin() + 1, c.end(), [](char ch) {
           return kAlphabet.find(ch) != std::string_view::npos;
         });
}

std::optional<JobOwner> slurm_owner(const std::vector<std::string_view>& cs) {
  // The Slurm component: "slurmstepd.scope" or "<node>_slurmstepd.scope"
  // (cgroup v2), "slurm" or "slurm_<node>" (cgroup v1); then job_<id> below it.
  for (std::size_t i = 0; i < cs.size(); ++i) {
    const std::string_view c = cs[i];
    const bool v2 = c == "slurmstepd.scope" || ends_with(c, "_slurmstepd.scope");
    const bool v1 = c == "slurm" || starts_with(c, "slurm_");
    if (!v2 && !v1) continue;
    std::size_t j = i + 1;
    if (v1 && j < cs.size() && starts_with(cs[j], "uid_") && is_digits(cs[j].substr(4))) ++j;
    if (j >= cs.size()) continue;
    const bool numeric = starts_with(cs[j], "job_") && is_digits(cs[j].substr(4));
    if (!numeric && !(v2 && is_sluid(cs[j]))) continue;
    JobOwner o;
    o.kind = JobOwner::Kind::kSlurm;
    o.job_id = std::string(numeric ? cs[j].substr(4) : cs[j]);
    if (j + 1 < cs.size() && starts_with(cs[j + 1], "step_")) {
      const std::string_view step = cs[j + 1].substr(5);
      if (is_digits(step) || step == "batch" || step == "extern" || step == "interactive")
        o.step = std::string(step);
      // A heterogeneous job's component steps: "step_0+1" is not written
      // by Slurm (its components have job ids of their own); anything else
      // there is a name this code does not know, kept out of the label.
    }
    return o;
  }
  return std::nullopt;
}

std::optional<JobOwner> kubernetes_owner(const std::vector<std::string_view>& cs) {
  // The first component that names kubepods ("kubepods", "kubepods.slice",
  // "kubelet-kubepods.slice" under a --cgroup-root), then a pod below it.
  auto kubepods = [](std::string_view c) { return c.find("kubepods") != std::string_view::npos; };
  std::size_t i = 0;
  while (i < cs.size() && !kubepods(cs[i])) ++i;
  for (; i < cs.size(); ++i) {
    const std::string_view c = cs[i];
    std::string uid;
    if (ends_with(c, ".slice")) {
      // systemd: kubepods-pod<uid>.slice, kubepods-<qos>-pod<uid>.slice
      // (with the cgroup root's name in front under a --cgroup-root).
      const auto at = c.rfind("-pod");
      if (!kubepods(c) || at == std::string_view::npos) continue;
      const std::string_view body = c.substr(at + 4, c.size() - 6 - (at + 4));
      uid = pod_uid(body, true);
    } else if (starts_with(c, "pod")) {
      uid = pod_uid(c.substr(3), false);  // cgroupfs: pod<uid>
    }
    if (uid.empty()) continue;
    JobOwner o;
    o.kind = JobOwner::Kind::kKubernetes;
    o.job_id = std::move(uid);
    if (i + 1 < cs.size()) o.container_id = container_id(cs[i + 1]);
    return o;
  }
  return std::nullopt;
}

}  // namespace

std::optional<JobOwner> job_owner_from_cgroup_path(std::string_view path) {
  const auto cs = components(path);
  if (auto o = slurm_owner(cs)) return o;
  return kubernetes_owner(cs);
}

JobOwner job_owner_from_proc_cgroup(std::string_view content) {
  // Lines "hierarchy-id:controllers:path"; the path may itself hold ':'.
  std::vector<std::pair<bool, std::string_view>> paths;  // (is v2, path)
  while (!content.empty()) {
    const auto nl = content.find('\n');
    std::string_view line = content.substr(0, nl);
    content.remove_prefix(nl == std::string_view::npos ? content.size() : nl + 1);
    const auto a = line.find(':');
    if (a == std::string_view::npos) continue;
    const auto b = line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    const bool v2 = line.substr(0, a) == "0" && b == a + 1;
    paths.emplace_back(v2, text::trim(line.substr(b + 1)));
  }
  std::stable_partition(paths.begin(), paths.end(), [](const auto& p) { return p.first; });
  for (const auto& [v2, path] : paths)
    if (auto o = job_owner_from_cgroup_path(path)) return *o;
  return {};
}

std::string normalize_device_id(std::string_view id) {
  id = text::trim(id);
  if (starts_with(id, "GPU-") || starts_with(id, "MIG-")) {
    const auto replica = id.find("::");
    return std::string(id.substr(0, replica));
  }
  std::string out(id);
  // A PCI address ("0000:C1:00.0"): lower case, as the backends report it.
  if (out.size() >= 7 && out.find(':') != std::string::npos && out.find('.') != std::string::npos)
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

DeviceJobs device_jobs_from(const std::vector<DeviceProcess>& processes,
                            const std::vector<std::optional<JobOwner>>& owners,
                            const std::vector<PodAssignment>& assignments, std::size_t max_jobs) {
  // Jobs by their labels; memory summed.
  using Key = std::tuple<std::string, std::string, std::string, std::string, std::string,
                         std::string, std::string, std::string>;
  std::map<Key, std::optional<double>> jobs;
  auto add = [&](DeviceJob j, std::optional<double> memory) {
    Key k{j.scheduler, j.job_id,    j.step,         j.namespace_name,
          j.pod,       j.container, j.gpu_instance, j.claim};
    auto [it, fresh] = jobs.try_emplace(std::move(k), std::nullopt);
    if (memory) it->second = it->second.value_or(0) + *memory;
  };
  auto gi_label = [](const std::optional<unsigned>& gi) {
    return gi ? std::to_string(*gi) : std::string();
  };

  // Per GPU instance (nullopt: the whole device).
  std::set<std::optional<unsigned>> instances;
  for (const auto& p : processes) instances.insert(p.gpu_instance);
  for (const auto& a : assignments) instances.insert(a.gpu_instance);

  for (const auto& gi : instances) {
    std::set<std::pair<std::string, std::string>> pods;  // (namespace, pod) assigned here
    for (const auto& a : assignments)
      if (a.gpu_instance == gi) pods.emplace(a.namespace_name, a.pod);
    std::set<std::string> uids;  // pod UIDs of the processes here
    for (std::size_t i = 0; i < processes.size(); ++i)
      if (processes[i].gpu_instance == gi && i < owners.size() && owners[i] &&
          owners[i]->kind == JobOwner::Kind::kKubernetes)
        uids.insert(owners[i]->job_id);
    const bool joined = pods.size() == 1 && uids.size() <= 1;

    for (std::size_t i = 0; i < processes.size(); ++i) {
      const DeviceProcess& p = processes[i];
      if (p.gpu_instance != gi) continue;
      const std::optional<JobOwner> owner = i < owners.size() ? owners[i] : std::nullopt;
      DeviceJob j;
      j.gpu_instance = gi_label(gi);
      if (!owner) {
        if (joined) continue;  // counted with the pod below
        j.scheduler = "unknown";
      } else if (owner->kind == JobOwner::Kind::kSlurm) {
        j.scheduler = "slurm";
        j.job_id = owner->job_id;
        j.step = owner->step;
      } else if (owner->kind == JobOwner::Kind::kKubernetes) {
        if (joined) continue;
        j.scheduler = "kubernetes";
        j.job_id = owner->job_id;
      } else {
        j.scheduler = "none";
      }
      add(std::move(j), p.memory_used_bytes);
    }

    if (joined) {
      // The pod's memory: its own processes and the unknown ones.
      std::optional<double> memory;
      for (std::size_t i = 0; i < processes.size(); ++i) {
        const DeviceProcess& p = processes[i];
        if (p.gpu_instance != gi || !p.memory_used_bytes) continue;
        const std::optional<JobOwner> owner = i < owners.size() ? owners[i] : std::nullopt;
        if (!owner || owner->kind == JobOwner::Kind::kKubernetes)
          memory = memory.value_or(0) + *p.memory_used_bytes;
      }
      // One job per container; the memory goes to the first (the metric
      // of memory is per job_id, and the containers share it).
      bool first = true;
      std::set<std::pair<std::string, std::string>> containers;  // (container, claim)
      for (const auto& a : assignments)
        if (a.gpu_instance == gi) containers.emplace(a.container, a.claim);
      for (const auto& [c, claim] : containers) {
        DeviceJob j;
        j.scheduler = "kubernetes";
        // The pod UID; where no process named it, "<namespace>/<pod>",
        // so that the job has an id of its own (its memory is not summed
        // with that of processes in no job).
        j.job_id = uids.empty() ? pods.begin()->first + "/" + pods.begin()->second : *uids.begin();
        j.namespace_name = pods.begin()->first;
        j.pod = pods.begin()->second;
        j.container = c;
        j.gpu_instance = gi_label(gi);
        j.claim = claim;
        add(std::move(j), first ? memory : std::nullopt);
        first = false;
      }
    } else {
      for (const auto& a : assignments) {
        if (a.gpu_instance != gi) continue;
        DeviceJob j;
        j.scheduler = "kubernetes";
        j.job_id = a.namespace_name + "/" + a.pod;
        j.namespace_name = a.namespace_name;
        j.pod = a.pod;
        j.container = a.container;
        j.gpu_instance = gi_label(gi);
        j.claim = a.claim;
        add(std::move(j), std::nullopt);
      }
    }
  }

  DeviceJobs out;
  out.jobs.reserve(jobs.size());
  for (auto& [k, memory] : jobs) {
    DeviceJob j;
    std::tie(j.scheduler, j.job_id, j.step, j.namespace_name, j.pod, j.container, j.gpu_instance,
             j.claim) = k;
    j.memory_used_bytes = memory;
    out.jobs.push_back(std::move(j));
  }
  // Largest memory first, none said last; the map's order among equals.
  std::stable_sort(out.jobs.begin(), out.jobs.end(), [](const DeviceJob& a, const DeviceJob& b) {
    return a.memory_used_bytes.value_or(-1) > b.memory_used_bytes.value_or(-1);
  });
  if (out.jobs.size() > max_jobs) {
    out.omitted = out.jobs.size() - max_jobs;
    out.jobs.resize(max_jobs);
  }
  return out;
}

}  // namespace nodewatch::accelerator
