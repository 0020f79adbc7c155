// provetop's injection library: the memory calls of an unmodified CUDA program, as a record
// stream (records.h), for `provetop trace`.
//
// The driver loads this library when the program initialises CUDA, if CUDA_INJECTION64_PATH
// names it, and calls InitializeInjection. From there CUPTI's callback API reports every driver
// call enabled below, on the program's own thread, at its entry and at its exit (with the
// result). The callback copies what it needs into a record and pushes it into a lock-free ring
// (ring.h); the library's own thread (writer.h) writes the ring out and samples each device's
// memory every PROVETOP_TRACE_INTERVAL_MS. What it never does: change a result, block the
// program's threads on I/O, create a context, or call back into itself (its own driver calls
// from inside a callback are fenced off by a thread-local flag, and its own thread never
// records).
//
// With PROVETOP_TRACE_HEAL=1 it also acts, once, where it can spare the program an
// out-of-memory that is not one: before a plain allocation that the driver's free bytes cannot
// hold but this process's stream-ordered pools' unused reserve could, it trims those pools
// (heal_before); before a stream-ordered allocation that its pool can neither serve nor grow
// for, it trims this process's other pools (heal_before_async). Over a socket, either asks the
// reader for other traced processes' reserves when its own are not enough. That changes no
// result: the driver then performs the allocation the program asked, with the program's
// arguments, and returns what it returns.
//
// Environment:
//   PROVETOP_TRACE_OUT          where to write: a path (a FIFO or a file; "%p" becomes the pid),
//                               "fd:N" for an inherited descriptor, or "unix:PATH" for a stream
//                               socket the reader listens on (each traced process connects on
//                               its own; commands come back on it). Unset: the library stays
//                               idle.
//   PROVETOP_TRACE_PID          the process meant to be traced. A descendant that inherits the
//                               environment (another pid) traces only where the path has "%p",
//                               so it never writes into its parent's stream. Not read for
//                               "unix:": there every process is a connection of its own.
//   PROVETOP_TRACE_INTERVAL_MS  sampling interval, default 100; 0: no periodic samples.
//   PROVETOP_TRACE_RING         ring slots (rounded up to a power of two), default 65536.
//   PROVETOP_TRACE_HEAL         "1": trim this process's pools before an allocation that does
//                               not fit without their unused bytes (plain or stream-ordered;
//                               over a socket, ask the reader for the other processes' when
//                               even that is short).
//   PROVETOP_TRACE_HEAL_WAIT_MS how long such an allocation waits for the reader's answer,
//                               default 1000.
//
// Build: kernels/cuda/inject_build.py (C++17, -fPIC -shared, against cuda.h and cupti.h,
// linked with libcupti only; libcuda's entry points come from the process, driver.h).
#include <cuda.h>
#include <cupti.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "inject/driver.h"
#include "inject/live.h"
#include "inject/records.h"
#include "inject/ring.h"
#include "inject/state.h"
#include "inject/writer.h"

namespace pvt {
namespace {

// 100 ms: the engine's own memory sampler's period, so a traced run and an engine run draw
// graphs of the same resolution; one sample costs ~86 us per device (measured on an H100,
// cuda-injection.md), under 0.1 % of one core.
constexpr uint32_t DEFAULT_INTERVAL_MS = 100;
// 2^16 slots of 88 bytes (a record and its sequence): 5.5 MiB, and ~70 ms of the fastest
// record rate measured (writer.h, DRAIN_MS).
constexpr uint32_t DEFAULT_RING = 1u << 16;
constexpr uint32_t MIN_RING = 1u << 10;
constexpr uint32_t MAX_RING = 1u << 24;  // 1.4 GiB of host memory: beyond that, a typo
// How long an allocation that asked the reader for other processes' memory waits for the
// answer. Only an allocation about to fail waits (its alternative is an out-of-memory error),
// so a moment is cheap; the reader answers within tens of milliseconds (one drain of each
// library it asks to trim, 5 ms, plus the trims), and waits for them at most 0.6 s itself
// (provetop/trace/broker.py, PEER_WAIT_S), so 1 s leaves room for a loaded machine while a
// reader that never answers costs the program one second per such allocation, no more.
constexpr uint32_t DEFAULT_HEAL_WAIT_MS = 1000;
// The granule of a plain allocation's footprint. The driver backs cuMemAlloc with 2 MiB pages
// (the large-page size of device memory on every GPU since Pascal; the granularity that
// cuMemGetAllocationGranularity reports for device memory), and cuMemGetInfo's free bytes are
// counted in those pages: an allocation of a few bytes over a page boundary needs the next
// page. Rounding up may over-estimate a small allocation that shares a page already mapped,
// so the heal acts a little early, never late. sources/trace/heal.py (GRANULE) is the same.
constexpr uint64_t HEAL_GRANULE = 2ull << 20;
// cuMemAllocPitch pads each row to the driver's pitch alignment (the pitch it returns is a
// multiple of 512 bytes on the GPUs seen); the footprint counts rows of the width rounded up to
// 512. The pitch itself is only known at the call's exit, too late for the heal.
constexpr uint64_t PITCH_ALIGN = 512;

std::atomic<bool> g_on{false};
bool g_heal = false;                          // PROVETOP_TRACE_HEAL=1
uint32_t g_heal_wait_ms = DEFAULT_HEAL_WAIT_MS;  // PROVETOP_TRACE_HEAL_WAIT_MS
std::atomic<uint64_t> g_heal_ids{0};          // HEAL_REQUEST ids: 1, 2, ...
bool g_child_of_fork = false;  // set in a fork()ed child: no drain thread there, no flush
LiveMap* g_device_ptrs = nullptr;  // cuMemAlloc*, cuMemAllocManaged (freed by cuMemFree)
LiveMap* g_host_ptrs = nullptr;    // cuMemHostRegister, cuMemHostAlloc, cuMemAllocHost
LiveMap* g_vmm = nullptr;          // cuMemCreate handles (freed by cuMemRelease)

thread_local uint32_t t_tid = 0;

// context -> device ordinal, a few per thread (a thread that drives several devices switches
// between their contexts); checked again when the registry forgets a context
struct CtxCache {
    CUcontext ctx = nullptr;
    int16_t device = -1;
    uint32_t generation = 0;
};
constexpr int CTX_CACHE = 4;
thread_local CtxCache t_ctx[CTX_CACHE];
thread_local int t_ctx_next = 0;

// the entry of a free call on this thread, for its exit (the block is forgotten at the entry,
// before the driver can hand its address to another thread's allocation)
struct PendingFree {
    bool found = false;
    Live live{};
};
thread_local PendingFree t_free;

uint32_t tid() {
    if (t_tid == 0) t_tid = static_cast<uint32_t>(syscall(SYS_gettid));
    return t_tid;
}

int16_t device_of(CUcontext ctx) {
    if (ctx == nullptr) return -1;
    const uint32_t gen = g_registry->generation.load(std::memory_order_acquire);
    for (const CtxCache& c : t_ctx)
        if (c.ctx == ctx && c.generation == gen) return c.device;
    CUdevice dev = -1;
    CUresult res = g_driver.ctxGetDeviceOf != nullptr ? g_driver.ctxGetDeviceOf(&dev, ctx)
                                                      : g_driver.ctxGetDevice(&dev);
    if (res != CUDA_SUCCESS) return -1;
    g_registry->see_context(ctx, dev);
    CtxCache& slot = t_ctx[t_ctx_next];
    t_ctx_next = (t_ctx_next + 1) % CTX_CACHE;
    slot = CtxCache{ctx, static_cast<int16_t>(dev), gen};
    return static_cast<int16_t>(dev);
}

template <typename P>
const P* params(const CUpti_CallbackData* cb) {
    return static_cast<const P*>(cb->functionParams);
}

uint64_t u(const void* p) { return reinterpret_cast<uint64_t>(p); }

CUresult result_of(const CUpti_CallbackData* cb) {
    return *static_cast<const CUresult*>(cb->functionReturnValue);
}

// An out-parameter's value once the call succeeded (a failed call may have been handed a null
// or left it unwritten).
template <typename T>
uint64_t written(const CUpti_CallbackData* cb, T* const* out) {
    return result_of(cb) == CUDA_SUCCESS && *out != nullptr ? static_cast<uint64_t>(**out) : 0;
}
template <typename T>
uint64_t written_ptr(const CUpti_CallbackData* cb, T** const* out) {
    return result_of(cb) == CUDA_SUCCESS && *out != nullptr ? u(**out) : 0;
}

PvtRecord make(uint16_t kind, uint16_t api, int16_t device, CUresult result) {
    PvtRecord r;
    memset(&r, 0, sizeof(r));
    r.t_ns = mono_ns();
    r.kind = kind;
    r.api = api;
    r.device = device;
    r.result = static_cast<int32_t>(result);
    r.tid = tid();
    return r;
}

std::atomic<bool> g_told_full{false};  // the STATUS record of the first drop was tried

void push(const PvtRecord& r) {
    if (!g_writer->ring.push(&r, 1) && !g_told_full.exchange(true)) {
        PvtRecord note = make(PVT_KIND_STATUS, 0, -1, CUDA_SUCCESS);
        note.v[0] = PVT_STATUS_RING_FULL;
        note.v[1] = g_writer->ring.capacity();
        g_writer->ring.push(&note, 1);  // may drop too; the samples' v6 still counts
    }
}

// An allocation's record; an out-of-memory one is followed, in the same block, by the device's
// memory picture read right now on this thread.
void push_alloc(PvtRecord rec) {
    if (rec.result != PVT_CUDA_ERROR_OUT_OF_MEMORY || rec.device < 0 ||
        rec.device >= MAX_DEVICES) {
        push(rec);
        return;
    }
    PvtRecord group[2 + MAX_GROUP_POOLS];
    group[0] = rec;
    PvtRecord head = rec;
    head.kind = PVT_KIND_OOM_STATE;
    memset(head.v, 0, sizeof(head.v));
    const uint32_t n = g_registry->snapshot_current(rec.device, head, &group[1]);
    group[1].v[6] = g_writer->ring.dropped();
    if (!g_writer->ring.push(group, 1 + n)) push(rec);  // no room for the group: the call alone
}

void alloc_record(uint16_t api, const CUpti_CallbackData* cb, uint64_t ptr, uint64_t bytes,
                  uint64_t pool, uint64_t stream, uint64_t flags, LiveMap* map, uint8_t cls,
                  int16_t device_override = -2) {
    const CUresult res = result_of(cb);
    const int16_t dev = device_override != -2 ? device_override : device_of(cb->context);
    PvtRecord r = make(PVT_KIND_ALLOC, api, dev, res);
    r.v[0] = res == CUDA_SUCCESS ? ptr : 0;
    r.v[1] = bytes;
    r.v[2] = pool;
    r.v[3] = stream;
    r.v[4] = flags;
    if (res == CUDA_SUCCESS && map != nullptr) map->insert(ptr, Live{bytes, dev, cls});
    push_alloc(r);
}

// A free's entry forgets the block; its exit records the free, or puts the block back when the
// call failed.
void free_call(uint16_t api, const CUpti_CallbackData* cb, uint64_t key, LiveMap* map,
               uint64_t stream = 0) {
    if (cb->callbackSite == CUPTI_API_ENTER) {
        t_free.found = map != nullptr && map->take(key, &t_free.live);
        return;
    }
    const CUresult res = result_of(cb);
    const bool found = t_free.found;
    t_free.found = false;
    if (key == 0 && res == CUDA_SUCCESS) return;  // cuMemFree(0) and the like: nothing freed
    if (res != CUDA_SUCCESS && found) map->insert(key, t_free.live);
    const int16_t dev = found && t_free.live.device >= 0 ? t_free.live.device
                                                          : device_of(cb->context);
    PvtRecord r = make(PVT_KIND_FREE, api, dev, res);
    r.v[0] = key;
    r.v[1] = found ? t_free.live.bytes : 0;
    r.v[3] = stream;
    push(r);
}

int16_t location_device(const CUmemLocation& loc) {
    return loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? static_cast<int16_t>(loc.id)
                                                   : static_cast<int16_t>(-1);
}

// What both heals do after their trims: a HEAL record when this process trimmed a pool, and,
// when the allocation is still short (`short_alone`) and a reader can answer, a HEAL_REQUEST
// for the other traced processes' reserves and the wait for its answer (both heals below).
void heal_record_and_ask(uint16_t api, int16_t device, uint64_t bytes, const TrimOutcome& t,
                         bool short_alone) {
    uint64_t id = 0;
    int slot = -1;
    if (short_alone && g_writer->can_ask()) {
        id = g_heal_ids.fetch_add(1, std::memory_order_relaxed) + 1;
        slot = g_writer->wait_begin(id);  // before the request: no answer can be missed
    }
    if (t.trimmed > 0) {
        PvtRecord r = make(PVT_KIND_HEAL, api, device, t.result);
        r.flags = PVT_HEAL_ALLOC | (slot >= 0 ? PVT_HEAL_ASKED : 0);
        r.v[0] = bytes;
        Registry::fill_heal(r, t);
        push(r);
    }
    if (slot < 0) return;  // not over a socket, the reader gone, or too many waiting already
    PvtRecord q = make(PVT_KIND_HEAL_REQUEST, api, device, CUDA_SUCCESS);
    q.v[0] = id;
    q.v[1] = bytes;
    q.v[2] = t.free_after;
    q.v[3] = g_registry->uuid_lo(device);
    if (!g_writer->ring.push(&q, 1)) {  // the ring is full: nobody will answer
        g_writer->wait_end(slot, 0);
        return;
    }
    g_writer->kick();
    g_writer->wait_end(slot, g_heal_wait_ms);
}

// The heal, at the entry of a plain allocation (cuMemAlloc, cuMemAllocPitch, cuMemCreate) on
// the program's thread, inside its callback (t_in_hook is set: the driver calls made here
// record nothing). `bytes`: what the call asks (its ALLOC record's v1); `footprint`: what it
// takes before rounding to pages; `device`: -1 for the current context's.
//
// The rule, mirrored in sources/trace/heal.py (verdict; the reader labels every OOM with it):
// need = footprint rounded up to HEAL_GRANULE; it fits when need <= the driver's free bytes,
// and nothing is done. Otherwise the device's pools' reserved-but-unused bytes (`unused`) are
// what this process can give back: when there are any, every pool of the device is trimmed
// (cuMemPoolTrimTo(pool, 0): only what is unused goes) and a HEAL record says so. When even
// free + unused < need (or the trim gave back less than it held: memory freed stream-ordered
// but not yet synchronised counts as used), the memory is elsewhere: over a socket, a
// HEAL_REQUEST asks the reader to have the other traced processes on that GPU trim theirs
// (sources/trace/heal.py, peers_to_trim) and the thread waits for the answer, at most
// PROVETOP_TRACE_HEAL_WAIT_MS. Then the callback returns and the driver performs the
// allocation as the program asked: it may still fail, an ordinary out-of-memory.
void heal_before(uint16_t api, const CUpti_CallbackData* cb, uint64_t bytes, uint64_t footprint,
                 int16_t device) {
    const int16_t current = device_of(cb->context);
    if (device < 0) device = current;
    if (device < 0 || device >= MAX_DEVICES) return;
    const uint64_t need = (footprint + HEAL_GRANULE - 1) / HEAL_GRANULE * HEAL_GRANULE;
    TrimOutcome t;
    bool fits = false;
    if (!g_registry->heal_before_alloc(device, current, need, &t, &fits) || fits) return;
    heal_record_and_ask(api, device, bytes, t,
                        t.free_before + t.unused < need || t.free_after < need);
}

// The same before a stream-ordered allocation (cuMemAllocAsync, cuMemAllocFromPoolAsync and
// their _ptsz forms) from `pool` (nullptr: the current pool). Such an allocation fails only when
// its pool can neither serve it from its own reserve nor grow: then another pool of this
// process, or another process's pool, holds what it lacks (Registry::heal_before_async). This
// process's other pools are trimmed; when that is not enough, the reader is asked, as above.
// The check costs two pool-attribute reads per call while the heal is on (none when it is off).
void heal_before_async(uint16_t api, const CUpti_CallbackData* cb, uint64_t bytes,
                       CUmemoryPool pool) {
    const int16_t device = device_of(cb->context);
    if (device < 0 || device >= MAX_DEVICES) return;
    const uint64_t need = (bytes + HEAL_GRANULE - 1) / HEAL_GRANULE * HEAL_GRANULE;
    TrimOutcome t;
    bool fits = false;
    uint64_t own_unused = 0;
    if (!g_registry->heal_before_async(device, device, pool, need, &t, &fits, &own_unused) ||
        fits)
        return;
    heal_record_and_ask(api, device, bytes, t, t.free_after < need);
}

void on_call(const CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
    const bool exit_site = cb->callbackSite == CUPTI_API_EXIT;
    switch (cbid) {
        // ---- plain device memory ----
        case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: {
            auto* p = params<cuMemAlloc_v2_params>(cb);
            if (!exit_site) {
                if (g_heal) heal_before(PVT_API_MEM_ALLOC, cb, p->bytesize, p->bytesize, -1);
                return;
            }
            alloc_record(PVT_API_MEM_ALLOC, cb, written(cb, &p->dptr), p->bytesize, 0, 0, 0,
                         g_device_ptrs, LIVE_PLAIN);
            return;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2: {
            auto* p = params<cuMemAllocPitch_v2_params>(cb);
            if (!exit_site) {
                if (g_heal) {
                    const uint64_t row = (p->WidthInBytes + PITCH_ALIGN - 1) / PITCH_ALIGN *
                                         PITCH_ALIGN;
                    heal_before(PVT_API_MEM_ALLOC_PITCH, cb, p->WidthInBytes * p->Height,
                                row * p->Height, -1);
                }
                return;
            }
            const uint64_t pitch = written(cb, &p->pPitch);
            const uint64_t bytes = (pitch != 0 ? pitch : p->WidthInBytes) * p->Height;
            alloc_record(PVT_API_MEM_ALLOC_PITCH, cb, written(cb, &p->dptr), bytes, 0, 0, 0,
                         g_device_ptrs, LIVE_PLAIN);
            return;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged: {
            if (!exit_site) return;
            auto* p = params<cuMemAllocManaged_params>(cb);
            alloc_record(PVT_API_MEM_ALLOC_MANAGED, cb, written(cb, &p->dptr), p->bytesize, 0, 0,
                         p->flags, g_device_ptrs, LIVE_MANAGED);
            return;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
            free_call(PVT_API_MEM_FREE, cb, params<cuMemFree_v2_params>(cb)->dptr, g_device_ptrs);
            return;
        // ---- stream-ordered ----
        case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync: {
            auto* p = params<cuMemAllocAsync_params>(cb);
            if (!exit_site) {
                if (g_heal) heal_before_async(PVT_API_MEM_ALLOC_ASYNC, cb, p->bytesize, nullptr);
                return;
            }
            alloc_record(PVT_API_MEM_ALLOC_ASYNC, cb, written(cb, &p->dptr), p->bytesize, 0,
                         u(p->hStream), 0, nullptr, 0);
            return;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz: {
            auto* p = params<cuMemAllocAsync_ptsz_params>(cb);
            if (!exit_site) {
                if (g_heal)
                    heal_before_async(PVT_API_MEM_ALLOC_ASYNC_PTSZ, cb, p->bytesize, nullptr);
                return;
            }
            alloc_record(PVT_API_MEM_ALLOC_ASYNC_PTSZ, cb, written(cb, &p->dptr), p->bytesize, 0,
                         u(p->hStream), 0, nullptr, 0);
            return;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync: {
            auto* p = params<cuMemAllocFromPoolAsync_params>(cb);
            if (!exit_site) {
                if (g_heal)
                    heal_before_async(PVT_API_MEM_ALLOC_FROM_POOL, cb, p->bytesize, p->pool);
                return;
            }
            alloc_record(PVT_API_MEM_ALLOC_FROM_POOL, cb, written(cb, &p->dptr), p->bytesize,
                         u(p->pool), u(p->hStream), 0, nullptr, 0);
            return;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz: {
            auto* p = params<cuMemAllocFromPoolAsync_ptsz_params>(cb);
            if (!exit_site) {
                if (g_heal)
                    heal_before_async(PVT_API_MEM_ALLOC_FROM_POOL_PTSZ, cb, p->bytesize, p->pool);
                return;
            }
            alloc_record(PVT_API_MEM_ALLOC_FROM_POOL_PTSZ, cb, written(cb, &p->dptr), p->bytesize,
                         u(p->pool), u(p->hStream), 0, nullptr, 0);
            return;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync: {
            if (!exit_site) return;  // nothing to forget: the pool keeps the count
            auto* p = params<cuMemFreeAsync_params>(cb);
            free_call(PVT_API_MEM_FREE_ASYNC, cb, p->dptr, nullptr, u(p->hStream));
            return;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz: {
            if (!exit_site) return;
            auto* p = params<cuMemFreeAsync_ptsz_params>(cb);
            free_call(PVT_API_MEM_FREE_ASYNC_PTSZ, cb, p->dptr, nullptr, u(p->hStream));
            return;
        }
        // ---- pools ----
        case CUPTI_DRIVER_TRACE_CBID_cuMemPoolCreate: {
            if (!exit_site) return;
            auto* p = params<cuMemPoolCreate_params>(cb);
            const CUresult res = result_of(cb);
            const int16_t dev = p->poolProps != nullptr ? location_device(p->poolProps->location)
                                                        : static_cast<int16_t>(-1);
            PvtRecord r = make(PVT_KIND_POOL_CREATE, PVT_API_MEM_POOL_CREATE, dev, res);
            r.v[0] = written_ptr(cb, &p->pool);
            if (r.v[0] != 0 && dev >= 0) g_registry->add_pool(*p->pool, dev);
            push(r);
            return;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuMemPoolDestroy: {
            auto* p = params<cuMemPoolDestroy_params>(cb);
            if (!exit_site) {
                g_registry->remove_pool(p->pool);  // not sampled while it goes away
                return;
            }
            PvtRecord r = make(PVT_KIND_POOL_DESTROY, PVT_API_MEM_POOL_DESTROY, -1,
                               result_of(cb));
            r.v[0] = u(p->pool);
            push(r);
            return;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuMemPoolTrimTo: {
            if (!exit_site) return;
            auto* p = params<cuMemPoolTrimTo_params>(cb);
            PvtRecord r = make(PVT_KIND_POOL_TRIM, PVT_API_MEM_POOL_TRIM_TO,
                               device_of(cb->context), result_of(cb));
            r.v[0] = u(p->pool);
            r.v[1] = p->minBytesToKeep;
            push(r);
            return;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuMemPoolSetAttribute: {
            if (!exit_site) return;
            auto* p = params<cuMemPoolSetAttribute_params>(cb);
            PvtRecord r = make(PVT_KIND_POOL_SET_ATTR, PVT_API_MEM_POOL_SET_ATTR,
                               device_of(cb->context), result_of(cb));
            r.v[0] = u(p->pool);
            r.v[1] = static_cast<uint64_t>(p->attr);
            const bool wide = p->attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD ||
                              p->attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH ||
                              p->attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH;
            if (p->value != nullptr)
                r.v[2] = wide ? *static_cast<const cuuint64_t*>(p->value)
                              : static_cast<uint64_t>(*static_cast<const int*>(p->value));
            push(r);
            return;
        }
        // ---- host memory ----
        case CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2:
        case CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister: {
            if (!exit_site) return;  // both structs: {void *p; size_t bytesize; unsigned Flags}
            auto* p = params<cuMemHostRegister_v2_params>(cb);
            alloc_record(PVT_API_MEM_HOST_REGISTER, cb, u(p->p), p->bytesize, 0, 0, p->Flags,
                         g_host_ptrs, LIVE_HOST, -1);
            return;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister:
            free_call(PVT_API_MEM_HOST_UNREGISTER, cb,
                      u(params<cuMemHostUnregister_params>(cb)->p), g_host_ptrs);
            return;
        case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc: {
            if (!exit_site) return;
            auto* p = params<cuMemHostAlloc_params>(cb);
            alloc_record(PVT_API_MEM_HOST_ALLOC, cb, written_ptr(cb, &p->pp), p->bytesize, 0, 0,
                         p->Flags, g_host_ptrs, LIVE_HOST, -1);
            return;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2: {
            if (!exit_site) return;
            auto* p = params<cuMemAllocHost_v2_params>(cb);
            alloc_record(PVT_API_MEM_ALLOC_HOST, cb, written_ptr(cb, &p->pp), p->bytesize, 0, 0, 0,
                         g_host_ptrs, LIVE_HOST, -1);
            return;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost:
            free_call(PVT_API_MEM_FREE_HOST, cb, u(params<cuMemFreeHost_params>(cb)->p),
                      g_host_ptrs);
            return;
        // ---- virtual memory management: physical allocations ----
        case CUPTI_DRIVER_TRACE_CBID_cuMemCreate: {
            auto* p = params<cuMemCreate_params>(cb);
            if (!exit_site) {  // device memory only: a host or NUMA location is not the GPU's
                if (g_heal && p->prop != nullptr && location_device(p->prop->location) >= 0)
                    heal_before(PVT_API_MEM_CREATE, cb, p->size, p->size,
                                location_device(p->prop->location));
                return;
            }
            const int16_t dev = p->prop != nullptr ? location_device(p->prop->location)
                                                   : static_cast<int16_t>(-1);
            alloc_record(PVT_API_MEM_CREATE, cb, written(cb, &p->handle), p->size, 0, 0, p->flags,
                         g_vmm, LIVE_VMM, dev);
            return;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuMemRelease:
            free_call(PVT_API_MEM_RELEASE, cb, params<cuMemRelease_params>(cb)->handle, g_vmm);
            return;
        // ---- contexts going away: stop sampling through them first ----
        case CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy_v2:
            if (!exit_site) g_registry->forget_context(params<cuCtxDestroy_v2_params>(cb)->ctx);
            return;
        case CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRelease_v2:
        case CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset_v2:
        case CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRelease:
        case CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset:
            // every form's params begin with the device: {CUdevice dev;}
            if (!exit_site)
                g_registry->forget_device(params<cuDevicePrimaryCtxRelease_v2_params>(cb)->dev);
            return;
        default:
            return;
    }
}

void CUPTIAPI callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                       const void* data) {
    if (t_in_hook || domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
    if (!g_on.load(std::memory_order_relaxed) || g_writer->broken.load(std::memory_order_relaxed))
        return;
    t_in_hook = true;  // our own driver calls below must not record themselves
    on_call(cbid, static_cast<const CUpti_CallbackData*>(data));
    t_in_hook = false;
}

constexpr CUpti_CallbackId CALLS[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged,
    CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemPoolCreate,
    CUPTI_DRIVER_TRACE_CBID_cuMemPoolDestroy,
    CUPTI_DRIVER_TRACE_CBID_cuMemPoolTrimTo,
    CUPTI_DRIVER_TRACE_CBID_cuMemPoolSetAttribute,
    CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister,
    CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister,
    CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost,
    CUPTI_DRIVER_TRACE_CBID_cuMemCreate,
    CUPTI_DRIVER_TRACE_CBID_cuMemRelease,
    CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy_v2,
    CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRelease_v2,
    CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset_v2,
    CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRelease,
    CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset,
};

uint32_t env_u32(const char* name, uint32_t fallback) {
    const char* s = getenv(name);
    if (s == nullptr || *s == '\0') return fallback;
    char* end = nullptr;
    const unsigned long v = strtoul(s, &end, 10);
    return (end != nullptr && *end == '\0' && v <= 0xffffffffu) ? static_cast<uint32_t>(v)
                                                                : fallback;
}

// PROVETOP_TRACE_OUT (and PROVETOP_TRACE_PID) into an Output; false: this process does not
// trace.
bool output_from_env(Output* out) {
    const char* spec = getenv("PROVETOP_TRACE_OUT");
    if (spec == nullptr || *spec == '\0') return false;
    if (strncmp(spec, "unix:", 5) == 0) {  // every process: each its own connection
        if (spec[5] == '\0' || strlen(spec + 5) >= sizeof(out->path)) return false;
        strcpy(out->path, spec + 5);
        out->socket = true;
        return true;
    }
    const bool per_process = strstr(spec, "%p") != nullptr;
    const char* want = getenv("PROVETOP_TRACE_PID");
    const long pid = static_cast<long>(getpid());
    if (want != nullptr && *want != '\0' && strtol(want, nullptr, 10) != pid && !per_process)
        return false;  // a descendant: its parent's stream is not its to write
    if (strncmp(spec, "fd:", 3) == 0) {
        out->fd = static_cast<int>(strtol(spec + 3, nullptr, 10));
        return out->fd >= 0;
    }
    size_t o = 0;
    for (const char* s = spec; *s != '\0' && o + 24 < sizeof(out->path); s++) {
        if (s[0] == '%' && s[1] == 'p') {
            o += static_cast<size_t>(snprintf(out->path + o, sizeof(out->path) - o, "%ld", pid));
            s++;
        } else {
            out->path[o++] = *s;
        }
    }
    out->path[o] = '\0';
    return true;
}

uint32_t pow2_at_least(uint32_t n) {
    uint32_t p = MIN_RING;
    while (p < n && p < MAX_RING) p <<= 1;
    return p;
}

void at_fork_child() {
    g_child_of_fork = true;  // the drain thread did not come along; CUDA is unusable here
    g_on.store(false);
    if (g_writer != nullptr) g_writer->forget_in_child();
}

void at_exit() {
    if (g_child_of_fork || g_writer == nullptr) return;
    g_writer->flush_at_exit();
}

}  // namespace
}  // namespace pvt

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
    using namespace pvt;
    static std::atomic<bool> once{false};
    if (once.exchange(true)) return 1;
    Output out;
    if (!output_from_env(&out)) return 1;  // nothing asked of this process

    const uint64_t t0 = mono_ns();
    g_registry = new Registry();
    g_device_ptrs = new LiveMap();
    g_host_ptrs = new LiveMap();
    g_vmm = new LiveMap();
    g_writer = new Writer();
    Writer& w = *g_writer;
    const uint32_t slots = pow2_at_least(env_u32("PROVETOP_TRACE_RING", DEFAULT_RING));
    const bool have_ring = w.ring.init(slots);

    PvtHeader& h = w.header;
    memcpy(h.magic, PVT_MAGIC, PVT_MAGIC_SIZE);
    h.version = PVT_VERSION;
    h.header_size = PVT_HEADER_SIZE;
    h.record_size = PVT_RECORD_SIZE;
    h.pid = static_cast<uint32_t>(getpid());
    h.ppid = static_cast<uint32_t>(getppid());
    h.t0_mono_ns = t0;
    h.t0_wall_ns = wall_ns();
    h.interval_ms = env_u32("PROVETOP_TRACE_INTERVAL_MS", DEFAULT_INTERVAL_MS);
    h.ring_slots = have_ring ? slots : 0;
    h.cupti_version = CUPTI_API_VERSION;
    const char* heal = getenv("PROVETOP_TRACE_HEAL");
    g_heal = heal != nullptr && strcmp(heal, "1") == 0;
    g_heal_wait_ms = env_u32("PROVETOP_TRACE_HEAL_WAIT_MS", DEFAULT_HEAL_WAIT_MS);

    PvtRecord status{};
    status.t_ns = t0;
    status.kind = PVT_KIND_STATUS;
    status.device = -1;
    status.tid = static_cast<uint32_t>(syscall(SYS_gettid));
    CUptiResult sub_res = CUPTI_ERROR_UNKNOWN;
    if (!g_driver.load()) {
        status.v[0] = PVT_STATUS_NO_DRIVER;
        h.interval_ms = 0;  // the samples need those entry points
    } else {
        CUpti_SubscriberHandle sub;
        sub_res = cuptiSubscribe(&sub, reinterpret_cast<CUpti_CallbackFunc>(callback), nullptr);
        if (sub_res == CUPTI_SUCCESS) {
            for (CUpti_CallbackId id : CALLS)
                cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, id);
            status.v[0] = PVT_STATUS_SUBSCRIBED;
            status.v[1] = CUPTI_API_VERSION;
        } else {
            status.v[0] = PVT_STATUS_NO_CUPTI;
            status.v[1] = static_cast<uint64_t>(sub_res);
            h.interval_ms = 0;  // no callbacks: no context is ever seen to sample through
        }
    }
    h.cupti_result = static_cast<int32_t>(sub_res);
    w.start(out, status);  // first: the callbacks read what it sets (can_ask)
    g_on.store(sub_res == CUPTI_SUCCESS && have_ring, std::memory_order_release);
    pthread_atfork(nullptr, nullptr, at_fork_child);
    atexit(at_exit);
    return 1;
}
