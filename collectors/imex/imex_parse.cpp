#include "imex/imex_parse.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstring>
#include <memory>
#include <utility>

namespace nodewatch::imex {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Calls f(line) for each line of `text`, its '#' comment cut off and
// trimmed, blank ones skipped.
template <class F>
void for_each_line(std::string_view text, F f) {
  while (!text.empty()) {
    std::size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    if (std::size_t hash = line.find('#'); hash != std::string_view::npos)
      line = line.substr(0, hash);
    line = trim(line);
    if (!line.empty()) f(line);
  }
}

// --- a bounded JSON reader: the subset nvidia-imex-ctl writes (objects,
// arrays, strings, numbers, true/false/null) into a small tree.

// A domain of 144 members is about 86,000 values (each member's fields and
// a connection to every other); a value costs about 100 bytes in the tree,
// so this bounds the tree at about 13 MiB.
constexpr int kMaxDepth = 16;
constexpr std::size_t kMaxValues = 1u << 17;

struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = Kind::kNull;
  std::string text;  // a string's value, a number's spelling, "true"/"false"
  // An object's keys and values, in order (a vector of pairs would need
  // Json complete here); an array's items are `values` alone.
  std::vector<std::string> keys;
  std::vector<Json> values;

  const Json* get(std::string_view key) const {
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return &values[i];
    return nullptr;
  }
  std::string string_of(std::string_view key) const {
    const Json* v = get(key);
    return v != nullptr && v->kind == Kind::kString ? v->text : std::string();
  }
};

class JsonReader {
 public:
  explicit JsonReader(std::string_view in) : in_(in) {}

  std::optional<Json> document(std::string* why) {
    Json root;
    if (!value(root, 0) || (skip(), pos_ != in_.size())) {
      if (why_.empty()) why_ = "trailing bytes";
      *why = "not JSON at byte " + std::to_string(pos_) + ": " + why_;
      return std::nullopt;
    }
    return root;
  }

 private:
  void skip() {
    while (pos_ < in_.size() &&
           (in_[pos_] == ' ' || in_[pos_] == '\t' || in_[pos_] == '\n' || in_[pos_] == '\r'))
      ++pos_;
  }
  bool fail(const char* why) {
    if (why_.empty()) why_ = why;
    return false;
  }
  bool literal(std::string_view word, Json& out, Json::Kind kind) {
    if (in_.substr(pos_, word.size()) != word) return fail("unexpected word");
    pos_ += word.size();
    out.kind = kind;
    out.text = std::string(word);
    return true;
  }
  static void utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  bool hex4(unsigned& cp) {
    if (pos_ + 4 > in_.size()) return fail("short \\u escape");
    cp = 0;
    auto [p, ec] = std::from_chars(in_.data() + pos_, in_.data() + pos_ + 4, cp, 16);
    if (ec != std::errc() || p != in_.data() + pos_ + 4) return fail("bad \\u escape");
    pos_ += 4;
    return true;
  }
  bool string(std::string& out) {
    ++pos_;  // the opening quote
    while (pos_ < in_.size()) {
      char c = in_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= in_.size()) break;
      char e = in_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xd800 && cp < 0xdc00) {
            unsigned lo = 0;
            if (in_.substr(pos_, 2) != "\\u") return fail("lone surrogate");
            pos_ += 2;
            if (!hex4(lo) || lo < 0xdc00 || lo > 0xdfff) return fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          } else if (cp >= 0xdc00 && cp < 0xe000) {
            return fail("lone surrogate");
          }
          utf8(out, cp);
          break;
        }
        default: return fail("bad escape");
      }
    }
    return fail("unterminated string");
  }
  bool number(Json& out) {
    std::size_t start = pos_;
    if (pos_ < in_.size() && in_[pos_] == '-') ++pos_;
    while (pos_ < in_.size() &&
           (std::isdigit(static_cast<unsigned char>(in_[pos_])) || in_[pos_] == '.' ||
            in_[pos_] == 'e' || in_[pos_] == 'E' || in_[pos_] == '+' || in_[pos_] == '-'))
      ++pos_;
    double d = 0;
    auto [p, ec] = std::from_chars(in_.data() + start, in_.data() + pos_, d);
    if (pos_ == start || ec != std::errc() || p != in_.data() + pos_) return fail("bad number");
    out.kind = Json::Kind::kNumber;
    out.text = std::string(in_.substr(start, pos_ - start));
    return true;
  }
  bool value(Json& out, int depth) {
    if (++values_ > kMaxValues) return fail("too many values");
    if (depth > kMaxDepth) return fail("nested too deep");
    skip();
    if (pos_ >= in_.size()) return fail("unexpected end");
    char c = in_[pos_];
    if (c == '"') {
      out.kind = Json::Kind::kString;
      return string(out.text);
    }
    if (c == 't') return literal("true", out, Json::Kind::kBool);
    if (c == 'f') return literal("false", out, Json::Kind::kBool);
    if (c == 'n') return literal("null", out, Json::Kind::kNull);
    if (c == '{' || c == '[') return container(out, depth, c == '{');
    return number(out);
  }
  bool container(Json& out, int depth, bool object) {
    out.kind = object ? Json::Kind::kObject : Json::Kind::kArray;
    const char close = object ? '}' : ']';
    ++pos_;
    skip();
    if (pos_ < in_.size() && in_[pos_] == close) {
      ++pos_;
      return true;
    }
    while (true) {
      skip();
      if (object) {
        if (pos_ >= in_.size() || in_[pos_] != '"') return fail("expected a key");
        std::string key;
        if (!string(key)) return false;
        skip();
        if (pos_ >= in_.size() || in_[pos_] != ':') return fail("expected ':'");
        ++pos_;
        out.keys.push_back(std::move(key));
      }
      out.values.emplace_back();
      if (!value(out.values.back(), depth + 1)) return false;
      skip();
      if (pos_ >= in_.size()) return fail("unexpected end");
      if (in_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (in_[pos_] == close) {
        ++pos_;
        return true;
      }
      return fail(object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
  }

  std::string_view in_;
  std::size_t pos_ = 0;
  std::size_t values_ = 0;
  std::string why_;
};

// The daemon's state word as the `state` label spells it; "" for a word
// that is none of them.
std::string_view daemon_state_of(std::string_view word) {
  const std::string l = lower(trim(word));
  for (std::string_view s : kDaemonStates)
    if (l == s) return s;
  return {};
}

// "10" < "9" as strings; as numbers where both are.
bool index_less(const std::string& a, const std::string& b) {
  unsigned long x = 0, y = 0;
  auto [pa, ea] = std::from_chars(a.data(), a.data() + a.size(), x);
  auto [pb, eb] = std::from_chars(b.data(), b.data() + b.size(), y);
  if (ea == std::errc() && eb == std::errc() && pa == a.data() + a.size() &&
      pb == b.data() + b.size())
    return x < y;
  return a < b;
}

// An address in a canonical spelling (IPv4-mapped IPv6 as IPv4); "" for
// anything that is not an address.
std::string canonical_address(std::string_view s) {
  std::string z(trim(s));
  if (z.find('\0') != std::string::npos) return "";  // "10.0.0.9\u0000junk" is no address
  unsigned char buf[16];
  char out[INET6_ADDRSTRLEN];
  if (::inet_pton(AF_INET, z.c_str(), buf) == 1)
    return ::inet_ntop(AF_INET, buf, out, sizeof out) != nullptr ? out : "";
  if (::inet_pton(AF_INET6, z.c_str(), buf) == 1) {
    static constexpr unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(buf, kMapped, 12) == 0)
      return ::inet_ntop(AF_INET, buf + 12, out, sizeof out) != nullptr ? out : "";
    return ::inet_ntop(AF_INET6, buf, out, sizeof out) != nullptr ? out : "";
  }
  return "";
}

}  // namespace

Config parse_config(std::string_view text) {
  Config c;
  for_each_line(text, [&](std::string_view line) {
    std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) return;
    std::string_view key = trim(line.substr(0, eq));
    std::string value(trim(line.substr(eq + 1)));
    if (key == "IMEX_NODE_CONFIG_FILE") {
      if (!value.empty()) c.nodes_file = value;
    } else if (key == "IMEX_CMD_ENABLED") {
      c.command_enabled = value == "1";
    } else if (key == "IMEX_CMD_PORT") {
      c.command_port = value;
    } else if (key == "IMEX_CMD_UNIX_DOMAIN_PATH") {
      c.command_socket = value;
    } else if (key == "BIND_INTERFACE_IP") {
      c.bind_ip = value;
    }
  });
  return c;
}

std::vector<std::string> parse_nodes(std::string_view text) {
  std::vector<std::string> out;
  for_each_line(text, [&](std::string_view line) {
    if (out.size() < kMaxMembers) out.emplace_back(line);
  });
  return out;
}

StateAnswer parse_state(std::string_view output, int exit_status) {
  std::string_view first = trim(output.substr(0, output.find('\n')));
  if (exit_status == 0) {
    std::string_view s = daemon_state_of(output);
    if (!s.empty()) return {s, {}};
  }
  const std::string l = lower(output);
  // gRPC's UNAVAILABLE (14): nothing listens where the configuration says,
  // or the connection was refused; -1: no answer in time.
  if (exit_status == -1 || l.find("error code: 14") != std::string::npos ||
      l.find("failed to connect") != std::string::npos ||
      l.find("connection refused") != std::string::npos)
    return {"unreachable", std::string(first)};
  if (l.find("permission denied") != std::string::npos)
    return {"no_permission", std::string(first)};
  return {"query_failed", first.empty() ? "exit status " + std::to_string(exit_status)
                                        : std::string(first.substr(0, 200))};
}

std::optional<Domain> parse_domain(std::string_view json, std::string* why) {
  std::optional<Json> doc = JsonReader(json).document(why);
  if (!doc) return std::nullopt;
  if (doc->kind != Json::Kind::kObject) {
    *why = "not a JSON object";
    return std::nullopt;
  }
  Domain d;
  d.status = lower(doc->string_of("status"));
  if (d.status != "up" && d.status != "degraded" && d.status != "down") {
    *why =
        "no domain status (up, degraded, down): \"" + doc->string_of("status").substr(0, 40) + "\"";
    return std::nullopt;
  }
  const Json* nodes = doc->get("nodes");
  if (nodes == nullptr || nodes->kind != Json::Kind::kObject) {
    *why = "no \"nodes\" object";
    return std::nullopt;
  }
  if (nodes->keys.size() > kMaxMembers) {
    *why =
        std::to_string(nodes->keys.size()) + " members, more than " + std::to_string(kMaxMembers);
    return std::nullopt;
  }
  for (std::size_t i = 0; i < nodes->keys.size(); ++i) {
    const Json& n = nodes->values[i];
    if (n.kind != Json::Kind::kObject) continue;
    Domain::Member m;
    m.index = nodes->keys[i];
    m.host = n.string_of("host");
    m.host_name = n.string_of("hostName");
    std::string_view s = daemon_state_of(n.string_of("status"));
    m.status = s.empty() ? "unknown" : std::string(s);
    m.version = n.string_of("version");
    if (const Json* c = n.get("connections"); c != nullptr && c->kind == Json::Kind::kObject) {
      for (const Json& cv : c->values) {
        if (cv.kind != Json::Kind::kObject || m.connections.size() >= kMaxMembers) continue;
        m.connections.push_back({cv.string_of("host"), cv.string_of("status")});
      }
    }
    d.members.push_back(std::move(m));
  }
  std::sort(d.members.begin(), d.members.end(),
            [](const Domain::Member& a, const Domain::Member& b) {
              return index_less(a.index, b.index);
            });
  return d;
}

const Domain::Member* local_member(const Domain& d, std::string_view bind_ip,
                                   const std::vector<std::string>& local_addresses) {
  auto same = [](std::string_view a, std::string_view b) {
    std::string x = canonical_address(a), y = canonical_address(b);
    return !x.empty() && x == y;
  };
  if (!trim(bind_ip).empty()) {
    for (const Domain::Member& m : d.members)
      if (same(m.host, bind_ip)) return &m;
    return nullptr;
  }
  for (const Domain::Member& m : d.members)
    for (const std::string& a : local_addresses)
      if (same(m.host, a)) return &m;
  return nullptr;
}

}  // namespace nodewatch::imex
