// What nodewatchd takes from its BMC helper and its SEL state file
// (collectors/bmc/bmc_wire.hpp, bmc_collector.hpp): the helper's answer (a
// BMC's names and readings, through FreeIPMI, in a process the daemon does
// not trust), a request (the helper's side), and the state file. Properties:
// an answer taken is within its bounds, its text is printable ASCII (it
// becomes label values), and it encodes to an answer decoded the same; a
// request and a state file taken round-trip.

#include "bmc/bmc_collector.hpp"
#include "bmc/bmc_wire.hpp"
#include "fuzz_support.hpp"

using namespace nodewatch::bmc;
using nodewatch::fuzz::require;

namespace {

bool printable(const std::string& s) {
  for (char c : s)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text = nodewatch::fuzz::as_text(data, size);
  std::string why;
  if (auto r = decode_reading(text, &why)) {
    require(r->sensors.size() <= kMaxSensors && r->events.size() <= kMaxEvents,
            "bmc: an answer over its bounds");
    for (const Sensor& s : r->sensors)
      require(!s.name.empty() && printable(s.name) && printable(s.type) && printable(s.unit_text),
              "bmc: a sensor's text that is no label value");
    require(printable(r->firmware) && printable(r->manufacturer) && printable(r->error),
            "bmc: text that is no label value");
    std::string again_why;
    auto again = decode_reading(encode_reading(*r), &again_why);
    require(again.has_value(), "bmc: an answer taken does not encode to one");
    require(*again == *r, "bmc: an answer does not round-trip");
  }
  if (auto q = decode_request(text))
    require(decode_request(encode_request(*q)) == q, "bmc: a request does not round-trip");
  SelBook book;
  if (parse_sel_book(text, &book, &why)) {
    SelBook again;
    require(parse_sel_book(serialize_sel_book(book), &again, &why),
            "bmc: a state file written is refused");
    require(
        again.counts == book.counts && again.cursor == book.cursor && again.target == book.target,
        "bmc: a state file does not round-trip");
  }
  return 0;
}
