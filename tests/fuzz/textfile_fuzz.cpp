// A textfile collector input (collectors/textfile): the Prometheus text
// format as a burn-in job writes it. Property: a file the parser accepts
// is re-exported as text that the parser accepts again and that renders
// the same (what nodewatch serves from a file is itself valid exposition).

#include "fuzz_support.hpp"
#include "textfile/textfile_parse.hpp"

using namespace nodewatch::textfile;
using nodewatch::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ParseResult first = parse(nodewatch::fuzz::as_text(data, size));
  if (!first.ok()) return 0;
  std::string rendered = render(first.families);
  require(nodewatch::fuzz::is_utf8(rendered), "textfile: the rendering is not UTF-8");
  ParseResult second = parse(rendered);
  if (!second.ok()) std::fprintf(stderr, "re-parse: %s\n", second.error.c_str());
  require(second.ok(), "textfile: what was rendered from an accepted file does not parse");
  require(second.families.size() == first.families.size(),
          "textfile: families lost in a round trip");
  require(render(second.families) == rendered, "textfile: the rendering is not stable");
  return 0;
}
