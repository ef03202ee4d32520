#pragma once
// Rendered exposition text and its gzip form.
//
// Each collector's snapshot is rendered to text once per collection, on the
// worker, and deflated there too: as a raw deflate stream that ends with a
// sync flush (byte aligned, no final block). Such segments can be laid end to
// end, so a gzip response for any subset of collectors is assembled by
// concatenation, plus the small self-metrics tail compressed per scrape and a
// CRC computed with crc32_combine. A scrape never compresses collector data.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace nodewatch {

struct RenderedText {
  std::string text;
  std::string deflated;   // raw deflate, sync-flushed, not final; empty if text is empty
  std::uint32_t crc = 0;  // crc32 of text
};

// Renders once: compresses `text` as a segment.
std::shared_ptr<const RenderedText> make_rendered(std::string text);

// Builds one gzip member from segments followed by `tail` (compressed now).
std::string assemble_gzip(const std::vector<const RenderedText*>& segments, std::string_view tail);

// Plain inflate of a gzip body, for tests and tools. Throws std::runtime_error.
std::string gunzip(std::string_view gz);

}  // namespace nodewatch
