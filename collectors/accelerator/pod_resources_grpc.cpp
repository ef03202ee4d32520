// The pod-resources client over gRPC (pod_resources.hpp): one channel to
// the kubelet's unix socket, one List call per refresh with a deadline.

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "accelerator/dra.hpp"
#include "accelerator/pod_resources.hpp"
#include "accelerator/pod_resources_wire.hpp"
#include "nodewatch/text.hpp"
#include "podresources.grpc.pb.h"

namespace nodewatch::accelerator {
namespace {

// Bounds on what one answer may hold: a kubelet runs at most a few hundred
// pods, and its answer is tens of kilobytes. A larger one is refused
// before it is parsed (the parsed messages cost some 30 times the bytes:
// 1 MiB of the smallest entries would be tens of MB, under the unit's
// MemoryMax), and more assignments than this are refused after.
constexpr int kMaxMessageBytes = 1 << 20;
// The assignments and the bytes of a field: the frames' bounds, which the
// daemon checks again (253: a DNS subdomain, the longest name Kubernetes has).
constexpr std::size_t kMaxDevices = pod_resources_wire::kMaxDevices;
constexpr std::size_t kMaxLabelBytes = pod_resources_wire::kMaxFieldBytes;

std::string bounded(const std::string& s) {
  return text::label_value(std::string_view(s).substr(0, kMaxLabelBytes));
}

const char* code_name(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "ERROR";
  }
}

class GrpcPodResourcesClient final : public PodResourcesClient {
 public:
  explicit GrpcPodResourcesClient(const std::string& path) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxMessageBytes);
    // One connection, no retries of our own and no service config from
    // the server: a failed call is counted and tried at the next refresh.
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
    args.SetInt(GRPC_ARG_SERVICE_CONFIG_DISABLE_RESOLUTION, 1);
    channel_ = grpc::CreateCustomChannel("unix:" + path, grpc::InsecureChannelCredentials(), args);
    stub_ = v1::PodResourcesLister::NewStub(channel_);
  }

  Answer list(std::chrono::milliseconds timeout) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    v1::ListPodResourcesRequest request;
    v1::ListPodResourcesResponse response;
    const grpc::Status status = stub_->List(&ctx, request, &response);
    Answer a;
    if (!status.ok()) {
      a.error = std::string(code_name(status.error_code())) + ": " +
                std::string(text::label_value(status.error_message().substr(0, 200)));
      return a;
    }
    std::size_t container_start = 0;
    auto add = [&a, &container_start](PodDevice d) {
      if (a.devices.size() >= kMaxDevices) return false;
      // A device once per container and claim: kubelets 1.35 on may repeat
      // a driver's earlier CDI names on its later devices.
      for (std::size_t i = container_start; i < a.devices.size(); ++i)
        if (a.devices[i] == d) return true;
      a.devices.push_back(std::move(d));
      return true;
    };
    for (const v1::PodResources& pod : response.pod_resources())
      for (const v1::ContainerResources& c : pod.containers()) {
        container_start = a.devices.size();
        PodDevice base;
        base.namespace_name = bounded(pod.namespace_());
        base.pod = bounded(pod.name());
        base.container = bounded(c.name());
        bool fits = true;
        for (const v1::ContainerDevices& d : c.devices())
          for (const std::string& id : d.device_ids()) {
            PodDevice pd = base;
            pd.resource = bounded(d.resource_name());
            pd.device_id = bounded(id);
            fits = fits && add(std::move(pd));
          }
        for (const v1::DynamicResource& claim : c.dynamic_resources())
          for (const v1::ClaimResource& r : claim.claim_resources()) {
            PodDevice pd = base;
            pd.claim_namespace = bounded(claim.claim_namespace());
            pd.claim = bounded(claim.claim_name());
            if (!r.device_name().empty()) {  // kubelet 1.31 on
              pd.driver = bounded(r.driver_name());
              pd.dra_device = bounded(r.device_name());
              fits = fits && add(std::move(pd));
              continue;
            }
            for (const v1::CDIDevice& cdi : r.cdi_devices())  // kubelet 1.27-1.30
              if (auto named = dra::from_cdi_name(cdi.name())) {
                PodDevice one = pd;
                one.driver = bounded(named->first);
                one.dra_device = bounded(named->second);
                fits = fits && add(std::move(one));
              }
          }
        if (!fits) {
          a.error = "more than " + std::to_string(kMaxDevices) + " device assignments";
          a.devices.clear();
          return a;
        }
      }
    a.ok = true;
    return a;
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::PodResourcesLister::Stub> stub_;
};

}  // namespace

std::unique_ptr<PodResourcesClient> make_grpc_pod_resources_client(const std::string& path) {
  return std::make_unique<GrpcPodResourcesClient>(path);
}

}  // namespace nodewatch::accelerator
