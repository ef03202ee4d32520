#pragma once
// What each nvmlDeviceGetFieldValues id means, by driver branch, and the
// value type it must answer with.
//
// NVML's header says every field id "is guaranteed never to change". Read
// across the published headers (NVML 12.2 to 13.3, in the history of
// NVIDIA's go-nvml, gen/nvml/nvml.h), three of the ids nodewatch reads did:
//
//   NVML header (driver branch)  251-253                          269-271
//   12.2-12.6 (R535-R560)        not defined (NVML_FI_MAX <= 230) not defined
//   12.8 (R570)                  power smoothing (251-268)        not defined (FI_MAX 269)
//   12.9, 13.0 (R575, R580)      clock-event time, ns             power smoothing (256-273)
//   13.1-13.3 (R590 on)          power smoothing (251-268)        clock-event time, ns
//
// (R575/R580 put the power-sync-balancing fields at 254-255 and moved power
// smoothing to 256-273; 13.1 put power smoothing back at 251-268 and the
// clock-event times after it.) Asking 251-253 of an R570 or R590 driver, or
// 269-271 of an R575/R580 one, is answered with power-smoothing values
// (0/1 flags, small unsigned ints), which nothing else tells apart from a
// throttle time. So those ids are asked only of a driver whose branch is
// known and in their range; and every answer is checked against the value
// type its meaning has, so that a driver that numbers them in yet another
// way is counted (reason "nvml_field_type") instead of exported.
//
// Every other id read here meant the same thing in every header that
// defines it (checked: 74, 76, 82, 91, 138, 139, 164, 170, 171, 172, 197, 198,
// 202-221, 230-234); a driver older than the id answers
// INVALID_ARGUMENT, which reads as "not supported". Those are asked of
// every driver, including one whose version could not be read.
//
// The branch is the driver's major version: the second component of
// nvmlSystemGetNVMLVersion ("13.590.44.01"), else the first of
// nvmlSystemGetDriverVersion ("590.44.01").

#include <optional>
#include <string>
#include <string_view>

#include "accelerator/nvml/nvml_api.hpp"

namespace nodewatch::accelerator {

// The fields the accelerator and interconnect questions read whose id
// depends on the driver branch.
enum class NvmlVersionedField {
  kClocksEventSwThermalNs,
  kClocksEventHwThermalNs,
  kClocksEventHwPowerBrakeNs,
};

// What the answer of a field must hold.
enum class NvmlFieldKind {
  kInteger,    // any integer type (counts, states, enum values)
  kInteger64,  // a 64-bit integer: a counter of ns or bytes wraps in seconds in 32 bits
  kNumber,     // any type, double included (a temperature)
};

struct NvmlFieldDef {
  unsigned id;
  std::string_view name;  // NVML's name without NVML_FI_DEV_, lower case, for messages
  NvmlFieldKind kind;
};

// The id of `field` under `branch`; nullopt when that driver has no such
// field or the branch is unknown (then it is not asked).
std::optional<unsigned> nvml_field_id(NvmlVersionedField field, std::optional<unsigned> branch);

// What field `id` means under `branch`, for the ids nodewatch reads;
// nullptr for any other id, and for a versioned id outside its range.
const NvmlFieldDef* nvml_field_def(unsigned id, std::optional<unsigned> branch);

// True when an answer's value_type is one `kind` accepts.
bool nvml_field_type_ok(NvmlFieldKind kind, unsigned value_type);

// "unsigned int", "double", ..., "value type 9" for one NVML does not have.
std::string nvml_value_type_name(unsigned value_type);

// The driver branch, from the NVML version ("13.590.44.01" -> 590) or,
// when that is empty or not of that form, the driver version ("590.44.01"
// -> 590); nullopt when neither says.
std::optional<unsigned> nvml_driver_branch(std::string_view nvml_version,
                                           std::string_view driver_version);

}  // namespace nodewatch::accelerator
