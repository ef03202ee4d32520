#pragma once
// The metric families the textfile collector emits about its inputs: each declared once, here. The
// collector's table is built from these and it emits through them; whatever else reads a family
// (the node verdict, the expect file, docs/metrics.md) refers to the constant.

#include "nodewatch/metric.hpp"

namespace nodewatch::textfile::families {

inline constexpr nodewatch::Family kFileMtimeSeconds{
    "nodewatch_textfile_file_mtime_seconds",
    MetricType::kGauge,
    "seconds",
    "Modification time of each *.prom file in the textfile directory (Unix time).",
    {"file"}};

inline constexpr nodewatch::Family kFileValid{
    "nodewatch_textfile_file_valid",
    MetricType::kGauge,
    "",
    "1 if the file was taken, 0 if it was refused whole (the reason "
    "is counted in nodewatch_collector_errors_total and logged).",
    {"file"}};

}  // namespace nodewatch::textfile::families
