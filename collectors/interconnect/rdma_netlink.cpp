#include "interconnect/rdma_netlink.hpp"

#include <linux/netlink.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>
#include <rdma/rdma_netlink.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

namespace nodewatch::interconnect {
namespace {

constexpr std::uint16_t kStatGetType = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_STAT_GET);
constexpr std::uint16_t kGetType = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET);

std::size_t align4(std::size_t n) {
  return (n + 3) & ~std::size_t{3};
}

template <class T>
T load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// One attribute inside a payload.
struct Attr {
  std::uint16_t type = 0;  // without NLA_F_NESTED / NLA_F_NET_BYTEORDER
  std::span<const std::uint8_t> data;
};

// Walks the attributes of `payload`; false when one is truncated.
template <class F>
bool for_each_attr(std::span<const std::uint8_t> payload, F&& f) {
  while (payload.size() >= sizeof(nlattr)) {
    auto len = load<std::uint16_t>(payload.data());
    auto type = load<std::uint16_t>(payload.data() + 2);
    if (len < sizeof(nlattr) || len > payload.size()) return false;
    Attr a;
    a.type = static_cast<std::uint16_t>(type & NLA_TYPE_MASK);
    a.data = payload.subspan(sizeof(nlattr), len - sizeof(nlattr));
    if (!f(a)) return false;
    std::size_t step = std::min(align4(len), payload.size());
    payload = payload.subspan(step);
  }
  // Trailing bytes shorter than an attribute header: padding at most.
  return true;
}

std::optional<std::uint32_t> attr_u32(const Attr& a) {
  if (a.data.size() < 4) return std::nullopt;
  return load<std::uint32_t>(a.data.data());
}

std::string attr_string(const Attr& a) {
  std::string_view s(reinterpret_cast<const char*>(a.data.data()), a.data.size());
  std::size_t nul = s.find('\0');
  if (nul != std::string_view::npos) s = s.substr(0, nul);
  return std::string(s);
}

bool parse_hwcounters(std::span<const std::uint8_t> payload, std::vector<HwCounterEntry>* out) {
  return for_each_attr(payload, [&](const Attr& entry) {
    if (entry.type != RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY) return true;
    HwCounterEntry e;
    bool has_name = false;
    bool has_value = false;
    bool ok = for_each_attr(entry.data, [&](const Attr& a) {
      if (a.type == RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME) {
        e.name = attr_string(a);
        has_name = !e.name.empty();
      } else if (a.type == RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE) {
        if (a.data.size() < 8) return false;
        e.value = load<std::uint64_t>(a.data.data());
        has_value = true;
      }
      return true;
    });
    if (!ok || !has_name || !has_value) return false;
    out->push_back(std::move(e));
    return true;
  });
}

bool parse_nldev_payload(std::span<const std::uint8_t> payload, RdmaMessage* m) {
  return for_each_attr(payload, [&](const Attr& a) {
    switch (a.type) {
      case RDMA_NLDEV_ATTR_DEV_INDEX: m->dev_index = attr_u32(a); return m->dev_index.has_value();
      case RDMA_NLDEV_ATTR_DEV_NAME: m->dev_name = attr_string(a); return true;
      case RDMA_NLDEV_ATTR_PORT_INDEX:
        m->port_index = attr_u32(a);
        return m->port_index.has_value();
      case RDMA_NLDEV_ATTR_STAT_HWCOUNTERS:
        m->has_hwcounters = true;
        return parse_hwcounters(a.data, &m->hwcounters);
      default: return true;  // an attribute this parser does not use
    }
  });
}

// A libnl socket, freed with it.
struct SockDeleter {
  void operator()(nl_sock* s) const { nl_socket_free(s); }
};
using SockPtr = std::unique_ptr<nl_sock, SockDeleter>;
struct MsgDeleter {
  void operator()(nl_msg* m) const { nlmsg_free(m); }
};
using MsgPtr = std::unique_ptr<nl_msg, MsgDeleter>;

class NetlinkSource final : public HwCounterSource {
 public:
  bool begin_cycle() override {
    if (!sock_ && !open()) return false;
    std::vector<RdmaMessage> replies;
    int err = 0;
    if (!transact(kGetType, NLM_F_DUMP, std::nullopt, 0, &replies, &err)) {
      // A socket that failed once is not trusted further: the next
      // collection opens a new one.
      sock_.reset();
      return false;
    }
    indexes_.clear();
    for (const RdmaMessage& m : replies) {
      if (m.dev_index && !m.dev_name.empty()) indexes_[m.dev_name] = *m.dev_index;
    }
    return true;
  }

  std::optional<std::vector<HwCounterEntry>> port_counters(std::string_view device,
                                                           std::uint32_t port,
                                                           int* error) override {
    *error = 0;
    auto it = indexes_.find(device);
    if (!sock_ || it == indexes_.end()) return std::nullopt;
    std::vector<RdmaMessage> replies;
    if (!transact(kStatGetType, 0, it->second, port, &replies, error)) {
      if (*error == 0) sock_.reset();  // a malformed or lost reply: start again
      return std::nullopt;
    }
    for (RdmaMessage& m : replies) {
      if (m.has_hwcounters) return std::move(m.hwcounters);
    }
    *error = ENODATA;
    return std::nullopt;
  }

 private:
  bool open() {
    SockPtr s(nl_socket_alloc());
    if (!s) return false;
    nl_socket_disable_auto_ack(s.get());
    if (nl_connect(s.get(), NETLINK_RDMA) < 0) return false;
    nl_socket_enable_msg_peek(s.get());
    // The kernel answers synchronously; the timeout only bounds a reply
    // that never comes, within the collector's deadline.
    timeval tv{};
    tv.tv_sec = 2;
    ::setsockopt(nl_socket_get_fd(s.get()), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sock_ = std::move(s);
    return true;
  }

  // Sends one request and collects its reply. False on any failure; *error
  // set to the kernel's errno when it answered with one.
  bool transact(std::uint16_t type, int flags, std::optional<std::uint32_t> dev_index,
                std::uint32_t port, std::vector<RdmaMessage>* out, int* error) {
    MsgPtr msg(nlmsg_alloc_simple(type, NLM_F_REQUEST | flags));
    if (!msg) return false;
    if (dev_index) {
      if (nla_put_u32(msg.get(), RDMA_NLDEV_ATTR_DEV_INDEX, *dev_index) < 0 ||
          nla_put_u32(msg.get(), RDMA_NLDEV_ATTR_PORT_INDEX, port) < 0)
        return false;
    }
    if (nl_send_auto(sock_.get(), msg.get()) < 0) return false;
    std::uint32_t seq = nlmsg_hdr(msg.get())->nlmsg_seq;
    // A dump of a few devices fits in a handful of datagrams; the bound
    // stops a kernel (or a bug) that never sends NLMSG_DONE.
    for (int i = 0; i < 64; ++i) {
      sockaddr_nl peer{};
      unsigned char* buf = nullptr;
      int n = nl_recv(sock_.get(), &peer, &buf, nullptr);
      if (n <= 0) {
        std::free(buf);
        return false;
      }
      NlParse r = parse_rdma_messages(
          std::span<const std::uint8_t>(buf, static_cast<std::size_t>(n)), seq, out, error);
      std::free(buf);
      if (r == NlParse::kDone) return true;
      if (r != NlParse::kMore) return false;
    }
    return false;
  }

  SockPtr sock_;
  std::map<std::string, std::uint32_t, std::less<>> indexes_;
};

class DisabledSource final : public HwCounterSource {
 public:
  bool begin_cycle() override { return false; }
  std::optional<std::vector<HwCounterEntry>> port_counters(std::string_view, std::uint32_t,
                                                           int* error) override {
    *error = 0;
    return std::nullopt;
  }
};

}  // namespace

NlParse parse_rdma_messages(std::span<const std::uint8_t> bytes, std::uint32_t seq,
                            std::vector<RdmaMessage>* out, int* error) {
  bool multipart = false;
  bool any = false;
  while (!bytes.empty()) {
    if (bytes.size() < sizeof(nlmsghdr)) return NlParse::kMalformed;
    auto hdr = load<nlmsghdr>(bytes.data());
    if (hdr.nlmsg_len < sizeof(nlmsghdr) || hdr.nlmsg_len > bytes.size()) {
      return NlParse::kMalformed;
    }
    std::span<const std::uint8_t> payload =
        bytes.subspan(sizeof(nlmsghdr), hdr.nlmsg_len - sizeof(nlmsghdr));
    bytes = bytes.subspan(std::min<std::size_t>(align4(hdr.nlmsg_len), bytes.size()));
    if (hdr.nlmsg_seq != seq) continue;
    any = true;
    if (hdr.nlmsg_flags & NLM_F_MULTI) multipart = true;
    if (hdr.nlmsg_type == NLMSG_DONE) return NlParse::kDone;
    if (hdr.nlmsg_type == NLMSG_NOOP) continue;
    if (hdr.nlmsg_type == NLMSG_ERROR) {
      if (payload.size() < sizeof(int)) return NlParse::kMalformed;
      int code = load<int>(payload.data());
      if (code == 0) return NlParse::kDone;  // an acknowledgement
      // The kernel sends a negative errno (-4095..-1, linux/err.h's
      // MAX_ERRNO); anything else is not its reply (and -INT_MIN overflows).
      if (code < -4095 || code > 0) return NlParse::kMalformed;
      *error = -code;
      return NlParse::kError;
    }
    if (RDMA_NL_GET_CLIENT(hdr.nlmsg_type) != RDMA_NL_NLDEV) continue;
    RdmaMessage m;
    if (!parse_nldev_payload(payload, &m)) return NlParse::kMalformed;
    out->push_back(std::move(m));
  }
  if (!any || multipart) return NlParse::kMore;
  return NlParse::kDone;
}

std::vector<std::uint8_t> build_stat_get_request(std::uint32_t seq, std::uint32_t dev_index,
                                                 std::uint32_t port) {
  std::vector<std::uint8_t> out(sizeof(nlmsghdr) + 2 * (sizeof(nlattr) + 4));
  nlmsghdr hdr{};
  hdr.nlmsg_len = static_cast<std::uint32_t>(out.size());
  hdr.nlmsg_type = kStatGetType;
  hdr.nlmsg_flags = NLM_F_REQUEST;
  hdr.nlmsg_seq = seq;
  std::memcpy(out.data(), &hdr, sizeof(hdr));
  std::size_t off = sizeof(hdr);
  for (auto [type, value] :
       {std::pair<std::uint16_t, std::uint32_t>{RDMA_NLDEV_ATTR_DEV_INDEX, dev_index},
        {RDMA_NLDEV_ATTR_PORT_INDEX, port}}) {
    nlattr a{};
    a.nla_len = sizeof(nlattr) + 4;
    a.nla_type = type;
    std::memcpy(out.data() + off, &a, sizeof(a));
    std::memcpy(out.data() + off + sizeof(a), &value, 4);
    off += sizeof(a) + 4;
  }
  return out;
}

std::unique_ptr<HwCounterSource> make_netlink_hw_counter_source() {
  return std::make_unique<NetlinkSource>();
}

std::unique_ptr<HwCounterSource> make_disabled_hw_counter_source() {
  return std::make_unique<DisabledSource>();
}

}  // namespace nodewatch::interconnect
