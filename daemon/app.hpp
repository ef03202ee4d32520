#pragma once
// The daemon's entry points, below main(): --check-config, --once and the
// long-running service.

#include <span>
#include <string>
#include <vector>

#include "nodewatch/collector.hpp"

namespace nodewatch {

inline constexpr const char* kDefaultConfigPath = "/etc/nodewatch/nodewatch.toml";

struct CommandLine {
  std::string config_path = kDefaultConfigPath;
  bool config_explicit = false;  // --config given: a missing file is an error
  bool check_config = false;
  bool once = false;
  bool list_metrics = false;         // print every metric family that can be exported, and exit
  bool list_options = false;         // print every configuration key, and exit
  std::string list_format = "text";  // --list-metrics, --list-options as text or markdown
  // --check: the node verdict (exit 0 healthy, 1 unhealthy, 2 undecided);
  // --learn-expected: the expect file of this node. Both ask the running
  // daemon first, unless `local`.
  bool check = false;
  bool learn_expected = false;
  bool local = false;
  std::string output = "table";     // --check: table or json
  std::vector<std::string> listen;  // overrides server.listen when not empty
  std::string log_level;            // overrides log.level when not empty
  std::string web_config_file;      // overrides server.web_config_file when not empty
  Roots roots;
};

// Returns the process exit code.
int run(const CommandLine& cmd, std::span<const CollectorSpec> catalog);

// The collectors built into nodewatchd, in the one place they are listed.
std::span<const CollectorSpec> builtin_collectors();

}  // namespace nodewatch
