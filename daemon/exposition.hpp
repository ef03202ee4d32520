#pragma once
// Rendered exposition text and its gzip form.
//
// Each collector's snapshot is rendered to text once per collection, on the
// worker. Its gzip form is a raw deflate stream that ends with a sync flush
// (byte aligned, no final block). Such segments can be laid end to end, so a
// gzip response for any subset of collectors is assembled by concatenation,
// plus the small self-metrics tail compressed per scrape and a CRC computed
// with crc32_combine.
//
// A segment is deflated once, by whoever needs it first, and kept: the
// worker, when a gzip scrape is expected during the snapshot's life
// (GzipDemand in snapshot_store.hpp), else the first gzip scrape that takes
// it. Every later gzip scrape of the same snapshot reuses it; a snapshot no
// gzip scrape asked for is never deflated.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace nodewatch {

class RenderedText {
 public:
  explicit RenderedText(std::string text) : text(std::move(text)) {}
  RenderedText(const RenderedText&) = delete;
  RenderedText& operator=(const RenderedText&) = delete;

  const std::string text;

  // Raw deflate, sync-flushed, not final; empty if text is empty. Computed
  // by the first caller (the others wait for it), then kept. Thread-safe.
  const std::string& deflated() const {
    ensure_deflated();
    return deflated_;
  }
  // crc32 of text, computed with the deflate.
  std::uint32_t crc() const {
    ensure_deflated();
    return crc_;
  }
  // True once the deflate was done (by anyone).
  bool is_deflated() const { return done_.load(std::memory_order_acquire); }
  void ensure_deflated() const;

 private:
  mutable std::once_flag once_;
  mutable std::atomic<bool> done_{false};
  mutable std::string deflated_;
  mutable std::uint32_t crc_ = 0;
};

// The rendered form of `text`, not deflated yet.
std::shared_ptr<const RenderedText> make_rendered(std::string text);
// The same, deflated now.
std::shared_ptr<const RenderedText> make_deflated(std::string text);

// Builds one gzip member from segments followed by `tail` (compressed now).
// Deflates the segments not deflated yet.
std::string assemble_gzip(const std::vector<const RenderedText*>& segments, std::string_view tail);

// Plain inflate of a gzip body, for tests and tools. Throws std::runtime_error.
std::string gunzip(std::string_view gz);

}  // namespace nodewatch
