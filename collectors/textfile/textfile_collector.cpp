#include "textfile/textfile_collector.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include "nodewatch/options.hpp"
#include "nodewatch/unique_fd.hpp"
#include "textfile/textfile_parse.hpp"

namespace nodewatch {
namespace textfile {
namespace {

const MetricTable& table() {
  static const MetricTable t({
      {"nodewatch_textfile_file_mtime_seconds",
       MetricType::kGauge,
       "seconds",
       "Modification time of each *.prom file in the textfile directory (Unix time).",
       {"file"}},
      {"nodewatch_textfile_file_valid",
       MetricType::kGauge,
       "",
       "1 if the file was taken, 0 if it was refused whole (the reason is counted in "
       "nodewatch_collector_errors_total and logged).",
       {"file"}},
  });
  return t;
}

// Names nodewatch exports itself: a file may not define them.
bool reserved(std::string_view name) {
  static const std::set<std::string_view> kProcess = {
      "process_cpu_seconds_total",
      "process_resident_memory_bytes",
      "process_virtual_memory_bytes",
      "process_open_fds",
      "process_max_fds",
      "process_start_time_seconds",
  };
  return name.rfind("nodewatch_", 0) == 0 || kProcess.count(name) != 0;
}

// The *.prom names in `dir`, sorted; -1 errno on failure.
int list_files(const std::string& dir, std::vector<std::string>* out) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return errno;
  while (dirent* e = readdir(d)) {
    std::string_view n = e->d_name;
    if (n.size() > 5 && n.substr(n.size() - 5) == ".prom" && n[0] != '.') out->emplace_back(n);
  }
  closedir(d);
  std::sort(out->begin(), out->end());
  return 0;
}

struct Read {
  std::string text;
  double mtime = 0;
  std::string error;   // empty: read
  std::string reason;  // the errors_total reason when `error` is set
};

Read read_file(const std::string& path, std::int64_t max_bytes) {
  Read r;
  // O_NONBLOCK: a FIFO named *.prom must not block the collector.
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    r.error = std::string("cannot open: ") + std::strerror(errno);
    r.reason = "read_error";
    return r;
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) {
    r.error = std::string("cannot stat: ") + std::strerror(errno);
    r.reason = "read_error";
    return r;
  }
  r.mtime = static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec / 1e9;
  if (!S_ISREG(st.st_mode)) {
    r.error = "not a regular file";
    r.reason = "not_regular_file";
    return r;
  }
  if (st.st_size > max_bytes) {
    r.error = "larger than max_file_bytes (" + std::to_string(max_bytes) + ")";
    r.reason = "too_large";
    return r;
  }
  r.text.resize(static_cast<std::size_t>(st.st_size) + 1);
  std::size_t got = 0;
  for (;;) {
    if (got == r.text.size()) {  // grew while being read: refuse, it is being written
      r.error = "changed while being read";
      r.reason = "read_error";
      return r;
    }
    ssize_t n = read(fd.get(), r.text.data() + got, r.text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      r.error = std::string("cannot read: ") + std::strerror(errno);
      r.reason = "read_error";
      return r;
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  r.text.resize(got);
  return r;
}

}  // namespace

TextfileOptions read_textfile_options(OptionReader& r) {
  TextfileOptions o;
  o.directory = r.get_string("directory", o.directory);
  if (o.directory.empty() || o.directory[0] != '/')
    r.error("directory", "must be an absolute path");
  o.max_file_bytes = r.get_int("max_file_bytes", o.max_file_bytes, 1, 64 << 20);
  o.max_files = r.get_int("max_files", o.max_files, 1, 10000);
  o.max_total_bytes = r.get_int("max_total_bytes", o.max_total_bytes, 1, std::int64_t{1} << 30);
  return o;
}

TextfileCollector::TextfileCollector(TextfileOptions options) : options_(std::move(options)) {}

const MetricTable& TextfileCollector::metrics() const {
  return table();
}

void TextfileCollector::collect(const CollectContext& ctx, MetricSink& out) {
  std::vector<std::string> files;
  if (int err = list_files(options_.directory, &files); err != 0) {
    // The default directory not existing is the normal case of a node
    // without inputs; anything else is worth counting.
    const bool quiet = err == ENOENT && options_.directory == kDefaultDirectory;
    std::string why = options_.directory + ": " + std::strerror(err);
    if (!quiet) out.error("read_error");
    if (!quiet && why != last_dir_error_) spdlog::warn("textfile: cannot list {}", why);
    last_dir_error_ = quiet ? "" : why;
    last_error_.clear();
    return;
  }
  last_dir_error_.clear();
  if (files.size() > static_cast<std::size_t>(options_.max_files)) {
    out.error("too_many_files", files.size() - static_cast<std::size_t>(options_.max_files));
    files.resize(static_cast<std::size_t>(options_.max_files));
  }

  std::vector<Family> merged;
  std::map<std::string, std::size_t, std::less<>> by_name;
  std::set<std::string> series;
  std::map<std::string, std::string> errors;  // this cycle's
  std::int64_t total_bytes = 0;
  for (const std::string& name : files) {
    if (ctx.should_stop()) break;
    const std::string path = options_.directory + "/" + name;
    Read r = read_file(path, options_.max_file_bytes);
    std::string error = r.error;
    std::string reason = r.reason;
    if (error.empty() &&
        total_bytes + static_cast<std::int64_t>(r.text.size()) > options_.max_total_bytes) {
      error = "over max_total_bytes (" + std::to_string(options_.max_total_bytes) +
              ") with the files before it";
      reason = "budget";
    }
    if (error.empty()) total_bytes += static_cast<std::int64_t>(r.text.size());
    ParseResult parsed;
    if (error.empty()) {
      parsed = parse(r.text);
      if (!parsed.ok()) {
        error = parsed.error;
        reason = "parse_error";
      }
    }
    if (error.empty()) {
      for (const Family& f : parsed.families) {
        if (reserved(f.name)) {
          error = "defines " + f.name + ", a name nodewatch exports itself";
          reason = "reserved_name";
          break;
        }
        auto it = by_name.find(f.name);
        if (it != by_name.end() && merged[it->second].type != f.type) {
          error = f.name + " is a " + type_name(f.type) + " here but a " +
                  type_name(merged[it->second].type) + " in an earlier file";
          reason = "conflict";
          break;
        }
        for (const Sample& s : f.samples) {
          if (series.count(series_key(s)) != 0) {
            error = "repeats a series of an earlier file (" + s.name + ")";
            reason = "conflict";
            break;
          }
        }
        if (!error.empty()) break;
      }
    }
    if (error.empty()) {
      for (Family& f : parsed.families) {
        for (const Sample& s : f.samples) series.insert(series_key(s));
        auto it = by_name.find(f.name);
        if (it == by_name.end()) {
          by_name.emplace(f.name, merged.size());
          merged.push_back(std::move(f));
        } else {
          Family& into = merged[it->second];
          if (!into.has_help && f.has_help) {
            into.help = f.help;
            into.has_help = true;
          }
          for (Sample& s : f.samples) into.samples.push_back(std::move(s));
        }
      }
    } else {
      out.error(reason);
    }
    // Log a refusal when it starts or changes, and the recovery once.
    auto last = last_error_.find(name);
    const std::string before = last == last_error_.end() ? "" : last->second;
    if (error != before) {
      if (!error.empty())
        spdlog::warn("textfile: {} refused: {}", path, error);
      else if (last != last_error_.end())
        spdlog::info("textfile: {} is taken again", path);
    }
    errors[name] = error;
    if (r.mtime > 0) out.add("nodewatch_textfile_file_mtime_seconds", {name}, r.mtime);
    out.add("nodewatch_textfile_file_valid", {name}, error.empty() ? 1 : 0);
  }
  last_error_ = std::move(errors);

  std::size_t samples = 0;
  for (const Family& f : merged) samples += f.samples.size();
  if (samples > 0) out.add_external(render(merged), samples);
}

}  // namespace textfile

const CollectorSpec& textfile_collector_spec() {
  static const CollectorSpec spec = [] {
    CollectorSpec s;
    s.name = "textfile";
    s.description = "Prometheus text files (*.prom) that burn-in jobs and scripts write";
    s.enabled_by_default = true;
    s.own_thread = true;
    s.default_interval = std::chrono::seconds(15);
    s.default_timeout = std::chrono::seconds(10);
    s.read_options = typed_options<textfile::TextfileOptions>(textfile::read_textfile_options);
    s.metrics = textfile::table;
    s.create = [](const CollectorEnv& env) -> std::unique_ptr<Collector> {
      return std::make_unique<textfile::TextfileCollector>(
          env.options_as<textfile::TextfileOptions>());
    };
    return s;
  }();
  return spec;
}

}  // namespace nodewatch
