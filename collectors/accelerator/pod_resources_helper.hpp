#pragma once
// The pod-resources client as nodewatchd uses it: the gRPC client runs in a
// helper process of its own, nwd-pod-resources, so that the daemon links no
// gRPC, protobuf, absl, c-ares or upb (48 shared libraries, about 10 MiB of
// resident pages on every node, kubelet or not).
//
// The helper is started on the first call (PodResourcesWatcher makes this
// client only once the kubelet's socket is seen, and drops it when the
// socket goes), with the socket's path; it answers one frame per request
// (pod_resources_wire.hpp) on its standard output. A call waits for the
// answer until the call's timeout and half a second more; a helper that
// does not answer by then is killed (SIGKILL) and the call fails with
// DEADLINE_EXCEEDED; one that exits or sends a frame that breaks the
// bounds fails the call too. Either way the next call starts a new helper,
// at most one every `backoff` (1 s, doubling up to 60 s while starts keep
// failing, back to 1 s after an answer). The helper dies with the daemon
// (PR_SET_PDEATHSIG) and when its standard input closes.
//
// Not thread-safe: one watcher thread calls it.

#include <memory>
#include <string>

#include "accelerator/pod_resources.hpp"
#include "nodewatch/helper_process.hpp"

namespace nodewatch::accelerator {

// The helper's path: nwd-pod-resources beside the running executable (the
// build tree), else /usr/libexec/nodewatch/nwd-pod-resources (the package).
std::string default_pod_resources_helper();

// What outlives one client: the watcher makes a new client after every
// failed call (a fresh channel), and the backoff must not start over.
struct PodResourcesHelperState : HelperBackoff {};

// `helper`: the executable; `socket`: the kubelet's; `state`: shared with
// the clients before and after this one (null: its own).
std::unique_ptr<PodResourcesClient> make_helper_pod_resources_client(
    const std::string& socket, const std::string& helper,
    std::shared_ptr<PodResourcesHelperState> state = nullptr);

}  // namespace nodewatch::accelerator
