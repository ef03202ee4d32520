// Running a vendor's tool (nodewatch/command.hpp): its output and exit,
// what it inherits (no descriptor of ours, a fixed environment), and the
// deadline, which kills it and everything it started.

#include "nodewatch/command.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

namespace nodewatch::command {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Result Sh(const std::string& script, std::chrono::milliseconds timeout = 5s,
          std::size_t max_output = 1 << 20) {
  return run({"/bin/sh", "-c", script}, Clock::now() + timeout, max_output);
}

TEST(Command, OutputAndErrorTogetherWithTheExitStatus) {
  Result r = Sh("echo out; echo err >&2; exit 3");
  ASSERT_TRUE(r.started);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_status, 3);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.output, "out\nerr\n");
  Result ok = Sh("printf READY");
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.output, "READY");
}

TEST(Command, KilledBySignalHasNoExitStatus) {
  Result r = Sh("kill -9 $$");
  ASSERT_TRUE(r.started);
  EXPECT_EQ(r.exit_status, -1);
  EXPECT_EQ(r.signal, 9);
}

TEST(Command, InheritsNoDescriptorAndAFixedEnvironment) {
  int leaked = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC: as a careless library's
  ASSERT_GE(leaked, 3);
  ::setenv("NODEWATCH_SECRET", "x", 1);
  Result fds = Sh("ls /proc/self/fd");
  Result env = Sh("env | sort");
  ::close(leaked);
  ::unsetenv("NODEWATCH_SECRET");
  // 0, 1, 2 and the descriptor ls opens to list the directory.
  EXPECT_EQ(fds.output, "0\n1\n2\n3\n");
  EXPECT_EQ(env.output.find("NODEWATCH_SECRET"), std::string::npos) << env.output;
  EXPECT_NE(env.output.find("LC_ALL=C\n"), std::string::npos) << env.output;
  EXPECT_NE(env.output.find("PATH=/usr/sbin:/usr/bin:/sbin:/bin\n"), std::string::npos);
  Result in = Sh("cat");  // standard input is /dev/null: no wait
  EXPECT_TRUE(in.ok());
  EXPECT_EQ(in.output, "");
}

TEST(Command, TheDeadlineKillsTheProgramAndWhatItStarted) {
  const std::string mark =
      (std::filesystem::temp_directory_path() / ("nw-cmd-" + std::to_string(::getpid()))).string();
  auto start = Clock::now();
  // A child that keeps the pipe open after its parent is killed, and
  // writes a file if it outlives it by a second.
  Result r = Sh("echo started; (sleep 1; touch " + mark + ") & sleep 60", 300ms);
  auto took = Clock::now() - start;
  EXPECT_TRUE(r.started);
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.output, "started\n");
  EXPECT_LT(took, 1s);
  EXPECT_GE(took, 300ms);
  std::this_thread::sleep_for(1500ms);
  EXPECT_FALSE(std::filesystem::exists(mark)) << "a child outlived the deadline";
  std::filesystem::remove(mark);
  EXPECT_EQ(unreaped(), 0u);
}

// A program that exits while something it started holds the pipe is not
// waited for, and what it left behind is killed, with a pidfd and without.
TEST(Command, AnExitedProgramIsNotWaitedForAndWhatItLeftIsKilled) {
  for (bool pidfd : {true, false}) {
    SCOPED_TRACE(pidfd ? "pidfd" : "no pidfd");
    use_pidfd_for_tests(pidfd);
    const std::string mark =
        (std::filesystem::temp_directory_path() / ("nw-cmd-left-" + std::to_string(::getpid())))
            .string();
    auto start = Clock::now();
    Result r = Sh("echo done; (sleep 1; touch " + mark + ") & exit 0", 3s);
    EXPECT_TRUE(r.ok());
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.output, "done\n");
    EXPECT_LT(Clock::now() - start, 500ms);
    std::this_thread::sleep_for(1500ms);
    EXPECT_FALSE(std::filesystem::exists(mark)) << "what it started outlived it";
    std::filesystem::remove(mark);
    // At the deadline, without a pidfd too, the program is reaped at once.
    Result slow = Sh("sleep 60", 200ms);
    EXPECT_TRUE(slow.timed_out);
    EXPECT_EQ(unreaped(), 0u);
  }
  use_pidfd_for_tests(true);
}

TEST(Command, OutputPastTheLimitIsDropped) {
  Result r = Sh("head -c 100000 /dev/zero", 5s, 1000);
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.truncated);
  EXPECT_EQ(r.output.size(), 1000u);
}

TEST(Command, AProgramThatCannotStartSaysWhy) {
  Result r = run({"/nonexistent/nvidia-imex-ctl", "-q"}, Clock::now() + 1s);
  EXPECT_FALSE(r.started);
  EXPECT_EQ(r.err, ENOENT);
  Result rel = run({"nvidia-imex-ctl", "-q"}, Clock::now() + 1s);
  EXPECT_FALSE(rel.started);
  EXPECT_EQ(rel.err, EINVAL);
  EXPECT_FALSE(run({}, Clock::now() + 1s).started);
}

}  // namespace
}  // namespace nodewatch::command
