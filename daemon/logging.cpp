#include "logging.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/systemd_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace nodewatch {

bool stderr_is_journal() {
  const char* env = std::getenv("JOURNAL_STREAM");
  if (env == nullptr) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(env, "%llu:%llu", &dev, &ino) != 2) return false;
  struct stat st {};
  if (fstat(2, &st) != 0) return false;
  return static_cast<unsigned long long>(st.st_dev) == dev &&
         static_cast<unsigned long long>(st.st_ino) == ino;
}

bool set_log_level(std::string_view level) {
  auto lvl = spdlog::level::from_str(std::string(level));
  // from_str maps unknown names to "off": only accept "off" when asked for.
  if (lvl == spdlog::level::off && level != "off") return false;
  spdlog::set_level(lvl);
  return true;
}

void setup_logging(std::string_view level) {
  std::shared_ptr<spdlog::logger> logger;
  if (stderr_is_journal()) {
    // The journal records time and priority itself.
    auto sink = std::make_shared<spdlog::sinks::systemd_sink_mt>("nodewatchd");
    logger = std::make_shared<spdlog::logger>("nodewatchd", sink);
    logger->set_pattern("%v");
  } else {
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    logger = std::make_shared<spdlog::logger>("nodewatchd", sink);
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %l %v");
  }
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  if (!set_log_level(level)) spdlog::set_level(spdlog::level::info);
}

}  // namespace nodewatch
