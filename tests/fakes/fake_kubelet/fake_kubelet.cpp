// nodewatch-fake-kubelet: the kubelet's pod-resources API alone, for
// scripts (packaging/verify-syscalls.sh): a gRPC server on a unix socket
// serving v1.PodResourcesLister/List (tests/support/fake_pod_resources.hpp)
// with the assignments given on the command line, until SIGTERM or SIGINT.
//
// Usage: nodewatch-fake-kubelet SOCKET [DEVICE_ID=NAMESPACE/POD/CONTAINER ...]

#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "support/fake_pod_resources.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s SOCKET [DEVICE_ID=NAMESPACE/POD/CONTAINER ...]\n", argv[0]);
    return 2;
  }
  std::vector<nodewatch::testing::FakePodDevice> devices;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    const auto s1 = a.find('/', eq == std::string::npos ? 0 : eq);
    const auto s2 = s1 == std::string::npos ? std::string::npos : a.find('/', s1 + 1);
    if (eq == std::string::npos || s1 == std::string::npos || s2 == std::string::npos) {
      std::fprintf(stderr, "bad assignment: %s\n", a.c_str());
      return 2;
    }
    devices.push_back({a.substr(eq + 1, s1 - eq - 1), a.substr(s1 + 1, s2 - s1 - 1),
                       a.substr(s2 + 1), "nvidia.com/gpu", a.substr(0, eq)});
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before gRPC's threads start
  nodewatch::testing::FakePodResourcesServer server(argv[1]);
  server.Set(devices);
  if (!server.Start()) {
    std::fprintf(stderr, "cannot listen on unix:%s\n", argv[1]);
    return 1;
  }
  int sig = 0;
  sigwait(&set, &sig);
  server.Stop();
  return 0;
}
