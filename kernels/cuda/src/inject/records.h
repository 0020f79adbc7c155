// The record stream of the injection library: the one definition of its layout.
//
// sources/trace/records.py mirrors every PVT_ constant and the two structs below, and
// tests/sources/test_trace_records.py parses this file to check that they agree; change both
// together and bump PVT_VERSION when a field moves or changes meaning (docs/trace-records.md).
//
// A stream is one PvtHeader followed by PvtRecords, all little-endian (the library refuses to
// build on a big-endian host), each record PVT_RECORD_SIZE bytes, so a reader can index or skip
// them and a stream cut mid-record (the traced process was killed) reads up to its last whole
// record. Records are written in the order their writers claimed them in the ring buffer: the
// records of one thread are in call order; those of different threads interleave within a few
// microseconds of their timestamps.
//
// Groups: a PVT_KIND_SAMPLE or PVT_KIND_OOM_STATE record is followed directly by `flags` records
// of kind PVT_KIND_POOL (one per stream-ordered pool known on that device at that instant); an
// out-of-memory allocation is an ALLOC record with result PVT_CUDA_ERROR_OUT_OF_MEMORY, followed
// directly by its OOM_STATE group. The library writes each group as one block, so no other
// record falls inside it.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define PVT_MAGIC "PVTRACE1"  // 8 bytes, no terminator in the stream
#define PVT_MAGIC_SIZE 8
#define PVT_VERSION 2
#define PVT_HEADER_SIZE 64
#define PVT_RECORD_SIZE 80
#define PVT_VALUES 7  // u64 payload words per record (v[0] .. v[6])

// ---- record kinds, and what v[0..6] hold for each ----------------------------------------------
// ALLOC: an allocation call returned (any result; device -1 where no context was current).
//   v0 pointer (0 when the call failed), v1 bytes asked (pitch * height for cuMemAllocPitch),
//   v2 pool handle (cuMemAllocFromPoolAsync; 0 = the device's current pool or no pool),
//   v3 stream, v4 the call's flags (managed attach flags, host-register/host-alloc flags).
#define PVT_KIND_ALLOC 1
// FREE: a free call returned. v0 pointer (or VMM handle), v1 bytes the library had recorded for
//   that pointer (0 when unknown: stream-ordered frees, whose pool's USED_MEM_CURRENT is the
//   authority), v3 stream.
#define PVT_KIND_FREE 2
// POOL_CREATE: v0 the new pool; device = its location (-1 for a host pool).
#define PVT_KIND_POOL_CREATE 3
// POOL_DESTROY: v0 the pool.
#define PVT_KIND_POOL_DESTROY 4
// POOL_TRIM: cuMemPoolTrimTo. v0 pool, v1 minBytesToKeep.
#define PVT_KIND_POOL_TRIM 5
// POOL_SET_ATTR: cuMemPoolSetAttribute. v0 pool, v1 attribute (CUmemPool_attribute), v2 value
//   (the 64-bit ones: thresholds, watermarks; the int ones widened).
#define PVT_KIND_POOL_SET_ATTR 6
// SAMPLE: the periodic state of one device (written by the library's own thread, api 0).
//   v0 driver free bytes (cuMemGetInfo), v1 driver total bytes, v2 plain device bytes live
//   (cuMemAlloc/cuMemAllocPitch not yet freed), v3 managed bytes live (cuMemAllocManaged),
//   v4 VMM physical bytes live (cuMemCreate not yet released), v5 pinned host bytes live in the
//   process (cuMemHostRegister + cuMemHostAlloc + cuMemAllocHost; not per device), v6 records
//   dropped so far because the ring was full. result: the first failing driver call, else 0.
//   flags: the number of POOL records that follow.
#define PVT_KIND_SAMPLE 7
// OOM_STATE: the same fields as SAMPLE, read on the failing call's own thread at its exit;
//   follows the ALLOC record it describes. api: that call.
#define PVT_KIND_OOM_STATE 8
// POOL: one stream-ordered pool inside a SAMPLE or OOM_STATE group. v0 pool handle,
//   v1 RESERVED_MEM_CURRENT, v2 RESERVED_MEM_HIGH, v3 USED_MEM_CURRENT, v4 USED_MEM_HIGH,
//   v5 RELEASE_THRESHOLD. flags: PVT_POOL_* bits. result: the first failing attribute read.
#define PVT_KIND_POOL 9
// EXIT: the process ran its exit handlers; everything before this was flushed. v6 dropped.
//   Records may follow (the CUDA runtime's own teardown); a stream without EXIT was cut short.
#define PVT_KIND_EXIT 10
// STATUS: something the reader should be told. v0 a PVT_STATUS_* code, v1 its detail.
#define PVT_KIND_STATUS 11

// DEVICE: a device the program uses, written once, before its first SAMPLE (by the library's
//   thread, api 0). v0 PCI domain, v1 PCI bus, v2 PCI device (cuDeviceGetAttribute), v3 and v4
//   the device's UUID (cuDeviceGetUuid: bytes 0-7 and 8-15, little-endian), v5 total memory
//   (cuDeviceTotalMem). What the reader matches NVML's devices with: CUDA ordinals follow
//   CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, NVML's indices do not.
#define PVT_KIND_DEVICE 12
// HEAL: the library trimmed the stream-ordered pools of one device (cuMemPoolTrimTo to keep
//   nothing unused). flags: PVT_HEAL_* (why). v0 bytes of the allocation it was for (0 on a
//   command), v1 driver free before, v2 driver free after, v3 the pools' reserved-but-unused
//   bytes before, v4 nanoseconds the trim took, v5 the command's id (PVT_HEAL_COMMAND; else 0),
//   v6 pools trimmed. result: the first trim that failed, else 0. api: the allocation's call
//   (PVT_HEAL_ALLOC), else 0.
#define PVT_KIND_HEAL 13
// HEAL_REQUEST: a plain allocation will not fit even with this process's own pools trimmed,
//   and the library asks the reader (only over a socket, PROVETOP_TRACE_OUT=unix:PATH) to have
//   the other traced processes on the same device trim theirs; the allocating thread waits for
//   PVT_OP_HEAL_DONE with the same id, at most PROVETOP_TRACE_HEAL_WAIT_MS. v0 the request id,
//   v1 bytes the allocation asks, v2 driver free now, v3 the UUID's bytes 0-7 (as DEVICE's v3).
//   api: the allocation's call.
#define PVT_KIND_HEAL_REQUEST 14

// HEAL flags
#define PVT_HEAL_ALLOC 1    // before a plain allocation that would not fit (PROVETOP_TRACE_HEAL)
#define PVT_HEAL_COMMAND 2  // on the reader's PVT_OP_TRIM (the operator, or another process)
#define PVT_HEAL_ASKED 4    // (with ALLOC) not enough alone: a HEAL_REQUEST follows

// POOL record flags
#define PVT_POOL_DEFAULT 1  // the device's default pool (cuDeviceGetDefaultMemPool)
#define PVT_POOL_CURRENT 2  // the device's current pool (cuDeviceGetMemPool) at that instant
#define PVT_POOL_CREATED 4  // made by the program through cuMemPoolCreate

// STATUS codes
#define PVT_STATUS_SUBSCRIBED 1   // v1 = CUPTI_API_VERSION the library was built against
#define PVT_STATUS_NO_CUPTI 2     // cuptiSubscribe failed: v1 = its CUptiResult (39: another
                                  // subscriber, e.g. a profiler, already holds CUPTI)
#define PVT_STATUS_NO_DRIVER 3    // a driver entry point the library needs was not found
#define PVT_STATUS_RING_FULL 4    // first record dropped; v1 = the ring's slots
#define PVT_STATUS_NO_SOCKET 5    // unix:PATH could not be connected: v1 = errno (not tracing)

// ---- driver calls (the `api` field): numbers of our own, stable across CUDA versions --------
#define PVT_API_SAMPLER 0
#define PVT_API_MEM_ALLOC 1               // cuMemAlloc_v2
#define PVT_API_MEM_ALLOC_PITCH 2         // cuMemAllocPitch_v2
#define PVT_API_MEM_FREE 3                // cuMemFree_v2
#define PVT_API_MEM_ALLOC_MANAGED 4       // cuMemAllocManaged
#define PVT_API_MEM_ALLOC_ASYNC 5         // cuMemAllocAsync
#define PVT_API_MEM_ALLOC_ASYNC_PTSZ 6    // cuMemAllocAsync_ptsz
#define PVT_API_MEM_FREE_ASYNC 7          // cuMemFreeAsync
#define PVT_API_MEM_FREE_ASYNC_PTSZ 8     // cuMemFreeAsync_ptsz
#define PVT_API_MEM_ALLOC_FROM_POOL 9     // cuMemAllocFromPoolAsync
#define PVT_API_MEM_ALLOC_FROM_POOL_PTSZ 10  // cuMemAllocFromPoolAsync_ptsz
#define PVT_API_MEM_POOL_CREATE 11        // cuMemPoolCreate
#define PVT_API_MEM_POOL_DESTROY 12       // cuMemPoolDestroy
#define PVT_API_MEM_POOL_TRIM_TO 13       // cuMemPoolTrimTo
#define PVT_API_MEM_POOL_SET_ATTR 14      // cuMemPoolSetAttribute
#define PVT_API_MEM_HOST_REGISTER 15      // cuMemHostRegister_v2 (and the older cuMemHostRegister)
#define PVT_API_MEM_HOST_UNREGISTER 16    // cuMemHostUnregister
#define PVT_API_MEM_HOST_ALLOC 17         // cuMemHostAlloc
#define PVT_API_MEM_ALLOC_HOST 18         // cuMemAllocHost_v2
#define PVT_API_MEM_FREE_HOST 19          // cuMemFreeHost
#define PVT_API_MEM_CREATE 20             // cuMemCreate (virtual memory management)
#define PVT_API_MEM_RELEASE 21            // cuMemRelease

#define PVT_CUDA_SUCCESS 0
#define PVT_CUDA_ERROR_OUT_OF_MEMORY 2  // CUDA_ERROR_OUT_OF_MEMORY (cudaErrorMemoryAllocation)

// ---- commands: the reader to the library, over the socket of PROVETOP_TRACE_OUT=unix:PATH ----
// Fixed-size PvtCommand messages; the library's thread reads them between two drains (at most
// DRAIN_MS late) and ignores what it does not know.
#define PVT_COMMAND_SIZE 32
// TRIM: trim every stream-ordered pool of `device` (-1: every device) to keep nothing unused;
//   answered by a HEAL record with flags PVT_HEAL_COMMAND and v5 = id.
#define PVT_OP_TRIM 1
// HEAL_DONE: the answer to HEAL_REQUEST `id`; arg = bytes the other processes released. The
//   waiting allocation goes on (and may still fail: then it is an ordinary out-of-memory).
#define PVT_OP_HEAL_DONE 2

typedef struct PvtCommand {
    uint32_t op;             // PVT_OP_*
    int32_t device;          // CUDA device ordinal in the library's process; -1 every device
    uint64_t id;             // echoed in the answer
    uint64_t arg;            // per op
    uint64_t reserved;
} PvtCommand;

// The stream's first PVT_HEADER_SIZE bytes.
typedef struct PvtHeader {
    char magic[8];           // PVT_MAGIC
    uint16_t version;        // PVT_VERSION
    uint16_t header_size;    // PVT_HEADER_SIZE
    uint16_t record_size;    // PVT_RECORD_SIZE
    uint16_t reserved0;
    uint32_t pid;            // the traced process
    uint32_t ppid;           // its parent
    uint64_t t0_mono_ns;     // CLOCK_MONOTONIC when the library started (records' t_ns clock)
    uint64_t t0_wall_ns;     // CLOCK_REALTIME at the same instant (ns since the epoch)
    uint32_t interval_ms;    // the sampling interval (0: no samples)
    uint32_t ring_slots;     // records the ring holds before it drops
    uint32_t cupti_version;  // CUPTI_API_VERSION the library was built against
    int32_t cupti_result;    // cuptiSubscribe's result (0: callbacks are on)
    uint64_t reserved1;
} PvtHeader;

typedef struct PvtRecord {
    uint64_t t_ns;           // CLOCK_MONOTONIC nanoseconds at the call's exit (or the sample)
    uint16_t kind;           // PVT_KIND_*
    uint16_t api;            // PVT_API_*
    int16_t device;          // CUDA device ordinal; -1 when none is known
    uint16_t flags;          // kind-specific (see above)
    int32_t result;          // the call's CUresult, exactly as it returned to the program
    uint32_t tid;            // the calling thread (kernel thread id, low 32 bits)
    uint64_t v[PVT_VALUES];  // kind-specific values (see above)
} PvtRecord;

#ifdef __cplusplus
static_assert(sizeof(PvtHeader) == PVT_HEADER_SIZE, "PvtHeader layout");
static_assert(sizeof(PvtRecord) == PVT_RECORD_SIZE, "PvtRecord layout");
static_assert(sizeof(PvtCommand) == PVT_COMMAND_SIZE, "PvtCommand layout");
static_assert(offsetof(PvtRecord, v) == PVT_RECORD_SIZE - 8 * PVT_VALUES, "PvtRecord.v");
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the record stream is little-endian");
#endif
