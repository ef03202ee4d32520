#include "accelerator/pod_resources_wire.hpp"

#include <charconv>
#include <cstdint>
#include <vector>

namespace nodewatch::accelerator::pod_resources_wire {
namespace {

// The fields of a device line (the header's list).
constexpr std::size_t kDeviceFields = 9;

}  // namespace

std::string encode_request(std::chrono::milliseconds timeout) {
  return "list " + std::to_string(timeout.count());
}

std::optional<std::chrono::milliseconds> decode_request(std::string_view payload) {
  if (!payload.starts_with("list ")) return std::nullopt;
  payload.remove_prefix(5);
  long long ms = 0;
  auto [p, ec] = std::from_chars(payload.data(), payload.data() + payload.size(), ms);
  if (ec != std::errc() || p != payload.data() + payload.size() || ms < 0 || ms > 600'000)
    return std::nullopt;
  return std::chrono::milliseconds(ms);
}

std::string field(std::string_view s) {
  std::string out(s.substr(0, kMaxFieldBytes));
  for (char& c : out)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return out;
}

std::string encode_answer(const PodResourcesClient::Answer& a) {
  if (!a.ok) return "error " + field(a.error);
  std::string out = "ok";
  for (const PodDevice& d : a.devices) {
    out += '\n';
    for (const std::string* f : {&d.namespace_name, &d.pod, &d.container, &d.resource, &d.device_id,
                                 &d.claim_namespace, &d.claim, &d.driver, &d.dra_device}) {
      if (f != &d.namespace_name) out += '\t';
      out += field(*f);
    }
  }
  return out;
}

std::optional<PodResourcesClient::Answer> decode_answer(std::string_view payload,
                                                        std::string* why) {
  PodResourcesClient::Answer a;
  std::size_t eol = payload.find('\n');
  std::string_view first = payload.substr(0, eol);
  if (first.starts_with("error ")) {
    if (eol != std::string_view::npos) {
      *why = "an error answer with more lines";
      return std::nullopt;
    }
    a.error = std::string(first.substr(6, kMaxFieldBytes));
    return a;
  }
  if (first != "ok") {
    *why = "neither ok nor error";
    return std::nullopt;
  }
  a.ok = true;
  std::string_view rest =
      eol == std::string_view::npos ? std::string_view{} : payload.substr(eol + 1);
  while (eol != std::string_view::npos) {
    eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view{} : rest.substr(eol + 1);
    std::vector<std::string_view> f;
    for (std::size_t pos = 0;;) {
      std::size_t tab = line.find('\t', pos);
      f.push_back(
          line.substr(pos, tab == std::string_view::npos ? std::string_view::npos : tab - pos));
      if (tab == std::string_view::npos) break;
      pos = tab + 1;
    }
    if (f.size() != kDeviceFields) {
      *why = "a device line of " + std::to_string(f.size()) + " fields";
      return std::nullopt;
    }
    for (std::string_view x : f)
      if (x.size() > kMaxFieldBytes) {
        *why = "a field longer than " + std::to_string(kMaxFieldBytes) + " bytes";
        return std::nullopt;
      }
    if (a.devices.size() >= kMaxDevices) {
      *why = "more than " + std::to_string(kMaxDevices) + " device assignments";
      return std::nullopt;
    }
    a.devices.push_back({std::string(f[0]), std::string(f[1]), std::string(f[2]), std::string(f[3]),
                         std::string(f[4]), std::string(f[5]), std::string(f[6]), std::string(f[7]),
                         std::string(f[8])});
  }
  return a;
}

}  // namespace nodewatch::accelerator::pod_resources_wire
