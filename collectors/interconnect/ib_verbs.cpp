#include "interconnect/ib_verbs.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <link.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <condition_variable>
#include <filesystem>
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

// Every opened device's async events are drained by one thread, which polls
// all their event file descriptors (a node with many RDMA devices, SR-IOV
// functions included, must not cost a thread each: the unit runs with
// TasksMax). The thread only touches the devices of the set it took at the
// top of its loop; sync() closes a device only after the thread has taken a
// set without it.
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
      return;
    }
    link_map* map = nullptr;
    if (::dlinfo(handle_, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr) {
      std::error_code ec;
      auto real = std::filesystem::canonical(map->l_name, ec);
      if (!ec) version_ = rdma_core_version_of(real.filename().string());
    }
  }
  ~DlVerbsSource() override {
    if (thread_.joinable()) {
      {
        std::lock_guard lock(mu_);
        stop_ = true;
      }
      wake();
      thread_.join();
    }
    for (auto& [name, dev] : devices_) api_.close_device(dev->ctx);
    devices_.clear();
    if (wake_fd_ >= 0) ::close(wake_fd_);
    if (handle_ != nullptr) ::dlclose(handle_);
  }
  DlVerbsSource(const DlVerbsSource&) = delete;
  DlVerbsSource& operator=(const DlVerbsSource&) = delete;

  bool loaded() const { return handle_ != nullptr; }
  std::string library_version() const override { return version_; }

  std::vector<VerbsFailure> sync(const std::vector<std::string>& devices) override {
    std::vector<VerbsFailure> failures;
    if (handle_ == nullptr) return failures;
    std::set<std::string, std::less<>> wanted(devices.begin(), devices.end());
    // Gone devices are closed; dead ones (fatal, disassociated by a reset or
    // driver reload) too, to be opened again below: a stale context would
    // also hold up the driver's unregistration.
    std::vector<std::unique_ptr<Device>> doomed;
    {
      std::lock_guard lock(mu_);
      for (auto it = devices_.begin(); it != devices_.end();) {
        if (!wanted.contains(it->first) || it->second->fatal) {
          doomed.push_back(std::move(it->second));
          it = devices_.erase(it);
        } else {
          ++it;
        }
      }
    }
    std::erase_if(failed_, [&](const std::string& d) { return !wanted.contains(d); });
    if (!doomed.empty()) {
      wait_for_new_set();
      for (auto& dev : doomed) api_.close_device(dev->ctx);
    }
    std::vector<std::string> to_open;
    {
      std::lock_guard lock(mu_);
      for (const std::string& d : wanted) {
        if (!devices_.contains(d) && !failed_.contains(d)) to_open.push_back(d);
      }
    }
    if (to_open.empty()) return failures;
    if (!start_thread()) {
      // No thread to spare (TasksMax, RLIMIT_NPROC): nothing is opened, and
      // the devices are not tried again until they come back.
      for (const std::string& d : to_open) {
        failed_.insert(d);
        failures.push_back({d, "no thread to poll its events"});
      }
      return failures;
    }
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
        failures.push_back({d, "no verbs device of that name, or no permission to open it"});
        continue;
      }
      int flags = ::fcntl(ctx->async_fd, F_GETFL);
      ::fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK);
      auto dev = std::make_unique<Device>();
      dev->ctx = ctx;
      std::lock_guard lock(mu_);
      devices_.emplace(d, std::move(dev));
      ++generation_;
    }
    if (list != nullptr) api_.free_device_list(list);
    wake();
    return failures;
  }

  std::optional<std::uint64_t> state_changes(std::string_view device, unsigned port) override {
    std::lock_guard lock(mu_);
    auto it = devices_.find(device);
    if (it == devices_.end() || it->second->fatal || port >= it->second->changes.size())
      return std::nullopt;
    return it->second->changes[port];
  }

 private:
  struct Device {
    ibv_context* ctx = nullptr;
    bool fatal = false;
    std::array<std::uint64_t, 256> changes{};  // by port number (u8)
  };

  bool start_thread() {
    if (thread_.joinable()) return true;
    if (wake_fd_ < 0) wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) return false;
    try {
      thread_ = std::thread([this] { run(); });
    } catch (const std::system_error&) {
      return false;
    }
    return true;
  }

  void wake() {
    std::uint64_t one = 1;
    if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof(one));
  }

  // Waits until the thread has taken a device set newer than the current
  // one (after devices were removed from it).
  void wait_for_new_set() {
    std::unique_lock lock(mu_);
    const std::uint64_t wanted = ++generation_;
    if (!thread_.joinable()) return;
    lock.unlock();
    wake();
    lock.lock();
    cv_.wait(lock, [&] { return seen_generation_ >= wanted || stop_; });
  }

  void run() {
    std::vector<pollfd> fds;
    std::vector<Device*> polled;
    for (;;) {
      fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
      polled.clear();
      {
        std::lock_guard lock(mu_);
        if (stop_) return;
        seen_generation_ = generation_;
        cv_.notify_all();
        for (auto& [name, dev] : devices_) {
          if (dev->fatal) continue;
          fds.push_back(pollfd{dev->ctx->async_fd, POLLIN, 0});
          polled.push_back(dev.get());
        }
      }
      int n = ::poll(fds.data(), fds.size(), -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents & POLLIN) {
        std::uint64_t drained = 0;
        (void)!::read(wake_fd_, &drained, sizeof(drained));
        continue;  // the set changed, or stop
      }
      for (std::size_t k = 1; k < fds.size(); ++k) {
        if (!(fds[k].revents & (POLLIN | POLLERR | POLLHUP))) continue;
        Device* dev = polled[k - 1];
        ibv_async_event ev{};
        while (api_.get_async_event(dev->ctx, &ev) == 0) {
          {
            std::lock_guard lock(mu_);
            switch (ev.event_type) {
              case IBV_EVENT_PORT_ACTIVE:
              case IBV_EVENT_PORT_ERR:
                if (static_cast<unsigned>(ev.element.port_num) < dev->changes.size())
                  ++dev->changes[static_cast<unsigned>(ev.element.port_num)];
                break;
              case IBV_EVENT_DEVICE_FATAL: dev->fatal = true; break;
              default: break;
            }
          }
          api_.ack_async_event(&ev);
        }
        if (fds[k].revents & (POLLERR | POLLHUP)) {
          // The device was disassociated (driver unbound, hot-unplug).
          std::lock_guard lock(mu_);
          dev->fatal = true;
        }
      }
    }
  }

  void* handle_ = nullptr;
  std::string version_;
  VerbsApi api_;
  std::set<std::string, std::less<>> failed_;  // touched by sync() only
  std::thread thread_;
  int wake_fd_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::uint64_t generation_ = 0;       // bumped when the device set changes
  std::uint64_t seen_generation_ = 0;  // the set the thread polls now
  std::map<std::string, std::unique_ptr<Device>, std::less<>> devices_;
};

}  // namespace

std::string rdma_core_version_of(std::string_view file_name) {
  constexpr std::string_view kStem = "libibverbs.so.1.";
  if (!file_name.starts_with(kStem)) return "";
  std::string_view rest = file_name.substr(kStem.size());  // "14.44.0"
  const std::size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 >= rest.size()) return "";
  for (char c : rest.substr(0, dot))
    if (c < '0' || c > '9') return "";
  std::string_view version = rest.substr(dot + 1);
  for (char c : version)
    if ((c < '0' || c > '9') && c != '.') return "";
  return std::string(version);
}

std::unique_ptr<VerbsSource> make_verbs_source(std::string library, std::string dev_dir) {
  return std::make_unique<DlVerbsSource>(library, dev_dir);
}

bool verbs_source_loaded(const VerbsSource& source) {
  auto* dl = dynamic_cast<const DlVerbsSource*>(&source);
  return dl != nullptr && dl->loaded();
}

}  // namespace nodewatch::interconnect
