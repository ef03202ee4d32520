#include "exposition.hpp"

#include <zlib.h>

#include <stdexcept>

namespace nodewatch {
namespace {

// Compresses `in` as raw deflate, finishing with `flush` (Z_SYNC_FLUSH or Z_FINISH).
std::string raw_deflate(std::string_view in, int flush, int level) {
  z_stream zs{};
  if (deflateInit2(&zs, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2 failed");
  std::string out;
  out.resize(deflateBound(&zs, static_cast<uLong>(in.size())) + 64);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  std::size_t used = 0;
  int rc = Z_OK;
  // deflateBound does not count the flush marker: loop until deflate has
  // room to spare, growing the buffer if it ever runs out.
  for (;;) {
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + used);
    zs.avail_out = static_cast<uInt>(out.size() - used);
    rc = deflate(&zs, flush);
    used = out.size() - zs.avail_out;
    if (rc == Z_STREAM_ERROR) break;
    if (flush == Z_FINISH ? rc == Z_STREAM_END : (zs.avail_in == 0 && zs.avail_out != 0)) break;
    out.resize(out.size() * 2);
  }
  out.resize(used);
  deflateEnd(&zs);
  if (rc == Z_STREAM_ERROR) throw std::runtime_error("deflate failed");
  return out;
}

void put_le32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

}  // namespace

std::shared_ptr<const RenderedText> make_rendered(std::string text) {
  auto r = std::make_shared<RenderedText>();
  r->crc = static_cast<std::uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size())));
  if (!text.empty()) r->deflated = raw_deflate(text, Z_SYNC_FLUSH, 6);
  r->text = std::move(text);
  return r;
}

std::string assemble_gzip(const std::vector<const RenderedText*>& segments, std::string_view tail) {
  std::size_t total = 18;
  for (const RenderedText* s : segments) total += s->deflated.size();
  std::string out;
  out.reserve(total + tail.size() / 2 + 64);
  // Header: magic, deflate, no flags, no mtime, no extra flags, OS unknown.
  static constexpr unsigned char kHeader[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
  out.append(reinterpret_cast<const char*>(kHeader), sizeof(kHeader));
  uLong crc = crc32(0L, Z_NULL, 0);
  std::uint64_t length = 0;
  for (const RenderedText* s : segments) {
    if (s->text.empty()) continue;
    out += s->deflated;
    crc = crc32_combine(crc, s->crc, static_cast<z_off_t>(s->text.size()));
    length += s->text.size();
  }
  out += raw_deflate(tail, Z_FINISH, 1);
  crc = crc32_combine(
      crc, crc32(0L, reinterpret_cast<const Bytef*>(tail.data()), static_cast<uInt>(tail.size())),
      static_cast<z_off_t>(tail.size()));
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
