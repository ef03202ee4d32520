#pragma once
// Runs the real nodewatchd binary as a child process for integration and
// end-to-end tests: arguments, extra environment, stderr captured to a file,
// signals, bounded waits.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include "support/paths.hpp"

namespace nodewatch::testing {

inline std::filesystem::path BinaryPath() {
  return NODEWATCH_BINARY;
}

// A fresh scratch directory, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "nodewatch-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& name, const std::string& content) const {
    auto p = path_ / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << content;
    return p;
  }

 private:
  std::filesystem::path path_;
};

inline std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The check socket every daemon a test starts serves, in `dir` (a test's
// own directory), never the host's /run/nodewatch: the line of [server].
inline std::string CheckSocketKey(const std::filesystem::path& dir) {
  return "check_socket = \"" + (dir / "check.sock").string() + "\"\n";
}

// The kernel log every daemon a test starts reads: a modelled node's
// (tests/fixtures/kernel/kmsg-node.txt), with a state file in `dir`, never
// the host's /dev/kmsg or /var/lib/nodewatch. Its [collectors.kernel]
// comes last, so that a test may add keys of its own to it.
inline std::string KernelSection(const std::filesystem::path& dir) {
  return "\n[collectors.kernel]\nkmsg_path = \"" +
         (std::filesystem::path(NODEWATCH_FIXTURES_DIR) / "kernel" / "kmsg-node.txt").string() +
         "\"\nstate_file = \"" + (dir / "kernel-log.state").string() + "\"\n";
}

// Both, for a configuration without [server] or [collectors.kernel]; a
// test that rewrites its configuration (a reload) adds them itself.
inline std::string TestSections(const std::filesystem::path& dir) {
  return "\n[server]\n" + CheckSocketKey(dir) + KernelSection(dir);
}

// `text` with CheckSocketKey(dir) in its [server] (added at the end when it
// has none), unless it names a check socket itself.
inline std::string WithCheckSocket(std::string text, const std::filesystem::path& dir) {
  if (text.find("check_socket") != std::string::npos) return text;
  const std::string header = "[server]\n";
  // Where its line starts (the line feed before it, in the text).
  const std::size_t at = ("\n" + text).find("\n" + header);
  if (at == std::string::npos) return text + "\n" + header + CheckSocketKey(dir);
  return text.insert(at + header.size(), CheckSocketKey(dir));
}

// Adds to the file `--config` names in `args` what TestSections() has and
// it does not.
inline void AddTestSections(const std::vector<std::string>& args) {
  for (std::size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] != "--config") continue;
    const std::filesystem::path config = args[i + 1];
    std::ifstream in(config);
    if (!in) return;
    std::stringstream ss;
    ss << in.rdbuf();
    const std::filesystem::path dir = config.parent_path();
    std::string text = WithCheckSocket(ss.str(), dir);
    if (text.find("[collectors.kernel]") == std::string::npos) text += KernelSection(dir);
    std::ofstream(config, std::ios::trunc) << text;
    return;
  }
}

class DaemonProcess {
 public:
  struct Options {
    std::vector<std::string> args;
    std::vector<std::string> env;  // "NAME=value", added to the test's environment
    std::vector<std::string> unset_env;
    // Descriptors to pass as 3, 4, ... (socket activation); LISTEN_PID is
    // set to the child's pid when `listen_fds` is true.
    std::vector<int> pass_fds;
    bool listen_fds = false;
    std::filesystem::path stdout_file;  // empty: /dev/null
    // Opened read-only by the child, as the test's user, before it runs
    // `program` (as systemd opens StandardInput=file:); empty: inherited.
    std::filesystem::path stdin_file;
    // What to run: nodewatchd, or a wrapper that runs it (setpriv), which
    // then has nodewatchd and its arguments in `args`.
    std::filesystem::path program = BinaryPath();
    // Whether to add TestSections() to the configuration (which reads
    // the file: not for one on a hung mount).
    bool add_test_sections = true;
  };

  DaemonProcess(const Options& o, const std::filesystem::path& log_file) : log_(log_file) {
    if (o.add_test_sections) AddTestSections(o.args);
    pid_ = ::fork();
    if (pid_ == 0) {
      int err = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(err, 2);
      int out = o.stdout_file.empty()
                    ? ::open("/dev/null", O_WRONLY)
                    : ::open(o.stdout_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out, 1);
      if (!o.stdin_file.empty()) {
        int in = ::open(o.stdin_file.c_str(), O_RDONLY | O_NOCTTY);
        if (in < 0) ::_exit(126);
        ::dup2(in, 0);
        if (in != 0) ::close(in);
      }
      for (std::size_t i = 0; i < o.pass_fds.size(); ++i)
        ::dup2(o.pass_fds[i], static_cast<int>(3 + i));
      for (const auto& e : o.unset_env) ::unsetenv(e.c_str());
      for (const auto& e : o.env) ::putenv(const_cast<char*>(e.c_str()));
      ::unsetenv("JOURNAL_STREAM");
      if (o.listen_fds) {
        ::setenv("LISTEN_FDS", std::to_string(o.pass_fds.size()).c_str(), 1);
        ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
      }
      std::vector<std::string> argv_s{o.program.string()};
      argv_s.insert(argv_s.end(), o.args.begin(), o.args.end());
      std::vector<char*> argv;
      for (auto& a : argv_s) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~DaemonProcess() {
    if (pid_ > 0 && !exit_code_) {
      ::kill(pid_, SIGKILL);
      int st;
      ::waitpid(pid_, &st, 0);
    }
  }
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) { ::kill(pid_, sig); }
  std::string log() const { return ReadFile(log_); }

  // Waits for exit; returns the exit code (128+signal when killed), or
  // nullopt if it is still running after `limit`.
  std::optional<int> wait(std::chrono::milliseconds limit) {
    if (exit_code_) return exit_code_;
    auto until = std::chrono::steady_clock::now() + limit;
    do {
      int st = 0;
      pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return exit_code_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } while (std::chrono::steady_clock::now() < until);
    return std::nullopt;
  }

  // Waits until the log matches `re`; returns the first capture group (or
  // the whole match), nullopt on timeout or exit.
  std::optional<std::string> wait_log(const std::string& re,
                                      std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::regex rx(re);
    auto until = std::chrono::steady_clock::now() + limit;
    do {
      std::string text = log();
      std::smatch m;
      if (std::regex_search(text, m, rx)) return m.size() > 1 ? m[1].str() : m[0].str();
      int st = 0;
      if (!exit_code_ && ::waitpid(pid_, &st, WNOHANG) == pid_) {
        exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      if (exit_code_) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } while (std::chrono::steady_clock::now() < until);
    return std::nullopt;
  }

  // The port of the first "listening on 127.0.0.1:PORT" log line.
  std::optional<std::uint16_t> port() {
    auto p = wait_log(R"(listening on 127\.0\.0\.1:(\d+))");
    if (!p) return std::nullopt;
    return static_cast<std::uint16_t>(std::stoi(*p));
  }

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// Value of a sample line `series value` in an exposition, nullopt if absent.
inline std::optional<double> SampleValue(const std::string& body, const std::string& series) {
  std::size_t pos = 0;
  while ((pos = body.find(series + " ", pos)) != std::string::npos) {
    if (pos == 0 || body[pos - 1] == '\n') {
      auto end = body.find('\n', pos);
      return std::strtod(
          body.substr(pos + series.size() + 1, end - pos - series.size() - 1).c_str(), nullptr);
    }
    pos += series.size();
  }
  return std::nullopt;
}

}  // namespace nodewatch::testing
