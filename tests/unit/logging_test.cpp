#include "logging.hpp"
#include "nodewatch/failure_log.hpp"
#include "support/log_capture.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cstdlib>
#include <sstream>

namespace nodewatch {
namespace {

using testing::LogCapture;

TEST(FailureLogTest, LogsWhenAFailureStartsAndEndsNotEveryCycle) {
  LogCapture cap;
  FailureLog log;
  for (int i = 0; i < 5; ++i) log.failed("storage", "cannot open diskstats");
  EXPECT_TRUE(log.is_failing("storage"));
  log.succeeded("storage");
  log.succeeded("storage");  // already fine: nothing to say
  EXPECT_FALSE(log.is_failing("storage"));
  auto lines = cap.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "warning storage: cannot open diskstats");
  EXPECT_EQ(lines[1],
            "info storage: recovered after 5 failures in a row (last: cannot open diskstats)");
}

TEST(FailureLogTest, ANewKindOfFailureIsLoggedOnce) {
  LogCapture cap;
  FailureLog log;
  log.failed("nic", "netlink timeout");
  log.failed("nic", "netlink timeout");
  log.failed("nic", "permission denied");
  log.failed("nic", "permission denied");
  log.failed("other", "x");
  auto lines = cap.lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], "warning nic: permission denied (failing 3 times in a row)");
  EXPECT_EQ(lines[2], "warning other: x");
}

TEST(LoggingTest, JournalDetectionComparesStderrDeviceAndInode) {
  struct stat st {};
  ASSERT_EQ(fstat(2, &st), 0);
  std::string match = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  ::setenv("JOURNAL_STREAM", match.c_str(), 1);
  EXPECT_TRUE(stderr_is_journal());
  std::string other = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino + 1);
  ::setenv("JOURNAL_STREAM", other.c_str(), 1);
  EXPECT_FALSE(stderr_is_journal());
  ::setenv("JOURNAL_STREAM", "garbage", 1);
  EXPECT_FALSE(stderr_is_journal());
  ::unsetenv("JOURNAL_STREAM");
  EXPECT_FALSE(stderr_is_journal());
}

TEST(LoggingTest, TheJournalStreamGetsEachLineWithItsPriority) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  spdlog::logger logger("journal", journal_stream_sink(f));
  logger.set_level(spdlog::level::debug);
  logger.error("collector {} failed", "nic");
  logger.warn("two\nlines");
  logger.info("ready");
  logger.debug("detail");
  logger.critical("fatal");
  logger.flush();
  std::rewind(f);
  char buf[256] = {};
  const std::size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  EXPECT_EQ(std::string(buf, n),
            "<3>collector nic failed\n<4>two\n<4>lines\n<6>ready\n<7>detail\n<2>fatal\n");
}

TEST(LoggingTest, LevelNames) {
  EXPECT_TRUE(set_log_level("debug"));
  EXPECT_EQ(spdlog::get_level(), spdlog::level::debug);
  EXPECT_TRUE(set_log_level("off"));
  EXPECT_FALSE(set_log_level("loud"));
  EXPECT_EQ(spdlog::get_level(), spdlog::level::off);  // unchanged by the bad name
  set_log_level("info");
}

}  // namespace
}  // namespace nodewatch
