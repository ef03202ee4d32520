#pragma once
// The metric families the pcie collector emits: each declared once, here. The collector's table is
// built from these and it emits through them; whatever else reads a family (the node verdict, the
// expect file, docs/metrics.md) refers to the constant.

#include "nodewatch/metric.hpp"

namespace nodewatch::pcie::families {

inline constexpr Family kLinkSpeedTransfersPerSecond{
    "nodewatch_pcie_link_speed_transfers_per_second",
    MetricType::kGauge,
    "transfers_per_second",
    "Current PCIe link speed (current_link_speed; 16.0 GT/s is 16e9). Accelerators and NICs lower "
    "it at idle, so alert on it only under load.",
    {"device"}};

inline constexpr Family kLinkMaxSpeedTransfersPerSecond{
    "nodewatch_pcie_link_max_speed_transfers_per_second",
    MetricType::kGauge,
    "transfers_per_second",
    "Fastest PCIe link speed the function supports (max_link_speed).",
    {"device"}};

inline constexpr Family kLinkWidth{"nodewatch_pcie_link_width",
                                   MetricType::kGauge,
                                   "",
                                   "Lanes the PCIe link trained to (current_link_width).",
                                   {"device"}};

inline constexpr Family kLinkMaxWidth{"nodewatch_pcie_link_max_width",
                                      MetricType::kGauge,
                                      "",
                                      "Lanes the function supports (max_link_width).",
                                      {"device"}};

inline constexpr Family kLinkWidthDegraded{
    "nodewatch_pcie_link_width_degraded",
    MetricType::kGauge,
    "",
    "1 when the link trained narrower than both the device and its upstream port support, else 0; "
    "accelerators and NICs only.",
    {"device"}};

inline constexpr Family kAerErrorsTotal{"nodewatch_pcie_aer_errors_total",
                                        MetricType::kCounter,
                                        "",
                                        "PCIe AER error reports seen by the function, by severity "
                                        "(the TOTAL_ERR_* lines of aer_dev_*).",
                                        {"device", "severity"}};

inline constexpr Family kAerDetailErrorsTotal{
    "nodewatch_pcie_aer_detail_errors_total",
    MetricType::kCounter,
    "",
    "PCIe AER errors seen by the function, by severity and error bit (the kernel's current name in "
    "snake_case), from aer_dev_*; only with collectors.pcie.aer_detail.",
    {"device", "severity", "error"}};

inline constexpr Family kDeviceInfo{
    "nodewatch_pcie_device_info",
    MetricType::kGauge,
    "",
    "A PCI function the collector watches, value 1: kind is accelerator, network or bridge; "
    "upstream is the port above it (\"\" at a root).",
    {"device", "vendor_id", "device_id", "class", "driver", "numa_node", "kind", "upstream"}};

}  // namespace nodewatch::pcie::families
