#pragma once
// Shell commands from the tests that build their own network namespaces,
// qdiscs and interfaces with iproute2.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace nodewatch::testing {

struct CmdResult {
  int status = -1;     // pclose()'s status: 0 when the command exited 0
  std::string output;  // stdout and stderr together
};

// Runs `cmd` with /bin/sh and returns its status and output.
inline CmdResult RunCommand(const std::string& cmd) {
  CmdResult r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  r.status = ::pclose(p);
  return r;
}

// RunCommand that fails the test (and goes on) when `cmd` does not exit 0.
inline std::string MustRun(const std::string& cmd) {
  CmdResult r = RunCommand(cmd);
  EXPECT_EQ(r.status, 0) << cmd << ": " << r.output;
  return r.output;
}

// Why tests that make network namespaces and qdiscs cannot run here, or ""
// when they can.
inline std::string NetnsTestsCannotRun() {
  if (::geteuid() != 0) return "needs root to create network namespaces";
  if (RunCommand("ip -V").status != 0) return "iproute2 (ip) is not installed";
  if (RunCommand("tc -V").status != 0) return "iproute2 (tc) is not installed";
  return "";
}

}  // namespace nodewatch::testing
