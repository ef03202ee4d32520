#include "interconnect/ib_verbs.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <map>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

// <infiniband/verbs.h> turns some entry points into macros over inline
// wrappers; the library's own symbols are what dlsym resolves.
#undef ibv_get_device_list

namespace nodewatch::interconnect {
namespace {

struct VerbsApi {
  ibv_device** (*get_device_list)(int*) = nullptr;
  void (*free_device_list)(ibv_device**) = nullptr;
  const char* (*get_device_name)(ibv_device*) = nullptr;
  ibv_context* (*open_device)(ibv_device*) = nullptr;
  int (*close_device)(ibv_context*) = nullptr;
  int (*get_async_event)(ibv_context*, ibv_async_event*) = nullptr;
  void (*ack_async_event)(ibv_async_event*) = nullptr;
};

template <class Fn>
bool resolve(void* handle, const char* name, Fn* out) {
  // The default (newest) version of each symbol, as a program linked
  // against libibverbs.so.1 would get.
  void* p = ::dlsym(handle, name);
  if (p == nullptr) return false;
  *out = reinterpret_cast<Fn>(p);
  return true;
}

// One opened device and the thread that drains its async events.
class DeviceWatch {
 public:
  DeviceWatch(const VerbsApi& api, ibv_context* ctx) : api_(api), ctx_(ctx) {
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int flags = ::fcntl(ctx_->async_fd, F_GETFL);
    ::fcntl(ctx_->async_fd, F_SETFL, flags | O_NONBLOCK);
    if (wake_fd_ < 0) {
      fatal_ = true;  // no way to stop a thread: watch nothing
      return;
    }
    try {
      thread_ = std::thread([this] { run(); });
    } catch (const std::system_error&) {
      // No thread to spare (TasksMax, RLIMIT_NPROC): watch nothing; the
      // destructor still closes the device.
      ::close(wake_fd_);
      wake_fd_ = -1;
      fatal_ = true;
    }
  }
  ~DeviceWatch() {
    std::uint64_t one = 1;
    if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof(one));
    if (thread_.joinable()) thread_.join();
    if (wake_fd_ >= 0) ::close(wake_fd_);
    api_.close_device(ctx_);
  }
  DeviceWatch(const DeviceWatch&) = delete;
  DeviceWatch& operator=(const DeviceWatch&) = delete;

  // False when no thread could be started for the device.
  bool started() const { return thread_.joinable(); }
  // True once the device went fatal or was disassociated (driver reload,
  // reset): it is closed and opened afresh.
  bool dead() {
    std::lock_guard lock(mu_);
    return fatal_;
  }

  std::optional<std::uint64_t> changes(unsigned port) {
    std::lock_guard lock(mu_);
    if (fatal_) return std::nullopt;
    if (port >= changes_.size()) return std::nullopt;
    return changes_[port];
  }

 private:
  void run() {
    std::array<pollfd, 2> fds{{{ctx_->async_fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}}};
    for (;;) {
      int n = ::poll(fds.data(), fds.size(), -1);
      if (n < 0 && errno != EINTR) return;
      if (fds[1].revents & POLLIN) return;
      if (!(fds[0].revents & (POLLIN | POLLERR | POLLHUP))) continue;
      ibv_async_event ev{};
      while (api_.get_async_event(ctx_, &ev) == 0) {
        {
          std::lock_guard lock(mu_);
          switch (ev.event_type) {
            case IBV_EVENT_PORT_ACTIVE:
            case IBV_EVENT_PORT_ERR:
              if (static_cast<unsigned>(ev.element.port_num) < changes_.size()) {
                ++changes_[static_cast<unsigned>(ev.element.port_num)];
              }
              break;
            case IBV_EVENT_DEVICE_FATAL: fatal_ = true; break;
            default: break;
          }
        }
        api_.ack_async_event(&ev);
      }
      if (fds[0].revents & (POLLERR | POLLHUP)) {
        // The device was disassociated (driver unbound, hot-unplug).
        std::lock_guard lock(mu_);
        fatal_ = true;
        return;
      }
    }
  }
  const VerbsApi& api_;
  ibv_context* ctx_;
  int wake_fd_ = -1;
  std::thread thread_;
  std::mutex mu_;
  bool fatal_ = false;
  std::array<std::uint64_t, 256> changes_{};  // by port number (u8)
};

class DlVerbsSource final : public VerbsSource {
 public:
  DlVerbsSource(const std::string& library, const std::string& dev_dir) {
    if (::access(dev_dir.c_str(), F_OK) != 0) return;
    handle_ = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) return;
    bool ok = resolve(handle_, "ibv_get_device_list", &api_.get_device_list) &&
              resolve(handle_, "ibv_free_device_list", &api_.free_device_list) &&
              resolve(handle_, "ibv_get_device_name", &api_.get_device_name) &&
              resolve(handle_, "ibv_open_device", &api_.open_device) &&
              resolve(handle_, "ibv_close_device", &api_.close_device) &&
              resolve(handle_, "ibv_get_async_event", &api_.get_async_event) &&
              resolve(handle_, "ibv_ack_async_event", &api_.ack_async_event);
    if (!ok) {
      ::dlclose(handle_);
      handle_ = nullptr;
    }
  }
  ~DlVerbsSource() override {
    watches_.clear();  // joins the threads and closes the devices first
    if (handle_ != nullptr) ::dlclose(handle_);
  }

  bool loaded() const { return handle_ != nullptr; }

  std::uint64_t sync(const std::vector<std::string>& devices) override {
    if (handle_ == nullptr) return 0;
    std::set<std::string, std::less<>> wanted(devices.begin(), devices.end());
    // Gone devices are closed; dead ones too, to be opened again below (a
    // reset or driver reload leaves a stale context behind, which would also
    // hold up the driver's unregistration).
    std::erase_if(watches_,
                  [&](const auto& e) { return !wanted.contains(e.first) || e.second->dead(); });
    std::erase_if(failed_, [&](const std::string& d) { return !wanted.contains(d); });
    std::vector<std::string> to_open;
    for (const std::string& d : wanted) {
      if (!watches_.contains(d) && !failed_.contains(d)) to_open.push_back(d);
    }
    if (to_open.empty()) return 0;
    std::uint64_t failures = 0;
    int n = 0;
    ibv_device** list = api_.get_device_list(&n);
    for (const std::string& d : to_open) {
      ibv_context* ctx = nullptr;
      for (int i = 0; list != nullptr && i < n; ++i) {
        const char* name = api_.get_device_name(list[i]);
        if (name != nullptr && d == name) {
          ctx = api_.open_device(list[i]);
          break;
        }
      }
      if (ctx == nullptr) {
        // Not a verbs device (no uverbs char device), or no permission.
        failed_.insert(d);
        ++failures;
        continue;
      }
      auto watch = std::make_unique<DeviceWatch>(api_, ctx);
      if (!watch->started()) {
        // Closed with `watch`; not tried again until the device comes back.
        failed_.insert(d);
        ++failures;
        continue;
      }
      watches_.emplace(d, std::move(watch));
    }
    if (list != nullptr) api_.free_device_list(list);
    return failures;
  }

  std::optional<std::uint64_t> state_changes(std::string_view device, unsigned port) override {
    auto it = watches_.find(device);
    if (it == watches_.end()) return std::nullopt;
    return it->second->changes(port);
  }

 private:
  void* handle_ = nullptr;
  VerbsApi api_;
  std::map<std::string, std::unique_ptr<DeviceWatch>, std::less<>> watches_;
  std::set<std::string, std::less<>> failed_;
};

}  // namespace

std::unique_ptr<VerbsSource> make_verbs_source(std::string library, std::string dev_dir) {
  return std::make_unique<DlVerbsSource>(library, dev_dir);
}

bool verbs_source_loaded(const VerbsSource& source) {
  auto* dl = dynamic_cast<const DlVerbsSource*>(&source);
  return dl != nullptr && dl->loaded();
}

}  // namespace nodewatch::interconnect
