// nodewatchd: command line parsing only; everything else is in the core library.

#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <boost/system/system_error.hpp>
#include <exception>
#include <iostream>
#include <system_error>

#include "app.hpp"
#include "nodewatch/fs_helper.hpp"
#include "nodewatch/kernel_log_fd.hpp"
#include "version.hpp"

namespace {

// Whether `e` is the system's EMFILE, by its error code: the text is no
// test (ENFILE's, "Too many open files in system", contains EMFILE's).
// The event loop's errors are Boost's, which is no std::system_error.
bool out_of_descriptors(const std::exception& e) {
  if (const auto* s = dynamic_cast<const std::system_error*>(&e))
    return s->code() == std::errc::too_many_files_open;
  if (const auto* b = dynamic_cast<const boost::system::system_error*>(&e))
    return b->code() == boost::system::errc::too_many_files_open;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // A replacement helper launcher (nodewatch/fs_helper.hpp) runs from here and
  // never returns.
  nodewatch::helper::launcher_entry(argc, argv);
  // The kernel log its unit opened for it as standard input, if that is
  // what standard input is (nodewatch/kernel_log_fd.hpp).
  nodewatch::kernel::adopt_inherited_log();
  nodewatch::CommandLine cmd;
  CLI::App app{"nodewatchd: per-node monitoring daemon for AI training clusters"};
  app.set_version_flag("--version", std::string("nodewatchd ") + nodewatch::kVersion +
                                        " (revision " + nodewatch::kRevision + ")");
  std::string sysfs = cmd.roots.sysfs.string();
  std::string procfs = cmd.roots.procfs.string();
  auto* config = app.add_option("--config", cmd.config_path, "Configuration file")
                     ->default_str(nodewatch::kDefaultConfigPath);
  app.add_flag("--check-config", cmd.check_config,
               "Validate the configuration, print 'configuration OK' or every error, and exit");
  app.add_flag(
      "--once", cmd.once,
      "Run every enabled collector once, print the exposition /metrics would serve, and exit");
  app.add_flag(
      "--check", cmd.check,
      "Print whether this node is fit to run a job, per subsystem, and exit 0 (healthy), 1 "
      "(unhealthy) or 2 (could not decide); asks the running daemon, else collects once");
  app.add_flag(
      "--learn-expected", cmd.learn_expected,
      "Print what this node has as an expect file ([expect]) to review and ship, and exit");
  app.add_flag("--local", cmd.local,
               "With --check or --learn-expected: collect here, even if a daemon is running");
  app.add_option("--output", cmd.output, "With --check: table, json or line")->default_str("table");
  app.add_flag("--list-metrics", cmd.list_metrics,
               "Print every metric family nodewatchd can export (name and type) and exit");
  app.add_flag("--list-options", cmd.list_options,
               "Print every configuration key (key, type, default) and exit");
  app.add_option("--format", cmd.list_format,
                 "With --list-metrics: text (name and type) or markdown (docs/metrics.md); with "
                 "--list-options: text or markdown (docs/configuration.md)")
      ->default_str("text");
  app.add_option("--listen", cmd.listen,
                 "Address to listen on (repeatable; overrides server.listen), e.g. 127.0.0.1:9842");
  app.add_option("--web.config.file", cmd.web_config_file,
                 "Web configuration (TLS, basic authentication) in the exporter-toolkit format");
  app.add_option("--log-level", cmd.log_level,
                 "trace, debug, info, warn, error, critical or off (overrides log.level)");
  app.add_option("--sysfs", sysfs, "Root of sysfs for every collector")->default_str("/sys");
  app.add_option("--procfs", procfs, "Root of procfs for every collector")->default_str("/proc");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  cmd.config_explicit = config->count() > 0;
  cmd.roots.sysfs = sysfs;
  cmd.roots.procfs = procfs;
  try {
    return nodewatch::run(cmd, nodewatch::builtin_collectors());
  } catch (const std::exception& e) {
    // What the daemon could not get from the system at start (a descriptor
    // for its signals or its event loop): a message and 1, never an abort.
    std::cerr << "nodewatchd: cannot run: " << e.what() << "\n";
    rlimit nofile{};
    if (out_of_descriptors(e) && ::getrlimit(RLIMIT_NOFILE, &nofile) == 0)
      std::cerr << "nodewatchd: at most " << nofile.rlim_cur
                << " open files (RLIMIT_NOFILE); raise the limit\n";
    return 1;
  }
}
