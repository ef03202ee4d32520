// Must compile: what a collector may include, with the collectors' include
// path alone (the control for collector_includes_daemon.cpp).
#include "nodewatch/collector.hpp"
#include "nodewatch/failure_log.hpp"
#include "nodewatch/options.hpp"
#include "nodewatch/services.hpp"
#include "nodewatch/sources/device_table.hpp"
#include "nodewatch/sources/fs.hpp"
#include "nodewatch/sources/name_filter.hpp"
#include "nodewatch/sources/wrap_counter.hpp"
#include "storage/diskstats.hpp"
