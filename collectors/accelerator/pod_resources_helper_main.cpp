// nwd-pod-resources: the kubelet's pod-resources client, in a process of
// its own (pod_resources_helper.hpp), so that nodewatchd links no gRPC.
//
//   nwd-pod-resources --socket /var/lib/kubelet/pod-resources/kubelet.sock --parent PID
//
// Reads requests from standard input and writes one answer per request to
// standard output, as frames (pod_resources_wire.hpp); exits when its input
// closes, when its parent (PID) is gone, or on a request it does not
// understand. Started by nodewatchd, never by hand.

#include <cstdio>
#include <string>
#include <string_view>

#include "accelerator/pod_resources.hpp"
#include "accelerator/pod_resources_wire.hpp"
#include "nodewatch/helper_process.hpp"

namespace wire = nodewatch::accelerator::pod_resources_wire;

int main(int argc, char** argv) {
  const std::string socket = nodewatch::helper_arg(argc, argv, "socket");
  if (socket.empty()) {
    std::fprintf(stderr, "usage: nwd-pod-resources --socket PATH --parent PID\n");
    return 2;
  }
  std::unique_ptr<nodewatch::accelerator::PodResourcesClient> client;
  return nodewatch::serve_frames(argc, argv, 64, [&](std::string_view request) {
    std::optional<std::string> out;
    auto timeout = wire::decode_request(request);
    if (!timeout) return out;
    // Made after the parent check (gRPC starts threads).
    if (!client) client = nodewatch::accelerator::make_grpc_pod_resources_client(socket);
    out = wire::encode_answer(client->list(*timeout));
    return out;
  });
}
