#pragma once
// The samples of exposition text (format 0.0.4) that the node verdict reads.
// The daemon parses its own collectors' snapshots with it, after each round
// and off the scrape path; `--check` and `--learn-expected` parse another
// daemon's /metrics. Only the families asked for are kept, so a 200 KB
// exposition costs a scan of its lines and the parse of a few hundred.

#include <cstddef>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nodewatch {

struct Sample {
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
  // The value of label `name`, or "" when the sample has none.
  std::string_view label(std::string_view name) const;
};

using FamilySet = std::set<std::string, std::less<>>;

// The set of these families' names (Family constants convert to theirs).
inline FamilySet family_set(std::initializer_list<std::string_view> names) {
  FamilySet out;
  for (std::string_view n : names) out.emplace(n);
  return out;
}

class Samples {
 public:
  // Keeps the families in `wanted` (all when null). The set must outlive this.
  explicit Samples(const FamilySet* wanted = nullptr) : wanted_(wanted) {}

  // Adds the samples of `text`. Returns how many sample lines of wanted
  // families were malformed and skipped.
  std::size_t add(std::string_view text);
  // Adds every sample of `other`.
  void merge(const Samples& other);

  // The samples of `family` (empty when there is none). `family` must be
  // one of those asked for (asserted): any other would always be empty.
  const std::vector<Sample>& of(std::string_view family) const;
  bool has(std::string_view family) const { return by_name_.find(family) != by_name_.end(); }
  // The first sample of `family` whose labels have these values, or null.
  const Sample* find(
      std::string_view family,
      std::initializer_list<std::pair<std::string_view, std::string_view>> labels) const;
  std::size_t size() const;

 private:
  const FamilySet* wanted_;
  std::map<std::string, std::vector<Sample>, std::less<>> by_name_;
};

}  // namespace nodewatch
