#pragma once
// The probe part of the storage collector: the configured probes
// (storage/probe.hpp), taken from the ProbeRegistry that the collectors
// share, and their state copied into the collection. collect() never waits
// on a file system: it copies each probe's state under its mutexes.

#include <memory>
#include <string>
#include <vector>

#include "nodewatch/metric.hpp"
#include "storage/probe.hpp"

namespace nodewatch::storage {

class ProbeSet {
 public:
  // `file_name` is the probe file's name under each path
  // (probe_file_name()). `registry` may be null (a private one).
  ProbeSet(std::shared_ptr<ProbeRegistry> registry, const std::vector<ProbeConfig>& configs,
           const std::string& file_name);
  // Gives the probes back to the registry: those no other collector holds
  // are stopped, with one short grace period in all; probes still blocked in
  // the kernel are left to end on their own.
  ~ProbeSet();
  ProbeSet(const ProbeSet&) = delete;
  ProbeSet& operator=(const ProbeSet&) = delete;

  // The declarations of every metric this part emits.
  static std::vector<MetricDesc> metric_descs();

  void collect(MetricSink& out);

  // In configuration order.
  const std::vector<std::shared_ptr<Probe>>& probes() const { return probes_; }

 private:
  std::shared_ptr<ProbeRegistry> registry_;
  std::vector<std::shared_ptr<Probe>> probes_;
};

}  // namespace nodewatch::storage
