// Must not compile: a collector that includes a daemon header. The daemon's
// include directory is private to it (docs/architecture.md).
#include "nodewatch/collector.hpp"
#include "scheduler.hpp"
