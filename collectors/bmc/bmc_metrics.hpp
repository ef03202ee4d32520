#pragma once
// The metric families the bmc collector emits: each declared once, here. The collector's table is
// built from these and it emits through them; whatever else reads a family (the node verdict,
// docs/metrics.md) refers to the constant. Names follow prometheus-community's ipmi_exporter
// where they mean the same (ipmi_temperature_celsius, ipmi_fan_speed_rpm, ...), so that alerts
// carry over with the prefix changed.

#include "nodewatch/metric.hpp"

namespace nodewatch::bmc::families {

inline constexpr Family kUp{"nodewatch_bmc_up",
                            MetricType::kGauge,
                            "",
                            "1 if the BMC answered this collection, else 0 (why: "
                            "nodewatch_collector_errors_total{collector=\"bmc\"} and the log).",
                            {}};

inline constexpr Family kInfo{
    "nodewatch_bmc_info",
    MetricType::kGauge,
    "",
    "The BMC, value 1: its firmware revision, manufacturer (IANA's name), product id and IPMI "
    "version (Get Device ID), and how it is reached (inband, lan, lanplus).",
    {"firmware", "manufacturer", "product", "ipmi_version", "interface"}};

inline constexpr Family kTemperatureCelsius{
    "nodewatch_bmc_temperature_celsius",
    MetricType::kGauge,
    "celsius",
    "A temperature sensor's reading (inlet, board, CPU, PSU...), by the SDR's sensor name.",
    {"sensor"}};

inline constexpr Family kFanSpeedRpm{"nodewatch_bmc_fan_speed_rpm",
                                     MetricType::kGauge,
                                     "rpm",
                                     "A fan's speed in revolutions per minute.",
                                     {"sensor"}};

inline constexpr Family kPowerWatts{"nodewatch_bmc_power_watts",
                                    MetricType::kGauge,
                                    "watts",
                                    "A power sensor's reading (a PSU's output or input, a "
                                    "board's draw).",
                                    {"sensor"}};

inline constexpr Family kVoltageVolts{"nodewatch_bmc_voltage_volts",
                                      MetricType::kGauge,
                                      "volts",
                                      "A voltage sensor's reading.",
                                      {"sensor"}};

inline constexpr Family kCurrentAmperes{"nodewatch_bmc_current_amperes",
                                        MetricType::kGauge,
                                        "amperes",
                                        "A current sensor's reading.",
                                        {"sensor"}};

inline constexpr Family kSensorValue{
    "nodewatch_bmc_sensor_value",
    MetricType::kGauge,
    "",
    "The reading of an analog sensor of no family above (a percentage, a flow, a sensor with a "
    "modifier unit), with its type and FreeIPMI's abbreviation of its unit.",
    {"sensor", "type", "unit"}};

inline constexpr Family kSensorState{
    "nodewatch_bmc_sensor_state",
    MetricType::kGauge,
    "",
    "Every sensor the BMC could read, as FreeIPMI interprets it: 0 nominal, 1 warning, 2 "
    "critical. Its default interpretation (/etc/freeipmi/freeipmi_interpret_sensor.conf, "
    "or the collector's interpret_config) reads non-critical thresholds as nominal and names "
    "OEM sensors' states where the file gives them (docs/bmc.md).",
    {"sensor", "type"}};

inline constexpr Family kSensors{
    "nodewatch_bmc_sensors",
    MetricType::kGauge,
    "",
    "The BMC's sensors by state (nominal, warning, critical, and unknown: a sensor that gave no "
    "reading or a state FreeIPMI does not interpret).",
    {"state"}};

inline constexpr Family kNodePowerWatts{
    "nodewatch_bmc_node_power_watts",
    MetricType::kGauge,
    "watts",
    "The node's power draw as the BMC measures it (DCMI Get Power Reading), where it has DCMI "
    "and its measurement is active.",
    {}};

inline constexpr Family kSelEntries{"nodewatch_bmc_sel_entries",
                                    MetricType::kGauge,
                                    "",
                                    "The entries in the BMC's System Event Log now.",
                                    {}};

inline constexpr Family kSelFreeBytes{
    "nodewatch_bmc_sel_free_bytes",
    MetricType::kGauge,
    "bytes",
    "The free space of the System Event Log (16 bytes an entry): a full SEL records nothing "
    "more until it is cleared.",
    {}};

inline constexpr Family kSelEventsTotal{
    "nodewatch_bmc_sel_events_total",
    MetricType::kCounter,
    "",
    "System Event Log entries counted, by the sensor type they name (oem for an OEM record) "
    "and FreeIPMI's interpretation of their state; each entry once, across restarts of "
    "nodewatch (the state file) and clears of the SEL.",
    {"type", "state"}};

}  // namespace nodewatch::bmc::families
