#include "logging.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace nodewatch {
namespace {

// sd-daemon(3)'s priorities.
char priority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::critical: return '2';
    case spdlog::level::err: return '3';
    case spdlog::level::warn: return '4';
    case spdlog::level::info: return '6';
    default: return '7';
  }
}

class JournalStreamSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit JournalStreamSink(std::FILE* out) : out_(out) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string_view text(msg.payload.data(), msg.payload.size());
    const char prefix[] = {'<', priority(msg.level), '>'};
    std::string out;
    out.reserve(text.size() + 8);
    // Every line its own record, each with the priority.
    for (std::size_t pos = 0;;) {
      const std::size_t eol = text.find('\n', pos);
      out.append(prefix, sizeof(prefix));
      out.append(text.substr(pos, eol == std::string_view::npos ? eol : eol - pos));
      out += '\n';
      if (eol == std::string_view::npos) break;
      pos = eol + 1;
    }
    std::fwrite(out.data(), 1, out.size(), out_);
  }
  void flush_() override { std::fflush(out_); }

 private:
  std::FILE* out_;
};

}  // namespace

std::shared_ptr<spdlog::sinks::sink> journal_stream_sink(std::FILE* out) {
  return std::make_shared<JournalStreamSink>(out);
}

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
    logger = std::make_shared<spdlog::logger>("nodewatchd", journal_stream_sink(stderr));
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
