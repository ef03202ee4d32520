#pragma once
// The Prometheus text format (0.0.4), as burn-in jobs and inventory scripts
// write it into the textfile directory: parsed strictly, so that a file is
// either taken whole or refused whole, and rendered again by us in canonical
// form (a file's own bytes never reach the exposition).
//
// Accepted: # HELP and # TYPE lines (counter, gauge, untyped, histogram,
// summary), other # comments, blank lines, samples `name{labels} value` with
// the format's escapes in label values and NaN/+Inf/-Inf values. Refused
// (the whole file): a sample with a timestamp (a file is a snapshot, its
// series take the scrape's time), an invalid metric or label name, a label
// name twice, a bad escape, an unterminated line (the file must end with a
// newline: a file still being written usually does not), a family split in
// two blocks, a TYPE or HELP given twice or after the family's samples, a
// duplicate series, a histogram or summary sample that does not belong to
// its family's suffixes, a negative counter, a histogram series without
// its +Inf bucket, with buckets whose cumulative counts go down, or with a
// _count other than its +Inf bucket.

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nodewatch::textfile {

enum class FamilyType { kUntyped, kCounter, kGauge, kHistogram, kSummary };

struct Sample {
  std::string name;                                         // the full sample name, e.g. foo_bucket
  std::vector<std::pair<std::string, std::string>> labels;  // in file order
  double value = 0;
};

struct Family {
  std::string name;
  FamilyType type = FamilyType::kUntyped;
  std::string help;  // unescaped
  bool has_help = false;
  std::vector<Sample> samples;
};

struct ParseResult {
  std::vector<Family> families;
  // Empty when the file is valid; else "line N: what". It quotes nothing
  // of the file but metric and label names that passed the format's rules:
  // it is logged, and the file may hold what its writer should not see.
  std::string error;
  bool ok() const { return error.empty(); }
};

ParseResult parse(std::string_view text);

// The text format of `families`: HELP (escaped), TYPE, then the samples.
std::string render(const std::vector<Family>& families);

const char* type_name(FamilyType t);

// The series key of a sample (name and sorted labels), for duplicate checks.
std::string series_key(const Sample& s);

}  // namespace nodewatch::textfile
