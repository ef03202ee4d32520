#pragma once
// OpenIPMI's BMC simulator (ipmi_sim) serving tests/fixtures/bmc over IPMI
// on the loopback (set up by its make-sim.sh), with each sensor's reading
// in a file the test writes while the daemon runs.

#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <netinet/in.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <thread>

#include "support/daemon_process.hpp"
#include "support/paths.hpp"
#include "support/shell.hpp"

namespace nodewatch::testing {

class IpmiSim {
 public:
  static constexpr const char* kUser = "nodewatch";
  static constexpr const char* kPassword = "sim-secret";

  // Why the simulator cannot run here, or "".
  static std::string CannotRun() {
    for (const char* tool : {"ipmi_sim", "sdrcomp"})
      if (RunCommand(std::string("command -v ") + tool).status != 0)
        return std::string(tool) +
               " is not installed (Debian's openipmi; packaging/install-deps.sh --test)";
    return "";
  }

  // Readings in raw counts (node.emu.in), first those of make-sim.sh: 30
  // °C, 5,000 RPM, a PSU present, 350 W, 12 V.
  explicit IpmiSim(const std::filesystem::path& dir) : dir_(dir) {
    port_ = FreeUdpPort();
    CmdResult made = RunCommand(
        (std::filesystem::path(NODEWATCH_FIXTURES_DIR) / "bmc" / "make-sim.sh").string() + " " +
        dir_.string() + " " + std::to_string(port_));
    if (made.status != 0) {
      error_ = "make-sim.sh: " + made.output;
      return;
    }
    start();
  }
  ~IpmiSim() { kill_now(); }
  IpmiSim(const IpmiSim&) = delete;
  IpmiSim& operator=(const IpmiSim&) = delete;

  // "" once it serves, else why not.
  const std::string& error() const { return error_; }
  std::uint16_t port() const { return port_; }
  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }
  std::filesystem::path password_file() const { return dir_ / "password"; }
  pid_t pid() const { return pid_; }

  // A sensor's next reading, in raw counts (the simulator polls it).
  void set(const std::string& sensor, int raw) const {
    std::ofstream(dir_ / (sensor + ".val"), std::ios::trunc) << raw << "\n";
  }
  void stop() const { ::kill(pid_, SIGSTOP); }
  void resume() const { ::kill(pid_, SIGCONT); }

  // FreeIPMI's ipmi-sensors asked the same BMC: "name" -> (state, reading)
  // as it prints them ("Nominal", "5000.00").
  std::map<std::string, std::pair<std::string, std::string>> FreeIpmiSensors() const {
    std::map<std::string, std::pair<std::string, std::string>> out;
    std::filesystem::create_directories(dir_ / "freeipmi-cache");
    ::chmod((dir_ / "freeipmi-cache").c_str(), 0700);
    CmdResult r = RunCommand(
        "ipmi-sensors -h " + host() + " -u " + kUser + " -p " + kPassword +
        " -l user -D LAN -a md5 --sdr-cache-directory=" + (dir_ / "freeipmi-cache").string() +
        " --quiet-cache --comma-separated-output --no-header-output "
        "--output-sensor-state");
    std::istringstream in(r.output);
    for (std::string line; std::getline(in, line);) {
      std::vector<std::string> f;
      std::istringstream fields(line);
      for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
      if (f.size() >= 5) out[f[1]] = {f[3], f[4]};
    }
    return out;
  }

 private:
  static std::uint16_t FreeUdpPort() {
    int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
  }

  // The simulator's UDP port, bound (in /proc/net/udp, in hex).
  bool listening() const {
    char hex[8];
    std::snprintf(hex, sizeof hex, ":%04X ", port_);
    return ReadFile("/proc/net/udp").find(std::string("0100007F") + hex) != std::string::npos;
  }

  void start() {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      const std::string log = (dir_ / "ipmi_sim.log").string();
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      // -n: no console on standard input; -p: nothing persisted.
      ::execlp("ipmi_sim", "ipmi_sim", "-c", (dir_ / "lan.conf").c_str(), "-f",
               (dir_ / "node.emu").c_str(), "-s", (dir_ / "state").c_str(), "-n", "-p",
               static_cast<char*>(nullptr));
      ::_exit(127);
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until && !listening()) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        error_ = "ipmi_sim exited: " + ReadFile(dir_ / "ipmi_sim.log");
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!listening()) error_ = "ipmi_sim does not listen: " + ReadFile(dir_ / "ipmi_sim.log");
  }

  void kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  std::filesystem::path dir_;
  std::uint16_t port_ = 0;
  pid_t pid_ = -1;
  std::string error_;
};

}  // namespace nodewatch::testing
