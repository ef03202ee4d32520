#pragma once
// The part of NVML's C ABI that nodewatch calls, declared by hand: no NVIDIA
// header or library exists at build time. Every fact here (names, signatures,
// struct layouts, constants, field ids) is from NVML's documented ABI as
// collected in shared/reference/accelerators.md, section (c), for NVML 13.3
// on LP64 (x86_64 and aarch64). The static_asserts pin the layouts so that a
// typo here fails the build instead of corrupting memory at run time.
//
// The same declarations are used by the NVML service (as function-pointer
// types for dlsym) and by the fake library the tests build (as the signatures of
// its exported functions), so the two cannot drift apart.
//
// Only what is called is declared. C enums passed by value are `unsigned`
// (GCC gives an enum with no negative enumerator an unsigned int type; on
// both ABIs it is passed and returned exactly like int).

#include <cstddef>
#include <cstdint>

namespace nodewatch::accelerator::nvml {

// nvmlReturn_t.
using Return = int;
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorResetRequired = 16;
inline constexpr Return kErrorLibRmVersionMismatch = 18;  // driver reloaded under a session
inline constexpr Return kErrorArgumentVersionMismatch = 25;
inline constexpr Return kErrorUnknown = 999;

// nvmlDevice_t and nvmlEventSet_t: opaque handles (pointers to structs the
// library never shows). The fake library completes these types.
struct DeviceSt;
using Device = DeviceSt*;
struct EventSetSt;
using EventSet = EventSetSt*;

// Buffer sizes (the "_V2" sizes, which also fit every older value).
inline constexpr unsigned kDriverVersionBufferSize = 80;
inline constexpr unsigned kUuidBufferSize = 96;
inline constexpr unsigned kNameBufferSize = 96;
inline constexpr unsigned kSerialBufferSize = 30;

// nvmlUtilization_t: percent over the driver's last sample period.
struct Utilization {
  unsigned gpu;
  unsigned memory;
};
static_assert(sizeof(Utilization) == 8);

// nvmlMemory_t (v1): used = reserved + allocated.
struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
static_assert(sizeof(Memory) == 24);

// nvmlMemory_v2_t: reserved is reported apart from used.
struct MemoryV2 {
  unsigned version;  // kMemoryV2Version
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
static_assert(sizeof(MemoryV2) == 40 && offsetof(MemoryV2, total) == 8 &&
              offsetof(MemoryV2, used) == 32);
// NVML_STRUCT_VERSION(Memory, 2) = sizeof | 2 << 24.
inline constexpr unsigned kMemoryV2Version = sizeof(MemoryV2) | (2u << 24);
static_assert(kMemoryV2Version == 0x02000028);

// nvmlTemperature_v1_t, for nvmlDeviceGetTemperatureV.
struct TemperatureV1 {
  unsigned version;  // kTemperatureV1Version
  unsigned sensor_type;
  int temperature;  // °C
};
static_assert(sizeof(TemperatureV1) == 12);
inline constexpr unsigned kTemperatureV1Version = sizeof(TemperatureV1) | (1u << 24);
static_assert(kTemperatureV1Version == 0x0100000C);

// nvmlPciInfo_t. busIdLegacy is what nvmlDeviceGetPciInfo (v1) fills
// ("0000:17:00.0"); busId is what _v2/_v3 fill ("00000000:17:00.0"). In the
// oldest drivers the bytes from offset 36 on were reserved, so v1 callers
// must not read busId.
struct PciInfo {
  char bus_id_legacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pci_device_id;  // device id << 16 | vendor id
  unsigned pci_sub_system_id;
  char bus_id[32];
};
static_assert(sizeof(PciInfo) == 68 && offsetof(PciInfo, domain) == 16 &&
              offsetof(PciInfo, bus_id) == 36);

// nvmlValue_t.
union Value {
  double d_val;
  int si_val;
  unsigned ui_val;
  unsigned long ul_val;
  unsigned long long ull_val;
  long long sll_val;
  unsigned short us_val;
};
static_assert(sizeof(Value) == 8);

// nvmlValueType_t: which member of Value a field filled.
inline constexpr unsigned kValueTypeDouble = 0;
inline constexpr unsigned kValueTypeUnsignedInt = 1;
inline constexpr unsigned kValueTypeUnsignedLong = 2;
inline constexpr unsigned kValueTypeUnsignedLongLong = 3;
inline constexpr unsigned kValueTypeSignedLongLong = 4;
inline constexpr unsigned kValueTypeSignedInt = 5;
inline constexpr unsigned kValueTypeUnsignedShort = 6;

// nvmlFieldValue_t: the caller sets field_id and scope_id; the library sets
// the rest, with a return code per field.
struct FieldValue {
  unsigned field_id;
  unsigned scope_id;
  long long timestamp;  // µs since the epoch
  long long latency_usec;
  unsigned value_type;
  Return nvml_return;
  Value value;
};
static_assert(sizeof(FieldValue) == 40 && offsetof(FieldValue, value_type) == 24 &&
              offsetof(FieldValue, nvml_return) == 28 && offsetof(FieldValue, value) == 32);

// nvmlEventData_t (v2). nvmlEventSetWait (v1) fills only the first 24 bytes
// (the instance ids came with v2), so passing this larger struct to it is safe.
struct EventData {
  Device device;
  unsigned long long event_type;
  unsigned long long event_data;  // the XID number for XID events; 999: unknown XID
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};
static_assert(sizeof(EventData) == 32 && offsetof(EventData, event_data) == 16);

// Enumerations used.
inline constexpr unsigned kTemperatureGpu = 0;                // nvmlTemperatureSensors_t
inline constexpr unsigned kTemperatureThresholdSlowdown = 1;  // nvmlTemperatureThresholds_t
inline constexpr unsigned kClockGraphics = 0;                 // nvmlClockType_t
inline constexpr unsigned kClockSm = 1;
inline constexpr unsigned kClockMem = 2;
inline constexpr unsigned kMemoryErrorCorrected = 0;  // nvmlMemoryErrorType_t
inline constexpr unsigned kMemoryErrorUncorrected = 1;
inline constexpr unsigned kEccCounterVolatile = 0;  // nvmlEccCounterType_t
inline constexpr unsigned kPcieUtilTxBytes = 0;     // nvmlPcieUtilCounter_t, KB/s
inline constexpr unsigned kPcieUtilRxBytes = 1;
inline constexpr unsigned long long kEventTypeXidCriticalError = 0x8;
inline constexpr unsigned kFeatureEnabled = 1;  // nvmlEnableState_t: NVML_FEATURE_ENABLED
// nvmlNvLinkErrorCounter_t (nvmlDeviceGetNvLinkErrorCounter; NOT_SUPPORTED
// on Blackwell and later, which have the NVLink5 fields instead).
inline constexpr unsigned kNvlinkErrorDlReplay = 0;
inline constexpr unsigned kNvlinkErrorDlRecovery = 1;
inline constexpr unsigned kNvlinkErrorDlCrcFlit = 2;
inline constexpr unsigned kNvlinkErrorDlCrcData = 3;
inline constexpr unsigned kNvlinkErrorDlEccData = 4;

// Clock event (throttle) reasons, a bitmask.
inline constexpr unsigned long long kClocksEventGpuIdle = 0x1;
inline constexpr unsigned long long kClocksEventApplicationsClocksSetting = 0x2;
inline constexpr unsigned long long kClocksEventSwPowerCap = 0x4;
inline constexpr unsigned long long kClocksEventHwSlowdown = 0x8;
inline constexpr unsigned long long kClocksEventSyncBoost = 0x10;
inline constexpr unsigned long long kClocksEventSwThermalSlowdown = 0x20;
inline constexpr unsigned long long kClocksEventHwThermalSlowdown = 0x40;
inline constexpr unsigned long long kClocksEventHwPowerBrakeSlowdown = 0x80;
inline constexpr unsigned long long kClocksEventDisplayClockSetting = 0x100;

// Field ids for nvmlDeviceGetFieldValues ("guaranteed never to change").
// The throttle-time ids 251-253 were checked against NVML's own header as
// published in its Python binding (269-271 there are power-smoothing fields).
inline constexpr unsigned kFieldClocksEventSwPowerCapNs = 74;  // alias of PERF_POLICY_POWER
inline constexpr unsigned kFieldClocksEventSyncBoostNs = 76;   // alias of PERF_POLICY_SYNC_BOOST
inline constexpr unsigned kFieldMemoryTemp = 82;               // °C
inline constexpr unsigned kFieldNvlinkLinkCount = 91;
// NVLink, scope = link.
inline constexpr unsigned kFieldNvlinkThroughputDataTx = 138;  // KiB, cumulative
inline constexpr unsigned kFieldNvlinkThroughputDataRx = 139;
inline constexpr unsigned kFieldNvlinkSpeedMBps = 164;  // NVLINK_GET_SPEED, MB/s
// NVLink5 counters (driver 560+), scope = link.
inline constexpr unsigned kFieldNvlinkCountXmitBytes = 202;
inline constexpr unsigned kFieldNvlinkCountRcvBytes = 204;
inline constexpr unsigned kFieldNvlinkCountMalformedPacketErrors = 206;
inline constexpr unsigned kFieldNvlinkCountBufferOverrunErrors = 207;
inline constexpr unsigned kFieldNvlinkCountRcvErrors = 208;
inline constexpr unsigned kFieldNvlinkCountRcvRemoteErrors = 209;
inline constexpr unsigned kFieldNvlinkCountRcvGeneralErrors = 210;
inline constexpr unsigned kFieldNvlinkCountLocalLinkIntegrityErrors = 211;
inline constexpr unsigned kFieldNvlinkCountXmitDiscards = 212;
inline constexpr unsigned kFieldNvlinkCountLinkRecoveryFailedEvents = 214;
inline constexpr unsigned kFieldNvlinkCountLinkRecoveryEvents = 215;
inline constexpr unsigned kFieldNvlinkCountEffectiveErrors = 219;
inline constexpr unsigned kFieldNvlinkCountSymbolErrors = 221;
inline constexpr unsigned kFieldC2cLinkCount = 170;
inline constexpr unsigned kFieldC2cLinkStatus = 171;  // scope = link; 0 inactive, 1 active
inline constexpr unsigned kFieldPcieCountTxBytes = 197;
inline constexpr unsigned kFieldPcieCountRxBytes = 198;
inline constexpr unsigned kFieldC2cLinkErrorIntr = 231;    // scope = link; CRC errors
inline constexpr unsigned kFieldC2cLinkErrorReplay = 232;  // scope = link
inline constexpr unsigned kFieldClocksEventSwThermalNs = 251;
inline constexpr unsigned kFieldClocksEventHwThermalNs = 252;
inline constexpr unsigned kFieldClocksEventHwPowerBrakeNs = 253;

// Signatures, as function-pointer types (dlsym names in the comments).
using InitFn = Return (*)();                            // nvmlInit_v2, nvmlInit
using ShutdownFn = Return (*)();                        // nvmlShutdown
using ErrorStringFn = const char* (*)(Return);          // nvmlErrorString
using SystemGetStringFn = Return (*)(char*, unsigned);  // nvmlSystemGetDriverVersion
using DeviceGetCountFn = Return (*)(unsigned*);         // nvmlDeviceGetCount_v2, nvmlDeviceGetCount
using DeviceGetHandleByIndexFn = Return (*)(unsigned,
                                            Device*);  // ..._v2, nvmlDeviceGetHandleByIndex
using DeviceGetStringFn = Return (*)(Device, char*, unsigned);    // GetUUID, GetName, GetSerial
using DeviceGetPciInfoFn = Return (*)(Device, PciInfo*);          // _v3, _v2, nvmlDeviceGetPciInfo
using DeviceGetUtilizationFn = Return (*)(Device, Utilization*);  // GetUtilizationRates
using DeviceGetMemoryInfoFn = Return (*)(Device, Memory*);        // GetMemoryInfo
using DeviceGetMemoryInfoV2Fn = Return (*)(Device, MemoryV2*);    // GetMemoryInfo_v2
using DeviceGetTemperatureVFn = Return (*)(Device, TemperatureV1*);  // GetTemperatureV
using DeviceGetTemperatureFn = Return (*)(Device, unsigned sensor, unsigned* celsius);
using DeviceGetTemperatureThresholdFn = Return (*)(Device, unsigned threshold, unsigned* celsius);
// GetPowerUsage (mW), GetEnforcedPowerLimit (mW), GetPcieReplayCounter.
using DeviceGetUintFn = Return (*)(Device, unsigned*);
// GetTotalEnergyConsumption (mJ), GetCurrentClocksEventReasons, ...ThrottleReasons.
using DeviceGetUllFn = Return (*)(Device, unsigned long long*);
using DeviceGetClockInfoFn = Return (*)(Device, unsigned clock_type, unsigned* mhz);
using DeviceGetTotalEccErrorsFn = Return (*)(Device, unsigned error_type, unsigned counter_type,
                                             unsigned long long* count);
using DeviceGetRemappedRowsFn = Return (*)(Device, unsigned* correctable, unsigned* uncorrectable,
                                           unsigned* pending, unsigned* failure);
using DeviceGetPcieThroughputFn = Return (*)(Device, unsigned counter, unsigned* kb_per_s);
using DeviceGetFieldValuesFn = Return (*)(Device, int count, FieldValue* values);
// nvmlDeviceGetNvLinkState: is_active is an nvmlEnableState_t.
using DeviceGetNvLinkStateFn = Return (*)(Device, unsigned link, unsigned* is_active);
using DeviceGetNvLinkErrorCounterFn = Return (*)(Device, unsigned link, unsigned counter,
                                                 unsigned long long* value);
using EventSetCreateFn = Return (*)(EventSet*);
using DeviceRegisterEventsFn = Return (*)(Device, unsigned long long event_types, EventSet);
using EventSetWaitFn = Return (*)(EventSet, EventData*, unsigned timeout_ms);  // _v2, v1
using EventSetFreeFn = Return (*)(EventSet);

}  // namespace nodewatch::accelerator::nvml
