#include "samples.hpp"

#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace nodewatch {
namespace {

bool name_char(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

// Parses `{a="x",b="y"}` at the start of `s` into `out`; returns the rest,
// or false when malformed.
bool parse_labels(std::string_view& s, std::vector<std::pair<std::string, std::string>>* out) {
  s.remove_prefix(1);  // '{'
  while (true) {
    while (!s.empty() && (s.front() == ' ' || s.front() == ',')) s.remove_prefix(1);
    if (s.empty()) return false;
    if (s.front() == '}') {
      s.remove_prefix(1);
      return true;
    }
    std::size_t n = 0;
    while (n < s.size() && name_char(s[n], n == 0)) ++n;
    if (n == 0 || n + 1 >= s.size() || s[n] != '=' || s[n + 1] != '"') return false;
    std::string name(s.substr(0, n));
    s.remove_prefix(n + 2);
    std::string value;
    while (true) {
      if (s.empty()) return false;
      char c = s.front();
      s.remove_prefix(1);
      if (c == '"') break;
      if (c == '\\') {
        if (s.empty()) return false;
        char e = s.front();
        s.remove_prefix(1);
        value.push_back(e == 'n' ? '\n' : e);
      } else {
        value.push_back(c);
      }
    }
    out->emplace_back(std::move(name), std::move(value));
  }
}

bool parse_value(std::string_view s, double* out) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  auto end = s.find(' ');  // a timestamp may follow
  std::string_view v = s.substr(0, end);
  if (v == "+Inf" || v == "Inf") {
    *out = INFINITY;
    return true;
  }
  if (v == "-Inf") {
    *out = -INFINITY;
    return true;
  }
  if (v == "NaN") {
    *out = NAN;
    return true;
  }
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
  return ec == std::errc() && ptr == v.data() + v.size() && !v.empty();
}

}  // namespace

std::string_view Sample::label(std::string_view name) const {
  for (const auto& [k, v] : labels)
    if (k == name) return v;
  return {};
}

std::size_t Samples::add(std::string_view text) {
  std::size_t bad = 0;
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (line.empty() || line.front() == '#') continue;
    std::size_t n = 0;
    while (n < line.size() && name_char(line[n], n == 0)) ++n;
    if (n == 0) continue;
    std::string_view name = line.substr(0, n);
    if (wanted_ != nullptr && wanted_->find(name) == wanted_->end()) continue;
    std::string_view rest = line.substr(n);
    Sample sample;
    if (!rest.empty() && rest.front() == '{' && !parse_labels(rest, &sample.labels)) {
      ++bad;
      continue;
    }
    if (rest.empty() || rest.front() != ' ' || !parse_value(rest, &sample.value)) {
      ++bad;
      continue;
    }
    auto it = by_name_.find(name);
    if (it == by_name_.end()) it = by_name_.emplace(std::string(name), std::vector<Sample>{}).first;
    it->second.push_back(std::move(sample));
  }
  return bad;
}

void Samples::merge(const Samples& other) {
  for (const auto& [name, list] : other.by_name_) {
    auto& mine = by_name_[name];
    mine.insert(mine.end(), list.begin(), list.end());
  }
}

const std::vector<Sample>& Samples::of(std::string_view family) const {
  static const std::vector<Sample> kNone;
  // A family that was not asked for is never kept: reading one is a bug
  // (a name missing from the reader's FamilySet) that would read as "none".
  assert(wanted_ == nullptr || wanted_->count(family) != 0);
  auto it = by_name_.find(family);
  return it == by_name_.end() ? kNone : it->second;
}

const Sample* Samples::find(
    std::string_view family,
    std::initializer_list<std::pair<std::string_view, std::string_view>> labels) const {
  for (const Sample& x : of(family)) {
    bool match = true;
    for (const auto& [name, value] : labels) match = match && x.label(name) == value;
    if (match) return &x;
  }
  return nullptr;
}

std::size_t Samples::size() const {
  std::size_t n = 0;
  for (const auto& [name, list] : by_name_) n += list.size();
  return n;
}

}  // namespace nodewatch
