// A fake libibverbs.so.1 for tests: the seven entry points nodewatch's
// verbs source resolves with dlsym, with <infiniband/verbs.h>'s types, over
// devices and events a test scripts through three hooks (not part of
// libibverbs):
//   void fake_ibv_set_devices(const char* names)   comma-separated device names
//   int  fake_ibv_event(const char* device, int event_type, int port)
//                                                   queues one async event on an
//                                                   open device (0, or -1 if not open)
//   unsigned long fake_ibv_count(const char* what)  "open", "close", "open_failed",
//                                                   "acked": calls so far
//   void fake_ibv_fail_open(const char* device)    ibv_open_device fails for it
// Each open context's async_fd is the read end of a pipe: one byte per
// queued event, as the kernel's uverbs async file is readable while events
// wait. Closing a device with events pending hangs up its pipe.

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#undef ibv_get_device_list

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct Context {
  ibv_context ctx{};  // first: the library's handle is &ctx
  std::string device;
  int write_fd = -1;
  std::deque<ibv_async_event> events;
};

std::mutex g_mu;
std::vector<std::string> g_names;
std::set<std::string> g_fail_open;
std::map<std::string, Context*> g_open;  // by device name
std::map<std::string, unsigned long> g_counts;

}  // namespace

FAKE_EXPORT void fake_ibv_set_devices(const char* names) {
  std::lock_guard lock(g_mu);
  g_names.clear();
  std::stringstream in(names);
  for (std::string n; std::getline(in, n, ',');)
    if (!n.empty()) g_names.push_back(n);
}

FAKE_EXPORT void fake_ibv_fail_open(const char* device) {
  std::lock_guard lock(g_mu);
  g_fail_open.insert(device);
}

FAKE_EXPORT unsigned long fake_ibv_count(const char* what) {
  std::lock_guard lock(g_mu);
  return g_counts[what];
}

FAKE_EXPORT int fake_ibv_event(const char* device, int event_type, int port) {
  std::lock_guard lock(g_mu);
  auto it = g_open.find(device);
  if (it == g_open.end()) return -1;
  ibv_async_event ev{};
  ev.event_type = static_cast<ibv_event_type>(event_type);
  ev.element.port_num = port;
  it->second->events.push_back(ev);
  char one = 1;
  return ::write(it->second->write_fd, &one, 1) == 1 ? 0 : -1;
}

FAKE_EXPORT ibv_device** ibv_get_device_list(int* num) {
  std::lock_guard lock(g_mu);
  auto** list = new ibv_device*[g_names.size() + 1];
  for (std::size_t i = 0; i < g_names.size(); ++i) {
    auto* d = new ibv_device{};
    std::snprintf(d->name, sizeof d->name, "%s", g_names[i].c_str());
    list[i] = d;
  }
  list[g_names.size()] = nullptr;
  if (num != nullptr) *num = static_cast<int>(g_names.size());
  return list;
}

FAKE_EXPORT void ibv_free_device_list(ibv_device** list) {
  for (ibv_device** p = list; *p != nullptr; ++p) delete *p;
  delete[] list;
}

FAKE_EXPORT const char* ibv_get_device_name(ibv_device* device) {
  return device->name;
}

FAKE_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  std::lock_guard lock(g_mu);
  ++g_counts["open"];
  if (g_fail_open.count(device->name) != 0 || g_open.count(device->name) != 0) {
    ++g_counts["open_failed"];
    return nullptr;
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  auto* c = new Context;
  c->device = device->name;
  c->ctx.async_fd = fds[0];
  c->write_fd = fds[1];
  g_open[c->device] = c;
  return &c->ctx;
}

FAKE_EXPORT int ibv_close_device(ibv_context* context) {
  auto* c = reinterpret_cast<Context*>(context);
  std::lock_guard lock(g_mu);
  ++g_counts["close"];
  g_open.erase(c->device);
  ::close(c->ctx.async_fd);
  ::close(c->write_fd);
  delete c;
  return 0;
}

FAKE_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  auto* c = reinterpret_cast<Context*>(context);
  char byte;
  // Non-blocking, as the daemon sets the fd: -1 with EAGAIN when none waits.
  if (::read(c->ctx.async_fd, &byte, 1) != 1) return -1;
  std::lock_guard lock(g_mu);
  if (c->events.empty()) return -1;
  *event = c->events.front();
  c->events.pop_front();
  return 0;
}

FAKE_EXPORT void ibv_ack_async_event(ibv_async_event*) {
  std::lock_guard lock(g_mu);
  ++g_counts["acked"];
}
