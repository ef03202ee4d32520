#pragma once
// NVLink metrics: per accelerator and link, from the NVLink questions of the
// process's NVML service (accelerator/nvml/nvml_service.hpp). The interconnect
// collector owns one and emits these series with its own; the accelerator
// collector asks the same service its device questions and no NVLink one,
// so no link is asked twice and no GPU gets a second session or thread.
//
// Series (labels accelerator, uuid, link):
//   nodewatch_nvlink_up, nodewatch_nvlink_speed_bytes_per_second,
//   nodewatch_nvlink_data_rate_bytes_per_second,
//   nodewatch_nvlink_transmitted_bytes_total, nodewatch_nvlink_received_bytes_total,
//   and only with link_errors: nodewatch_nvlink_link_errors_total{type},
//   nodewatch_nvlink_link_bit_error_rate{kind},
//   nodewatch_nvlink_link_fec_codewords_total{bin},
//   nodewatch_nvlink_link_plr_total{counter},
//   nodewatch_nvlink_link_transmit_wait_ticks_total;
// and per accelerator: nodewatch_nvlink_errors_total{type},
//   nodewatch_nvlink_fec_codewords_total{bin}, nodewatch_nvlink_plr_total{counter},
//   nodewatch_nvlink_transmit_wait_ticks_total (the links' sums),
//   nodewatch_nvlink_bit_error_rate{kind} (the worst link's),
//   nodewatch_accelerator_nvlink_links, nodewatch_accelerator_nvlink_links_active.
//
// The counters per accelerator are the sum over its links, each link
// counting with the last value read of it: a link whose counter could not
// be read in one collection keeps its last value in the sum, so that the
// sum never drops (which Prometheus would read as a reset and count the
// whole total again). A link first read later adds its count then. Per
// link (5 to 8 types on 18 links: 90 to 144 series per accelerator, nearly
// all 0, which every shipped rule sums away) only with link_errors.
// These names are not the interconnect collector's own prefix: they name
// what they measure (an NVLink link, an accelerator's NVLink links)
// wherever it is collected, and the interconnect collector's table
// declares them as borrowed prefixes (nvlink_metric_prefixes(),
// MetricTable's `borrowed_prefixes`), which the metric lint checks.

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "accelerator/backend.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/metric.hpp"

namespace nodewatch::accelerator {
class NvmlService;
}  // namespace nodewatch::accelerator

namespace nodewatch::interconnect {

std::vector<MetricDesc> nvlink_metric_descs();
// The prefixes of the families above, for a table that carries them:
// "nodewatch_nvlink_" and "nodewatch_accelerator_nvlink_".
std::vector<std::string> nvlink_metric_prefixes();
// The families above, in a table of their own (tests, benchmarks).
const MetricTable& nvlink_metric_table();

// The last count read of each (accelerator, link, counter), kept while
// the process runs (a Services entry: a rebuilt interconnect collector
// finds it): what the per-accelerator sums are made of. A link's counter
// that goes back (retrained, cleared) counts on from what it had reached,
// so that a sum never drops, which Prometheus would read as a reset of the
// whole sum and count every link's total again. The counters: the
// error counts by type, the FEC history by bin, the PLR counts by
// counter, and PORT_XMIT_WAIT. Thread-safe.
class NvlinkTotals {
 public:
  // The sums over every link read so far, each in label order.
  struct Sums {
    std::vector<std::pair<std::string, double>> errors;  // by type
    std::vector<std::pair<std::string, double>> fec;     // by bin
    std::vector<std::pair<std::string, double>> plr;     // by counter
    std::optional<double> transmit_wait_ticks;
  };
  // Takes this collection's per-link counts of `d`; returns the sums.
  Sums update(const accelerator::DeviceSample& d);

 private:
  enum class Of { kError, kFec, kPlr, kTransmitWait };
  using Key = std::tuple<Of, std::string, unsigned>;  // what, label, link
  struct Count {
    double value;   // the last read
    double offset;  // what it had reached before each time it went back
  };
  std::mutex mu_;
  // uuid -> key -> count
  std::map<std::string, std::map<Key, Count>> last_;
};

// Adds the NVLink series of `devices` (samples with their links filled in)
// to `sink`, and reports their partial failures. `totals` keeps the error
// counts between collections; `link_errors` adds the per-link series.
void emit_nvlinks(const std::vector<accelerator::DeviceSample>& devices, NvlinkTotals& totals,
                  bool link_errors, MetricSink& sink);

class NvlinkMetrics {
 public:
  // `totals`: null for one of its own (tests).
  explicit NvlinkMetrics(std::shared_ptr<accelerator::NvmlService> nvml, bool link_errors = false,
                         std::shared_ptr<NvlinkTotals> totals = nullptr);

  // Adds every NVLink series to `sink`. A library that cannot be used is
  // counted under its reason (the service logs it, and the accelerator
  // collector reports it as a failure); it never throws, so the collector's
  // other sources carry on.
  void collect(const CollectContext& ctx, MetricSink& sink);

 private:
  std::shared_ptr<accelerator::NvmlService> nvml_;
  bool link_errors_;
  std::shared_ptr<NvlinkTotals> totals_;
};

}  // namespace nodewatch::interconnect
