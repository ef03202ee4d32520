#include "interconnect/nvlink_metrics.hpp"

#include <algorithm>
#include <exception>
#include <map>
#include <utility>

#include "accelerator/nvml/nvml_service.hpp"
#include "interconnect/interconnect_metrics.hpp"

namespace nodewatch::interconnect {

using accelerator::DeviceSample;
using accelerator::NvlinkSample;
using accelerator::NvmlService;

std::vector<MetricDesc> nvlink_metric_descs() {
  return {
      describe(families::kNvlinkUp),
      describe(families::kNvlinkSpeedBytesPerSecond),
      describe(families::kNvlinkDataRateBytesPerSecond),
      describe(families::kNvlinkTransmittedBytesTotal),
      describe(families::kNvlinkReceivedBytesTotal),
      describe(families::kNvlinkErrorsTotal),
      describe(families::kNvlinkLinkErrorsTotal),
      describe(families::kNvlinkBitErrorRate),
      describe(families::kNvlinkLinkBitErrorRate),
      describe(families::kNvlinkFecCodewordsTotal),
      describe(families::kNvlinkLinkFecCodewordsTotal),
      describe(families::kNvlinkPlrTotal),
      describe(families::kNvlinkLinkPlrTotal),
      describe(families::kNvlinkTransmitWaitTicksTotal),
      describe(families::kNvlinkLinkTransmitWaitTicksTotal),
      describe(families::kNvlinkP2pOk),
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

NvlinkTotals::Sums NvlinkTotals::update(const DeviceSample& d) {
  std::lock_guard lock(mu_);
  auto& last = last_[d.uuid];
  // A link's counter that went back (the link retrained, the driver
  // cleared it) counts on from what it had reached: its last value joins
  // its offset, so the sum never drops.
  auto take = [&last](const Key& key, double value) {
    auto [it, added] = last.try_emplace(key, Count{value, 0});
    if (added) return;
    if (value < it->second.value) it->second.offset += it->second.value;
    it->second.value = value;
  };
  for (const NvlinkSample& l : d.nvlinks) {
    for (const auto& [type, value] : l.errors) take({Of::kError, type, l.link}, value);
    for (const auto& [bin, value] : l.fec_history)
      take({Of::kFec, std::to_string(bin), l.link}, value);
    for (const auto& [counter, value] : l.plr) take({Of::kPlr, counter, l.link}, value);
    if (l.transmit_wait_ticks) take({Of::kTransmitWait, "", l.link}, *l.transmit_wait_ticks);
  }
  std::map<std::string, double> errors, plr;
  std::map<unsigned, double> fec;  // in the bins' order, not the strings'
  Sums out;
  for (const auto& [key, count] : last) {
    const double value = count.value + count.offset;
    const std::string& label = std::get<1>(key);
    switch (std::get<0>(key)) {
      case Of::kError: errors[label] += value; break;
      case Of::kFec: fec[static_cast<unsigned>(std::stoul(label))] += value; break;
      case Of::kPlr: plr[label] += value; break;
      case Of::kTransmitWait: out.transmit_wait_ticks = out.transmit_wait_ticks.value_or(0) + value;
    }
  }
  out.errors.assign(errors.begin(), errors.end());
  out.plr.assign(plr.begin(), plr.end());
  for (const auto& [bin, value] : fec) out.fec.emplace_back(std::to_string(bin), value);
  return out;
}

void emit_nvlinks(const std::vector<DeviceSample>& devices, NvlinkTotals& totals, bool link_errors,
                  MetricSink& sink) {
  for (const DeviceSample& d : devices) {
    report_device_errors(d, sink);
    // A lost or stuck device has no links to report: its accelerator_up
    // says so.
    if (!d.up || d.uuid.empty()) continue;
    const std::string index = std::to_string(d.index);
    unsigned active = 0;
    std::map<std::string, double> worst_ber;  // by kind, over the active links
    for (const NvlinkSample& l : d.nvlinks) {
      const std::string link = std::to_string(l.link);
      if (l.active) ++active;
      sink.add(families::kNvlinkUp, {index, d.uuid, link}, l.active ? 1 : 0);
      if (l.speed_bytes_per_second)
        sink.add(families::kNvlinkSpeedBytesPerSecond, {index, d.uuid, link},
                 *l.speed_bytes_per_second);
      if (l.data_rate_bytes_per_second)
        sink.add(families::kNvlinkDataRateBytesPerSecond, {index, d.uuid, link},
                 *l.data_rate_bytes_per_second);
      if (l.tx_bytes)
        sink.add(families::kNvlinkTransmittedBytesTotal, {index, d.uuid, link}, *l.tx_bytes);
      if (l.rx_bytes)
        sink.add(families::kNvlinkReceivedBytesTotal, {index, d.uuid, link}, *l.rx_bytes);
      if (l.active) {
        for (const auto& [kind, ber] : l.bit_error_rate) {
          auto [it, added] = worst_ber.emplace(kind, ber);
          if (!added) it->second = std::max(it->second, ber);
        }
      }
      if (link_errors) {
        for (const auto& [type, value] : l.errors)
          sink.add(families::kNvlinkLinkErrorsTotal, {index, d.uuid, link, type}, value);
        for (const auto& [kind, ber] : l.bit_error_rate)
          sink.add(families::kNvlinkLinkBitErrorRate, {index, d.uuid, link, kind}, ber);
        for (const auto& [bin, value] : l.fec_history)
          sink.add(families::kNvlinkLinkFecCodewordsTotal,
                   {index, d.uuid, link, std::to_string(bin)}, value);
        for (const auto& [counter, value] : l.plr)
          sink.add(families::kNvlinkLinkPlrTotal, {index, d.uuid, link, counter}, value);
        if (l.transmit_wait_ticks)
          sink.add(families::kNvlinkLinkTransmitWaitTicksTotal, {index, d.uuid, link},
                   *l.transmit_wait_ticks);
      }
    }
    const NvlinkTotals::Sums sums = totals.update(d);
    for (const auto& [type, value] : sums.errors)
      sink.add(families::kNvlinkErrorsTotal, {index, d.uuid, type}, value);
    for (const auto& [bin, value] : sums.fec)
      sink.add(families::kNvlinkFecCodewordsTotal, {index, d.uuid, bin}, value);
    for (const auto& [counter, value] : sums.plr)
      sink.add(families::kNvlinkPlrTotal, {index, d.uuid, counter}, value);
    if (sums.transmit_wait_ticks)
      sink.add(families::kNvlinkTransmitWaitTicksTotal, {index, d.uuid}, *sums.transmit_wait_ticks);
    for (const auto& [kind, ber] : worst_ber)
      sink.add(families::kNvlinkBitErrorRate, {index, d.uuid, kind}, ber);
    for (const auto& [peer, ok] : d.nvlink_p2p)
      sink.add(families::kNvlinkP2pOk, {index, d.uuid, std::to_string(peer)}, ok ? 1 : 0);
    if (d.nvlink_count) {
      sink.add(families::kNvlinkLinks, {index, d.uuid}, *d.nvlink_count);
      sink.add(families::kNvlinkLinksActive, {index, d.uuid}, active);
    }
  }
}

NvlinkMetrics::NvlinkMetrics(std::shared_ptr<NvmlService> nvml, bool link_errors,
                             std::shared_ptr<NvlinkTotals> totals)
    : nvml_(std::move(nvml)),
      link_errors_(link_errors),
      totals_(totals ? std::move(totals) : std::make_shared<NvlinkTotals>()) {}

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
