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
inline constexpr Return kErrorFunctionNotFound = 13;
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
// NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE, the same in every nvml.h.
inline constexpr unsigned kVbiosBufferSize = 32;

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

// nvmlMarginTemperature_v1_t, for nvmlDeviceGetMarginTemperature (NVML
// 12.8 on: in go-nvml's nvml.h from the 12.8 sync, f420a32; not in 12.6).
struct MarginTemperatureV1 {
  unsigned version;  // kMarginTemperatureV1Version
  int margin;        // °C to the nearest slowdown threshold
};
static_assert(sizeof(MarginTemperatureV1) == 8);
inline constexpr unsigned kMarginTemperatureV1Version = sizeof(MarginTemperatureV1) | (1u << 24);
static_assert(kMarginTemperatureV1Version == 0x01000008);

// nvmlRepairStatus_v1_t, for nvmlDeviceGetRepairStatus (NVML 13.0 on, in
// every header since, the same; Ampere on): TPC and memory-channel repairs
// that wait for a GPU reset.
struct RepairStatusV1 {
  unsigned version;  // kRepairStatusV1Version
  unsigned channel_repair_pending;
  unsigned tpc_repair_pending;
};
static_assert(sizeof(RepairStatusV1) == 12);
inline constexpr unsigned kRepairStatusV1Version = sizeof(RepairStatusV1) | (1u << 24);
static_assert(kRepairStatusV1Version == 0x0100000C);
// nvmlUnrepairableMemoryStatus_v1_t, for
// nvmlDeviceGetUnrepairableMemoryFlag_v1 (NVML 13.1 on; Hopper on): no
// version field (the _v1 of the call is it).
struct UnrepairableMemoryStatusV1 {
  unsigned unrepairable_memory;
};
static_assert(sizeof(UnrepairableMemoryStatusV1) == 4);

// nvmlPlatformInfo_v2_t, for nvmlDeviceGetPlatformInfo: where a GPU sits
// in its rack (Blackwell on). The same in go-nvml's nvml.h from the 12.8
// sync (f420a32) to 13.3 (8b8585b); absent before 12.8. v1 (rackGuid,
// chassisPhysicalSlotNumber, computeSlotIndex, nodeIndex) is deprecated.
struct PlatformInfoV2 {
  unsigned version;  // kPlatformInfoV2Version
  unsigned char ib_guid[16];
  unsigned char chassis_serial[16];  // Blackwell: 13 bytes, the rest zero
  unsigned char slot_number;         // in the chassis, switches included
  unsigned char tray_index;          // among the compute trays
  unsigned char host_id;             // the node within the slot
  unsigned char peer_type;
  unsigned char module_id;  // the GPU within the node
};
static_assert(sizeof(PlatformInfoV2) == 44);
inline constexpr unsigned kPlatformInfoV2Version = sizeof(PlatformInfoV2) | (2u << 24);
static_assert(kPlatformInfoV2Version == 0x0200002C);

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

// Field ids for nvmlDeviceGetFieldValues. The header says each id is
// "guaranteed never to change"; it is not so (see nvml_fields.hpp, which
// says for each id from which driver branch it means what, and which
// value type it answers with). Only the ids whose meaning never moved are
// named here; the clock-event time ids are in nvml_fields.hpp's table.
inline constexpr unsigned kFieldClocksEventSwPowerCapNs = 74;  // alias of PERF_POLICY_POWER
inline constexpr unsigned kFieldClocksEventSyncBoostNs = 76;   // alias of PERF_POLICY_SYNC_BOOST
inline constexpr unsigned kFieldMemoryTemp = 82;               // °C
inline constexpr unsigned kFieldNvlinkLinkCount = 91;
// NVLink, scope = link.
inline constexpr unsigned kFieldNvlinkThroughputDataTx = 138;  // KiB, cumulative
inline constexpr unsigned kFieldNvlinkThroughputDataRx = 139;
inline constexpr unsigned kFieldNvlinkSpeedMBps = 164;  // NVLINK_GET_SPEED, MB/s
// NVLink5 counters (NVML 12.6, driver 560+), scope = link.
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
// NVLink5 link quality, scope = link. Bit error rates (12.6 on) as NVML
// encodes them: the exponent in bits 0-7, the mantissa in bits 8-11
// (NVML_NVLINK_BER_{EXP,MANTISSA}_{SHIFT,WIDTH}): mantissa x 10^-exponent.
inline constexpr unsigned kFieldNvlinkCountEffectiveBer = 220;  // after FEC
inline constexpr unsigned kFieldNvlinkCountSymbolBer = 222;     // before FEC
inline constexpr unsigned kNvlinkBerMantissaShift = 8;
inline constexpr unsigned kNvlinkBerMantissaMask = 0xf;
inline constexpr unsigned kNvlinkBerExponentShift = 0;
inline constexpr unsigned kNvlinkBerExponentMask = 0xff;
// The FEC history (12.8 on): bin b at 235 + b, b 0-15, cumulative.
inline constexpr unsigned kFieldNvlinkCountFecHistory0 = 235;
inline constexpr unsigned kNvlinkFecHistoryBins = 16;
// 13.2 on: the total raw BER (encoded as above [inferred: the header
// says "NVLINK total raw BER" and no encoding]) and the physical-layer
// retransmission (PLR) block counters; 13.3 on: the data rate left after
// the FEC overhead.
inline constexpr unsigned kFieldNvlinkCountRawBerV2 = 293;
inline constexpr unsigned kFieldNvlinkPlrXmitBlocks = 294;
inline constexpr unsigned kFieldNvlinkPlrXmitRetryBlocks = 295;
inline constexpr unsigned kFieldNvlinkGetDataRate = 296;
inline constexpr unsigned kFieldC2cLinkCount = 170;
inline constexpr unsigned kFieldC2cLinkStatus = 171;  // scope = link; 0 inactive, 1 active
// scope = link: that link's speed, MB/s ("C2C Link Speed in MBps for
// active links"; NCCL's topology and UCX ask it per link too).
inline constexpr unsigned kFieldC2cLinkMaxBw = 172;
inline constexpr unsigned kFieldPcieCountTxBytes = 197;  // NVML 12.5 (driver 555) on
inline constexpr unsigned kFieldPcieCountRxBytes = 198;
// NVML 12.8 (driver 570) on: nvmlDeviceGpuRecoveryAction_t.
inline constexpr unsigned kFieldGpuRecoveryAction = 230;
inline constexpr unsigned kFieldC2cLinkErrorIntr = 231;       // NVML 12.9 on; scope = link; CRC
inline constexpr unsigned kFieldC2cLinkErrorReplay = 232;     // scope = link
inline constexpr unsigned kFieldC2cLinkErrorReplayB2b = 233;  // scope = link; back-to-back replays
inline constexpr unsigned kFieldC2cLinkPowerState = 234;      // scope = link; 0 full, 1 low power

// nvmlDeviceReadPRMCounters_v1 (NVML 13.1 on; Blackwell on): counters of
// the NVLink ports' PRM registers, by nvmlPRMCounterId_t. The ids, the
// structs and the call are the same in 13.1, 13.2 and 13.3; no header
// before 13.1 has them (the symbol is then absent and nothing is asked).
inline constexpr unsigned kPrmLinkDownEvents = 1;  // PPCNT physical layer (group 0x12)
inline constexpr unsigned kPrmPortXmitWait = 201;  // PPCNT IB port counters (group 0x20)
inline constexpr unsigned kPrmPlrRcvCodes = 301;   // PPCNT PLR counters (group 0x22), 301-307
inline constexpr unsigned kPrmPlrRcvCodeErr = 302;
inline constexpr unsigned kPrmPlrRcvUncorrectableCode = 303;
inline constexpr unsigned kPrmPlrXmitCodes = 304;
inline constexpr unsigned kPrmPlrXmitRetryCodes = 305;
inline constexpr unsigned kPrmPlrXmitRetryEvents = 306;
inline constexpr unsigned kPrmPlrSyncEvents = 307;
// nvmlPRMCounter_v1_t: the id and the port in, the status and the value out.
struct PrmCounter {
  unsigned counter_id;
  unsigned local_port;  // nvmlPRMCounterInput_v1_t
  Return status;        // nvmlPRMCounterValue_v1_t
  unsigned output_type;
  Value output_value;
};
static_assert(sizeof(PrmCounter) == 24 && offsetof(PrmCounter, status) == 8 &&
              offsetof(PrmCounter, output_value) == 16);
// nvmlPRMCounterList_v1_t (no version field: the _v1 of the call is it).
struct PrmCounterList {
  unsigned num_counters;
  PrmCounter* counters;
};
static_assert(sizeof(PrmCounterList) == 16 && offsetof(PrmCounterList, counters) == 8);

// nvmlGpuP2PCapsIndex_t's NVLINK and nvmlGpuP2PStatus_t's OK: the same
// values in every header from 12.2 to 13.3 (READ 0, WRITE 1, NVLINK 2; OK 0,
// then the reasons it is not: chipset, GPU, IOH topology, regkey, not
// supported, unknown).
inline constexpr unsigned kP2pCapsIndexNvlink = 2;
inline constexpr unsigned kP2pStatusOk = 0;

// nvmlDeviceGpuRecoveryAction_t (RECOVER_IMEX_DOMAIN from NVML 13.3).
inline constexpr unsigned kRecoveryActionNone = 0;
inline constexpr unsigned kRecoveryActionGpuReset = 1;
inline constexpr unsigned kRecoveryActionNodeReboot = 2;
inline constexpr unsigned kRecoveryActionDrainP2p = 3;
inline constexpr unsigned kRecoveryActionDrainAndReset = 4;
inline constexpr unsigned kRecoveryActionRecoverImexDomain = 5;

// Buffer size for nvmlSystemGetNVMLVersion ("13.590.44.01").
inline constexpr unsigned kNvmlVersionBufferSize = 80;

// GPM (GPU performance monitoring; Hopper and later, NVML 11.8 on).
struct GpmSampleSt;
using GpmSample = GpmSampleSt*;
// nvmlGpmMetricId_t: the ones read here did not move in any header from
// 11.8 to 13.3.
inline constexpr unsigned kGpmGraphicsUtil = 1;
inline constexpr unsigned kGpmSmUtil = 2;
inline constexpr unsigned kGpmSmOccupancy = 3;
inline constexpr unsigned kGpmAnyTensorUtil = 5;
inline constexpr unsigned kGpmDramBwUtil = 10;
// NVLink-C2C throughput, MiB/s (the header gives no unit; DCGM's
// dcgm_fields.h says its C2C fields, these, come from GPM in MiB/s): from
// NVML 12.9 (R575) on, the same ids in every header to 13.3. The whole
// device at 100-103 (total = headers and data, then data only; tx, rx),
// then link L at 104 + 4 L (L 0-13) in the same order. A driver of an
// older branch has NVML_GPM_METRIC_MAX 98 and is never asked them.
inline constexpr unsigned kGpmC2cTotalTx = 100;
inline constexpr unsigned kGpmC2cTotalRx = 101;
inline constexpr unsigned kGpmC2cDataTx = 102;
inline constexpr unsigned kGpmC2cDataRx = 103;
inline constexpr unsigned kGpmC2cLink0TotalTx = 104;
inline constexpr unsigned kGpmC2cLinkStride = 4;
inline constexpr unsigned kGpmC2cLinks = 14;
inline constexpr unsigned kGpmC2cFirstBranch = 575;
// nvmlGpmMetric_t.
struct GpmMetric {
  unsigned metric_id;  // in
  Return nvml_return;  // out: nonzero, value not valid
  double value;        // out
  struct {
    char* short_name;
    char* long_name;
    char* unit;
  } metric_info;  // out; may be null
};
static_assert(sizeof(GpmMetric) == 40 && offsetof(GpmMetric, value) == 8);
// NVML_GPM_METRIC_MAX: 98 in NVML 11.8-12.8, 210 in 12.9-13.1, 333 from
// 13.2, while NVML_GPM_METRICS_GET_VERSION stayed 1: the library cannot
// tell the array's size, so it reads only num_metrics entries. The array
// here has the largest size and num_metrics stays far below the smallest.
inline constexpr unsigned kGpmMetricMax = 333;
inline constexpr unsigned kGpmMetricMaxOldest = 98;
// nvmlGpmMetricsGet_t.
struct GpmMetricsGet {
  unsigned version;  // kGpmMetricsGetVersion
  unsigned num_metrics;
  GpmSample sample1;
  GpmSample sample2;
  GpmMetric metrics[kGpmMetricMax];
};
static_assert(offsetof(GpmMetricsGet, sample1) == 8 && offsetof(GpmMetricsGet, metrics) == 24 &&
              sizeof(GpmMetricsGet) == 24 + 40 * kGpmMetricMax);
inline constexpr unsigned kGpmMetricsGetVersion = 1;
// nvmlGpmSupport_t.
struct GpmSupport {
  unsigned version;  // kGpmSupportVersion
  unsigned is_supported_device;
};
static_assert(sizeof(GpmSupport) == 8);
inline constexpr unsigned kGpmSupportVersion = 1;

// MIG (nvmlDeviceGetMigMode's current mode).
inline constexpr unsigned kDeviceMigEnable = 1;

// nvmlGpuFabricInfo_v2_t (NVML 12.4 on) and _v3_t (13.0 on: adds
// health_summary), for nvmlDeviceGetGpuFabricInfoV. nvmlGpuFabricState_t
// is an unsigned char in every header.
inline constexpr unsigned kGpuFabricUuidLen = 16;
struct GpuFabricInfoV2 {
  unsigned version;
  unsigned char cluster_uuid[kGpuFabricUuidLen];
  Return status;  // valid only once state is COMPLETED
  unsigned clique_id;
  unsigned char state;
  unsigned health_mask;
};
static_assert(sizeof(GpuFabricInfoV2) == 36 && offsetof(GpuFabricInfoV2, status) == 20 &&
              offsetof(GpuFabricInfoV2, state) == 28 &&
              offsetof(GpuFabricInfoV2, health_mask) == 32);
struct GpuFabricInfoV3 {
  unsigned version;
  unsigned char cluster_uuid[kGpuFabricUuidLen];
  Return status;
  unsigned clique_id;
  unsigned char state;
  unsigned health_mask;
  unsigned char health_summary;
};
static_assert(sizeof(GpuFabricInfoV3) == 40 && offsetof(GpuFabricInfoV3, health_summary) == 36);
inline constexpr unsigned kGpuFabricInfoV2Version = sizeof(GpuFabricInfoV2) | (2u << 24);
inline constexpr unsigned kGpuFabricInfoV3Version = sizeof(GpuFabricInfoV3) | (3u << 24);
static_assert(kGpuFabricInfoV2Version == 0x02000024 && kGpuFabricInfoV3Version == 0x03000028);
// NVML_GPU_FABRIC_STATE_*.
inline constexpr unsigned kFabricStateNotSupported = 0;
inline constexpr unsigned kFabricStateNotStarted = 1;
inline constexpr unsigned kFabricStateInProgress = 2;
inline constexpr unsigned kFabricStateCompleted = 3;
// NVML_GPU_FABRIC_HEALTH_MASK_*: 2-bit fields (0 not supported, 1 TRUE, 2
// FALSE) at these shifts, TRUE meaning trouble; DEGRADED_BW from 12.4,
// ROUTE_RECOVERY, ROUTE_UNHEALTHY and ACCESS_TIMEOUT_RECOVERY from 12.8.
inline constexpr unsigned kFabricHealthShiftDegradedBw = 0;
inline constexpr unsigned kFabricHealthShiftRouteRecovery = 2;
inline constexpr unsigned kFabricHealthShiftRouteUnhealthy = 4;
inline constexpr unsigned kFabricHealthShiftAccessTimeoutRecovery = 6;
inline constexpr unsigned kFabricHealthTrue = 1;
// INCORRECT_CONFIGURATION (13.0 on): a 4-bit field at shift 8: 0 not
// supported, 1 none, 2..8 a configuration fault.
inline constexpr unsigned kFabricHealthShiftIncorrectConfiguration = 8;
inline constexpr unsigned kFabricHealthIncorrectConfigurationNone = 1;
// Its values 2..8: INCORRECT_SYSGUID, _CHASSIS_SN, NO_PARTITION,
// INSUFFICIENT_NVLINKS, INCOMPATIBLE_GPU_FW (13.0 on), INVALID_LOCATION
// (13.1 on), GPU_STATE_INVALID (13.2 on); the same numbers in every header
// that has them, to 13.3.
inline constexpr unsigned kFabricHealthIncorrectConfigurationMask = 0xf;
// NVML_GPU_FABRIC_HEALTH_SUMMARY_* (v3, 13.0 on): 1 healthy, 2 unhealthy, 3
// limited capacity.
inline constexpr unsigned kFabricHealthSummaryNotSupported = 0;
inline constexpr unsigned kFabricHealthSummaryHealthy = 1;
inline constexpr unsigned kFabricHealthSummaryLimitedCapacity = 3;

// Running compute processes. nvmlDeviceGetComputeRunningProcesses fills
// nvmlProcessInfo_v1_t; its _v2 (NVML 11) and _v3 (NVML 11.6 / R510 on)
// fill a struct with the MIG instance ids after the memory, the same
// layout under both names (nvmlProcessInfo_v2_t, nvmlProcessInfo_t).
struct ProcessInfoV1 {
  unsigned pid;
  unsigned long long used_gpu_memory;  // bytes, or kValueNotAvailable
};
struct ProcessInfo {
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id;  // kInstanceIdNone without MIG
  unsigned compute_instance_id;
};
static_assert(sizeof(ProcessInfoV1) == 16 && sizeof(ProcessInfo) == 24);
// NVML_VALUE_NOT_AVAILABLE, as an unsigned long long.
inline constexpr unsigned long long kValueNotAvailable = ~0ull;
// The instance ids of a process on a GPU that is not in MIG mode.
inline constexpr unsigned kInstanceIdNone = 0xFFFFFFFFu;

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
using DeviceGetMarginTemperatureFn = Return (*)(Device, MarginTemperatureV1*);
using DeviceGetRepairStatusFn = Return (*)(Device, RepairStatusV1*);
using DeviceGetUnrepairableMemoryFlagFn = Return (*)(Device, UnrepairableMemoryStatusV1*);
using DeviceGetPlatformInfoFn = Return (*)(Device, PlatformInfoV2*);
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
using SystemGetNvmlVersionFn = Return (*)(char*, unsigned);  // nvmlSystemGetNVMLVersion
using GpmQueryDeviceSupportFn = Return (*)(Device, GpmSupport*);
using GpmSampleAllocFn = Return (*)(GpmSample*);
using GpmSampleFreeFn = Return (*)(GpmSample);
using GpmSampleGetFn = Return (*)(Device, GpmSample);
using GpmMigSampleGetFn = Return (*)(Device, unsigned gpu_instance_id, GpmSample);
using GpmMetricsGetFn = Return (*)(GpmMetricsGet*);
// nvmlDeviceGetMigMode(device, &current, &pending).
using DeviceGetMigModeFn = Return (*)(Device, unsigned* current, unsigned* pending);
// nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetGpuInstanceId.
using DeviceGetMaxMigDeviceCountFn = Return (*)(Device, unsigned*);
using DeviceGetMigDeviceHandleByIndexFn = Return (*)(Device, unsigned index, Device* mig);
using DeviceGetGpuInstanceIdFn = Return (*)(Device, unsigned*);
// nvmlDeviceGetComputeRunningProcesses(_v3, _v2): `infos` is an array of
// ProcessInfo (_v3, _v2) or ProcessInfoV1; *count in: its length, out: the
// number filled, or needed with INSUFFICIENT_SIZE.
using DeviceGetProcessesFn = Return (*)(Device, unsigned* count, void* infos);
// nvmlDeviceGetGpuFabricInfoV: takes a GpuFabricInfoV2 or V3, by its version.
using DeviceGetGpuFabricInfoVFn = Return (*)(Device, void* info);
using DeviceReadPrmCountersFn = Return (*)(Device, PrmCounterList*);
// nvmlDeviceGetP2PStatus(device1, device2, nvmlGpuP2PCapsIndex_t, &nvmlGpuP2PStatus_t).
using DeviceGetP2pStatusFn = Return (*)(Device, Device, unsigned caps_index, unsigned* status);

}  // namespace nodewatch::accelerator::nvml
