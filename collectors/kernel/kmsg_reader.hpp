#pragma once
// Reading the kernel log: /dev/kmsg, where each read() returns one record
// and EPIPE says records were overwritten before they were read (the next
// read goes on with the oldest one left), or a file of records one after
// another (a fixture), which is read whole on every call: the counting
// (kernel_log.hpp) skips what it has counted by sequence number, so
// re-reading is exact.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "nodewatch/unique_fd.hpp"

namespace nodewatch::kernel {

class KmsgReader {
 public:
  // A record is at most 8 KiB as the kernel formats it for /dev/kmsg
  // (CONSOLE_EXT_LOG_MAX); a read with a smaller buffer fails with EINVAL.
  static constexpr std::size_t kRecordMax = 16 * 1024;

  explicit KmsgReader(std::string path);

  // Opens the path (from its first record). 0 or the errno.
  int open();
  // Calls `on_record` with each record available now, without waiting, and
  // at most `max_records` of a device (then `*more` is set: call again).
  // 0, or the errno of a read that failed otherwise than EAGAIN or EPIPE
  // (the reader is then closed; open() again).
  int read_available(const std::function<void(std::string_view record)>& on_record,
                     std::size_t max_records = SIZE_MAX, bool* more = nullptr);

  // The descriptor to poll for new records: a device's; -1 for a file,
  // which is read again on the caller's schedule.
  int poll_fd() const { return device_ ? fd_.get() : -1; }
  bool is_open() const { return fd_.get() >= 0; }
  // Closes the log: the next read_available() opens it again, from its
  // first record.
  void close() { fd_.reset(); }
  // EPIPE answers so far: reads that found records overwritten.
  std::uint64_t overruns() const { return overruns_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  UniqueFd fd_;
  bool device_ = false;
  std::uint64_t overruns_ = 0;
  std::string buf_;
};

}  // namespace nodewatch::kernel
