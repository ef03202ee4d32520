#pragma once
// Captures what is logged through spdlog's default logger during a test.

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace nodewatch::testing {

// Captures the default logger's output for one test; readable while other
// threads log (scheduler workers).
class LogCapture {
  class Sink final : public spdlog::sinks::base_sink<std::mutex> {
   public:
    std::string text() {
      std::lock_guard lock(mutex_);
      return text_;
    }

   protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
      spdlog::memory_buf_t buf;
      formatter_->format(msg, buf);
      text_.append(buf.data(), buf.size());
    }
    void flush_() override {}

   private:
    std::string text_;
  };

 public:
  LogCapture() {
    previous_ = spdlog::default_logger();
    sink_ = std::make_shared<Sink>();
    auto logger = std::make_shared<spdlog::logger>("capture", sink_);
    logger->set_pattern("%l %v");
    spdlog::set_default_logger(logger);
    spdlog::set_level(spdlog::level::info);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::string text() const { return sink_->text(); }
  std::vector<std::string> lines() const {
    std::vector<std::string> v;
    std::istringstream in(text());
    for (std::string l; std::getline(in, l);) v.push_back(l);
    return v;
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<Sink> sink_;
};

}  // namespace nodewatch::testing
