// /proc/diskstats lines, block sysfs attributes and /proc/self/mountstats
// (collectors/storage). The input is one file's text; every parser that
// reads such a file gets it.

#include <charconv>

#include "fuzz_support.hpp"
#include "nodewatch/text.hpp"
#include "storage/diskstats.hpp"
#include "storage/mountstats.hpp"

using namespace nodewatch;
using nodewatch::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input = fuzz::as_text(data, size);

  // diskstats, line by line as the collector reads it.
  std::string_view rest = input;
  while (!rest.empty()) {
    std::string_view line = storage::next_line(rest);
    if (storage::is_blank(line)) continue;
    auto parsed = storage::parse_diskstats_line(line);
    if (!parsed) continue;
    require(parsed->stat_count == storage::kBaseStatCount ||
                parsed->stat_count == storage::kDiscardStatCount ||
                parsed->stat_count == storage::kFlushStatCount,
            "diskstats: a line parsed with a statistic count no layout has");
    for (std::size_t i = parsed->stat_count; i < parsed->stats.size(); ++i)
      require(parsed->stats[i] == 0, "diskstats: a statistic past the line's layout is set");
    require(!parsed->name.empty(), "diskstats: a line parsed without a device name");
    require(parsed->name.data() >= line.data() &&
                parsed->name.data() + parsed->name.size() <= line.data() + line.size(),
            "diskstats: the name points outside the line");
    std::string dir = storage::sysfs_block_name(parsed->name);
    require(dir.find('/') == std::string::npos && dir != "." && dir != "..",
            "diskstats: sysfs_block_name gave a name that is not one directory entry");
  }

  // A one-number attribute: whatever parse_attribute_uint accepts, the
  // trimmed input is that decimal number.
  if (auto v = storage::parse_attribute_uint(input)) {
    std::string_view t = text::trim(input);
    std::uint64_t ref = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), ref);
    require(ec == std::errc() && end == t.data() + t.size() && ref == *v,
            "parse_attribute_uint: a value that is not the input's decimal number");
  }

  // mountstats.
  storage::MountstatsResult m = storage::parse_mountstats(input);
  for (const storage::NfsMount& mount : m.mounts) {
    require(mount.fstype == "nfs" || mount.fstype == "nfs4", "mountstats: a mount that is not NFS");
    require(mount.export_name.size() <= input.size() && mount.mountpoint.size() <= input.size(),
            "mountstats: a decoded field longer than the file");
    require(mount.server.size() <= mount.export_name.size(),
            "mountstats: a server longer than its export");
    for (const storage::NfsOpStats& op : mount.ops) {
      require(op.name.data() >= input.data() &&
                  op.name.data() + op.name.size() <= input.data() + input.size(),
              "mountstats: an operation name points outside the file");
    }
  }
  std::string unescaped = storage::unescape_mount_field(input);
  require(unescaped.size() <= input.size(), "unescape_mount_field: the result grew");
  (void)storage::nfs_server(unescaped);
  return 0;
}
