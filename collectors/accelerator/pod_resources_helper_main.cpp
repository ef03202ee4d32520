// nwd-pod-resources: the kubelet's pod-resources client, in a process of
// its own (pod_resources_helper.hpp), so that nodewatchd links no gRPC.
//
//   nwd-pod-resources --socket /var/lib/kubelet/pod-resources/kubelet.sock --parent PID
//
// Reads requests from standard input and writes one answer per request to
// standard output, as frames (pod_resources_wire.hpp); exits when its input
// closes, when its parent (PID) is gone, or on a request it does not
// understand. Started by nodewatchd, never by hand.

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "accelerator/pod_resources.hpp"
#include "accelerator/pod_resources_wire.hpp"

namespace wire = nodewatch::accelerator::pod_resources_wire;

namespace {

bool read_exact(char* out, std::size_t n) {
  while (n > 0) {
    ssize_t got = ::read(0, out, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

bool write_all(std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(1, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket;
  long parent = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string_view key = argv[i];
    if (key == "--socket") socket = argv[i + 1];
    if (key == "--parent") parent = std::strtol(argv[i + 1], nullptr, 10);
  }
  if (socket.empty() || parent <= 0) {
    std::fprintf(stderr, "usage: nwd-pod-resources --socket PATH --parent PID\n");
    return 2;
  }
  // Dies with the daemon; a parent already gone before the flag was set
  // is seen as another parent.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) return 0;
  ::signal(SIGPIPE, SIG_IGN);

  auto client = nodewatch::accelerator::make_grpc_pod_resources_client(socket);
  for (;;) {
    char head[4];
    if (!read_exact(head, sizeof head)) return 0;
    std::uint32_t len = 0;
    for (int i = 0; i < 4; ++i)
      len |= static_cast<std::uint32_t>(static_cast<unsigned char>(head[i])) << (8 * i);
    if (len > 64) return 2;
    std::string request(len, '\0');
    if (!read_exact(request.data(), len)) return 0;
    auto timeout = wire::decode_request(request);
    if (!timeout) return 2;
    if (!write_all(wire::frame(wire::encode_answer(client->list(*timeout))))) return 0;
  }
}
