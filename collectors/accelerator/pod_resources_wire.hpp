#pragma once
// The frames between nodewatchd and its pod-resources helper
// (nwd-pod-resources, pod_resources_helper.hpp), which holds the gRPC
// client so that the daemon links no gRPC, protobuf or absl.
//
// Each frame (nodewatch/helper_process.hpp) is at most kMaxFrameBytes. A request is "list <timeout
// in ms>". An answer is text: a first line "ok" or "error <message>", then for an ok one line per
// device assignment, its nine fields (namespace, pod, container, resource, device id; then for a
// device of a ResourceClaim the claim's namespace and name, the DRA driver and the device, else
// four empty fields) separated by tabs. The helper bounds what it sends (the gRPC client's bounds:
// 1 MiB messages, 4,096 assignments, 253 bytes a field); the daemon checks every frame again and
// refuses one that breaks them.

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "accelerator/pod_resources.hpp"

namespace nodewatch::accelerator::pod_resources_wire {

inline constexpr std::size_t kMaxFrameBytes = std::size_t{2} << 20;
inline constexpr std::size_t kMaxDevices = 4096;
inline constexpr std::size_t kMaxFieldBytes = 253;

std::string encode_request(std::chrono::milliseconds timeout);
// The timeout a request asks for; nullopt for anything else.
std::optional<std::chrono::milliseconds> decode_request(std::string_view payload);

// A field made safe for the answer: tabs and line ends become spaces, and
// it is cut to kMaxFieldBytes.
std::string field(std::string_view s);
std::string encode_answer(const PodResourcesClient::Answer& a);
// nullopt, with `*why`, for a payload that is no answer or breaks a bound.
std::optional<PodResourcesClient::Answer> decode_answer(std::string_view payload, std::string* why);

}  // namespace nodewatch::accelerator::pod_resources_wire
