#pragma once
// Long-lived services that several collectors share, or that hold state
// which must outlive one collector instance (see DESIGN.md, "Layers").
//
// The daemon owns one Services for its whole life; collectors reach it
// through CollectorEnv::service(). A service is found by its type and a key
// ("libnvidia-ml.so.1" for the NVML session, "storage" for the storage
// collector's saved state): the first collector to ask makes it, later ones
// share it. The registry holds services weakly: a service lives exactly as
// long as some collector holds it. A reload builds the new collectors before
// the old ones are released, so a rebuilt collector finds the service (and
// the counts, offsets and threads in it) its predecessor used; a collector
// that is disabled takes its service with it.
//
// Thread-safe: get() may be called from any thread.

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <typeindex>
#include <utility>

namespace nodewatch {

class Services {
 public:
  Services() = default;
  Services(const Services&) = delete;
  Services& operator=(const Services&) = delete;

  // The live service of type T under `key`, or a new one from `make()`
  // (called with the registry's lock held: it must not call get()).
  template <class T, class Make>
  std::shared_ptr<T> get(std::string_view key, Make make) {
    std::lock_guard lock(mu_);
    auto& slot = services_[Key{std::type_index(typeid(T)), std::string(key)}];
    if (std::shared_ptr<void> alive = slot.lock()) return std::static_pointer_cast<T>(alive);
    std::shared_ptr<T> made = make();
    slot = made;
    ++made_;
    ++made_of_[std::type_index(typeid(T))];
    return made;
  }

  // Services made so far (tests: a reload that kept a service made none).
  std::size_t made() const {
    std::lock_guard lock(mu_);
    return made_;
  }
  // Services of type T made so far.
  template <class T>
  std::size_t made_of() const {
    std::lock_guard lock(mu_);
    auto it = made_of_.find(std::type_index(typeid(T)));
    return it == made_of_.end() ? 0 : it->second;
  }
  // Services alive now.
  std::size_t alive() const {
    std::lock_guard lock(mu_);
    std::size_t n = 0;
    for (const auto& [key, weak] : services_) n += weak.expired() ? 0 : 1;
    return n;
  }

 private:
  using Key = std::pair<std::type_index, std::string>;
  mutable std::mutex mu_;
  std::map<Key, std::weak_ptr<void>> services_;
  std::size_t made_ = 0;
  std::map<std::type_index, std::size_t> made_of_;
};

}  // namespace nodewatch
