// The configuration file (daemon/config.cpp) with the built-in catalog of
// collectors, an expect file (daemon/expect.cpp), and a listen address.
// Property: any text is a configuration or a list of errors that each name
// the file and say what is wrong; nothing throws.

#include "app.hpp"
#include "config.hpp"
#include "expect.hpp"
#include "fuzz_support.hpp"

using namespace nodewatch;
using nodewatch::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text = fuzz::as_text(data, size);
  ConfigResult r = parse_config(text, "fuzz.toml", builtin_collectors());
  require(r.config.has_value() == r.errors.empty(), "config: both a configuration and errors");
  for (const ConfigError& e : r.errors) {
    require(!e.message.empty(), "config: an error without a message");
  }
  std::vector<ConfigError> errors;
  (void)parse_expect_file(text, "fuzz-expect.toml", &errors);
  for (const ConfigError& e : errors)
    require(!e.message.empty(), "expect: an error without a message");
  (void)parse_listen_address(text.substr(0, 256));
  (void)parse_transfer_rate(text.substr(0, 64));
  (void)parse_bit_rate(text.substr(0, 64));
  return 0;
}
