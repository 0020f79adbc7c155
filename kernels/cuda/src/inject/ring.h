// A bounded ring of records: many program threads push, the library's one drain thread pops.
//
// Why lock-free: pushes happen inside the program's driver calls (a cudaMallocAsync/free pair
// costs well under a microsecond untraced), so a push must never wait for the drain thread or
// for another pusher that was descheduled. This is the per-slot sequence scheme (each slot's
// sequence says whose turn it is): a push claims slots with one compare-and-swap on the head
// and publishes each with a release store; the consumer reads a slot once its sequence says it
// was published. A full ring drops the push and counts it (a push never waits).
//
// A push may claim several consecutive slots at once (a SAMPLE or OOM_STATE group and its POOL
// records), so a group is never split by another thread's records. Claiming n slots needs only
// the last one to be free: the single consumer frees slots in order.
#pragma once
#include <atomic>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "inject/records.h"

namespace pvt {

class Ring {
  public:
    // `slots` must be a power of two (the index is a mask of the position).
    bool init(uint32_t slots) {
        slots_ = static_cast<Slot*>(calloc(slots, sizeof(Slot)));
        if (slots_ == nullptr) return false;
        mask_ = slots - 1;
        for (uint64_t i = 0; i < slots; i++) slots_[i].seq.store(i, std::memory_order_relaxed);
        return true;
    }

    uint32_t capacity() const { return static_cast<uint32_t>(mask_ + 1); }

    // Copies `n` records into consecutive slots; false (and counted in dropped()) when the ring
    // has no room for all of them.
    bool push(const PvtRecord* recs, uint32_t n) {
        if (slots_ == nullptr || n == 0 || n > capacity()) return drop(n);
        uint64_t pos = head_.load(std::memory_order_relaxed);
        for (;;) {
            const uint64_t last = pos + n - 1;
            const uint64_t seq = slots_[last & mask_].seq.load(std::memory_order_acquire);
            const int64_t diff = static_cast<int64_t>(seq - last);
            if (diff == 0) {
                if (head_.compare_exchange_weak(pos, pos + n, std::memory_order_relaxed)) break;
            } else if (diff < 0) {
                return drop(n);  // the consumer has not freed that slot yet: full
            } else {
                pos = head_.load(std::memory_order_relaxed);  // another pusher moved on
            }
        }
        for (uint32_t i = 0; i < n; i++) {
            Slot& s = slots_[(pos + i) & mask_];
            memcpy(&s.rec, &recs[i], sizeof(PvtRecord));
            s.seq.store(pos + i + 1, std::memory_order_release);
        }
        return true;
    }

    // Consumer only: copies up to `max` published records into `out`, in claim order, and frees
    // their slots; stops at the first slot claimed but not yet written.
    uint32_t pop(PvtRecord* out, uint32_t max) {
        uint32_t got = 0;
        while (got < max) {
            Slot& s = slots_[tail_ & mask_];
            if (s.seq.load(std::memory_order_acquire) != tail_ + 1) break;
            memcpy(&out[got++], &s.rec, sizeof(PvtRecord));
            s.seq.store(tail_ + mask_ + 1, std::memory_order_release);
            tail_++;
        }
        return got;
    }

    uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

  private:
    struct Slot {
        std::atomic<uint64_t> seq;
        PvtRecord rec;
    };

    bool drop(uint32_t n) {
        dropped_.fetch_add(n, std::memory_order_relaxed);
        return false;
    }

    Slot* slots_ = nullptr;
    uint64_t mask_ = 0;
    alignas(64) std::atomic<uint64_t> head_{0};  // own cache line: every pusher writes it
    alignas(64) uint64_t tail_ = 0;              // the consumer's alone
    std::atomic<uint64_t> dropped_{0};
};

}  // namespace pvt
