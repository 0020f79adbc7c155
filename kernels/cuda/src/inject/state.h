// What the library knows of the program's devices: one live context per device (to read the
// device's memory from the library's own thread), the stream-ordered pools, and the reading of
// one device's memory picture (a SAMPLE or OOM_STATE group).
//
// Why a context per device: cuMemGetInfo reports on the calling thread's current context, so
// the sampling thread pushes a context the program made (it never creates one: a context of
// its own would take device memory and change what it measures). The context is forgotten as
// soon as the program starts to destroy it (cuCtxDestroy, a primary context's release or reset,
// seen at the call's entry), under the same lock the sampler holds while it uses it; the next
// driver call on that device registers whatever context is current then.
#pragma once
#include <cuda.h>
#include <mutex>
#include <stdint.h>

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

    // The sampling thread: one group per device that has a live context, handed to `emit`.
    template <typename Emit>
    void sample_all(const PvtRecord& head, Emit emit) {
        PvtRecord group[1 + MAX_GROUP_POOLS];
        std::lock_guard<std::mutex> g(lock_);
        for (int d = 0; d < ndevices_; d++) {
            CUcontext ctx = devices_[d].ctx;
            if (ctx == nullptr || g_driver.ctxPush(ctx) != CUDA_SUCCESS) continue;
            const uint32_t n = read(d, head, group);
            CUcontext popped;
            g_driver.ctxPop(&popped);
            emit(group, n);
        }
    }

  private:
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
    int ndevices_ = 0;
    PoolSlot pools_[MAX_POOLS];
};

// Made once in InitializeInjection and never destroyed: callbacks and the drain thread may
// still run while the process's static destructors do.
inline Registry* g_registry = nullptr;

}  // namespace pvt
