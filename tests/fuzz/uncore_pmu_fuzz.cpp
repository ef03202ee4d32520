// What the uncore collector parses (collectors/uncore/pmu.hpp): a PMU's
// cpumask and format files as sysfs writes them, and an event as an
// operator writes it in perf's syntax. The first byte picks the parser.
// Property: what is accepted is well-formed: a CPU list is sorted, without
// repeats and below 65536, and written back as a list it parses to itself;
// a format's bits are sorted, without repeats, below 64, in config0-2; an
// event names a PMU and terms without a slash.

#include <string>

#include "fuzz_support.hpp"
#include "uncore/pmu.hpp"

using namespace nodewatch::uncore;
using nodewatch::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text = nodewatch::fuzz::as_text(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      std::optional<std::vector<int>> cpus = parse_cpulist(text);
      if (!cpus) return 0;
      require(!cpus->empty(), "uncore: an empty CPU list was accepted");
      std::string back;
      for (std::size_t i = 0; i < cpus->size(); ++i) {
        require((*cpus)[i] >= 0 && (*cpus)[i] < 65536, "uncore: a CPU out of range");
        require(i == 0 || (*cpus)[i - 1] < (*cpus)[i], "uncore: CPUs not sorted or repeated");
        back += (i ? "," : "") + std::to_string((*cpus)[i]);
      }
      require(parse_cpulist(back) == cpus, "uncore: a CPU list does not parse back to itself");
      return 0;
    }
    case 1: {
      std::optional<FormatTerm> f = parse_format(text);
      if (!f) return 0;
      require(f->word >= 0 && f->word <= 2, "uncore: a format outside config0-2");
      require(!f->bits.empty(), "uncore: a format without bits");
      for (std::size_t i = 0; i < f->bits.size(); ++i) {
        require(f->bits[i] >= 0 && f->bits[i] < 64, "uncore: a format bit out of range");
        require(i == 0 || f->bits[i - 1] < f->bits[i], "uncore: format bits not sorted");
      }
      return 0;
    }
    default: {
      std::string error;
      std::optional<EventRequest> r = parse_request(text, &error);
      if (!r) {
        require(!error.empty(), "uncore: an event refused without a reason");
        return 0;
      }
      require(!r->pmu.empty() && r->pmu.find('/') == std::string::npos,
              "uncore: an accepted event with a malformed PMU");
      require(!r->terms.empty() && r->terms.find('/') == std::string::npos,
              "uncore: an accepted event with a slash in its terms");
      return 0;
    }
  }
}
