#pragma once
// libibverbs, for the one thing sysfs cannot give: the asynchronous event
// stream of each device (ibv_get_async_event), whose IBV_EVENT_PORT_ACTIVE
// and IBV_EVENT_PORT_ERR events count the port-state transitions that
// happen between two samples (a port that flaps for a second is invisible
// to a 15s sample of ports/<n>/state).
//
// Active width and speed are not taken from verbs: the kernel's
// ports/<n>/rate is computed from the same ib_query_port() active_width and
// active_speed ("100 Gb/sec (4X EDR)"), so sysfs already gives both,
// without a uverbs context.
//
// The library is loaded with dlopen("libibverbs.so.1") at run time, with the
// types of <infiniband/verbs.h> (libibverbs-dev) at build time: nodewatchd
// neither links against nor depends on rdma-core, a node without RDMA does
// not need it installed, and a node without /dev/infiniband never loads it.
// Holding a device open costs a uverbs file descriptor and a kernel
// ucontext for the daemon's lifetime; the `verbs = false` option turns this
// off.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nodewatch::interconnect {

// A device whose event stream could not be started, and why.
struct VerbsFailure {
  std::string device;  // "mlx5_0"
  std::string detail;  // "no verbs device of that name, or no permission to open it"
  bool operator==(const VerbsFailure&) const = default;
};

class VerbsSource {
 public:
  virtual ~VerbsSource() = default;
  // Follows the devices listed under <sysfs>/class/infiniband this
  // collection: opens the ones not open yet, closes those that went away.
  // Returns the devices that could not be opened this time (counted by the
  // caller); a device that failed is not tried again until it leaves and
  // comes back.
  virtual std::vector<VerbsFailure> sync(const std::vector<std::string>& devices) = 0;
  // Port-state transitions (PORT_ACTIVE + PORT_ERR events) seen on one port
  // since the device was opened; nullopt when no event stream watches the
  // device (library absent, device not opened, device lost).
  virtual std::optional<std::uint64_t> state_changes(std::string_view device, unsigned port) = 0;
  // rdma-core's version, from the loaded library's file name
  // (libibverbs.so.1.14.44.0 is rdma-core 44.0: rdma-core names it
  // 1.<ABI minor>.<its own version>); "" when none is loaded or the name
  // says none.
  virtual std::string library_version() const { return ""; }
};

// The rdma-core version in a libibverbs file name, or "".
std::string rdma_core_version_of(std::string_view file_name);

// The real source. Loads `library` only when `dev_dir` (/dev/infiniband)
// exists; without it, or when the library or one of its symbols is
// missing, every device reads nullopt.
std::unique_ptr<VerbsSource> make_verbs_source(std::string library, std::string dev_dir);

// Whether the real source loaded its library (for tests of the fallback).
bool verbs_source_loaded(const VerbsSource& source);

}  // namespace nodewatch::interconnect
