// The pod-resources watcher and its client (the gRPC client in its helper
// process, nwd-pod-resources) against a real gRPC server
// on a unix socket this test makes (support/fake_pod_resources.hpp): names
// and device assignments as the kubelet's v1 List gives them, the socket
// absent (not an error, no thread), going away and coming back, an error
// status, and a slow server that never holds a collection past its bound;
// the helper started only with the socket, started again after it was
// killed, killed when it hangs, and its frames refused past their bounds.

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "accelerator/pod_resources.hpp"
#include "accelerator/pod_resources_helper.hpp"
#include "accelerator/pod_resources_wire.hpp"
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
  o.helper = nodewatch::testing::kPodResourcesHelper;
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

// The helper's pid, by its --socket argument.
pid_t HelperOf(const std::string& socket) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream in(e.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(in)), {});
    if (cmd.find("nwd-pod-resources") != std::string::npos && cmd.find(socket) != std::string::npos)
      return static_cast<pid_t>(std::stol(e.path().filename()));
  }
  return 0;
}

PodResourcesWatcher::Options HelperOptions(const std::string& socket,
                                           std::shared_ptr<PodResourcesHelperState> stats,
                                           std::chrono::milliseconds timeout = 500ms,
                                           std::string helper = testing::kPodResourcesHelper) {
  PodResourcesWatcher::Options o = options(socket, timeout);
  o.make_client = [stats, helper](const std::string& s) {
    return make_helper_pod_resources_client(s, helper, stats);
  };
  return o;
}

TEST(PodResourcesHelper, StartsOnlyWithTheSocketAndAgainAfterItWasKilled) {
  testing::TempDir dir;
  const std::string socket = (dir.path() / "kubelet.sock").string();
  auto stats = std::make_shared<PodResourcesHelperState>();
  PodResourcesWatcher w(HelperOptions(socket, stats));
  EXPECT_EQ(w.get(Clock::now() + 2s).state, State::kAbsent);
  EXPECT_EQ(stats->starts, 0u);
  EXPECT_EQ(HelperOf(socket), 0);

  testing::FakePodResourcesServer server(socket);
  server.Set(kPods);
  ASSERT_TRUE(server.Start());
  auto snap = w.get(Clock::now() + 5s);
  EXPECT_EQ(snap.state, State::kUp) << snap.error;
  EXPECT_EQ(snap.devices.size(), 3u);
  EXPECT_EQ(stats->starts, 1u);
  const pid_t first = HelperOf(socket);
  ASSERT_GT(first, 0);

  // Killed: the next call fails, the last answer stays, and a new helper
  // answers once the backoff (1 s) has passed.
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  snap = w.get(Clock::now() + 5s);
  EXPECT_EQ(snap.state, State::kDown);
  EXPECT_NE(snap.error.find("UNAVAILABLE"), std::string::npos) << snap.error;
  EXPECT_EQ(snap.devices.size(), 3u);
  EXPECT_EQ(stats->restarts, 1u);
  std::this_thread::sleep_for(1100ms);
  snap = w.get(Clock::now() + 5s);
  EXPECT_EQ(snap.state, State::kUp) << snap.error;
  EXPECT_EQ(stats->starts, 2u);
  EXPECT_NE(HelperOf(socket), first);
}

// The watcher's own helper (no make_client): its restarts are in the
// snapshot, which the accelerator collector exports.
TEST(PodResourcesHelper, TheWatcherCountsItsHelpersRestarts) {
  Kubelet k;
  PodResourcesWatcher w(options(k.socket));
  auto snap = w.get(Clock::now() + 5s);
  ASSERT_EQ(snap.state, State::kUp) << snap.error;
  EXPECT_EQ(snap.helper_restarts, 0u);
  const pid_t helper = HelperOf(k.socket);
  ASSERT_GT(helper, 0);
  ASSERT_EQ(::kill(helper, SIGKILL), 0);
  snap = w.get(Clock::now() + 5s);
  EXPECT_EQ(snap.state, State::kDown);
  EXPECT_EQ(snap.helper_restarts, 1u);
}

TEST(PodResourcesHelper, AHelperThatHangsIsKilledAtTheCallsBound) {
  testing::TempDir dir;
  const std::string socket = (dir.path() / "kubelet.sock").string();
  testing::FakePodResourcesServer server(socket);
  server.Set(kPods);
  ASSERT_TRUE(server.Start());
  auto stats = std::make_shared<PodResourcesHelperState>();
  PodResourcesWatcher w(HelperOptions(socket, stats, 300ms));
  ASSERT_EQ(w.get(Clock::now() + 5s).state, State::kUp);
  const pid_t helper = HelperOf(socket);
  ASSERT_GT(helper, 0);
  ASSERT_EQ(::kill(helper, SIGSTOP), 0);
  // The call fails at its timeout (300 ms) and half a second more; no get
  // waits longer than its own bound meanwhile.
  bool down = false;
  PodResourcesWatcher::Snapshot snap;
  const auto stopped_at = Clock::now();
  while (!down && Clock::now() - stopped_at < 3s) {
    auto t0 = Clock::now();
    snap = w.get(Clock::now() + 10s);
    EXPECT_LT(Clock::now() - t0, 2s);
    down = snap.state == State::kDown;
    if (!down) std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(down);
  EXPECT_LT(Clock::now() - stopped_at, 1500ms);
  // The call that hung (DEADLINE_EXCEEDED), or a later one before the
  // helper may start again (1 s).
  EXPECT_TRUE(snap.error.find("DEADLINE_EXCEEDED") != std::string::npos ||
              snap.error.find("started again in") != std::string::npos)
      << snap.error;
  EXPECT_EQ(snap.devices.size(), 3u);
  EXPECT_EQ(stats->restarts, 1u);
  // The stopped helper was killed, and reaped.
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = ::kill(helper, 0) != 0;
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone);
}

TEST(PodResourcesHelper, AHelperThatAnswersNonsenseIsRefusedAndReplaced) {
  testing::TempDir dir;
  const std::string socket = (dir.path() / "kubelet.sock").string();
  testing::FakePodResourcesServer server(socket);
  ASSERT_TRUE(server.Start());
  // A "helper" that answers any request with the length of a 16 MiB frame.
  const auto fake = dir.write("nonsense.sh", "#!/bin/sh\nprintf '\\000\\000\\000\\001'\nsleep 5\n");
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  auto stats = std::make_shared<PodResourcesHelperState>();
  PodResourcesWatcher w(HelperOptions(socket, stats, 300ms, fake.string()));
  auto snap = w.get(Clock::now() + 5s);
  EXPECT_EQ(snap.state, State::kDown);
  EXPECT_NE(snap.error.find("a frame of 16777216 bytes"), std::string::npos) << snap.error;
  EXPECT_EQ(stats->restarts, 1u);
}

TEST(PodResourcesWire, AnswersRoundTripAndTheirBoundsAreKept) {
  namespace wire = pod_resources_wire;
  PodResourcesClient::Answer a;
  a.ok = true;
  a.devices = {
      {"train", "llama\t0", "trainer", "nvidia.com/gpu", "GPU-1"},
      {"infer", "server-0", "triton", "nvidia.com/mig-1g.10gb", "MIG-2"},
      {"train", "bert-0", "main", "", "", "train", "bert-gpus", "gpu.nvidia.com", "gpu-3"}};
  std::string why;
  auto back = wire::decode_answer(wire::encode_answer(a), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_TRUE(back->ok);
  ASSERT_EQ(back->devices.size(), 3u);
  EXPECT_EQ(back->devices[0].pod, "llama 0");  // a tab is no separator
  EXPECT_EQ(back->devices[1], a.devices[1]);
  EXPECT_EQ(back->devices[2], a.devices[2]);  // a claim's device
  PodResourcesClient::Answer none;
  none.ok = true;
  back = wire::decode_answer(wire::encode_answer(none), &why);
  ASSERT_TRUE(back);
  EXPECT_TRUE(back->ok && back->devices.empty());
  PodResourcesClient::Answer failed;
  failed.error = "UNAVAILABLE: connection refused";
  back = wire::decode_answer(wire::encode_answer(failed), &why);
  ASSERT_TRUE(back);
  EXPECT_FALSE(back->ok);
  EXPECT_EQ(back->error, failed.error);

  std::string many = "ok";
  for (int i = 0; i <= 4096; ++i) many += "\na\tb\tc\td\te\t\t\t\t";
  EXPECT_FALSE(wire::decode_answer(many, &why));
  EXPECT_NE(why.find("more than 4096"), std::string::npos) << why;
  EXPECT_FALSE(wire::decode_answer("ok\n" + std::string(254, 'x') + "\tb\tc\td\te\t\t\t\t", &why));
  EXPECT_FALSE(wire::decode_answer("ok\na\tb", &why));
  EXPECT_FALSE(wire::decode_answer("ok\na\tb\tc\td\te", &why));  // five: the old frames
  EXPECT_FALSE(wire::decode_answer("maybe", &why));
  EXPECT_EQ(wire::decode_request(wire::encode_request(1500ms)), 1500ms);
  EXPECT_FALSE(wire::decode_request("list -1"));
  EXPECT_FALSE(wire::decode_request("list 12x"));
  EXPECT_FALSE(wire::decode_request("drop tables"));
}

}  // namespace
}  // namespace nodewatch::accelerator
