// Which job owns a process (collectors/accelerator/jobs.cpp): the text of
// /proc/<pid>/cgroup, whose paths any workload that may create cgroups
// (a delegated subtree, a container) chooses. Property: a job id is never
// empty, and every field is valid UTF-8 (it becomes a label value).

#include "accelerator/jobs.hpp"
#include "fuzz_support.hpp"

using namespace nodewatch::accelerator;
using nodewatch::fuzz::require;

namespace {

void check(const JobOwner& o) {
  if (o.kind == JobOwner::Kind::kNone) return;
  require(!o.job_id.empty(), "jobs: a job without an id");
  require(nodewatch::fuzz::is_utf8(o.job_id) && nodewatch::fuzz::is_utf8(o.step) &&
              nodewatch::fuzz::is_utf8(o.container_id),
          "jobs: a field that is not UTF-8");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text = nodewatch::fuzz::as_text(data, size);
  check(job_owner_from_proc_cgroup(text));
  if (auto o = job_owner_from_cgroup_path(text)) check(*o);
  std::string id = normalize_device_id(text);
  require(id.size() <= text.size() + 16, "jobs: a device id that grew");
  return 0;
}
