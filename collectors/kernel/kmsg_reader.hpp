#pragma once
// Reading the kernel log: /dev/kmsg, where each read() returns one record
// and EPIPE says records were overwritten before they were read (the next
// read goes on with the oldest one left), or a file of records one after
// another (a fixture), read from where the last call left off: its whole
// content once, then what was appended (a file that shrank, rewritten, is
// read again from its start; the counting, kernel_log.hpp, skips what it
// has counted by sequence number). A record starts at each line that does
// not begin with a space (split_records' rule); the last one is taken at
// the end of the file, so a writer appends whole records.
//
// A record longer than the kernel ever formats (kRecordLimit) is none of
// its records: refused, never passed on, and counted (refused()).

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "nodewatch/unique_fd.hpp"

namespace nodewatch::kernel {

class KmsgReader {
 public:
  // The longest record the kernel formats for /dev/kmsg: CONSOLE_EXT_LOG_MAX,
  // 8 KiB, its devkmsg_read() buffer (PRINTK_MESSAGE_MAX, 2 KiB, from 6.2 on).
  static constexpr std::size_t kRecordLimit = 8 * 1024;
  // The read buffer: larger than any record (a read with a buffer smaller
  // than the record fails with EINVAL), so that a longer read is seen as one.
  static constexpr std::size_t kRecordMax = 16 * 1024;
  // At most this much of a file is read by one call (then `*more`), so that
  // a call over a large file, or one with no line end, is bounded.
  static constexpr std::size_t kFileBytesPerCall = 4 << 20;

  explicit KmsgReader(std::string path);

  // Opens the path (from its first record). 0 or the errno.
  int open();
  // Calls `on_record` with each record available now, without waiting, and
  // at most `max_records` (refused ones included) a call, then `*more` is
  // set: call again. 0, or the errno of a read that failed otherwise than
  // EAGAIN or EPIPE (the reader is then closed; open() again).
  int read_available(const std::function<void(std::string_view record)>& on_record,
                     std::size_t max_records = SIZE_MAX, bool* more = nullptr);

  // The descriptor to poll for new records: a device's; -1 for a file,
  // which is read again on the caller's schedule.
  int poll_fd() const { return device_ ? fd_.get() : -1; }
  bool is_open() const { return fd_.get() >= 0; }
  // Closes the log: the next read_available() opens it again, from its
  // first record.
  void close();
  // EPIPE answers so far: reads that found records overwritten.
  std::uint64_t overruns() const { return overruns_; }
  // Records refused so far: longer than kRecordLimit.
  std::uint64_t refused() const { return refused_; }
  const std::string& path() const { return path_; }

 private:
  int read_file(const std::function<void(std::string_view)>& on_record, std::size_t max_records,
                bool* more);
  // Takes the line ended now; true when a record was passed on or refused.
  bool end_line(const std::function<void(std::string_view)>& on_record);
  // Ends the record its lines made: passed on, or refused when too long.
  bool end_record(const std::function<void(std::string_view)>& on_record);

  std::string path_;
  UniqueFd fd_;
  bool device_ = false;
  std::uint64_t overruns_ = 0;
  std::uint64_t refused_ = 0;
  std::string buf_;
  // A file's reading position, and what of it is not passed on yet.
  off_t offset_ = 0;
  std::string line_;            // the line being read, with its '\n' once ended
  std::size_t line_bytes_ = 0;  // its length, though past kRecordLimit it is not kept
  std::string record_;          // the record its ended lines make so far
  bool too_long_ = false;       // the record is past kRecordLimit: dropped to its end
};

}  // namespace nodewatch::kernel
