#pragma once
// The kubelet's pod-resources API (v1, PodResourcesLister.List over gRPC on
// a unix socket, /var/lib/kubelet/pod-resources/kubelet.sock): which
// container of which pod was given which device. The accelerator collector
// uses it to name the pods on each GPU (jobs.hpp), also for pods whose
// processes the node's PID namespace cannot see.
//
// Off the scrape path and off the collection's critical path: one watcher
// thread per socket, started when the socket is first seen, shared by every collector built with it
// (a reload keeps it). A collection asks for a fresh answer and waits for it at most until its own
// deadline or the call's timeout, whichever comes first; a slow or hung kubelet then costs that
// wait and nothing else, and the last answer is used. The gRPC call has the same timeout as its
// deadline.
//
// Where the socket is absent (a node without a kubelet), nothing is asked,
// nothing is counted and no series is exported: not an error. Where it
// goes away (a kubelet restart) or answers with an error, the last good
// answer is kept for `keep` (default 60 s, so that a restarting kubelet
// does not make every pod name flap), then dropped.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nodewatch::accelerator {

// One device given to one container: by a device plugin (resource and
// device_id), or through a ResourceClaim (claim, driver and dra_device).
struct PodDevice {
  std::string namespace_name;
  std::string pod;
  std::string container;
  std::string resource;   // "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu"
  std::string device_id;  // as the device plugin wrote it
  // Dynamic Resource Allocation: the claim's namespace and name, the DRA
  // driver ("gpu.nvidia.com", "gpu.amd.com") and the device's name in the
  // driver's pool ("gpu-0", "gpu-0-mig-19-0-1", "gpu-1-129"; dra.hpp).
  std::string claim_namespace{};
  std::string claim{};
  std::string driver{};
  std::string dra_device{};
  bool operator==(const PodDevice&) const = default;
};

// One List call. Implementations: the gRPC client below, and tests' own.
class PodResourcesClient {
 public:
  virtual ~PodResourcesClient() = default;
  struct Answer {
    bool ok = false;
    std::string error;  // when not ok: "DEADLINE_EXCEEDED: ...", "UNAVAILABLE: ..."
    std::vector<PodDevice> devices;
  };
  virtual Answer list(std::chrono::milliseconds timeout) = 0;
};

// The gRPC client of the socket at `path` (a channel to "unix:<path>").
// Implemented in pod_resources_grpc.cpp, which only the helper process
// (nwd-pod-resources) and tests link: the daemon asks it through
// make_helper_pod_resources_client().
std::unique_ptr<PodResourcesClient> make_grpc_pod_resources_client(const std::string& path);

struct PodResourcesHelperState;  // pod_resources_helper.hpp

class PodResourcesWatcher {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::string socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
    std::chrono::milliseconds timeout{1000};
    std::chrono::milliseconds keep{60000};
    // Makes the client once the socket is seen (again: a socket replaced,
    // by inode, gets a new client). Default: the helper process's
    // (pod_resources_helper.hpp), running `helper` ("": the default one).
    std::function<std::unique_ptr<PodResourcesClient>(const std::string&)> make_client;
    std::string helper;
  };

  struct Snapshot {
    enum class State {
      kAbsent,  // no socket now: nothing asked
      kUp,      // the last call answered
      kDown,    // the last call failed (or timed out)
    };
    State state = State::kAbsent;
    std::vector<PodDevice> devices;     // the last good answer, while younger than `keep`
    std::string error;                  // the last failure's, when kDown
    std::uint64_t failures = 0;         // failed calls since the watcher started
    std::uint64_t answers = 0;          // answered calls since the watcher started
    std::uint64_t helper_restarts = 0;  // of the default client's helper process
  };

  explicit PodResourcesWatcher(Options options);
  PodResourcesWatcher(const PodResourcesWatcher&) = delete;
  PodResourcesWatcher& operator=(const PodResourcesWatcher&) = delete;
  ~PodResourcesWatcher();

  const Options& options() const { return options_; }
  // Whether its thread was started (the socket was seen once).
  bool started() {
    std::lock_guard lock(mu_);
    return thread_.joinable();
  }

  // Asks for a fresh answer and waits for it until `until` at most (and no
  // longer than the call's timeout and a little more); returns the newest
  // state, fresh or not.
  Snapshot get(Clock::time_point until);

 private:
  void run();
  void refresh();  // on the thread: one look at the socket, one call

  const Options options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::uint64_t requested_ = 0;  // refreshes asked for
  std::uint64_t done_ = 0;       // refreshes done
  Snapshot snapshot_;
  Clock::time_point good_at_{};  // when `snapshot_.devices` was answered
  // Thread-only.
  std::unique_ptr<PodResourcesClient> client_;
  std::uint64_t client_inode_ = 0;
  // The default client's helper process: its backoff outlives a client.
  std::shared_ptr<PodResourcesHelperState> helper_state_;
  std::thread thread_;
};

}  // namespace nodewatch::accelerator
