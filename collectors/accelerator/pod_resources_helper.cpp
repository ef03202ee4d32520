#include "accelerator/pod_resources_helper.hpp"

#include "accelerator/pod_resources_wire.hpp"

namespace nodewatch::accelerator {
namespace {

namespace wire = pod_resources_wire;
using Clock = std::chrono::steady_clock;

constexpr auto kAnswerMargin = std::chrono::milliseconds(500);

class HelperClient final : public PodResourcesClient {
 public:
  HelperClient(const std::string& socket, const std::string& helper,
               std::shared_ptr<HelperBackoff> state)
      : process_("the pod-resources helper", {helper, "--socket", socket}, wire::kMaxFrameBytes,
                 std::move(state)) {}

  Answer list(std::chrono::milliseconds timeout) override {
    Answer a;
    HelperProcess::Answer got =
        process_.ask(wire::encode_request(timeout), Clock::now() + timeout + kAnswerMargin);
    if (!got.payload) {
      a.error = (got.timed_out ? "DEADLINE_EXCEEDED: " : "UNAVAILABLE: ") + got.why;
      return a;
    }
    std::string why;
    std::optional<Answer> answer = wire::decode_answer(*got.payload, &why);
    if (!answer) {
      process_.discard();
      a.error = "INTERNAL: the pod-resources helper answered " + why;
      return a;
    }
    return *answer;
  }

 private:
  HelperProcess process_;
};

}  // namespace

std::string default_pod_resources_helper() {
  return helper_path("nwd-pod-resources");
}

std::unique_ptr<PodResourcesClient> make_helper_pod_resources_client(
    const std::string& socket, const std::string& helper,
    std::shared_ptr<PodResourcesHelperState> state) {
  return std::make_unique<HelperClient>(socket, helper, std::move(state));
}

}  // namespace nodewatch::accelerator
