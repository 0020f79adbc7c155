// Memory the program holds outside the stream-ordered pools: pointer (or handle) -> bytes.
//
// Why: plain cuMemAlloc memory, managed memory, VMM handles and pinned host memory have no pool
// attribute to read, and their free calls carry only the pointer. The library keeps what each
// allocation was, so a FREE record says how much went back and every SAMPLE carries exact
// per-device totals without replaying the whole stream (records dropped from a full ring do not
// make the totals drift). Stream-ordered allocations are not kept here: their pool's
// USED_MEM_CURRENT already says what is in use, and they are the hot path.
//
// Sharded by pointer so that threads freeing different blocks rarely meet on one lock; a lock
// is held only for one hash-map operation (the calls it guards take tens of microseconds).
#pragma once
#include <atomic>
#include <mutex>
#include <stdint.h>
#include <unordered_map>

namespace pvt {

constexpr int MAX_DEVICES = 64;  // device ordinals traced; beyond it, counted under none

enum LiveClass : uint8_t { LIVE_PLAIN = 0, LIVE_MANAGED = 1, LIVE_VMM = 2, LIVE_HOST = 3 };
constexpr int LIVE_CLASSES = 4;

struct Live {
    uint64_t bytes;
    int16_t device;
    uint8_t cls;
};

class LiveMap {
  public:
    void insert(uint64_t key, const Live& live) {
        Shard& s = shard(key);
        {
            std::lock_guard<std::mutex> g(s.lock);
            auto [it, fresh] = s.map.emplace(key, live);
            if (!fresh) {  // a block we never saw freed: replace it, keep the totals right
                account(it->second, -1);
                it->second = live;
            }
        }
        account(live, +1);
    }

    // Removes `key`; true and its entry in `out` when it was there.
    bool take(uint64_t key, Live* out) {
        Shard& s = shard(key);
        {
            std::lock_guard<std::mutex> g(s.lock);
            auto it = s.map.find(key);
            if (it == s.map.end()) return false;
            *out = it->second;
            s.map.erase(it);
        }
        account(*out, -1);
        return true;
    }

  private:
    // 64 shards: more than the threads that allocate at once in the provers seen so far
    // (a few workers per device), so two rarely share one.
    static constexpr int SHARDS = 64;
    struct Shard {
        std::mutex lock;
        std::unordered_map<uint64_t, Live> map;
    };

    Shard& shard(uint64_t key) {
        // allocations are at least 256-byte aligned on the device (512 in CuPy): drop those
        // bits, then mix so that neighbouring blocks spread over the shards
        const uint64_t h = (key >> 8) * 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio
        return shards_[h >> 58];                                 // top 6 bits: 64 shards
    }

    void account(const Live& live, int sign);

    Shard shards_[SHARDS];
};

// Per-device totals by class (host memory is the process's: device -1 there).
struct Totals {
    std::atomic<uint64_t> bytes[MAX_DEVICES + 1][LIVE_CLASSES];

    std::atomic<uint64_t>& at(int device, int cls) {
        const int d = (device >= 0 && device < MAX_DEVICES) ? device : MAX_DEVICES;
        return bytes[d][cls];
    }
    uint64_t get(int device, int cls) { return at(device, cls).load(std::memory_order_relaxed); }
    uint64_t host() {
        uint64_t sum = 0;
        for (int d = 0; d <= MAX_DEVICES; d++) sum += get(d, LIVE_HOST);
        return sum;
    }
};

inline Totals g_totals;

inline void LiveMap::account(const Live& live, int sign) {
    std::atomic<uint64_t>& slot = g_totals.at(live.device, live.cls);
    if (sign > 0)
        slot.fetch_add(live.bytes, std::memory_order_relaxed);
    else
        slot.fetch_sub(live.bytes, std::memory_order_relaxed);
}

}  // namespace pvt
