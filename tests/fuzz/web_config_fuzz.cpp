// The web configuration file (daemon/web_config.cpp), the exporter
// toolkit's YAML. Property: any text is a configuration or errors; nothing
// throws, nothing recurses without bound.

#include "fuzz_support.hpp"
#include "web_config.hpp"

using namespace nodewatch;
using nodewatch::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text = fuzz::as_text(data, size);
  WebConfigResult r = parse_web_config(text, "/nonexistent/web.yml");
  require(r.config.has_value() == r.errors.empty(), "web config: both a configuration and errors");
  for (const ConfigError& e : r.errors)
    require(!e.message.empty(), "web config: an error without a message");
  (void)is_bcrypt_hash(text);
  (void)parse_go_duration(text.substr(0, 64));
  return 0;
}
