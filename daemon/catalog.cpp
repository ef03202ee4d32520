// The one place that lists the collectors built into nodewatchd. A name in
// the configuration that is not here is a configuration error.

#include <vector>

#include "accelerator/accelerator_collector.hpp"
#include "app.hpp"
#include "bmc/bmc_collector.hpp"
#include "imex/imex_collector.hpp"
#include "interconnect/interconnect_collector.hpp"
#include "kernel/kernel_collector.hpp"
#include "mesh/mesh_collector.hpp"
#include "nic/nic_collector.hpp"
#include "pcie/pcie_collector.hpp"
#include "storage/storage_collector.hpp"
#include "textfile/textfile_collector.hpp"
#include "uncore/uncore_collector.hpp"

namespace nodewatch {

std::span<const CollectorSpec> builtin_collectors() {
  static const std::vector<CollectorSpec> kCatalog = {
      accelerator_collector_spec(),  pcie_collector_spec(),    nic_collector_spec(),
      interconnect_collector_spec(), storage_collector_spec(), textfile_collector_spec(),
      kernel_collector_spec(),       mesh_collector_spec(),    uncore_collector_spec(),
      imex_collector_spec(),         bmc_collector_spec(),
  };
  return kCatalog;
}

}  // namespace nodewatch
