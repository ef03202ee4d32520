#pragma once
// The bmc collector: the node's power supplies, fans, temperatures, voltages
// and leak detectors as its BMC sees them, the BMC's System Event Log and,
// where the BMC has DCMI, the node's power draw.
//
// Reached in-band through the kernel's IPMI driver (`device`, /dev/ipmi0)
// or, where `host` is set, over the network (IPMI 1.5 "lan" or 2.0
// "lanplus"). FreeIPMI does the work in a helper process of its own,
// nwd-bmc (bmc_wire.hpp), which keeps its session and the SDR cache
// (under `state_directory`, fetched again only when the repository's
// addition or erase time moves) between collections. The daemon asks it
// once per collection and kills it at the collection's deadline: a BMC
// that does not answer (in-band KCS can block for seconds, a stopped BMC
// forever) costs this collector its round, never the daemon or the other
// collectors.
//
// No device and no host: the collector says so once (info) and exports
// nothing; that is not an error. Otherwise nodewatch_bmc_up says whether
// the BMC answered, and a failure is counted under its reason
// (bmc_timeout, bmc_refused, bmc_permission, bmc_no_device, bmc_busy,
// bmc_sdr, bmc_interpret_config, bmc_password_unreadable, bmc_error,
// helper_unavailable, bmc_answer_invalid). The SEL's counts are kept in
// `state_directory`/bmc-sel.state and exported whether or not the BMC
// answers, so that they never vanish or reset.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "bmc/bmc_wire.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/helper_process.hpp"

namespace nodewatch {

// The catalog entry: name "bmc", on by default, every 30s.
const CollectorSpec& bmc_collector_spec();

namespace bmc {

struct BmcOptions {
  std::string device = "/dev/ipmi0";
  std::string host;  // "ADDRESS[:PORT]"; "" reads `device`
  std::string protocol = "lanplus";
  std::string username;
  std::string password_file;
  std::string privilege = "user";
  std::string interpret_config;  // "" FreeIPMI's default
  std::string state_directory = "/var/lib/nodewatch";
  std::int64_t sel_entries_per_collection = 256;
  // Not an option: the helper (tests move it); "" nwd-bmc's default path.
  std::string helper;
  bool operator==(const BmcOptions&) const = default;
};

BmcOptions read_bmc_options(OptionReader& r);
const MetricTable& bmc_metric_table();

// The SEL's counts and the entry counted last, kept in the state file and
// shared by the collectors a reload makes one after the other.
struct SelBook {
  std::mutex mu;
  bool loaded = false;
  std::string target;  // the BMC the cursor is of
  SelCursor cursor;
  std::map<std::pair<std::string, std::string>, std::uint64_t> counts;  // (type, state)
};

// The state file's text, and back (nullopt, with why, for one that is not).
std::string serialize_sel_book(const SelBook& book);
bool parse_sel_book(std::string_view text, SelBook* book, std::string* why);

class BmcCollector final : public Collector {
 public:
  BmcCollector(BmcOptions options, std::shared_ptr<SelBook> book);

  const MetricTable& metrics() const override { return bmc_metric_table(); }
  void collect(const CollectContext& ctx, MetricSink& out) override;

 private:
  std::string target() const;
  void load(MetricSink& out);
  void count(const Reading& r, MetricSink& out);
  void emit_counts(MetricSink& out);

  BmcOptions options_;
  std::shared_ptr<SelBook> book_;
  HelperProcess helper_;
  bool said_absent_ = false;
  bool made_directory_ = false;
};

}  // namespace bmc
}  // namespace nodewatch
