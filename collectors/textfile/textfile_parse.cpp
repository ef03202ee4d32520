#include "textfile/textfile_parse.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "nodewatch/metric.hpp"

namespace nodewatch::textfile {
namespace {

bool name_char(char c, bool first, bool colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':') ||
         (!first && c >= '0' && c <= '9');
}

bool valid_name(std::string_view s, bool colon) {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (!name_char(s[i], i == 0, colon)) return false;
  return true;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() > suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

void skip_blanks(std::string_view s, std::size_t& i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
}

// A float as the format writes it: Go's ParseFloat syntax, NaN, +Inf, -Inf.
bool parse_value(std::string_view s, double* out) {
  if (s == "NaN") {
    *out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (s == "+Inf" || s == "Inf") {
    *out = std::numeric_limits<double>::infinity();
    return true;
  }
  if (s == "-Inf") {
    *out = -std::numeric_limits<double>::infinity();
    return true;
  }
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && std::isfinite(*out);
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

std::string escape(std::string_view s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (quote && c == '"')
      out += "\\\"";
    else
      out += c;
  }
  return out;
}

struct Parser {
  std::vector<Family> families;
  std::map<std::string, std::size_t, std::less<>> index;
  std::set<std::string, std::less<>> closed;  // families whose block has ended
  std::string current;
  std::set<std::string> series;
  std::string error;
  std::size_t line_no = 0;

  bool fail(std::string what) {
    error = "line " + std::to_string(line_no) + ": " + what;
    return false;
  }

  // The family `name` (created untyped if new), entered as the current block.
  Family* enter(const std::string& name) {
    if (name != current) {
      if (!current.empty()) closed.insert(current);
      if (closed.count(name) != 0) {
        fail("family " + name + " appears in two separate blocks");
        return nullptr;
      }
      current = name;
    }
    auto it = index.find(name);
    if (it == index.end()) {
      it = index.emplace(name, families.size()).first;
      families.push_back(Family{name, FamilyType::kUntyped, "", false, {}});
    }
    return &families[it->second];
  }

  // Which family a sample named `name` belongs to: a histogram or summary
  // declared under its base name, else its own name.
  std::string family_of(const std::string& name) const {
    for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
      if (!ends_with(name, suffix)) continue;
      std::string base = name.substr(0, name.size() - suffix.size());
      auto it = index.find(base);
      if (it == index.end()) continue;
      FamilyType t = families[it->second].type;
      if (t == FamilyType::kHistogram || (t == FamilyType::kSummary && suffix != "_bucket"))
        return base;
    }
    return name;
  }

  bool comment(std::string_view line) {
    std::size_t i = 1;
    skip_blanks(line, i);
    std::size_t kw_end = line.find_first_of(" \t", i);
    std::string_view kw = line.substr(i, kw_end == std::string_view::npos ? line.npos : kw_end - i);
    if (kw != "HELP" && kw != "TYPE") return true;  // another comment
    i = kw_end == std::string_view::npos ? line.size() : kw_end;
    skip_blanks(line, i);
    std::size_t name_end = line.find_first_of(" \t", i);
    std::string name(line.substr(i, name_end == std::string_view::npos ? line.npos : name_end - i));
    if (!valid_name(name, true)) return fail("invalid metric name in # " + std::string(kw));
    i = name_end == std::string_view::npos ? line.size() : name_end;
    if (i < line.size()) ++i;  // the single separator
    std::string_view rest = line.substr(i);
    Family* f = enter(name);
    if (f == nullptr) return false;
    if (kw == "HELP") {
      if (f->has_help) return fail("second HELP for " + name);
      std::string help;
      for (std::size_t k = 0; k < rest.size(); ++k) {
        if (rest[k] == '\\' && k + 1 < rest.size() && (rest[k + 1] == '\\' || rest[k + 1] == 'n')) {
          help += rest[k + 1] == 'n' ? '\n' : '\\';
          ++k;
        } else {
          help += rest[k];
        }
      }
      if (!is_valid_utf8(help)) return fail("HELP of " + name + " is not valid UTF-8");
      f->help = std::move(help);
      f->has_help = true;
      return true;
    }
    while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\t')) rest.remove_suffix(1);
    static const std::pair<std::string_view, FamilyType> kTypes[] = {
        {"counter", FamilyType::kCounter}, {"gauge", FamilyType::kGauge},
        {"untyped", FamilyType::kUntyped}, {"histogram", FamilyType::kHistogram},
        {"summary", FamilyType::kSummary},
    };
    auto t = std::find_if(std::begin(kTypes), std::end(kTypes),
                          [&](const auto& k) { return k.first == rest; });
    if (t == std::end(kTypes))
      return fail("unknown type (counter, gauge, histogram, summary or untyped)");
    if (!f->samples.empty()) return fail("TYPE of " + name + " after its samples");
    if (typed_.count(name) != 0) return fail("second TYPE for " + name);
    typed_.insert(name);
    f->type = t->second;
    return true;
  }

  bool sample(std::string_view line) {
    std::size_t i = 0;
    while (i < line.size() && name_char(line[i], i == 0, true)) ++i;
    Sample s;
    s.name = std::string(line.substr(0, i));
    if (!valid_name(s.name, true)) return fail("invalid metric name");
    skip_blanks(line, i);
    std::set<std::string, std::less<>> label_names;
    if (i < line.size() && line[i] == '{') {
      ++i;
      for (;;) {
        skip_blanks(line, i);
        if (i < line.size() && line[i] == '}') {
          ++i;
          break;
        }
        std::size_t start = i;
        while (i < line.size() && name_char(line[i], i == start, false)) ++i;
        std::string lname(line.substr(start, i - start));
        if (!valid_name(lname, false) || lname.rfind("__", 0) == 0)
          return fail("invalid label name");
        if (!label_names.insert(lname).second) return fail("label " + lname + " given twice");
        skip_blanks(line, i);
        if (i >= line.size() || line[i] != '=') return fail("expected '=' after label " + lname);
        ++i;
        skip_blanks(line, i);
        if (i >= line.size() || line[i] != '"') return fail("expected '\"' for label " + lname);
        ++i;
        std::string value;
        bool closed_quote = false;
        while (i < line.size()) {
          char c = line[i++];
          if (c == '"') {
            closed_quote = true;
            break;
          }
          if (c == '\\') {
            if (i >= line.size()) break;
            char e = line[i++];
            if (e == 'n')
              value += '\n';
            else if (e == '\\' || e == '"')
              value += e;
            else
              return fail("bad escape in the value of label " + lname);
          } else {
            value += c;
          }
        }
        if (!closed_quote) return fail("unterminated value of label " + lname);
        if (!is_valid_utf8(value)) return fail("label " + lname + " is not valid UTF-8");
        s.labels.emplace_back(std::move(lname), std::move(value));
        skip_blanks(line, i);
        if (i < line.size() && line[i] == ',') {
          ++i;
          continue;
        }
        if (i < line.size() && line[i] == '}') {
          ++i;
          break;
        }
        return fail("expected ',' or '}' in the labels");
      }
    }
    skip_blanks(line, i);
    std::size_t vend = line.find_first_of(" \t", i);
    std::string_view value = line.substr(i, vend == std::string_view::npos ? line.npos : vend - i);
    if (!parse_value(value, &s.value)) return fail("invalid value");
    if (vend != std::string_view::npos) {
      std::size_t k = vend;
      skip_blanks(line, k);
      if (k < line.size()) return fail("timestamps are not accepted in a textfile");
    }

    const std::string fam_name = family_of(s.name);
    Family* f = enter(fam_name);
    if (f == nullptr) return false;
    auto has = [&](std::string_view l) { return label_names.count(l) != 0; };
    switch (f->type) {
      case FamilyType::kCounter:
        if (!(s.value >= 0)) return fail("counter " + s.name + " is negative or NaN");
        break;
      case FamilyType::kHistogram:
        if (s.name == fam_name + "_bucket") {
          double le = 0;
          auto it = std::find_if(s.labels.begin(), s.labels.end(),
                                 [](const auto& l) { return l.first == "le"; });
          if (it == s.labels.end() || !parse_value(it->second, &le))
            return fail("histogram bucket " + s.name + " without a valid le label");
        } else if (s.name == fam_name + "_sum" || s.name == fam_name + "_count") {
          if (has("le")) return fail(s.name + " must not have an le label");
        } else {
          return fail(s.name + " is not a sample of histogram " + fam_name);
        }
        break;
      case FamilyType::kSummary:
        if (s.name == fam_name) {
          if (!has("quantile")) return fail("summary sample " + s.name + " without quantile");
        } else if (s.name != fam_name + "_sum" && s.name != fam_name + "_count") {
          return fail(s.name + " is not a sample of summary " + fam_name);
        }
        break;
      default: break;
    }
    if (!series.insert(series_key(s)).second) return fail("duplicate series " + s.name);
    f->samples.push_back(std::move(s));
    return true;
  }

  std::set<std::string> typed_;
};

}  // namespace

const char* type_name(FamilyType t) {
  switch (t) {
    case FamilyType::kCounter: return "counter";
    case FamilyType::kGauge: return "gauge";
    case FamilyType::kHistogram: return "histogram";
    case FamilyType::kSummary: return "summary";
    case FamilyType::kUntyped: break;
  }
  return "untyped";
}

std::string series_key(const Sample& s) {
  std::vector<std::pair<std::string, std::string>> labels = s.labels;
  std::sort(labels.begin(), labels.end());
  // Each field length-prefixed: label values may contain any byte, NUL
  // included, so no separator is safe.
  auto field = [](std::string& out, std::string_view f) {
    out += std::to_string(f.size());
    out += ':';
    out += f;
  };
  std::string key;
  field(key, s.name);
  for (const auto& [k, v] : labels) {
    field(key, k);
    field(key, v);
  }
  return key;
}

namespace {

// Each series of histogram `f` (its labels without le) has a +Inf bucket,
// cumulative counts that never go down as le grows, and a _count, where
// given, equal to its +Inf bucket: what Prometheus's histogram_quantile
// assumes. "" or why not.
std::string check_histogram(const Family& f) {
  struct Series {
    std::vector<std::pair<double, double>> buckets;  // (le, count)
    std::optional<double> count;
  };
  std::map<std::string, Series> series;
  auto key_without_le = [](const Sample& s) {
    Sample k;
    for (const auto& l : s.labels)
      if (l.first != "le") k.labels.push_back(l);
    return series_key(k);
  };
  for (const Sample& s : f.samples) {
    Series& x = series[key_without_le(s)];
    if (s.name == f.name + "_bucket") {
      double le = 0;
      for (const auto& l : s.labels)
        if (l.first == "le") parse_value(l.second, &le);
      x.buckets.emplace_back(le, s.value);
    } else if (s.name == f.name + "_count") {
      x.count = s.value;
    }
  }
  for (auto& [key, x] : series) {
    if (x.buckets.empty()) continue;  // _sum and _count alone
    std::sort(x.buckets.begin(), x.buckets.end());
    if (!std::isinf(x.buckets.back().first))
      return "histogram " + f.name + " has a series without its le=\"+Inf\" bucket";
    for (std::size_t i = 1; i < x.buckets.size(); ++i)
      if (!(x.buckets[i].second >= x.buckets[i - 1].second))
        return "histogram " + f.name + ": the bucket le=\"" + format_value(x.buckets[i].first) +
               "\" counts fewer than le=\"" + format_value(x.buckets[i - 1].first) +
               "\" (buckets are cumulative)";
    if (x.count && *x.count != x.buckets.back().second)
      return "histogram " + f.name + ": _count differs from its le=\"+Inf\" bucket";
  }
  return {};
}

}  // namespace

ParseResult parse(std::string_view text) {
  Parser p;
  ParseResult r;
  std::size_t pos = 0;
  while (pos < text.size()) {
    ++p.line_no;
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) {
      p.fail("the last line does not end with a newline (a file still being written?)");
      break;
    }
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::size_t i = 0;
    skip_blanks(line, i);
    line.remove_prefix(i);
    if (line.empty()) continue;
    bool ok = line[0] == '#' ? p.comment(line) : p.sample(line);
    if (!ok) break;
  }
  if (!p.error.empty()) {
    r.error = std::move(p.error);
    return r;
  }
  for (const Family& f : p.families) {
    if (f.type != FamilyType::kHistogram) continue;
    if (std::string why = check_histogram(f); !why.empty()) {
      r.error = why;
      return r;
    }
  }
  // Families declared but without samples are dropped.
  for (Family& f : p.families)
    if (!f.samples.empty()) r.families.push_back(std::move(f));
  return r;
}

std::string render(const std::vector<Family>& families) {
  std::string out;
  for (const Family& f : families) {
    if (f.samples.empty()) continue;
    if (f.has_help) out += "# HELP " + f.name + " " + escape(f.help, false) + "\n";
    out += "# TYPE " + f.name + " " + type_name(f.type) + "\n";
    for (const Sample& s : f.samples) {
      out += s.name;
      if (!s.labels.empty()) {
        out += '{';
        for (std::size_t i = 0; i < s.labels.size(); ++i) {
          if (i > 0) out += ',';
          out += s.labels[i].first + "=\"" + escape(s.labels[i].second, true) + "\"";
        }
        out += '}';
      }
      out += ' ';
      out += format_value(s.value);
      out += '\n';
    }
  }
  return out;
}

}  // namespace nodewatch::textfile
