#pragma once
// The end-to-end node: the collectors' fixture trees merged into one sysfs
// and one procfs root (each collector keeps its fixture beside its tests;
// the end-to-end tests need them side by side, as on a real node), the
// textfile inputs, the fake NVML with eight GPUs, and a configuration that
// runs every collector over them.

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/daemon_process.hpp"
#include "support/paths.hpp"

namespace nodewatch::testing {

inline const std::filesystem::path kE2EFixtures = NODEWATCH_FIXTURES_DIR;

struct E2ENodeOptions {
  // The kernel log; empty: the modelled node's (kmsg-node.txt).
  std::filesystem::path kmsg;
  // Appended to the configuration (whole tables).
  std::string extra_config;
};

// Builds the node under `dir` ("node/sys", "node/proc", "node/textfile",
// "nodewatch.toml") and returns the arguments that run nodewatchd on it.
inline std::vector<std::string> E2ENodeArgs(const TempDir& dir, const E2ENodeOptions& o = {}) {
  namespace fs = std::filesystem;
  const auto opts = fs::copy_options::recursive | fs::copy_options::copy_symlinks |
                    fs::copy_options::skip_existing;
  for (const char* tree :
       {"storage", "pcie", "amdgpu", "interconnect", "edac", "kernel", "jobs", "versions"}) {
    for (const char* root : {"sys", "proc"}) {
      fs::path from = kE2EFixtures / tree / root;
      if (fs::exists(from)) {
        fs::create_directories(dir.path() / "node" / root);
        fs::copy(from, dir.path() / "node" / root, opts);
      }
    }
  }
  // Burn-in and inventory files, as jobs on the node would write them.
  fs::create_directories(dir.path() / "node" / "textfile");
  for (const auto& e : fs::directory_iterator(kE2EFixtures / "textfile"))
    if (e.path().extension() == ".prom") fs::copy(e.path(), dir.path() / "node" / "textfile");
  // IMEX: its configuration in the node's tree, with the command service
  // on and no nodes file (not configured: tests that want it write
  // node/etc/nvidia-imex/nodes_config.cfg), and the fake nvidia-imex-ctl
  // (tests/fixtures/imex), whose answers go beside it in node/bin.
  const fs::path imex = dir.path() / "node" / "etc" / "nvidia-imex";
  fs::create_directories(imex);
  fs::create_directories(dir.path() / "node" / "etc" / "systemd" / "system");
  fs::create_directories(dir.path() / "node" / "bin");
  {
    std::string cfg = ReadFile(kE2EFixtures / "imex" / "config.cfg");
    const std::string key = "IMEX_NODE_CONFIG_FILE=";
    std::size_t at = cfg.find(key) + key.size();
    cfg.replace(at, cfg.find('\n', at) - at, (imex / "nodes_config.cfg").string());
    std::ofstream(imex / "config.cfg") << cfg;
    fs::copy_file(kE2EFixtures / "imex" / "nvidia-imex-ctl",
                  dir.path() / "node" / "bin" / "nvidia-imex-ctl",
                  fs::copy_options::overwrite_existing);
  }
  std::string kernel = KernelSection(dir.path());
  if (!o.kmsg.empty()) {
    const std::string modelled = (kE2EFixtures / "kernel" / "kmsg-node.txt").string();
    kernel.replace(kernel.find(modelled), modelled.size(), o.kmsg.string());
  }
  // The accelerator collector loads the fake NVML (8 GPUs) built by the
  // tests; the configuration names it, as an operator would a driver path.
  std::ostringstream config;
  config << ReadFile(std::filesystem::path(NODEWATCH_TESTS_SOURCE_DIR) / "e2e" / "nodewatch.toml")
         << "\n[nvml]\nlibrary = \"" << FAKE_NVML_LIBRARY
         << "\"\n[collectors.accelerator]\ninterval = \"1h\"\n"
         // No kubelet: a machine running the tests may have one.
         << "pod_resources_socket = \"\"\n"
         << "[collectors.interconnect]\ninterval = \"1h\"\n[collectors.textfile]\ninterval = "
            "\"1h\"\ndirectory = \""
         << (dir.path() / "node" / "textfile").string() << "\"\n"
         << kernel << "interval = \"1h\"\n"
         << "[collectors.imex]\ninterval = \"1h\"\nconfig_file = \""
         << (imex / "config.cfg").string() << "\"\nsocket = \""
         << (imex / "imex_ctrl.sock").string() << "\"\nsystemd_dir = \""
         << (dir.path() / "node" / "etc" / "systemd" / "system").string() << "\"\nctl = \""
         << (dir.path() / "node" / "bin" / "nvidia-imex-ctl").string()
         << "\"\n"
         // No BMC (the machine running the tests may have one): the
         // simulator's tests (bmc_sim_test.cpp) read one.
         << "[collectors.bmc]\ndevice = \"" << (dir.path() / "node" / "dev" / "ipmi0").string()
         << "\"\nstate_directory = \"" << dir.path().string() << "\"\n"
         << o.extra_config;
  std::ofstream(dir.path() / "nodewatch.toml") << WithCheckSocket(config.str(), dir.path());
  return {"--config", (dir.path() / "nodewatch.toml").string(),
          "--sysfs",  (dir.path() / "node" / "sys").string(),
          "--procfs", (dir.path() / "node" / "proc").string()};
}

// The fake NVML's scenario for the end-to-end node: eight GPUs with the
// processes of the jobs tests/fixtures/jobs/ models.
inline std::filesystem::path E2ENvmlScenario() {
  return kE2EFixtures / "nvml" / "e2e_node.scenario";
}
inline std::vector<std::string> E2ENodeEnv() {
  return {"FAKE_NVML_SCENARIO=" + E2ENvmlScenario().string()};
}

}  // namespace nodewatch::testing
