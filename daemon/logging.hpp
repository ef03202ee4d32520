#pragma once
// Logging: spdlog, to the journal (with priorities) when stderr is connected
// to it, else to stderr.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace nodewatch {

// True when stderr is the journal stream systemd set up (JOURNAL_STREAM
// names stderr's device and inode).
bool stderr_is_journal();

// Installs the default logger. Safe to call more than once.
void setup_logging(std::string_view level);
// Changes the level; false if the name is not a level.
bool set_log_level(std::string_view level);

}  // namespace nodewatch
