#pragma once
// The frames between nodewatchd and its BMC helper (nwd-bmc,
// bmc_helper_main.cpp), which holds libfreeipmi so that the daemon links
// none of it (nor libgcrypt, which it needs).
//
// A request is "read <timeout ms> <SEL record id or -1> <its timestamp>
// <most SEL entries>": read the sensors, the SEL's fill and the SEL entries
// after the one named (the last one counted; -1: none yet). An answer is
// text, one record per line, fields separated by tabs:
//   ok | error <reason> <message>       the first line
//   bmc <firmware> <manufacturer> <product id> <IPMI version>
//   sensor <name> <type> <unit code> <unit> <value or -> <state>
//   power <watts>                        DCMI's system power, where measured
//   sel <entries> <free bytes>
//   event <record id> <timestamp> <sensor type> <state>
//   cursor <record id> <timestamp>       the last SEL entry read
//   sdr <records>                        the SDR was fetched anew, with so many
// A state is nominal, warning, critical or unknown (FreeIPMI's
// interpretation). The helper bounds what it sends; the daemon checks every
// frame again and refuses one that breaks a bound.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nodewatch::bmc {

inline constexpr std::size_t kMaxFrameBytes = std::size_t{1} << 20;
inline constexpr std::size_t kMaxSensors = 2048;
inline constexpr std::size_t kMaxEvents = 1024;
inline constexpr std::size_t kMaxFieldBytes = 128;

inline constexpr std::string_view kStates[] = {"nominal", "warning", "critical", "unknown"};

// The SEL entry counted last: its record id (-1: none) and timestamp.
struct SelCursor {
  std::int32_t record_id = -1;
  std::uint32_t timestamp = 0;
  bool operator==(const SelCursor&) const = default;
};

struct Request {
  std::chrono::milliseconds timeout{0};
  SelCursor cursor;
  std::size_t sel_max = 0;
  bool operator==(const Request&) const = default;
};

struct Sensor {
  std::string name;             // the SDR's ID string
  std::string type;             // "Temperature", "Fan", "Power Supply", ...
  int unit = 0;                 // IPMI base unit code (1 degrees C, 18 RPM, ...)
  std::string unit_text;        // FreeIPMI's abbreviation ("C", "RPM", "W")
  std::optional<double> value;  // analog sensors that gave a reading
  std::string state = "unknown";
  bool operator==(const Sensor&) const = default;
};

struct SelEvent {
  std::uint32_t record_id = 0;
  std::uint32_t timestamp = 0;
  std::string type;  // the sensor type, or "oem" for an OEM record
  std::string state = "unknown";
  bool operator==(const SelEvent&) const = default;
};

struct Reading {
  std::string error_reason;  // empty: the BMC answered
  std::string error;
  bool have_device = false;
  std::string firmware, manufacturer, product, ipmi_version;
  std::vector<Sensor> sensors;
  std::optional<double> node_power_watts;
  bool have_sel = false;
  std::uint32_t sel_entries = 0;
  std::uint32_t sel_free_bytes = 0;
  std::vector<SelEvent> events;
  SelCursor cursor;
  std::optional<std::uint32_t> sdr_fetched;  // records, when fetched anew
  bool operator==(const Reading&) const = default;
};

std::string encode_request(const Request& r);
std::optional<Request> decode_request(std::string_view payload);

// A field made safe for a line: tabs and line ends become spaces, cut to
// kMaxFieldBytes.
std::string field(std::string_view s);
std::string encode_reading(const Reading& r);
// nullopt, with `*why`, for a payload that is no answer or breaks a bound.
std::optional<Reading> decode_reading(std::string_view payload, std::string* why);

}  // namespace nodewatch::bmc
