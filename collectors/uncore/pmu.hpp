#pragma once
// The kernel's performance monitoring units as sysfs describes them
// (Documentation/ABI/testing/sysfs-bus-event_source-devices-format and
// -events), and events named in perf's own syntax, turned into what
// perf_event_open(2) takes. Pure parsing over an FsRoot: no system call
// but the reads.
//
// <sysfs>/bus/event_source/devices/<pmu>/
//   type            the perf_event_attr.type to open its events with
//   cpumask         the CPUs to open on, one per die or socket the PMU
//                   counts (uncore PMUs); absent for per-CPU PMUs
//   format/<term>   where a term's value goes: "config:0-7",
//                   "config1:0-1", "config:0-7,32-35" (the value's low
//                   bits fill the lowest bits named, in order)
//   events/<name>   an event as terms: "event=0x3c,umask=0x1", "config=0x5"
//   events/<name>.scale, .unit   what one count is worth, and in what

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nodewatch/sources/fs.hpp"

namespace nodewatch::uncore {

inline constexpr std::string_view kPmuDir = "bus/event_source/devices";

// "<kPmuDir>/<pmu>/<rest>": a file of a PMU's description.
std::string pmu_path(std::string_view pmu, std::string_view rest);

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; nullopt for anything else (an
// empty list included).
std::optional<std::vector<int>> parse_cpulist(std::string_view text);

// One format term: the attribute word it lands in (0: config, 1: config1,
// 2: config2) and its bits, lowest first.
struct FormatTerm {
  int word = 0;
  std::vector<int> bits;
};

// "config1:0-1,8" -> {1, {0, 1, 8}}; nullopt when malformed.
std::optional<FormatTerm> parse_format(std::string_view text);

// A PMU read from sysfs.
struct Pmu {
  std::string name;
  std::uint32_t type = 0;
  // From cpumask; without one, the online CPUs (perf stat -a's choice).
  std::vector<int> cpus;
  bool has_cpumask = false;
};

// Reads <pmu>'s type and CPUs. On failure, nullopt and `error` says why
// ("no such PMU" when the directory is gone).
std::optional<Pmu> read_pmu(const sources::FsRoot& sys, std::string_view name, std::string* error);

// An event as perf_event_open takes it, with what one count is worth.
struct EventAttr {
  std::uint64_t config[3] = {0, 0, 0};
  double scale = 1;
  std::string unit;        // after scaling: "bytes" where sysfs said MiB/KiB/GiB/B
  std::string alias;       // the events/ name it came from, if any
  double sysfs_scale = 1;  // the alias's .scale as written
};

// "msr/tsc/" -> {"msr", "tsc"}; "nvidia_scf_pmu_*/gmem_rd_data/" ->
// {"nvidia_scf_pmu_*", ...}. A PMU name ending in '*' names every PMU
// with that prefix. Nullopt, with `error`, for anything else (modifiers
// after the last slash included: an uncore count has no user/kernel
// split).
struct EventRequest {
  std::string pmu;
  std::string terms;  // between the slashes: the event label
  bool prefix = false;
};
std::optional<EventRequest> parse_request(std::string_view text, std::string* error);

// Resolves `terms` ("tsc", "total_bytes_loc,port=0x1", "event=0x3c") on
// `pmu` through its format/ and events/ files: a bare word is an event
// alias, or else a format term set to 1; `config`, `config1` and `config2`
// take a raw value. Nullopt, with `error`, for an unknown term, a value
// wider than its format, an alias that leaves a value to the user ("?"),
// or unreadable files.
std::optional<EventAttr> resolve_event(const sources::FsRoot& sys, std::string_view pmu,
                                       std::string_view terms, std::string* error);

}  // namespace nodewatch::uncore
