#pragma once
// Logging: spdlog, to the journal (with priorities) when stderr is connected
// to it, else to stderr.
//
// The journal's priority comes from a "<N>" prefix (syslog's numbers, as
// sd-daemon(3) defines them) on each line written to the stream systemd
// connected stderr to; journald reads it (SyslogLevelPrefix=, on by
// default) and records the line without it.

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace spdlog::sinks {
class sink;
}

namespace nodewatch {

// True when stderr is the journal stream systemd set up (JOURNAL_STREAM
// names stderr's device and inode).
bool stderr_is_journal();

// A sink that writes each line of each message to `out` behind its
// priority ("<3>" for errors, "<4>" warnings, "<6>" information, "<7>"
// debugging), without time or level: the journal records both.
std::shared_ptr<spdlog::sinks::sink> journal_stream_sink(std::FILE* out);

// Installs the default logger. Safe to call more than once.
void setup_logging(std::string_view level);
// Changes the level; false if the name is not a level.
bool set_log_level(std::string_view level);

}  // namespace nodewatch
