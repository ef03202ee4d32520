// Driver statistics (ETHTOOL_GSTRINGS names, ETHTOOL_GSTATS values) through
// the whole nic collector, over a kernel source that returns what the input
// says. The input is `ethtool -S` listings ("name: value" lines), one per
// collection, separated by a line "--"; a line "values: N" makes GSTATS
// return N values (a set that changed between the calls). Two interfaces
// get the same listing, one of them with its name count also changed.
// Property: nothing the collector emits is refused by its metric sink (an
// undeclared series, a wrong label set, a label value that is not UTF-8, a
// duplicate series), and it never throws.

#include <charconv>
#include <map>
#include <memory>

#include "fuzz_support.hpp"
#include "nic/nic_collector.hpp"
#include "nic/nic_kernel.hpp"

using namespace nodewatch;
using namespace nodewatch::nic;
using nodewatch::fuzz::require;

namespace {

struct Listing {
  std::vector<std::string> names;
  std::vector<std::uint64_t> values;
  std::optional<std::size_t> values_count;
};

Listing parse_listing(std::string_view text) {
  Listing l;
  while (!text.empty()) {
    std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    std::size_t colon = line.rfind(": ");
    if (colon == std::string_view::npos) continue;
    std::string_view name = line.substr(0, colon);
    std::string_view number = line.substr(colon + 2);
    std::uint64_t v = 0;
    std::from_chars(number.data(), number.data() + number.size(), v);
    if (name == "values") {
      l.values_count = static_cast<std::size_t>(v % 4096);
      continue;
    }
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    // What the real source makes of a kernel string: at most
    // ETH_GSTRING_LEN (32) bytes, cut at the first NUL.
    name = name.substr(0, 32);
    name = name.substr(0, name.find('\0'));
    l.names.emplace_back(name);
    l.values.push_back(v);
    if (l.names.size() >= 4096) break;
  }
  return l;
}

class ListingSource final : public KernelSource {
 public:
  Listing now;
  std::uint32_t names_extra = 0;  // for the second interface

  Dump<LinkRecord> dump_links() override {
    Dump<LinkRecord> d;
    for (int i : {4, 5}) {
      LinkRecord l;
      l.ifindex = i;
      l.name = i == 4 ? "ens1f0np0" : "ens2f0";
      l.mac = "0c:42:a1:00:00:01";
      l.operstate = 6;
      l.carrier = 1;
      l.stat_count = kLinkStatCount;
      d.records.push_back(l);
    }
    return d;
  }
  Dump<QdiscRecord> dump_qdiscs() override { return {}; }
  Status driver_info(const std::string& ifname, DriverInfo* out) override {
    *out = {ifname == "ens1f0np0" ? "mlx5_core" : "ice", "1.0", "0000:17:00.0"};
    return Status::kOk;
  }
  Status link_speed(const std::string&, std::optional<std::uint32_t>* mbps) override {
    *mbps = 400000;
    return Status::kOk;
  }
  Status stats_count(const std::string& ifname, std::uint32_t* count) override {
    *count = static_cast<std::uint32_t>(now.names.size()) + (ifname == "ens2f0" ? names_extra : 0);
    return Status::kOk;
  }
  Status stats_names(const std::string&, std::uint32_t count,
                     std::vector<std::string>* names) override {
    *names = now.names;
    names->resize(std::min<std::size_t>(count, names->size()));
    return Status::kOk;
  }
  Status stats_values(const std::string&, std::uint32_t count,
                      std::vector<std::uint64_t>* values) override {
    *values = now.values;
    values->resize(now.values_count ? *now.values_count
                                    : std::min<std::size_t>(count, values->size()));
    return Status::kOk;
  }
  Status pause_stats(Dump<PauseStats>*) override { return Status::kUnsupported; }
  Status fec_stats(Dump<FecStats>*) override { return Status::kUnsupported; }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text = fuzz::as_text(data, size);
  NicOptions options;
  options.qdiscs = false;
  options.protocol_statistics = false;
  options.max_driver_counters = 64;
  auto src = std::make_unique<ListingSource>();
  ListingSource* source = src.get();
  source->names_extra = size % 3;
  NicCollector collector(Roots{"/nonexistent/sys", "/nonexistent/proc"}, options, std::move(src));

  for (int round = 0; round < 3 && !text.empty(); ++round) {
    auto [listing, rest] = fuzz::split_once(text, "\n--\n");
    text = rest;
    source->now = parse_listing(listing);
    MetricSink sink(collector.metrics());
    CollectContext ctx{std::chrono::steady_clock::now() + std::chrono::seconds(10), nullptr};
    collector.collect(ctx, sink);
    for (const std::string& v : sink.violations())
      std::fprintf(stderr, "violation: %s\n", v.c_str());
    require(sink.violations().empty(), "nic collector: the sink refused a sample");
  }
  return 0;
}
