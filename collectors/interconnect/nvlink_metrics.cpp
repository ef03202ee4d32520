#include "interconnect/nvlink_metrics.hpp"

#include <exception>
#include <utility>

#include "accelerator/nvml/nvml_service.hpp"
#include "interconnect/interconnect_metrics.hpp"

namespace nodewatch::interconnect {

using accelerator::DeviceSample;
using accelerator::NvlinkSample;
using accelerator::NvmlService;

std::vector<MetricDesc> nvlink_metric_descs() {
  const std::vector<std::string> link = {"accelerator", "uuid", "link"};
  const std::vector<std::string> dev = {"accelerator", "uuid"};
  const std::vector<std::string> dev_type = {"accelerator", "uuid", "type"};
  return {
      describe(families::kNvlinkUp),
      describe(families::kNvlinkSpeedBytesPerSecond),
      describe(families::kNvlinkTransmittedBytesTotal),
      describe(families::kNvlinkReceivedBytesTotal),
      describe(families::kNvlinkErrorsTotal),
      describe(families::kNvlinkLinkErrorsTotal),
      describe(families::kNvlinkLinks),
      describe(families::kNvlinkLinksActive),
  };
}

std::vector<std::string> nvlink_metric_prefixes() {
  return {"nodewatch_nvlink_", "nodewatch_accelerator_nvlink_"};
}

const MetricTable& nvlink_metric_table() {
  static const MetricTable t(nvlink_metric_descs(), nvlink_metric_prefixes());
  return t;
}

std::vector<std::pair<std::string, double>> NvlinkErrorTotals::update(const DeviceSample& d) {
  std::lock_guard lock(mu_);
  auto& last = last_[d.uuid];
  for (const NvlinkSample& l : d.nvlinks)
    for (const auto& [type, value] : l.errors) last[{l.link, type}] = value;
  std::map<std::string, double> sum;
  for (const auto& [key, value] : last) sum[key.second] += value;
  return {sum.begin(), sum.end()};
}

void emit_nvlinks(const std::vector<DeviceSample>& devices, NvlinkErrorTotals& totals,
                  bool link_errors, MetricSink& sink) {
  for (const DeviceSample& d : devices) {
    report_device_errors(d, sink);
    // A lost or stuck device has no links to report: its accelerator_up
    // says so.
    if (!d.up || d.uuid.empty()) continue;
    const std::string index = std::to_string(d.index);
    unsigned active = 0;
    for (const NvlinkSample& l : d.nvlinks) {
      const std::string link = std::to_string(l.link);
      if (l.active) ++active;
      sink.add(families::kNvlinkUp, {index, d.uuid, link}, l.active ? 1 : 0);
      if (l.speed_bytes_per_second)
        sink.add(families::kNvlinkSpeedBytesPerSecond, {index, d.uuid, link},
                 *l.speed_bytes_per_second);
      if (l.tx_bytes)
        sink.add(families::kNvlinkTransmittedBytesTotal, {index, d.uuid, link}, *l.tx_bytes);
      if (l.rx_bytes)
        sink.add(families::kNvlinkReceivedBytesTotal, {index, d.uuid, link}, *l.rx_bytes);
      if (link_errors) {
        for (const auto& [type, value] : l.errors)
          sink.add(families::kNvlinkLinkErrorsTotal, {index, d.uuid, link, type}, value);
      }
    }
    for (const auto& [type, value] : totals.update(d))
      sink.add(families::kNvlinkErrorsTotal, {index, d.uuid, type}, value);
    if (d.nvlink_count) {
      sink.add(families::kNvlinkLinks, {index, d.uuid}, *d.nvlink_count);
      sink.add(families::kNvlinkLinksActive, {index, d.uuid}, active);
    }
  }
}

NvlinkMetrics::NvlinkMetrics(std::shared_ptr<NvmlService> nvml, bool link_errors,
                             std::shared_ptr<NvlinkErrorTotals> totals)
    : nvml_(std::move(nvml)),
      link_errors_(link_errors),
      totals_(totals ? std::move(totals) : std::make_shared<NvlinkErrorTotals>()) {}

void NvlinkMetrics::collect(const CollectContext& ctx, MetricSink& sink) {
  std::vector<DeviceSample> devices;
  try {
    devices = nvml_->sample_nvlinks(ctx);
  } catch (const CollectError& e) {
    // Counted only: the service logged it, once for the process.
    sink.error(e.reason());
    return;
  } catch (const std::exception& e) {
    sink.error("nvml_error", "nvml", e.what());
    return;
  }
  emit_nvlinks(devices, *totals_, link_errors_, sink);
}

}  // namespace nodewatch::interconnect
