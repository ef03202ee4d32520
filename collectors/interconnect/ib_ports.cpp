#include "interconnect/ib_ports.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <filesystem>
#include <set>
#include <system_error>
#include <utility>

namespace nodewatch::interconnect {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kInfo = "nodewatch_interconnect_port_info";
constexpr std::string_view kState = "nodewatch_interconnect_port_state";
constexpr std::string_view kPhysState = "nodewatch_interconnect_port_physical_state";
constexpr std::string_view kRate = "nodewatch_interconnect_port_rate_bytes_per_second";
constexpr std::string_view kWidth = "nodewatch_interconnect_port_width";
constexpr std::string_view kStateChanges = "nodewatch_interconnect_port_state_changes_total";
constexpr std::string_view kPmaGeneric = "nodewatch_interconnect_port_pma_total";
constexpr std::string_view kHwGeneric = "nodewatch_interconnect_hw_counters_total";

struct CuratedMetric {
  std::string_view name;
  std::string_view unit;
  std::string_view help;
};

// Indexed by PmaMetric.
constexpr std::array<CuratedMetric, static_cast<std::size_t>(PmaMetric::kCount)> kPmaMetrics = {{
    {"nodewatch_interconnect_port_transmitted_bytes_total", "bytes",
     "Data bytes sent by the port, from the PMA counter port_xmit_data (4-byte words, times 4); "
     "on mlx5 RoCE ports RDMA traffic only."},
    {"nodewatch_interconnect_port_received_bytes_total", "bytes",
     "Data bytes received by the port, from the PMA counter port_rcv_data (4-byte words, times 4); "
     "on mlx5 RoCE ports RDMA traffic only."},
    {"nodewatch_interconnect_port_transmitted_packets_total", "",
     "Packets sent by the port (PMA port_xmit_packets)."},
    {"nodewatch_interconnect_port_received_packets_total", "",
     "Packets received by the port (PMA port_rcv_packets)."},
    {"nodewatch_interconnect_port_symbol_errors_total", "",
     "Minor link errors on any lane (PMA symbol_error, 16 bits, saturates)."},
    {"nodewatch_interconnect_port_link_downed_total", "",
     "Times link error recovery failed and the link went down (PMA link_downed, 8 bits, "
     "saturates)."},
    {"nodewatch_interconnect_port_link_error_recovery_total", "",
     "Times link error recovery succeeded (PMA link_error_recovery, 8 bits, saturates)."},
    {"nodewatch_interconnect_port_receive_errors_total", "",
     "Received packets with an error, e.g. a bad CRC (PMA port_rcv_errors)."},
    {"nodewatch_interconnect_port_receive_remote_physical_errors_total", "",
     "Received packets marked bad elsewhere in the fabric (PMA port_rcv_remote_physical_errors)."},
    {"nodewatch_interconnect_port_transmit_discards_total", "",
     "Outbound packets discarded because the port was down or congested (PMA "
     "port_xmit_discards)."},
    {"nodewatch_interconnect_port_transmit_wait_total", "",
     "Ticks during which the port had data to send but no credits (PMA port_xmit_wait)."},
    {"nodewatch_interconnect_port_local_link_integrity_errors_total", "",
     "Times local physical errors exceeded their threshold (PMA local_link_integrity_errors)."},
    {"nodewatch_interconnect_port_excessive_buffer_overrun_errors_total", "",
     "Input buffer overruns, a flow-control fault (PMA excessive_buffer_overrun_errors)."},
    {"nodewatch_interconnect_port_vl15_dropped_total", "",
     "Management (VL15) packets dropped for lack of buffers (PMA VL15_dropped)."},
}};

// Indexed by HwMetric.
constexpr std::array<CuratedMetric, static_cast<std::size_t>(HwMetric::kCount)> kHwMetrics = {{
    {"nodewatch_interconnect_roce_ecn_marked_packets_total", "",
     "RoCEv2 packets received with ECN congestion marks (hw_counters np_ecn_marked_roce_packets)."},
    {"nodewatch_interconnect_roce_cnp_sent_total", "",
     "Congestion notification packets sent by the notification point (hw_counters np_cnp_sent)."},
    {"nodewatch_interconnect_roce_cnp_handled_total", "",
     "Congestion notification packets handled by the reaction point (hw_counters "
     "rp_cnp_handled)."},
    {"nodewatch_interconnect_roce_cnp_ignored_total", "",
     "Congestion notification packets received and ignored; should stay 0 with DCQCN on "
     "(hw_counters rp_cnp_ignored)."},
    {"nodewatch_interconnect_roce_out_of_buffer_total", "",
     "Packets dropped for lack of a posted receive buffer (hw_counters out_of_buffer)."},
    {"nodewatch_interconnect_roce_out_of_sequence_total", "",
     "Packets received with an out-of-sequence PSN (hw_counters out_of_sequence)."},
    {"nodewatch_interconnect_roce_packet_sequence_errors_total", "",
     "NAK sequence-error packets received (hw_counters packet_seq_err)."},
    {"nodewatch_interconnect_roce_local_ack_timeouts_total", "",
     "Times a QP's ACK timer expired, a sign of a lossy fabric (hw_counters "
     "local_ack_timeout_err)."},
    {"nodewatch_interconnect_roce_retransmits_total", "",
     "Adaptive retransmissions (hw_counters roce_adp_retrans)."},
}};

// A held file descriptor (movable, closed on destruction).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// sysfs attributes are at most a page.
constexpr std::size_t kAttrBytes = 4096;

// One pread at offset 0 of a held attribute. Returns 0 or an errno.
int pread_attr(const Fd& fd, std::string* out) {
  if (!fd.valid()) return ENOENT;
  out->resize(kAttrBytes);
  ssize_t n = 0;
  do {
    n = ::pread(fd.get(), out->data(), out->size(), 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno;
  out->resize(static_cast<std::size_t>(n));
  return 0;
}

Fd open_attr(const std::string& path, int* err) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  *err = fd < 0 ? errno : 0;
  return Fd(fd);
}

// open + read + close. Returns 0 or an errno.
int read_attr(const std::string& path, std::string* out) {
  int err = 0;
  Fd fd = open_attr(path, &err);
  if (!fd.valid()) return err;
  return pread_attr(fd, out);
}

// Names in a directory, sorted; nullopt when it does not exist or cannot be listed.
std::optional<std::vector<std::string>> list_dir(const std::string& dir, std::error_code* ec) {
  std::vector<std::string> out;
  fs::directory_iterator it(dir, *ec);
  for (; !*ec && it != fs::directory_iterator(); it.increment(*ec)) {
    out.push_back(it->path().filename().native());
  }
  if (*ec) return std::nullopt;
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<unsigned> parse_port_dir(std::string_view name) {
  if (name.empty() || name.size() > 3) return std::nullopt;
  unsigned v = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v == 0 || v > 255) return std::nullopt;
  return v;
}

std::optional<std::regex> compile(const std::string& pattern) {
  if (pattern.empty()) return std::nullopt;
  return std::regex(pattern, std::regex::ECMAScript);
}

// Counter values go into doubles; below 2^53 they are exact.
double as_double(std::uint64_t v) {
  return static_cast<double>(v);
}

// A read of the device's or port's facts that may be missing.
std::string read_fact(const std::string& path, bool* missing) {
  std::string buf;
  if (read_attr(path, &buf) != 0) {
    *missing = true;
    return {};
  }
  return attribute_label(buf);
}

}  // namespace

// What one device produced, handed to the sink only when the device did
// not vanish half-way (its errors are then not counted either).
class IbPorts::Staging {
 public:
  void add(std::string_view name, std::initializer_list<std::string_view> labels, double value) {
    samples_.push_back({name, std::vector<std::string>(labels.begin(), labels.end()), value});
  }
  void error(std::string_view reason, std::uint64_t n = 1) {
    errors_.emplace_back(std::string(reason), n);
  }
  void flush(MetricSink& out) {
    for (const Sample& s : samples_) out.add(s.name, s.labels, s.value);
    for (const auto& [reason, n] : errors_) out.error(reason, n);
  }

 private:
  struct Sample {
    std::string_view name;  // one of the static names of this file
    std::vector<std::string> labels;
    double value;
  };
  std::vector<Sample> samples_;
  std::vector<std::pair<std::string, std::uint64_t>> errors_;
};

struct IbPorts::Port {
  unsigned number = 0;
  std::string label;  // "1"
  std::string dir;
  Fd state;
  Fd phys_state;
  Fd rate;
  std::string link_layer;
  std::string netdev;
  std::map<std::string, Fd, std::less<>> hw_fds;  // sysfs fallback only
  std::map<std::string, WrapAccumulator, std::less<>> hw_acc;
  bool pma_read = false;
  std::chrono::steady_clock::time_point pma_at;
  std::array<std::optional<double>, static_cast<std::size_t>(PmaMetric::kCount)> pma;
  std::map<std::string, double, std::less<>> pma_generic;
  std::uint64_t last_seen = 0;
};

struct IbPorts::Device {
  std::string dir;
  std::string firmware;
  std::string board_id;
  std::string hca_type;
  std::string node_guid;
  std::uint64_t info_read = 0;
  std::map<unsigned, Port> ports;
  std::map<std::string, Fd, std::less<>> hw_fds;  // device-level hw_counters/
  std::map<std::string, WrapAccumulator, std::less<>> hw_acc;
};

namespace {

// Keeps `fds` in step with the files of `dir` (opened once, read with
// pread every collection). Returns the names, or nullopt when the
// directory does not exist.
template <class Sink>
bool sync_held_dir(const std::string& dir, std::map<std::string, Fd, std::less<>>* fds, Sink& out) {
  std::error_code ec;
  std::optional<std::vector<std::string>> names = list_dir(dir, &ec);
  if (!names) {
    fds->clear();
    if (ec != std::errc::no_such_file_or_directory) out.error("read_error");
    return false;
  }
  std::set<std::string_view> present(names->begin(), names->end());
  std::erase_if(*fds, [&](const auto& e) { return !present.contains(e.first); });
  for (const std::string& n : *names) {
    if (fds->contains(n)) continue;
    int err = 0;
    Fd fd = open_attr(dir + "/" + n, &err);
    if (!fd.valid()) {
      if (!is_gone_errno(err)) out.error("read_error");
      continue;
    }
    fds->emplace(n, std::move(fd));
  }
  return true;
}

template <class Sink>
void emit_hw(Sink& out, std::string_view device, std::string_view port, const std::string& name,
             std::uint64_t value) {
  HwMetric m = classify_hw_counter(name);
  if (m == HwMetric::kSkip) return;
  if (m == HwMetric::kGeneric) {
    std::string label = attribute_label(name);
    out.add(kHwGeneric, {device, port, label}, as_double(value));
    return;
  }
  out.add(kHwMetrics[static_cast<std::size_t>(m)].name, {device, port}, as_double(value));
}

enum class ReadOutcome { kOk, kGone };

// Reads every held hw_counters file, accumulates and emits.
template <class Sink>
ReadOutcome read_held_hw(std::map<std::string, Fd, std::less<>>& fds,
                         std::map<std::string, WrapAccumulator, std::less<>>& acc,
                         std::string_view device, std::string_view port, Sink& out) {
  std::string buf;
  for (const auto& [name, fd] : fds) {
    if (classify_hw_counter(name) == HwMetric::kSkip) continue;
    int err = pread_attr(fd, &buf);
    if (err != 0) {
      if (is_gone_errno(err)) return ReadOutcome::kGone;
      out.error(read_error_reason(err));
      continue;
    }
    Counter c = parse_counter(buf);
    if (c.reading != CounterReading::kValue) {
      out.error("parse_error");
      continue;
    }
    std::uint64_t v = acc[name].update(c.value, hw_counter_is_32bit(name));
    emit_hw(out, device, port, name, v);
  }
  return ReadOutcome::kOk;
}

}  // namespace

IbPorts::IbPorts(Roots roots, IbOptions options, std::unique_ptr<HwCounterSource> hw_source,
                 std::unique_ptr<VerbsSource> verbs, Clock clock)
    : roots_(std::move(roots)),
      class_dir_((roots_.sysfs / "class" / "infiniband").native()),
      options_(std::move(options)),
      include_(compile(options_.devices_include)),
      exclude_(compile(options_.devices_exclude)),
      hw_source_(std::move(hw_source)),
      verbs_(std::move(verbs)),
      clock_(std::move(clock)) {}

IbPorts::~IbPorts() = default;

std::vector<MetricDesc> IbPorts::metric_descs() {
  auto desc = [](std::string_view name, MetricType type, std::string_view unit,
                 std::string_view help, std::vector<std::string> labels) {
    return MetricDesc{std::string(name), type, std::string(unit), std::string(help),
                      std::move(labels)};
  };
  const std::vector<std::string> port{"device", "port"};
  std::vector<MetricDesc> d;
  d.push_back(desc(
      kInfo, MetricType::kGauge, "",
      "An InfiniBand or RoCE port, value 1: link_layer InfiniBand or Ethernet, netdev "
      "the RoCE network device, and the device's GUID, firmware, board and type.",
      {"device", "port", "link_layer", "netdev", "node_guid", "firmware", "board_id", "hca_type"}));
  d.push_back(desc(kState, MetricType::kGauge, "",
                   "Logical port state: 1 down, 2 init, 3 armed, 4 active, 5 active defer.", port));
  d.push_back(desc(kPhysState, MetricType::kGauge, "",
                   "Physical port state: 2 polling, 3 disabled, 4 training, 5 LinkUp, 6 link "
                   "error recovery.",
                   port));
  d.push_back(desc(kRate, MetricType::kGauge, "bytes_per_second",
                   "Data rate the port trained to, width times lane speed (ports/N/rate).", port));
  d.push_back(desc(kWidth, MetricType::kGauge, "",
                   "Lanes the port trained to (the 4X of ports/N/rate); fewer than the cable's "
                   "lanes is a degraded link.",
                   port));
  d.push_back(desc(kStateChanges, MetricType::kCounter, "",
                   "Port state transitions (PORT_ACTIVE and PORT_ERR events from libibverbs) "
                   "since the daemon opened the device; absent without /dev/infiniband.",
                   port));
  for (const CuratedMetric& m : kPmaMetrics)
    d.push_back(desc(m.name, MetricType::kCounter, m.unit, m.help, port));
  d.push_back(desc(kPmaGeneric, MetricType::kCounter, "",
                   "Other PMA counters of the port (counters/ and counters_ext/), by file name: "
                   "unicast and multicast packets, constraint and switch relay errors.",
                   {"device", "port", "counter"}));
  for (const CuratedMetric& m : kHwMetrics)
    d.push_back(desc(m.name, MetricType::kCounter, m.unit, m.help, port));
  d.push_back(desc(kHwGeneric, MetricType::kCounter, "",
                   "Driver hw_counters without a curated name, by counter; port 0 is the "
                   "device-level hw_counters.",
                   {"device", "port", "counter"}));
  return d;
}

bool IbPorts::is_selected(const std::string& name) const {
  if (include_ && !std::regex_search(name, *include_)) return false;
  if (exclude_ && std::regex_search(name, *exclude_)) return false;
  return true;
}

std::size_t IbPorts::tracked_devices() const {
  return devices_.size();
}

std::size_t IbPorts::held_descriptors() const {
  std::size_t n = 0;
  for (const auto& [name, dev] : devices_) {
    n += dev->hw_fds.size();
    for (const auto& [num, p] : dev->ports) {
      n += p.hw_fds.size();
      n += (p.state.valid() ? 1 : 0) + (p.phys_state.valid() ? 1 : 0) + (p.rate.valid() ? 1 : 0);
    }
  }
  return n;
}

void IbPorts::collect(const CollectContext& ctx, MetricSink& out) {
  ++cycle_;
  std::error_code ec;
  std::optional<std::vector<std::string>> listed = list_dir(class_dir_, &ec);
  if (!listed) {
    if (ec == std::errc::no_such_file_or_directory) {
      // No RDMA device on this node (or none any more).
      devices_.clear();
      verbs_->sync({});
      return;
    }
    throw CollectError("read_error", "cannot list " + class_dir_ + ": " + ec.message());
  }
  std::vector<std::string> names;
  for (std::string& n : *listed) {
    if (is_valid_utf8(n) && is_selected(n)) names.push_back(std::move(n));
  }
  if (std::uint64_t failed = verbs_->sync(names); failed > 0) out.error("verbs_error", failed);
  bool netlink_ok = !names.empty() && hw_source_->begin_cycle();

  std::set<std::string, std::less<>> seen;
  bool complete = true;
  for (const std::string& name : names) {
    if (ctx.should_stop()) {
      complete = false;
      break;
    }
    // A held descriptor that reads ENODEV means the device went away; when
    // it came back under the same name (a driver reload between two
    // collections), the second pass opens it afresh.
    for (int attempt = 0; attempt < 2; ++attempt) {
      auto it = devices_.find(name);
      if (it == devices_.end()) {
        auto dev = std::make_unique<Device>();
        dev->dir = class_dir_ + "/" + name;
        it = devices_.emplace(name, std::move(dev)).first;
      }
      // Emits into a scratch sink first: a device that vanishes half-way
      // must not leave half of its series behind.
      Staging staged;
      bool ok = collect_device(name, *it->second, netlink_ok, staged);
      if (ok) {
        staged.flush(out);
        seen.insert(name);
        break;
      }
      devices_.erase(it);
      if (::access((class_dir_ + "/" + name).c_str(), F_OK) != 0) break;
    }
  }
  if (complete) {
    std::erase_if(devices_, [&](const auto& e) { return !seen.contains(e.first); });
  }
}

bool IbPorts::collect_device(const std::string& name, Device& dev, bool netlink_ok, Staging& out) {
  bool refresh = dev.info_read == 0 || cycle_ - dev.info_read >= kInfoRefreshCycles;
  if (refresh) {
    bool missing = false;
    std::uint64_t missing_count = 0;
    auto fact = [&](const char* file, std::string* dst) {
      missing = false;
      *dst = read_fact(dev.dir + "/" + file, &missing);
      if (missing) ++missing_count;
    };
    fact("fw_ver", &dev.firmware);
    fact("board_id", &dev.board_id);
    fact("hca_type", &dev.hca_type);
    fact("node_guid", &dev.node_guid);
    if (::access(dev.dir.c_str(), F_OK) != 0) return false;
    if (missing_count > 0) out.error("missing_attribute", missing_count);
    dev.info_read = cycle_;
  }

  std::error_code ec;
  std::optional<std::vector<std::string>> port_names = list_dir(dev.dir + "/ports", &ec);
  if (!port_names) {
    if (ec == std::errc::no_such_file_or_directory) return false;
    out.error("read_error");
    port_names.emplace();
  }
  auto now = clock_();
  for (const std::string& pn : *port_names) {
    std::optional<unsigned> number = parse_port_dir(pn);
    if (!number) continue;
    auto [it, inserted] = dev.ports.try_emplace(*number);
    Port& port = it->second;
    if (inserted) {
      port.number = *number;
      port.label = pn;
      port.dir = dev.dir + "/ports/" + pn;
    }
    if (inserted || refresh) {
      bool missing = false;
      port.link_layer = read_fact(port.dir + "/link_layer", &missing);
      if (missing) out.error("missing_attribute");
      // Only RoCE ports have a netdev; on InfiniBand ports the read fails.
      bool no_netdev = false;
      port.netdev = read_fact(port.dir + "/gid_attrs/ndevs/0", &no_netdev);
    }
    bool pma_due =
        !port.pma_read || now - port.pma_at + options_.pma_interval / 10 >= options_.pma_interval;
    if (!collect_port(dev, port, netlink_ok, pma_due, out)) return false;
    if (pma_due) {
      port.pma_read = true;
      port.pma_at = now;
    }
    port.last_seen = cycle_;
    std::string_view device = name;
    out.add(kInfo,
            {device, port.label, port.link_layer, port.netdev, dev.node_guid, dev.firmware,
             dev.board_id, dev.hca_type},
            1.0);
    if (std::optional<std::uint64_t> changes = verbs_->state_changes(name, port.number)) {
      out.add(kStateChanges, {device, port.label}, as_double(*changes));
    }
  }
  std::erase_if(dev.ports, [&](const auto& e) { return e.second.last_seen != cycle_; });

  // Device-level hw_counters (mlx5 in switchdev mode, some iWARP devices).
  if (sync_held_dir(dev.dir + "/hw_counters", &dev.hw_fds, out)) {
    if (read_held_hw(dev.hw_fds, dev.hw_acc, name, "0", out) == ReadOutcome::kGone) return false;
  }
  return true;
}

bool IbPorts::collect_port(Device& dev, Port& port, bool netlink_ok, bool pma_due, Staging& out) {
  const std::string device = dev.dir.substr(dev.dir.rfind('/') + 1);
  const std::string_view label = port.label;
  std::string buf;

  // state, phys_state, rate: held descriptors.
  struct Held {
    Fd* fd;
    const char* file;
  };
  for (Held h : {Held{&port.state, "state"}, Held{&port.phys_state, "phys_state"},
                 Held{&port.rate, "rate"}}) {
    if (!h.fd->valid()) {
      int err = 0;
      *h.fd = open_attr(port.dir + "/" + h.file, &err);
      if (!h.fd->valid()) {
        if (is_gone_errno(err)) return false;
        out.error("read_error");
        continue;
      }
    }
    int err = pread_attr(*h.fd, &buf);
    if (err != 0) {
      if (is_gone_errno(err)) return false;
      // Rates of a port whose link is down read EINVAL on some kernels.
      out.error(read_error_reason(err));
      continue;
    }
    if (h.fd == &port.rate) {
      std::optional<PortRate> rate = parse_rate(buf);
      if (!rate) {
        out.error("parse_error");
        continue;
      }
      out.add(kRate, {device, label}, rate->bytes_per_second);
      if (rate->width) out.add(kWidth, {device, label}, static_cast<double>(*rate->width));
      continue;
    }
    std::optional<unsigned> state = parse_numbered_state(buf);
    if (!state) {
      out.error("parse_error");
      continue;
    }
    out.add(h.fd == &port.state ? kState : kPhysState, {device, label},
            static_cast<double>(*state));
  }

  // hw_counters: netlink, else the sysfs files.
  bool from_netlink = false;
  if (netlink_ok) {
    int err = 0;
    if (auto counters = hw_source_->port_counters(device, port.number, &err)) {
      from_netlink = true;
      port.hw_fds.clear();
      for (const HwCounterEntry& e : *counters) {
        if (classify_hw_counter(e.name) == HwMetric::kSkip) continue;
        std::uint64_t v = port.hw_acc[e.name].update(e.value, hw_counter_is_32bit(e.name));
        emit_hw(out, device, label, e.name, v);
      }
    }
  }
  if (!from_netlink && sync_held_dir(port.dir + "/hw_counters", &port.hw_fds, out)) {
    if (read_held_hw(port.hw_fds, port.hw_acc, device, label, out) == ReadOutcome::kGone)
      return false;
  }

  // PMA counters: only every pma_interval.
  if (pma_due) {
    decltype(port.pma) pma{};
    std::map<std::string, double, std::less<>> generic;
    std::array<bool, static_cast<std::size_t>(PmaMetric::kCount)> from_ext{};
    for (bool ext : {false, true}) {
      const std::string dir = port.dir + (ext ? "/counters_ext" : "/counters");
      std::error_code ec;
      std::optional<std::vector<std::string>> files = list_dir(dir, &ec);
      if (!files) {
        if (ec != std::errc::no_such_file_or_directory) out.error("read_error");
        continue;
      }
      for (const std::string& f : *files) {
        int err = read_attr(dir + "/" + f, &buf);
        if (err != 0) {
          if (is_gone_errno(err)) {
            if (::access(port.dir.c_str(), F_OK) != 0) return false;
            continue;  // the file alone went away
          }
          out.error(read_error_reason(err));
          continue;
        }
        Counter c = parse_counter(buf);
        if (c.reading == CounterReading::kNoPma) {
          out.error("no_pma");
          continue;
        }
        if (c.reading == CounterReading::kMalformed) {
          out.error("parse_error");
          continue;
        }
        PmaFile pf = classify_pma_file(f, ext);
        double v = as_double(c.value) * static_cast<double>(pf.multiplier);
        if (pf.metric == PmaMetric::kGeneric) {
          generic[attribute_label(pf.label)] = v;
          continue;
        }
        auto i = static_cast<std::size_t>(pf.metric);
        // A counters_ext/ _64 file wins over its 32-bit counters/ twin.
        if (from_ext[i] && !pf.overrides) continue;
        pma[i] = v;
        from_ext[i] = pf.overrides;
      }
    }
    port.pma = pma;
    port.pma_generic = std::move(generic);
  }
  for (std::size_t i = 0; i < port.pma.size(); ++i) {
    if (port.pma[i]) out.add(kPmaMetrics[i].name, {device, label}, *port.pma[i]);
  }
  for (const auto& [name, v] : port.pma_generic) out.add(kPmaGeneric, {device, label, name}, v);
  return true;
}

}  // namespace nodewatch::interconnect
