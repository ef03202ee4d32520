// The real KernelSource: route netlink dumps through libnl (with our own
// request and parser), ethtool netlink through libnl-genl, and the
// SIOCETHTOOL ioctl for driver information, speed and driver statistics.

#include <linux/ethtool.h>
#include <linux/ethtool_netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include "nic/nic_kernel.hpp"
#include "nodewatch/collector.hpp"
#include "nodewatch/unique_fd.hpp"

namespace nodewatch::nic {
namespace {

// A dump that does not complete within this time is abandoned: the kernel
// answers a dump in microseconds to milliseconds, so this only bounds a
// wedged kernel (the collector's own deadline is the scheduler's business).
constexpr int kReceiveTimeoutSeconds = 5;

// Driver statistics may grow between ETHTOOL_GSSET_INFO and the GSTRINGS or
// GSTATS that follows (the kernel writes as many as the driver has *now*,
// whatever length we pass): buffers get this much room beyond the count just
// read, and end at an inaccessible page (GuardedBuffer), so that a larger
// growth fails the call with EFAULT instead of writing past the buffer.
constexpr std::uint32_t kStatsSlack = 256;

class GuardedBuffer {
 public:
  GuardedBuffer() = default;
  ~GuardedBuffer() { release(); }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  // `bytes` (rounded up to 8) that end where the guard page begins, zeroed;
  // null when no mapping could be made. The mapping is kept for the next
  // call and grown only when a call needs more: a collection costs no
  // mmap, mprotect and munmap per interface (three system calls and the
  // page faults of a fresh mapping, twice: names and values).
  std::uint8_t* get(std::size_t bytes) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t rounded = (bytes + 7) / 8 * 8;
    if (rounded > data_bytes_) {
      release();
      const std::size_t data = (rounded + page - 1) / page * page;
      void* p =
          ::mmap(nullptr, data + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) return nullptr;
      base_ = static_cast<std::uint8_t*>(p);
      if (::mprotect(base_ + data, page, PROT_NONE) != 0) {
        ::munmap(base_, data + page);
        base_ = nullptr;
        return nullptr;
      }
      data_bytes_ = data;
    }
    std::uint8_t* start = base_ + data_bytes_ - rounded;
    std::memset(start, 0, rounded);
    return start;
  }

 private:
  void release() {
    if (base_ == nullptr) return;
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    ::munmap(base_, data_bytes_ + page);
    base_ = nullptr;
    data_bytes_ = 0;
  }
  std::uint8_t* base_ = nullptr;
  std::size_t data_bytes_ = 0;  // below the guard page
};
// A driver reporting more statistics than this is not believed.
constexpr std::uint32_t kMaxStats = 1 << 16;

struct SockDeleter {
  void operator()(nl_sock* s) const { nl_socket_free(s); }
};
using SockPtr = std::unique_ptr<nl_sock, SockDeleter>;
struct CbDeleter {
  void operator()(nl_cb* c) const { nl_cb_put(c); }
};
using CbPtr = std::unique_ptr<nl_cb, CbDeleter>;
struct MsgDeleter {
  void operator()(nl_msg* m) const { nlmsg_free(m); }
};
using MsgPtr = std::unique_ptr<nl_msg, MsgDeleter>;

SockPtr open_netlink(int protocol) {
  SockPtr sk(nl_socket_alloc());
  if (!sk) return nullptr;
  if (nl_connect(sk.get(), protocol) < 0) return nullptr;
  nl_socket_enable_msg_peek(sk.get());
  timeval tv{kReceiveTimeoutSeconds, 0};
  ::setsockopt(nl_socket_get_fd(sk.get()), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return sk;
}

// Empties the socket after an abandoned dump, so the next request does not
// read the tail of the old one. The socket itself is kept: it is bound to
// the network namespace it was created in.
void drain(nl_sock* sk) {
  std::uint8_t buf[8192];
  while (::recv(nl_socket_get_fd(sk), buf, sizeof(buf), MSG_DONTWAIT) > 0) {
  }
}

struct DumpState {
  std::function<void(Bytes)> on_message;
  std::uint32_t seq = 0;
  bool done = false;
};

// Replies to an earlier, abandoned request (a timeout) carry its sequence
// number: skipped rather than taken as this dump's.
int on_seq_check(nl_msg* msg, void* arg) {
  return nlmsg_hdr(msg)->nlmsg_seq == static_cast<DumpState*>(arg)->seq ? NL_OK : NL_SKIP;
}

int on_valid(nl_msg* msg, void* arg) {
  auto* st = static_cast<DumpState*>(arg);
  nlmsghdr* h = nlmsg_hdr(msg);
  st->on_message(Bytes(reinterpret_cast<const std::uint8_t*>(h), h->nlmsg_len));
  return NL_OK;
}

int on_finish(nl_msg*, void* arg) {
  static_cast<DumpState*>(arg)->done = true;
  return NL_STOP;
}

// Sends `request` (already built) and reads the whole dump. Returns 0 or a
// negative libnl error.
int run_dump(nl_sock* sk, nl_msg* request, const std::function<void(Bytes)>& on_message) {
  CbPtr cb(nl_cb_alloc(NL_CB_DEFAULT));
  if (!cb) return -NLE_NOMEM;
  DumpState st{on_message, 0, false};
  nl_cb_set(cb.get(), NL_CB_VALID, NL_CB_CUSTOM, on_valid, &st);
  nl_cb_set(cb.get(), NL_CB_FINISH, NL_CB_CUSTOM, on_finish, &st);
  nl_cb_set(cb.get(), NL_CB_SEQ_CHECK, NL_CB_CUSTOM, on_seq_check, &st);
  int err = nl_send_auto(sk, request);
  if (err < 0) return err;
  st.seq = nlmsg_hdr(request)->nlmsg_seq;
  while (!st.done) {
    err = nl_recvmsgs(sk, cb.get());
    if (err < 0) break;
    if (!st.done && err == 0) {
      // nl_recv returns 0 on a receive timeout: the dump never finished.
      err = -NLE_AGAIN;
      break;
    }
  }
  if (err < 0) {
    drain(sk);
    return err;
  }
  return 0;
}

Status status_of_errno(int err) {
  switch (err) {
    case EOPNOTSUPP: return Status::kUnsupported;
    case ENODEV:
    case ENXIO: return Status::kGone;
    default: return Status::kError;
  }
}

class RealKernelSource final : public KernelSource {
 public:
  RealKernelSource()
      : route_(open_netlink(NETLINK_ROUTE)),
        genl_(open_netlink(NETLINK_GENERIC)),
        ioctl_fd_(open_ioctl_socket()) {
    if (!route_) {
      throw CollectError("netlink_error", "cannot open a route netlink socket: " +
                                              std::string(std::strerror(errno)));
    }
  }

  Dump<LinkRecord> dump_links() override {
    // The request carries no IFLA_EXT_MASK: without RTEXT_FILTER_VF the
    // kernel does not fill per-VF information under the RTNL lock (libnl's
    // rtnl_link_alloc_cache always asks for it).
    ifinfomsg ifi{};
    ifi.ifi_family = AF_UNSPEC;
    return dump<LinkRecord>(RTM_GETLINK, &ifi, sizeof(ifi), parse_link_message);
  }

  Dump<QdiscRecord> dump_qdiscs() override {
    tcmsg tc{};
    tc.tcm_family = AF_UNSPEC;
    return dump<QdiscRecord>(RTM_GETQDISC, &tc, sizeof(tc), parse_qdisc_message);
  }

  Status driver_info(const std::string& ifname, DriverInfo* out) override {
    ethtool_drvinfo info{};
    info.cmd = ETHTOOL_GDRVINFO;
    Status s = ethtool_ioctl(ifname, &info);
    if (s != Status::kOk) return s;
    out->driver = bounded(info.driver, sizeof(info.driver));
    out->firmware = bounded(info.fw_version, sizeof(info.fw_version));
    out->bus_info = bounded(info.bus_info, sizeof(info.bus_info));
    return Status::kOk;
  }

  Status link_speed(const std::string& ifname, std::optional<std::uint32_t>* mbps) override {
    // ETHTOOL_GLINKSETTINGS starts with a handshake: asked with 0 mask
    // words, the kernel answers with -(the number it uses), a constant of
    // the running kernel, then fills the settings when asked with it. The
    // masks (3 x nwords u32, nwords an s8) follow the fixed part.
    alignas(8) std::uint8_t buf[sizeof(ethtool_link_settings) + 3 * 127 * 4] = {};
    ethtool_link_settings base{};
    base.cmd = ETHTOOL_GLINKSETTINGS;
    base.link_mode_masks_nwords = nwords_;
    std::memcpy(buf, &base, sizeof(base));
    Status s = ethtool_ioctl(ifname, buf);
    if (s != Status::kOk) return s;
    std::memcpy(&base, buf, sizeof(base));
    if (base.link_mode_masks_nwords <= 0) {
      if (base.link_mode_masks_nwords == 0 || nwords_ != 0) return Status::kError;
      nwords_ = static_cast<std::int8_t>(-base.link_mode_masks_nwords);
      return link_speed(ifname, mbps);
    }
    std::uint32_t speed = base.speed;
    if (speed == 0 || speed == static_cast<std::uint32_t>(SPEED_UNKNOWN)) {
      mbps->reset();
    } else {
      *mbps = speed;
    }
    return Status::kOk;
  }

  Status stats_count(const std::string& ifname, std::uint32_t* count) override {
    alignas(8) std::uint8_t buf[sizeof(ethtool_sset_info) + sizeof(std::uint32_t)] = {};
    ethtool_sset_info info{};
    info.cmd = ETHTOOL_GSSET_INFO;
    info.sset_mask = std::uint64_t{1} << ETH_SS_STATS;
    std::memcpy(buf, &info, sizeof(info));
    Status s = ethtool_ioctl(ifname, buf);
    if (s != Status::kOk) return s;
    std::memcpy(&info, buf, sizeof(info));
    if ((info.sset_mask & (std::uint64_t{1} << ETH_SS_STATS)) == 0) return Status::kUnsupported;
    std::uint32_t n = 0;
    std::memcpy(&n, buf + sizeof(info), sizeof(n));
    if (n > kMaxStats) return Status::kError;
    *count = n;
    return Status::kOk;
  }

  Status stats_names(const std::string& ifname, std::uint32_t count,
                     std::vector<std::string>* names) override {
    std::uint32_t room = count + kStatsSlack;
    std::uint8_t* buf =
        guarded_.get(sizeof(ethtool_gstrings) + std::size_t{room} * ETH_GSTRING_LEN);
    if (buf == nullptr) return Status::kError;
    ethtool_gstrings hdr{};
    hdr.cmd = ETHTOOL_GSTRINGS;
    hdr.string_set = ETH_SS_STATS;
    hdr.len = count;
    std::memcpy(buf, &hdr, sizeof(hdr));
    Status s = ethtool_ioctl(ifname, buf);
    if (s != Status::kOk) return s;
    std::memcpy(&hdr, buf, sizeof(hdr));
    std::uint32_t n = std::min(hdr.len, room);
    names->clear();
    names->reserve(n);
    const char* base = reinterpret_cast<const char*>(buf + sizeof(ethtool_gstrings));
    for (std::uint32_t i = 0; i < n; ++i) {
      names->push_back(bounded(base + std::size_t{i} * ETH_GSTRING_LEN, ETH_GSTRING_LEN));
    }
    return Status::kOk;
  }

  Status stats_values(const std::string& ifname, std::uint32_t count,
                      std::vector<std::uint64_t>* values) override {
    std::uint32_t room = count + kStatsSlack;
    std::uint8_t* buf =
        guarded_.get(sizeof(ethtool_stats) + std::size_t{room} * sizeof(std::uint64_t));
    if (buf == nullptr) return Status::kError;
    ethtool_stats hdr{};
    hdr.cmd = ETHTOOL_GSTATS;
    hdr.n_stats = count;
    std::memcpy(buf, &hdr, sizeof(hdr));
    Status s = ethtool_ioctl(ifname, buf);
    if (s != Status::kOk) return s;
    std::memcpy(&hdr, buf, sizeof(hdr));
    std::uint32_t n = std::min(hdr.n_stats, room);
    values->resize(n);
    std::memcpy(values->data(), buf + sizeof(ethtool_stats), std::size_t{n} * 8);
    return Status::kOk;
  }

  Status pause_stats(Dump<PauseStats>* out) override {
    return ethtool_dump(ETHTOOL_MSG_PAUSE_GET, ETHTOOL_A_PAUSE_HEADER, &pause_supported_,
                        [&](Bytes m) {
                          if (auto rec = parse_ethtool_pause_reply(m)) {
                            out->records.push_back(*rec);
                          } else {
                            ++out->malformed;
                          }
                        });
  }

  Status fec_stats(Dump<FecStats>* out) override {
    return ethtool_dump(ETHTOOL_MSG_FEC_GET, ETHTOOL_A_FEC_HEADER, &fec_supported_, [&](Bytes m) {
      if (auto rec = parse_ethtool_fec_reply(m)) {
        out->records.push_back(*rec);
      } else {
        ++out->malformed;
      }
    });
  }

 private:
  static int open_ioctl_socket() {
    // Any socket carries SIOCETHTOOL to the device layer; AF_INET is what
    // ethtool uses, AF_UNIX serves a kernel built without IPv4.
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    return fd;
  }

  static std::string bounded(const char* s, std::size_t max) {
    return std::string(s, strnlen(s, max));
  }

  Status ethtool_ioctl(const std::string& ifname, void* data) {
    if (ioctl_fd_.get() < 0) return Status::kError;
    if (ifname.size() >= IFNAMSIZ) return Status::kError;
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, ifname.data(), ifname.size());
    ifr.ifr_data = static_cast<char*>(data);
    if (::ioctl(ioctl_fd_.get(), SIOCETHTOOL, &ifr) < 0) return status_of_errno(errno);
    return Status::kOk;
  }

  template <class Record, class Parse>
  Dump<Record> dump(int type, const void* header, std::size_t size, Parse parse) {
    Dump<Record> out;
    int err = 0;
    // A dump interrupted by a concurrent change (NLM_F_DUMP_INTR) is
    // inconsistent: done again, once.
    for (int attempt = 0; attempt < 2; ++attempt) {
      out = Dump<Record>{};
      MsgPtr msg(nlmsg_alloc_simple(type, NLM_F_REQUEST | NLM_F_DUMP));
      if (!msg || nlmsg_append(msg.get(), const_cast<void*>(header), size, NLMSG_ALIGNTO) < 0) {
        throw CollectError("netlink_error", "cannot build a netlink request");
      }
      err = run_dump(route_.get(), msg.get(), [&](Bytes m) {
        if (auto rec = parse(m)) {
          out.records.push_back(std::move(*rec));
        } else {
          ++out.malformed;
        }
      });
      if (err != -NLE_DUMP_INTR) break;
    }
    if (err < 0) {
      throw CollectError("netlink_error", std::string("netlink dump failed: ") + nl_geterror(err));
    }
    return out;
  }

  Status ethtool_dump(std::uint8_t cmd, int header_attr, bool* supported,
                      const std::function<void(Bytes)>& fn) {
    if (!*supported || !genl_) return Status::kUnsupported;
    if (family_ < 0) {
      family_ = genl_ctrl_resolve(genl_.get(), ETHTOOL_GENL_NAME);
      if (family_ < 0) {
        // No "ethtool" family: kernel before 5.6 or built without it.
        *supported = false;
        return Status::kUnsupported;
      }
    }
    MsgPtr msg(nlmsg_alloc());
    if (!msg) return Status::kError;
    if (!genlmsg_put(msg.get(), NL_AUTO_PORT, NL_AUTO_SEQ, family_, 0, NLM_F_DUMP, cmd,
                     ETHTOOL_GENL_VERSION)) {
      return Status::kError;
    }
    nlattr* nest = nla_nest_start(msg.get(), header_attr | NLA_F_NESTED);
    if (nest == nullptr || nla_put_u32(msg.get(), ETHTOOL_A_HEADER_FLAGS, ETHTOOL_FLAG_STATS) < 0) {
      return Status::kError;
    }
    nla_nest_end(msg.get(), nest);
    int err = run_dump(genl_.get(), msg.get(), fn);
    if (err == -NLE_OPNOTSUPP || err == -NLE_INVAL) {
      // The kernel knows the family but not this request or the statistics
      // flag (5.6 to 5.9 for pause, before 5.13 for FEC): not asked again.
      *supported = false;
      return Status::kUnsupported;
    }
    return err < 0 ? Status::kError : Status::kOk;
  }

  SockPtr route_;
  SockPtr genl_;
  UniqueFd ioctl_fd_;
  GuardedBuffer guarded_;  // GSTRINGS and GSTATS, one after the other
  std::int8_t nwords_ = 0;
  int family_ = -1;
  bool pause_supported_ = true;
  bool fec_supported_ = true;
};

}  // namespace

std::unique_ptr<KernelSource> make_kernel_source() {
  return std::make_unique<RealKernelSource>();
}

}  // namespace nodewatch::nic
