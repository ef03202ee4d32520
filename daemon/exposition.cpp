#include "exposition.hpp"

#include <zlib.h>

#include <stdexcept>

namespace nodewatch {
namespace {

// Deflate states, reset between streams and kept in a free list shared by
// every thread: deflateInit2 allocates and clears some 260 KiB of window and
// hash tables, which costs more than deflating a small snapshot, and the
// list holds only as many states as deflates ever ran at once.
class Deflater {
 public:
  explicit Deflater(int level) : level_(level) {
    if (deflateInit2(&zs_, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
      throw std::runtime_error("deflateInit2 failed");
  }
  ~Deflater() { deflateEnd(&zs_); }
  Deflater(const Deflater&) = delete;
  Deflater& operator=(const Deflater&) = delete;

  // Compresses `in` at `level` as raw deflate, finishing with `flush`
  // (Z_SYNC_FLUSH or Z_FINISH), appended to `out`.
  static void compress(int level, std::string_view in, int flush, std::string& out) {
    std::unique_ptr<Deflater> d = take(level);
    d->run(in, flush, out);
    give_back(std::move(d));
  }

 private:
  struct FreeList {
    std::mutex mu;
    std::vector<std::unique_ptr<Deflater>> states;
  };
  static FreeList& free_list() {
    static FreeList* list = new FreeList;  // never destroyed: used until exit
    return *list;
  }
  static std::unique_ptr<Deflater> take(int level) {
    FreeList& f = free_list();
    {
      std::lock_guard lock(f.mu);
      for (auto it = f.states.begin(); it != f.states.end(); ++it) {
        if ((*it)->level_ != level) continue;
        std::unique_ptr<Deflater> d = std::move(*it);
        f.states.erase(it);
        return d;
      }
    }
    return std::make_unique<Deflater>(level);
  }
  static void give_back(std::unique_ptr<Deflater> d) {
    FreeList& f = free_list();
    std::lock_guard lock(f.mu);
    f.states.push_back(std::move(d));
  }

  // Compresses `in` as raw deflate, finishing with `flush` (Z_SYNC_FLUSH or
  // Z_FINISH), appended to `out`.
  void run(std::string_view in, int flush, std::string& out) {
    if (deflateReset(&zs_) != Z_OK) throw std::runtime_error("deflateReset failed");
    const std::size_t base = out.size();
    out.resize(base + deflateBound(&zs_, static_cast<uLong>(in.size())) + 64);
    zs_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs_.avail_in = static_cast<uInt>(in.size());
    std::size_t used = base;
    int rc = Z_OK;
    // deflateBound does not count the flush marker: loop until deflate has
    // room to spare, growing the buffer if it ever runs out.
    for (;;) {
      zs_.next_out = reinterpret_cast<Bytef*>(out.data() + used);
      zs_.avail_out = static_cast<uInt>(out.size() - used);
      rc = deflate(&zs_, flush);
      used = out.size() - zs_.avail_out;
      if (rc == Z_STREAM_ERROR) break;
      if (flush == Z_FINISH ? rc == Z_STREAM_END : (zs_.avail_in == 0 && zs_.avail_out != 0))
        break;
      out.resize(out.size() * 2);
    }
    out.resize(used);
    if (rc == Z_STREAM_ERROR) throw std::runtime_error("deflate failed");
  }

  int level_;
  z_stream zs_{};
};

std::uint32_t crc_of(std::string_view s) {
  return static_cast<std::uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}

void put_le32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

}  // namespace

void RenderedText::ensure_deflated() const {
  if (is_deflated()) return;
  std::call_once(once_, [this] {
    crc_ = crc_of(text);
    if (!text.empty()) Deflater::compress(6, text, Z_SYNC_FLUSH, deflated_);
    done_.store(true, std::memory_order_release);
  });
}

std::shared_ptr<const RenderedText> make_rendered(std::string text) {
  return std::make_shared<const RenderedText>(std::move(text));
}

std::shared_ptr<const RenderedText> make_deflated(std::string text) {
  auto r = make_rendered(std::move(text));
  r->ensure_deflated();
  return r;
}

std::string assemble_gzip(const std::vector<const RenderedText*>& segments, std::string_view tail) {
  std::size_t total = 18;
  for (const RenderedText* s : segments) total += s->deflated().size();
  std::string out;
  out.reserve(total + tail.size() / 2 + 64);
  // Header: magic, deflate, no flags, no mtime, no extra flags, OS unknown.
  static constexpr unsigned char kHeader[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
  out.append(reinterpret_cast<const char*>(kHeader), sizeof(kHeader));
  uLong crc = crc32(0L, Z_NULL, 0);
  std::uint64_t length = 0;
  for (const RenderedText* s : segments) {
    if (s->text.empty()) continue;
    out += s->deflated();
    crc = crc32_combine(crc, s->crc(), static_cast<z_off_t>(s->text.size()));
    length += s->text.size();
  }
  Deflater::compress(1, tail, Z_FINISH, out);
  crc = crc32_combine(crc, crc_of(tail), static_cast<z_off_t>(tail.size()));
  length += tail.size();
  put_le32(out, static_cast<std::uint32_t>(crc));
  put_le32(out, static_cast<std::uint32_t>(length & 0xFFFFFFFFu));
  return out;
}

std::string gunzip(std::string_view gz) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + 15) != Z_OK) throw std::runtime_error("inflateInit2 failed");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  zs.avail_in = static_cast<uInt>(gz.size());
  std::string out;
  char buf[65536];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&zs);
      throw std::runtime_error("inflate failed: " + std::to_string(rc));
    }
    out.append(buf, sizeof(buf) - zs.avail_out);
    if (rc == Z_OK && zs.avail_in == 0 && zs.avail_out != 0) {
      inflateEnd(&zs);
      throw std::runtime_error("truncated gzip stream");
    }
  }
  bool trailing = zs.avail_in != 0;
  inflateEnd(&zs);
  if (trailing) throw std::runtime_error("data after the end of the gzip stream");
  return out;
}

}  // namespace nodewatch
