#pragma once
// The helper protocol's encoding (nodewatch/fs_helper.hpp): a frame is a
// 32-bit length (host order: both ends are the same binary) and that many
// bytes; the first byte of a request is its operation, the fields follow as
// fixed-size integers and length-prefixed byte strings. A Reader never
// reads past its frame: a short or malformed frame leaves it !ok().

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace nodewatch::helper::wire {

enum class Op : std::uint8_t {
  kStat = 1,
  kOpen,
  kClose,
  kPwrite,
  kPread,
  kFsync,
  kFtruncate,
  kFadviseDontneed,
  kList,
  kReadRegular,
  kOpenSame,
  kUnlinkSame,
};

class Writer {
 public:
  Writer() { buf_.resize(4); }  // the length, filled by frame()
  Writer& u8(std::uint8_t v) { return raw(&v, 1); }
  Writer& u32(std::uint32_t v) { return raw(&v, 4); }
  Writer& i32(std::int32_t v) { return raw(&v, 4); }
  Writer& u64(std::uint64_t v) { return raw(&v, 8); }
  Writer& i64(std::int64_t v) { return raw(&v, 8); }
  Writer& bytes(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    buf_.append(s.data(), s.size());
    return *this;
  }
  // The whole frame, length included (the writer is left empty).
  std::string frame() {
    auto n = static_cast<std::uint32_t>(buf_.size() - 4);
    std::memcpy(buf_.data(), &n, 4);
    return std::move(buf_);
  }

 private:
  Writer& raw(const void* p, std::size_t n) {
    buf_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string buf_;
};

class Reader {
 public:
  explicit Reader(std::string_view payload) : rest_(payload) {}
  std::uint8_t u8() { return fixed<std::uint8_t>(); }
  std::uint32_t u32() { return fixed<std::uint32_t>(); }
  std::int32_t i32() { return fixed<std::int32_t>(); }
  std::uint64_t u64() { return fixed<std::uint64_t>(); }
  std::int64_t i64() { return fixed<std::int64_t>(); }
  std::string_view bytes() {
    std::uint32_t n = u32();
    if (!ok_ || n > rest_.size()) {
      ok_ = false;
      return {};
    }
    std::string_view out = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return out;
  }
  bool ok() const { return ok_; }
  // Every byte was read: a frame with bytes left over is malformed too.
  bool done() const { return ok_ && rest_.empty(); }

 private:
  template <class T>
  T fixed() {
    T v{};
    if (!ok_ || rest_.size() < sizeof(T)) {
      ok_ = false;
      return v;
    }
    std::memcpy(&v, rest_.data(), sizeof(T));
    rest_.remove_prefix(sizeof(T));
    return v;
  }
  std::string_view rest_;
  bool ok_ = true;
};

}  // namespace nodewatch::helper::wire
