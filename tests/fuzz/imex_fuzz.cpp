// IMEX's files and nvidia-imex-ctl's answers (collectors/imex/imex_parse):
// what another program wrote, read by the daemon. Per input:
//  - as the domain's JSON: refused with a reason, or a domain whose status
//    is one of up, degraded, down, with at most kMaxMembers members, each
//    with a known state or "unknown", and the local member (if any) one of
//    them;
//  - as the daemon's state with each kind of exit: always one of the
//    states the `state` label has;
//  - as config.cfg and as a nodes file: never more than kMaxMembers
//    members, none empty or with a '#'.

#include <algorithm>
#include <iterator>

#include "fuzz_support.hpp"
#include "imex/imex_parse.hpp"

using namespace nodewatch::imex;
using nodewatch::fuzz::as_text;
using nodewatch::fuzz::require;

namespace {

bool known_state(std::string_view s) {
  auto in = [&](const auto& list) {
    return std::find(std::begin(list), std::end(list), s) != std::end(list);
  };
  return in(kDaemonStates) || in(kQueryStates);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = as_text(data, size);
  std::string why;
  if (std::optional<Domain> d = parse_domain(text, &why)) {
    require(d->status == "up" || d->status == "degraded" || d->status == "down",
            "a domain status outside up, degraded, down");
    require(d->members.size() <= kMaxMembers, "more members than kMaxMembers");
    for (const Domain::Member& m : d->members) {
      require(m.status == "unknown" || std::find(std::begin(kDaemonStates), std::end(kDaemonStates),
                                                 m.status) != std::end(kDaemonStates),
              "a member state that is no daemon state");
      require(m.connections.size() <= kMaxMembers, "more connections than kMaxMembers");
    }
    if (const Domain::Member* self = local_member(*d, "", {"127.0.0.1", "198.18.0.1"}))
      require(self >= d->members.data() && self < d->members.data() + d->members.size(),
              "a local member outside the domain");
  } else {
    require(!why.empty(), "a refusal without a reason");
  }
  for (int rc : {0, 1, 14, 255, -1})
    require(known_state(parse_state(text, rc).state), "a state the label does not have");
  Config c = parse_config(text);
  require(c.nodes_file.find('#') == std::string::npos, "a comment in the nodes file's path");
  std::vector<std::string> members = parse_nodes(text);
  require(members.size() <= kMaxMembers, "more nodes than kMaxMembers");
  for (const std::string& m : members)
    require(!m.empty() && m.find('#') == std::string::npos && m.find('\n') == std::string::npos,
            "an empty, commented or multi-line member");
  return 0;
}
