#include "storage/mountstats.hpp"

#include <array>
#include <charconv>
#include <optional>
#include <system_error>

#include "storage/diskstats.hpp"

#include "nodewatch/text.hpp"

namespace nodewatch::storage {
namespace {

using text::is_space;
using text::next_token;
using text::trim;

bool parse_u64(std::string_view token, std::uint64_t* out) {
  if (token.empty()) return false;
  const char* end = token.data() + token.size();
  auto [ptr, ec] = std::from_chars(token.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

// Parses every remaining token of `rest` as a number into `out` (at most
// out.size() kept). Returns the count, or nullopt when one is not a number.
template <std::size_t N>
std::optional<std::size_t> parse_numbers(std::string_view rest, std::array<std::uint64_t, N>& out) {
  std::size_t count = 0;
  for (std::string_view t = next_token(rest); !t.empty(); t = next_token(rest)) {
    std::uint64_t v = 0;
    if (!parse_u64(t, &v)) return std::nullopt;
    if (count < N) out[count] = v;
    ++count;
  }
  return count;
}

// The value of `key=` in a comma-separated option list, or "".
std::string_view option_value(std::string_view opts, std::string_view key) {
  while (!opts.empty()) {
    std::size_t comma = opts.find(',');
    std::string_view item = opts.substr(0, comma);
    opts.remove_prefix(comma == std::string_view::npos ? opts.size() : comma + 1);
    if (item.size() > key.size() && item.substr(0, key.size()) == key && item[key.size()] == '=') {
      return item.substr(key.size() + 1);
    }
  }
  return {};
}

// The minimum xprt numbers per transport and statvers (see the header).
std::optional<std::size_t> xprt_min_fields(std::string_view protocol, bool v1_1) {
  if (protocol == "tcp") return v1_1 ? 13 : 10;
  if (protocol == "udp") return v1_1 ? 10 : 7;
  if (protocol == "rdma") return 10;
  return std::nullopt;
}

struct Block {
  NfsMount mount;
  bool nfs = false;
  bool broken = false;
  bool seen_xprt = false;
  bool seen_ops_header = false;
};

// "device SRC mounted on MP with fstype T [statvers=V]", or "no device ...".
// Returns false when the line does not have that shape.
bool parse_header(std::string_view line, Block* b) {
  std::string_view rest = line;
  std::string_view first = next_token(rest);
  std::string_view source;
  if (first == "no") {
    if (next_token(rest) != "device") return false;
  } else {
    source = next_token(rest);
    if (source.empty()) return false;
  }
  if (next_token(rest) != "mounted" || next_token(rest) != "on") return false;
  std::string_view mountpoint = next_token(rest);
  if (mountpoint.empty() || next_token(rest) != "with" || next_token(rest) != "fstype") {
    return false;
  }
  std::string_view fstype = next_token(rest);
  if (fstype.empty()) return false;
  std::string_view stats = next_token(rest);
  b->nfs = fstype == "nfs" || fstype == "nfs4";
  if (!b->nfs) return true;
  if (stats.substr(0, 9) != "statvers=" || stats.size() == 9) {
    b->broken = true;  // an NFS mount always prints its statistics
    return true;
  }
  b->mount.export_name = unescape_mount_field(source);
  b->mount.mountpoint = unescape_mount_field(mountpoint);
  b->mount.fstype = std::string(fstype);
  b->mount.statvers = std::string(stats.substr(9));
  b->mount.server = nfs_server(b->mount.export_name);
  return true;
}

void parse_xprt(std::string_view rest, Block* b) {
  std::string_view protocol = next_token(rest);
  std::array<std::uint64_t, 32> v{};
  std::optional<std::size_t> n = parse_numbers(rest, v);
  if (protocol.empty() || !n) {
    b->broken = true;
    return;
  }
  b->seen_xprt = true;
  NfsTransport& t = b->mount.transport;
  t.protocol = std::string(protocol);
  std::optional<std::size_t> min = xprt_min_fields(protocol, b->mount.statvers != "1.0");
  if (!min) return;  // a transport this parser does not know: protocol only
  if (*n < *min) {
    b->broken = true;
    return;
  }
  // A mount with nconnect=N (or session trunking) prints one xprt line per
  // transport: the mount's counters are their sum.
  if (protocol == "udp") {
    t.sends += v[2];
    t.receives += v[3];
    t.bad_xids += v[4];
  } else {
    t.connects += v[2];
    t.sends += v[5];
    t.receives += v[6];
    t.bad_xids += v[7];
  }
}

void parse_op(std::string_view line, Block* b, MountstatsResult* out) {
  std::string_view rest = line;
  std::string_view name = next_token(rest);
  if (name.size() < 2 || name.back() != ':') return;  // not an op line: ignored
  name.remove_suffix(1);
  std::array<std::uint64_t, 9> v{};
  std::optional<std::size_t> n = parse_numbers(rest, v);
  if (!n) {
    b->broken = true;
    return;
  }
  if (*n < 8) {
    ++out->skipped_op_lines;
    return;
  }
  NfsOpStats op;
  op.name = name;
  op.operations = v[0];
  op.transmissions = v[1];
  op.major_timeouts = v[2];
  op.sent_bytes = v[3];
  op.received_bytes = v[4];
  op.queue_ms = v[5];
  op.rtt_ms = v[6];
  op.execute_ms = v[7];
  op.has_errors = *n >= 9;
  op.errors = op.has_errors ? v[8] : 0;
  b->mount.ops.push_back(op);
}

void finish(Block& b, MountstatsResult* out) {
  if (!b.nfs) return;
  if (b.broken || !b.seen_xprt || !b.seen_ops_header) {
    ++out->malformed;
    return;
  }
  out->mounts.push_back(std::move(b.mount));
}

}  // namespace

MountstatsResult parse_mountstats(std::string_view text) {
  MountstatsResult out;
  Block block;
  bool in_block = false;
  while (!text.empty()) {
    bool complete = text.find('\n') != std::string_view::npos;
    std::string_view raw = next_line(text);
    std::string_view line = trim(raw);
    if (line.empty()) continue;
    if (line.substr(0, 7) == "device " || line.substr(0, 10) == "no device ") {
      if (in_block) finish(block, &out);
      block = Block{};
      in_block = true;
      if (!parse_header(line, &block)) {
        // Cannot tell whether it was an NFS mount: count it, skip its lines.
        ++out.malformed;
        in_block = false;
      }
      continue;
    }
    if (!in_block || !block.nfs || block.broken) continue;
    if (!complete) {
      // The kernel ends every line with a newline: this one was cut short.
      block.broken = true;
      continue;
    }
    if (line.substr(0, 5) == "opts:") {
      std::string_view opts = trim(line.substr(5));
      block.mount.version = std::string(option_value(opts, "vers"));
      if (block.mount.transport.protocol.empty()) {
        block.mount.transport.protocol = std::string(option_value(opts, "proto"));
      }
    } else if (line.substr(0, 5) == "xprt:") {
      parse_xprt(line.substr(5), &block);
    } else if (line == "per-op statistics") {
      block.seen_ops_header = true;
    } else if (block.seen_ops_header) {
      parse_op(line, &block, &out);
    }
  }
  if (in_block) finish(block, &out);
  return out;
}

std::string unescape_mount_field(std::string_view field) {
  std::string out;
  out.reserve(field.size());
  for (std::size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size() && field[i + 1] >= '0' && field[i + 1] <= '3' &&
        field[i + 2] >= '0' && field[i + 2] <= '7' && field[i + 3] >= '0' && field[i + 3] <= '7') {
      out.push_back(static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 +
                                      (field[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(field[i]);
    }
  }
  return out;
}

std::string nfs_server(std::string_view export_name) {
  std::size_t sep = export_name.find(":/");
  if (sep == std::string_view::npos) return {};
  std::string_view server = export_name.substr(0, sep);
  if (server.size() >= 2 && server.front() == '[' && server.back() == ']') {
    server = server.substr(1, server.size() - 2);
  }
  return std::string(server);
}

}  // namespace nodewatch::storage
