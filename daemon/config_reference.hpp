#pragma once
// The configuration reference, printed by `nodewatchd --list-options`:
// every key as the call that reads it describes it (describe_config).

#include <span>
#include <string>

#include "nodewatch/collector.hpp"

namespace nodewatch {

// One key per line: "key type default" (the type in one word, the default
// as TOML writes it, "-" when the key has none), for tools that check a
// file against it.
std::string options_text(std::span<const CollectorSpec> catalog);

// docs/configuration.md: a fixed introduction, a table per section (key,
// type, default, range, meaning) and a fixed end.
std::string options_markdown(std::span<const CollectorSpec> catalog);

// A collector's description as the references open its section with:
// "<description>. On by default." (or "Off").
std::string collector_summary(const CollectorSpec& spec);

}  // namespace nodewatch
