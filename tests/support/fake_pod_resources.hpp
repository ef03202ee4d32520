#pragma once
// A fake kubelet pod-resources server for tests: a real gRPC server on a
// unix socket the test names, serving v1.PodResourcesLister/List from
// collectors/accelerator/proto/podresources.proto (the kubelet's field
// numbers), with what the test sets: the pods, a delay before answering,
// an error status. Start() and Stop() make the socket come and go.

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "podresources.grpc.pb.h"

namespace nodewatch::testing {

// A device given to a container: by a device plugin (resource, device_id),
// or through a ResourceClaim `claim` (in the pod's namespace) as a kubelet
// 1.31 on names it (driver, dra_device), or as kubelets 1.27-1.30 do, by
// its CDI device name `cdi` alone (dra_device empty).
struct FakePodDevice {
  std::string namespace_name, pod, container, resource, device_id;
  std::string claim{}, driver{}, dra_device{}, cdi{};
};

class FakePodResourcesServer final : public v1::PodResourcesLister::Service {
 public:
  explicit FakePodResourcesServer(std::string socket) : socket_(std::move(socket)) {}
  ~FakePodResourcesServer() override { Stop(); }

  void Set(std::vector<FakePodDevice> devices) {
    std::lock_guard lock(mu_);
    devices_ = std::move(devices);
  }
  void SetDelay(std::chrono::milliseconds d) { delay_ms_ = static_cast<int>(d.count()); }
  void SetFailure(grpc::StatusCode code) { failure_ = static_cast<int>(code); }
  int Calls() const { return calls_; }

  bool Start() {
    grpc::ServerBuilder b;
    b.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    return server_ != nullptr;
  }
  // Stops serving and removes the socket (as a kubelet that exits does).
  void Stop() {
    if (!server_) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    server_->Wait();
    server_.reset();
    std::remove(socket_.c_str());
  }

  grpc::Status List(grpc::ServerContext* ctx, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* out) override {
    ++calls_;
    // A slow kubelet: sleeps, but leaves when the caller has gone.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms_);
    while (std::chrono::steady_clock::now() < until && !ctx->IsCancelled())
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (failure_ != 0) return grpc::Status(static_cast<grpc::StatusCode>(failure_.load()), "fake");
    std::lock_guard lock(mu_);
    for (const FakePodDevice& d : devices_) {
      v1::PodResources* p = out->add_pod_resources();
      p->set_name(d.pod);
      p->set_namespace_(d.namespace_name);
      v1::ContainerResources* c = p->add_containers();
      c->set_name(d.container);
      if (!d.claim.empty()) {
        v1::DynamicResource* dr = c->add_dynamic_resources();
        dr->set_claim_name(d.claim);
        dr->set_claim_namespace(d.namespace_name);
        v1::ClaimResource* r = dr->add_claim_resources();
        if (!d.dra_device.empty()) {
          r->set_driver_name(d.driver);
          r->set_pool_name("node-1");
          r->set_device_name(d.dra_device);
        }
        if (!d.cdi.empty()) r->add_cdi_devices()->set_name(d.cdi);
        continue;
      }
      v1::ContainerDevices* cd = c->add_devices();
      cd->set_resource_name(d.resource);
      cd->add_device_ids(d.device_id);
    }
    return grpc::Status::OK;
  }

 private:
  const std::string socket_;
  std::mutex mu_;
  std::vector<FakePodDevice> devices_;
  std::atomic<int> delay_ms_{0};
  std::atomic<int> failure_{0};
  std::atomic<int> calls_{0};
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace nodewatch::testing
