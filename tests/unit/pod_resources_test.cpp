// The pod-resources watcher and its gRPC client against a real gRPC server
// on a unix socket this test makes (support/fake_pod_resources.hpp): names
// and device assignments as the kubelet's v1 List gives them, the socket
// absent (not an error, no thread), going away and coming back, an error
// status, and a slow server that never holds a collection past its bound.

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "accelerator/pod_resources.hpp"
#include "support/daemon_process.hpp"
#include "support/fake_pod_resources.hpp"

namespace nodewatch::accelerator {
namespace {

using namespace std::chrono_literals;
using State = PodResourcesWatcher::Snapshot::State;
using Clock = std::chrono::steady_clock;

PodResourcesWatcher::Options options(const std::string& socket,
                                     std::chrono::milliseconds timeout = 500ms) {
  PodResourcesWatcher::Options o;
  o.socket = socket;
  o.timeout = timeout;
  o.keep = 60s;
  return o;
}

const std::vector<testing::FakePodDevice> kPods = {
    {"train", "llama-worker-0", "trainer", "nvidia.com/gpu",
     "GPU-00000000-0000-4000-8000-000000000001"},
    {"train", "llama-worker-0", "trainer", "nvidia.com/gpu",
     "GPU-00000000-0000-4000-8000-000000000002"},
    {"infer", "server-7f9", "triton", "nvidia.com/mig-1g.10gb",
     "MIG-00000000-0000-4000-9000-000000000300"},
};

// A kubelet serving kPods on a socket in a directory of its own.
struct Kubelet {
  testing::TempDir dir;
  const std::string socket = (dir.path() / "kubelet.sock").string();
  testing::FakePodResourcesServer server{socket};
  Kubelet() {
    server.Set(kPods);
    EXPECT_TRUE(server.Start());
  }
};

TEST(PodResources, ListsWhatTheKubeletGave) {
  Kubelet k;
  const std::string& socket = k.socket;
  testing::FakePodResourcesServer& server = k.server;
  PodResourcesWatcher w(options(socket));
  const auto snap = w.get(Clock::now() + 5s);
  EXPECT_EQ(snap.state, State::kUp) << snap.error;
  ASSERT_EQ(snap.devices.size(), 3u);
  EXPECT_EQ(snap.devices[0], (PodDevice{"train", "llama-worker-0", "trainer", "nvidia.com/gpu",
                                        "GPU-00000000-0000-4000-8000-000000000001"}));
  EXPECT_EQ(snap.devices[2].resource, "nvidia.com/mig-1g.10gb");
  EXPECT_EQ(snap.devices[2].namespace_name, "infer");
  EXPECT_EQ(snap.answers, 1u);
  EXPECT_EQ(snap.failures, 0u);
  // Each get is one call: a refresh per collection.
  w.get(Clock::now() + 5s);
  EXPECT_EQ(server.Calls(), 2);
}

TEST(PodResources, AbsentSocketIsNotAnErrorAndStartsNoThread) {
  testing::TempDir dir;
  const std::string socket = (dir.path() / "kubelet.sock").string();
  PodResourcesWatcher w(options(socket));
  const auto t0 = Clock::now();
  const auto snap = w.get(Clock::now() + 5s);
  EXPECT_LT(Clock::now() - t0, 100ms);
  EXPECT_EQ(snap.state, State::kAbsent);
  EXPECT_EQ(snap.failures, 0u);
  EXPECT_TRUE(snap.devices.empty());
  EXPECT_FALSE(w.started());
  // The socket appears: the thread starts with the first look at it.
  testing::FakePodResourcesServer server(socket);
  server.Set(kPods);
  ASSERT_TRUE(server.Start());
  EXPECT_EQ(w.get(Clock::now() + 5s).state, State::kUp);
  EXPECT_TRUE(w.started());
}

TEST(PodResources, SocketGoingAwayKeepsTheLastAnswerForAWhileAndComingBackIsSeen) {
  testing::TempDir dir;
  const std::string socket = (dir.path() / "kubelet.sock").string();
  auto server = std::make_unique<testing::FakePodResourcesServer>(socket);
  server->Set(kPods);
  ASSERT_TRUE(server->Start());
  auto o = options(socket);
  o.keep = 2s;
  PodResourcesWatcher w(o);
  ASSERT_EQ(w.get(Clock::now() + 5s).state, State::kUp);

  server.reset();  // the kubelet exits: its socket is gone
  auto snap = w.get(Clock::now() + 5s);
  EXPECT_EQ(snap.state, State::kAbsent);
  EXPECT_EQ(snap.devices.size(), 3u) << "kept while younger than `keep`";
  EXPECT_EQ(snap.failures, 0u) << "an absent socket is not a failed call";
  std::this_thread::sleep_for(2200ms);
  snap = w.get(Clock::now() + 5s);
  EXPECT_TRUE(snap.devices.empty()) << "dropped once older than `keep`";

  // A new kubelet, a new socket (another inode), other pods.
  testing::FakePodResourcesServer again(socket);
  again.Set({kPods[2]});
  ASSERT_TRUE(again.Start());
  snap = w.get(Clock::now() + 5s);
  EXPECT_EQ(snap.state, State::kUp) << snap.error;
  ASSERT_EQ(snap.devices.size(), 1u);
  EXPECT_EQ(snap.devices[0].pod, "server-7f9");
}

TEST(PodResources, AnErrorStatusIsCountedAndTheLastAnswerKept) {
  Kubelet k;
  const std::string& socket = k.socket;
  testing::FakePodResourcesServer& server = k.server;
  PodResourcesWatcher w(options(socket));
  ASSERT_EQ(w.get(Clock::now() + 5s).state, State::kUp);
  server.SetFailure(grpc::StatusCode::PERMISSION_DENIED);
  const auto snap = w.get(Clock::now() + 5s);
  EXPECT_EQ(snap.state, State::kDown);
  EXPECT_EQ(snap.failures, 1u);
  EXPECT_NE(snap.error.find("PERMISSION_DENIED"), std::string::npos) << snap.error;
  EXPECT_EQ(snap.devices.size(), 3u);
}

TEST(PodResources, ASlowServerNeverHoldsTheCollectionPastItsBound) {
  Kubelet k;
  const std::string& socket = k.socket;
  testing::FakePodResourcesServer& server = k.server;
  PodResourcesWatcher w(options(socket, 300ms));
  ASSERT_EQ(w.get(Clock::now() + 5s).state, State::kUp);

  server.SetDelay(5s);
  // A collection whose own deadline is near waits only until it.
  auto t0 = Clock::now();
  auto snap = w.get(Clock::now() + 50ms);
  EXPECT_LT(Clock::now() - t0, 1s);
  EXPECT_EQ(snap.devices.size(), 3u) << "the last answer while the new one is late";
  // One with time to spare waits for the call's timeout (300 ms) and a
  // little more, never longer; within a few such collections the late call
  // has failed (DEADLINE_EXCEEDED), and the last answer is still in use.
  bool down = false;
  for (int i = 0; i < 10 && !down; ++i) {
    t0 = Clock::now();
    snap = w.get(Clock::now() + 10s);
    EXPECT_LT(Clock::now() - t0, 2s);
    down = snap.state == State::kDown;
  }
  ASSERT_TRUE(down);
  EXPECT_NE(snap.error.find("DEADLINE_EXCEEDED"), std::string::npos) << snap.error;
  EXPECT_EQ(snap.devices.size(), 3u);

  // It answers again (once the watcher is past the late calls).
  server.SetDelay(0ms);
  bool up = false;
  for (int i = 0; i < 10 && !up; ++i) up = w.get(Clock::now() + 5s).state == State::kUp;
  EXPECT_TRUE(up);
}

TEST(PodResources, SomethingElseAtThePathIsNotASocket) {
  testing::TempDir dir;
  const auto path = dir.write("kubelet.sock", "not a socket");
  PodResourcesWatcher w(options(path.string()));
  const auto snap = w.get(Clock::now() + 5s);
  EXPECT_EQ(snap.state, State::kAbsent);
  EXPECT_EQ(snap.failures, 0u);
}

}  // namespace
}  // namespace nodewatch::accelerator
