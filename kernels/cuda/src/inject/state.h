// What the library knows of the program's devices: one live context per device (to read the
// device's memory from the library's own thread), the stream-ordered pools, the reading of one
// device's memory picture (a SAMPLE or OOM_STATE group), each device's identity (the DEVICE
// record) and the trims of the heal (HEAL records).
//
// Why a context per device: cuMemGetInfo reports on the calling thread's current context, so
// the sampling thread pushes a context the program made (it never creates one: a context of
// its own would take device memory and change what it measures). The context is forgotten as
// soon as the program starts to destroy it (cuCtxDestroy, a primary context's release or reset,
// seen at the call's entry), under the same lock the sampler holds while it uses it; the next
// driver call on that device registers whatever context is current then.
//
// The lock is held for driver calls only, never for I/O: the sampling thread copies its groups
// out under the lock and writes them after, so a program thread that registers a context or
// reads its OOM state never waits for a slow reader.
#pragma once
#include <cuda.h>
#include <atomic>
#include <mutex>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "inject/driver.h"
#include "inject/live.h"
#include "inject/records.h"

namespace pvt {

// Pools created through cuMemPoolCreate that are tracked at once; the provers seen so far make
// none or one per device, so 256 covers 64 devices with room to spare (more are not sampled).
constexpr int MAX_POOLS = 256;
// The most POOL records in one group: the default and the current pool plus created ones; a
// group must fit in the flags field and, with its head, in a small stack buffer.
constexpr int MAX_GROUP_POOLS = 30;

struct DeviceSlot {
    CUcontext ctx = nullptr;            // a live context of the program on this device
    CUmemoryPool default_pool = nullptr;  // read once per context registration
};

// A device's identity for its DEVICE record, read once (the UUID is also each HEAL_REQUEST's).
struct DeviceInfo {
    bool described = false;  // the DEVICE record was handed to the writer
    bool have_uuid = false;
    uint64_t uuid_lo = 0;    // the UUID's bytes 0-7, little-endian (memcpy)
    uint64_t uuid_hi = 0;    // bytes 8-15
};

// What a trim of one device's pools did (a HEAL record's figures).
struct TrimOutcome {
    uint64_t free_before = 0;  // cuMemGetInfo before
    uint64_t free_after = 0;   // and after (the same when nothing was trimmed)
    uint64_t unused = 0;       // the pools' reserved - used before
    uint64_t ns = 0;           // the trims and the second cuMemGetInfo
    uint32_t trimmed = 0;      // cuMemPoolTrimTo calls made
    CUresult result = CUDA_SUCCESS;  // the first that failed
};

struct PoolSlot {
    CUmemoryPool pool = nullptr;
    int16_t device = -1;
};

class Registry {
  public:
    // Bumped whenever a context is forgotten, so that threads' cached context -> device answers
    // are checked again.
    std::atomic<uint32_t> generation{1};

    void see_context(CUcontext ctx, int device) {
        if (ctx == nullptr || device < 0 || device >= MAX_DEVICES) return;
        std::lock_guard<std::mutex> g(lock_);
        if (devices_[device].ctx == nullptr) {
            devices_[device].ctx = ctx;
            devices_[device].default_pool = nullptr;
            if (device >= ndevices_) ndevices_ = device + 1;
            if (!info_[device].described) fresh_.store(true, std::memory_order_release);
        }
    }

    void forget_context(CUcontext ctx) {
        std::lock_guard<std::mutex> g(lock_);
        for (int d = 0; d < ndevices_; d++)
            if (devices_[d].ctx == ctx) devices_[d] = DeviceSlot();
        generation.fetch_add(1, std::memory_order_release);
    }

    void forget_device(int device) {
        if (device < 0 || device >= MAX_DEVICES) return;
        std::lock_guard<std::mutex> g(lock_);
        devices_[device] = DeviceSlot();
        generation.fetch_add(1, std::memory_order_release);
    }

    void add_pool(CUmemoryPool pool, int device) {
        std::lock_guard<std::mutex> g(lock_);
        for (PoolSlot& p : pools_)
            if (p.pool == nullptr) {
                p.pool = pool;
                p.device = static_cast<int16_t>(device);
                return;
            }
    }

    // At cuMemPoolDestroy's entry: the pool is not read again from here on.
    void remove_pool(CUmemoryPool pool) {
        std::lock_guard<std::mutex> g(lock_);
        for (PoolSlot& p : pools_)
            if (p.pool == pool) p = PoolSlot();
    }

    // The program thread's view at an allocation's exit: its own context is current.
    uint32_t snapshot_current(int device, const PvtRecord& head, PvtRecord* out) {
        std::lock_guard<std::mutex> g(lock_);
        return read(device, head, out);
    }

    // The sampling thread: for each device that has a live context, its DEVICE record the
    // first time, then its group, copied into `out` (room for MAX_OUT records); returns how
    // many. The caller writes them once the lock is released.
    static constexpr uint32_t MAX_OUT = MAX_DEVICES * (2 + 1 + MAX_GROUP_POOLS);
    uint32_t sample_all(const PvtRecord& head, PvtRecord* out) {
        uint32_t n = 0;
        std::lock_guard<std::mutex> g(lock_);
        for (int d = 0; d < ndevices_; d++) {
            CUcontext ctx = devices_[d].ctx;
            if (ctx == nullptr) continue;
            n += describe(d, head, &out[n]);
            if (g_driver.ctxPush(ctx) != CUDA_SUCCESS) continue;
            n += read(d, head, &out[n]);
            CUcontext popped;
            g_driver.ctxPop(&popped);
        }
        return n;
    }

    // The DEVICE records of devices that got their first context since the last call (into
    // `out`, room for MAX_DEVICES); how many.
    uint32_t describe_new(const PvtRecord& head, PvtRecord* out) {
        uint32_t n = 0;
        if (!fresh_.exchange(false, std::memory_order_acquire)) return 0;  // the usual case
        std::lock_guard<std::mutex> g(lock_);
        for (int d = 0; d < ndevices_; d++)
            if (devices_[d].ctx != nullptr) n += describe(d, head, &out[n]);
        return n;
    }

    // The reader's PVT_OP_TRIM, on the sampling thread: for `device` (-1: each device) with a
    // live context, trim its pools, then a HEAL record (PVT_HEAL_COMMAND, v5 = id) and a fresh
    // SAMPLE group, into `out` (room for MAX_OUT); how many. A device without a live context
    // is not answered: its memory cannot be read, and it holds none of this process's pools
    // that the library could reach.
    uint32_t trim_command(int device, uint64_t id, const PvtRecord& head, PvtRecord* out) {
        uint32_t n = 0;
        std::lock_guard<std::mutex> g(lock_);
        for (int d = 0; d < ndevices_; d++) {
            if (device >= 0 && d != device) continue;
            CUcontext ctx = devices_[d].ctx;
            if (ctx == nullptr) continue;
            n += describe(d, head, &out[n]);
            if (g_driver.ctxPush(ctx) != CUDA_SUCCESS) continue;
            TrimOutcome t;
            size_t free_b = 0, total_b = 0;
            const CUresult res = g_driver.memGetInfo(&free_b, &total_b);
            t.free_before = t.free_after = free_b;
            CUmemoryPool pools[MAX_GROUP_POOLS];
            uint16_t flags[MAX_GROUP_POOLS];
            const int np = pools_of(d, pools, flags);
            t.unused = unused_of(pools, np);
            trim(pools, np, &t);
            PvtRecord& h = out[n++];
            h = head;
            memset(h.v, 0, sizeof(h.v));
            h.kind = PVT_KIND_HEAL;
            h.device = static_cast<int16_t>(d);
            h.flags = PVT_HEAL_COMMAND;
            h.result = static_cast<int32_t>(res != CUDA_SUCCESS ? res : t.result);
            fill_heal(h, t);
            h.v[5] = id;
            PvtRecord sample = head;
            sample.kind = PVT_KIND_SAMPLE;
            sample.t_ns = mono_now();
            n += read(d, sample, &out[n]);
            CUcontext popped;
            g_driver.ctxPop(&popped);
        }
        return n;
    }

    // The heal before a plain allocation, on the program's thread inside its callback: reads
    // `device`'s free bytes (through the current context when it is that device's, else
    // through the registered one) and, when `need` does not fit, its pools' unused bytes, and
    // trims them when there are any. False when nothing could be read; `fits` when `need` fit
    // before any trim (then nothing was done).
    bool heal_before_alloc(int device, int current_device, uint64_t need, TrimOutcome* t,
                           bool* fits) {
        if (device < 0 || device >= MAX_DEVICES) return false;
        std::lock_guard<std::mutex> g(lock_);
        CUcontext pushed = nullptr;
        if (device != current_device) {
            pushed = devices_[device].ctx;
            if (pushed == nullptr || g_driver.ctxPush(pushed) != CUDA_SUCCESS) return false;
        }
        size_t free_b = 0, total_b = 0;
        const bool ok = g_driver.memGetInfo(&free_b, &total_b) == CUDA_SUCCESS;
        t->free_before = t->free_after = free_b;
        *fits = ok && need <= free_b;
        if (ok && !*fits) {
            CUmemoryPool pools[MAX_GROUP_POOLS];
            uint16_t flags[MAX_GROUP_POOLS];
            const int np = pools_of(device, pools, flags);
            t->unused = unused_of(pools, np);
            if (t->unused > 0) trim(pools, np, t);
        }
        if (pushed != nullptr) {
            CUcontext popped;
            g_driver.ctxPop(&popped);
        }
        return ok;
    }

    // The heal before a stream-ordered allocation from `target` (nullptr: the device's current
    // pool, where cuMemAllocAsync takes from): it fits when the target pool's own unused
    // reserve holds `need` (no cuMemGetInfo then, the common case) or the device's free bytes
    // let the pool grow by all of it. Otherwise this process's *other* pools on the device give their
    // unused bytes back (the target's own are its to use; trimming them would only make it
    // grow again), and `*own_unused` says what the target still holds, so the caller can tell
    // whether the rest must come from another process.
    bool heal_before_async(int device, int current_device, CUmemoryPool target, uint64_t need,
                           TrimOutcome* t, bool* fits, uint64_t* own_unused) {
        if (device < 0 || device >= MAX_DEVICES) return false;
        std::lock_guard<std::mutex> g(lock_);
        CUcontext pushed = nullptr;
        if (device != current_device) {
            pushed = devices_[device].ctx;
            if (pushed == nullptr || g_driver.ctxPush(pushed) != CUDA_SUCCESS) return false;
        }
        if (target == nullptr) g_driver.currentPool(&target, device);
        *own_unused = target != nullptr ? unused_of(&target, 1) : 0;
        *fits = *own_unused >= need;
        bool ok = true;
        if (!*fits) {
            size_t free_b = 0, total_b = 0;
            ok = g_driver.memGetInfo(&free_b, &total_b) == CUDA_SUCCESS;
            t->free_before = t->free_after = free_b;
            *fits = ok && need <= free_b;  // a grown pool takes a fresh block: free must hold it
            if (ok && !*fits) {
                CUmemoryPool pools[MAX_GROUP_POOLS], others[MAX_GROUP_POOLS];
                uint16_t flags[MAX_GROUP_POOLS];
                const int np = pools_of(device, pools, flags);
                int no = 0;
                for (int i = 0; i < np; i++)
                    if (pools[i] != target) others[no++] = pools[i];
                t->unused = unused_of(others, no);
                if (t->unused > 0) trim(others, no, t);
            }
        }
        if (pushed != nullptr) {
            CUcontext popped;
            g_driver.ctxPop(&popped);
        }
        return ok;
    }

    // The UUID's bytes 0-7 of `device` (0 when the driver does not say), read once.
    uint64_t uuid_lo(int device) {
        if (device < 0 || device >= MAX_DEVICES) return 0;
        std::lock_guard<std::mutex> g(lock_);
        return identify(device).uuid_lo;
    }

    // A HEAL record's values from a trim (v0, v5 and the head's fields are the caller's).
    static void fill_heal(PvtRecord& r, const TrimOutcome& t) {
        r.v[1] = t.free_before;
        r.v[2] = t.free_after;
        r.v[3] = t.unused;
        r.v[4] = t.ns;
        r.v[6] = t.trimmed;
    }

  private:
    static uint64_t mono_now() {
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
    }

    // The stream-ordered pools of `device`: its default pool, its current pool and the pools
    // the program made there (each once, its PVT_POOL_* flags in `flags`); how many. Caller
    // holds lock_ and has a context of `device` current.
    int pools_of(int device, CUmemoryPool* seen, uint16_t* flags) {
        int n = 0;
        DeviceSlot& slot = devices_[device < MAX_DEVICES ? device : 0];
        if (slot.default_pool == nullptr) g_driver.defaultPool(&slot.default_pool, device);
        CUmemoryPool current = nullptr;
        g_driver.currentPool(&current, device);
        auto add = [&](CUmemoryPool pool, uint16_t flag) {
            if (pool == nullptr) return;
            for (int i = 0; i < n; i++)
                if (seen[i] == pool) {
                    flags[i] |= flag;
                    return;
                }
            if (n < MAX_GROUP_POOLS) {
                seen[n] = pool;
                flags[n++] = flag;
            }
        };
        add(slot.default_pool, PVT_POOL_DEFAULT);
        add(current, PVT_POOL_CURRENT);
        for (const PoolSlot& p : pools_)
            if (p.pool != nullptr && p.device == device) add(p.pool, PVT_POOL_CREATED);
        return n;
    }

    // Reserved - used, summed over `pools` (a pool whose attributes cannot be read counts 0).
    static uint64_t unused_of(const CUmemoryPool* pools, int n) {
        uint64_t sum = 0;
        for (int i = 0; i < n; i++) {
            cuuint64_t reserved = 0, used = 0;
            if (g_driver.poolGetAttr(pools[i], CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) !=
                    CUDA_SUCCESS ||
                g_driver.poolGetAttr(pools[i], CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) !=
                    CUDA_SUCCESS)
                continue;
            if (reserved > used) sum += reserved - used;
        }
        return sum;
    }

    // cuMemPoolTrimTo(pool, 0) on each of `pools`, then the free bytes again (into t). A trim
    // releases only what the pool holds unused: its blocks in use stay, so the program's
    // results cannot change; what it costs the program is a fresh reservation at its next
    // stream-ordered allocations. Every pool of the device is trimmed, not only those read as
    // holding unused bytes: a trim of a pool with nothing unused does nothing, and a pool whose
    // attributes could not be read may still hold some.
    static void trim(const CUmemoryPool* pools, int n, TrimOutcome* t) {
        if (g_driver.poolTrimTo == nullptr) return;  // a driver without it: nothing trimmed
        const uint64_t t0 = mono_now();
        for (int i = 0; i < n; i++) {
            const CUresult res = g_driver.poolTrimTo(pools[i], 0);
            t->trimmed++;
            if (res != CUDA_SUCCESS && t->result == CUDA_SUCCESS) t->result = res;
        }
        size_t free_b = 0, total_b = 0;
        if (g_driver.memGetInfo(&free_b, &total_b) == CUDA_SUCCESS) t->free_after = free_b;
        t->ns = mono_now() - t0;
    }

    // Reads (once) and returns `device`'s identity. Caller holds lock_. cuDeviceGetUuid and
    // cuDeviceGetAttribute need no context.
    DeviceInfo& identify(int device) {
        DeviceInfo& info = info_[device];
        if (!info.have_uuid) {
            info.have_uuid = true;  // tried once: a driver that does not say is not asked again
            CUuuid uuid;
            memset(&uuid, 0, sizeof(uuid));
            if (g_driver.deviceGetUuid != nullptr &&
                g_driver.deviceGetUuid(&uuid, device) == CUDA_SUCCESS) {
                static_assert(sizeof(uuid.bytes) == 16, "CUuuid");
                memcpy(&info.uuid_lo, uuid.bytes, 8);
                memcpy(&info.uuid_hi, uuid.bytes + 8, 8);
            }
        }
        return info;
    }

    // The DEVICE record of `device` into out[0] if it was not written yet; 1 or 0. Caller holds
    // lock_.
    uint32_t describe(int device, const PvtRecord& head, PvtRecord* out) {
        DeviceInfo& info = identify(device);
        if (info.described) return 0;
        info.described = true;
        PvtRecord& r = out[0];
        r = head;
        r.kind = PVT_KIND_DEVICE;
        r.api = PVT_API_SAMPLER;
        r.device = static_cast<int16_t>(device);
        r.flags = 0;
        r.result = CUDA_SUCCESS;
        memset(r.v, 0, sizeof(r.v));
        static const CUdevice_attribute pci[3] = {CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID,
                                                  CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
                                                  CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID};
        for (int i = 0; i < 3 && g_driver.deviceGetAttr != nullptr; i++) {
            int value = 0;
            if (g_driver.deviceGetAttr(&value, pci[i], device) == CUDA_SUCCESS && value >= 0)
                r.v[i] = static_cast<uint64_t>(value);
        }
        r.v[3] = info.uuid_lo;
        r.v[4] = info.uuid_hi;
        size_t total = 0;
        if (g_driver.deviceTotalMem != nullptr &&
            g_driver.deviceTotalMem(&total, device) == CUDA_SUCCESS)
            r.v[5] = total;
        return 1;
    }

    // Fills out[0] (head's kind, api, time and thread, with the device's figures) and one POOL
    // record per pool of `device`; returns how many records. Caller holds lock_ and has a
    // context of `device` current.
    uint32_t read(int device, const PvtRecord& head, PvtRecord* out) {
        PvtRecord& s = out[0];
        s = head;
        s.device = static_cast<int16_t>(device);
        size_t free_b = 0, total_b = 0;
        s.result = g_driver.memGetInfo(&free_b, &total_b);
        s.v[0] = free_b;
        s.v[1] = total_b;
        s.v[2] = g_totals.get(device, LIVE_PLAIN);
        s.v[3] = g_totals.get(device, LIVE_MANAGED);
        s.v[4] = g_totals.get(device, LIVE_VMM);
        s.v[5] = g_totals.host();
        // v[6] (dropped) is the writer's to fill: it knows the ring
        CUmemoryPool seen[MAX_GROUP_POOLS];
        uint16_t flags[MAX_GROUP_POOLS];
        const int n = pools_of(device, seen, flags);
        for (int i = 0; i < n; i++) {
            PvtRecord& r = out[1 + i];
            r = head;
            r.kind = PVT_KIND_POOL;
            r.device = static_cast<int16_t>(device);
            r.flags = flags[i];
            r.result = CUDA_SUCCESS;
            r.v[0] = reinterpret_cast<uint64_t>(seen[i]);
            static const CUmemPool_attribute attrs[5] = {
                CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
                CU_MEMPOOL_ATTR_USED_MEM_CURRENT, CU_MEMPOOL_ATTR_USED_MEM_HIGH,
                CU_MEMPOOL_ATTR_RELEASE_THRESHOLD};
            for (int a = 0; a < 5; a++) {
                cuuint64_t value = 0;
                const CUresult res = g_driver.poolGetAttr(seen[i], attrs[a], &value);
                if (res != CUDA_SUCCESS && r.result == CUDA_SUCCESS) r.result = res;
                r.v[1 + a] = value;
            }
            r.v[6] = 0;
        }
        s.flags = static_cast<uint16_t>(n);
        return 1 + static_cast<uint32_t>(n);
    }

    std::mutex lock_;
    DeviceSlot devices_[MAX_DEVICES];
    DeviceInfo info_[MAX_DEVICES];  // kept when a context is forgotten: a device is described once
    int ndevices_ = 0;
    std::atomic<bool> fresh_{false};  // a device got its first context: describe_new has work
    PoolSlot pools_[MAX_POOLS];
};

// Made once in InitializeInjection and never destroyed: callbacks and the drain thread may
// still run while the process's static destructors do.
inline Registry* g_registry = nullptr;

}  // namespace pvt
