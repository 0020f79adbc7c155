// The library's own thread: opens the output, drains the ring into it every few milliseconds,
// and writes the periodic samples.
//
// Why a thread of its own: the program's threads only copy a record into the ring; every
// system call (open, write, a FIFO that blocks until its reader opens it or while its reader
// is slow) happens here. While this thread is blocked the ring fills and further records are
// dropped and counted (SAMPLE v6), the program never waits. It writes as it goes, not at exit:
// a program killed, or one that ends without running its exit handlers, leaves everything up
// to the last drain (at most DRAIN_MS old) in the stream.
//
// All signals are blocked on this thread, so a reader that closes the FIFO makes write() fail
// with EPIPE here (tracing stops) instead of raising SIGPIPE in the program, and the program's
// own signal handlers never run on it.
#pragma once
#include <chrono>
#include <condition_variable>
#include <errno.h>
#include <fcntl.h>
#include <mutex>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <thread>
#include <time.h>
#include <unistd.h>

#include "inject/records.h"
#include "inject/ring.h"
#include "inject/state.h"

namespace pvt {

// How often the ring is drained: records reach the reader at most this late. The ring
// (PROVETOP_TRACE_RING, 65536 slots by default) fills in no less than ~70 ms at the fastest
// record rate measured (one record per ~1.1 us: a stream-ordered alloc/free pair with
// callbacks costs ~2.2 us and makes two), so 5 ms leaves a 14-fold margin.
constexpr int DRAIN_MS = 5;
// Records written per write(): 4096 * 80 B = 320 KiB, larger than a pipe's default capacity
// (64 KiB), so a drain is a few system calls, not one per record.
constexpr uint32_t BATCH = 4096;
// How long the exit handler waits for the last flush: a FIFO whose reader stopped reading
// must not hold the program's exit for ever.
constexpr int EXIT_WAIT_MS = 2000;

inline uint64_t mono_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

inline uint64_t wall_ns() {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

struct Output {
    char path[4096] = {0};  // the file or FIFO to open (empty: fd is given)
    int fd = -1;            // an inherited descriptor ("fd:N")
};

class Writer {
  public:
    Ring ring;
    PvtHeader header{};
    std::atomic<bool> broken{false};  // the output failed: callbacks stop recording

    void start(const Output& out, PvtRecord status) {
        out_ = out;
        status_ = status;
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);  // the new thread inherits the full mask
        thread_ = std::thread([this] { run(); });
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        thread_.detach();  // never joined: the process may end with it blocked on a FIFO
    }

    // From the exit handler: drain, sample once more, write an EXIT record; wait for it (a
    // bounded wait). The thread keeps draining afterwards (the runtime's own teardown), but
    // samples no more.
    void flush_at_exit() {
        std::unique_lock<std::mutex> g(m_);
        const uint64_t want = ++flush_asked_;
        cv_.notify_all();
        cv_.wait_for(g, std::chrono::milliseconds(EXIT_WAIT_MS),
                     [&] { return flush_done_ >= want || broken.load(); });
    }

  private:
    void run() {
        t_in_hook = true;  // this thread records nothing of its own driver calls
        const int mode = 0600;  // the trace may name pointers and sizes: the user's alone
        fd_ = out_.fd >= 0 ? out_.fd
                           : open(out_.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
        if (fd_ < 0) {
            fprintf(stderr, "provetop trace: cannot open %s: %s; not tracing\n", out_.path,
                    strerror(errno));
            broken.store(true);
            cv_.notify_all();
            return;
        }
        if (out_.fd >= 0) fcntl(fd_, F_SETFD, FD_CLOEXEC);  // exec'd children don't write to it
        if (!put(&header, sizeof(header)) || !put(&status_, sizeof(status_))) return;
        const uint64_t interval_ns = static_cast<uint64_t>(header.interval_ms) * 1000000ull;
        uint64_t next_sample = mono_ns();
        for (;;) {
            uint64_t asked;
            {
                std::unique_lock<std::mutex> g(m_);
                cv_.wait_for(g, std::chrono::milliseconds(DRAIN_MS),
                             [&] { return flush_asked_ > flush_done_; });
                asked = flush_asked_;
            }
            if (!drain()) return;
            const bool flushing = asked > flush_done_;
            const uint64_t now = mono_ns();
            if (!exited_ && ((interval_ns > 0 && now >= next_sample) || flushing)) {
                if (!sample(now)) return;
                if (interval_ns > 0)
                    while (next_sample <= now) next_sample += interval_ns;
            }
            if (flushing) {
                PvtRecord exit_rec{};
                exit_rec.t_ns = mono_ns();
                exit_rec.kind = PVT_KIND_EXIT;
                exit_rec.device = -1;
                exit_rec.v[6] = ring.dropped();
                if (!drain() || !put(&exit_rec, sizeof(exit_rec))) return;
                // no driver calls from here on: the runtime and the driver tear down next, and a
                // sample racing them could fault the exiting program; records still drain
                exited_ = true;
                std::lock_guard<std::mutex> g(m_);
                flush_done_ = asked;
                cv_.notify_all();
            }
        }
    }

    bool drain() {
        for (;;) {
            const uint32_t n = ring.pop(batch_, BATCH);
            if (n == 0) return true;
            if (!put(batch_, n * sizeof(PvtRecord))) return false;
        }
    }

    bool sample(uint64_t now) {
        PvtRecord head{};
        head.t_ns = now;
        head.kind = PVT_KIND_SAMPLE;
        head.api = PVT_API_SAMPLER;
        head.tid = static_cast<uint32_t>(syscall(SYS_gettid));
        bool ok = true;
        g_registry->sample_all(head, [&](PvtRecord* group, uint32_t n) {
            group[0].v[6] = ring.dropped();
            if (ok) ok = put(group, n * sizeof(PvtRecord));
        });
        return ok;
    }

    // Writes all of `len` bytes; on failure marks the output broken (callbacks stop) and wakes
    // a waiting exit handler.
    bool put(const void* data, size_t len) {
        const char* p = static_cast<const char*>(data);
        while (len > 0) {
            const ssize_t w = write(fd_, p, len);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                broken.store(true);
                std::lock_guard<std::mutex> g(m_);
                cv_.notify_all();
                return false;
            }
            p += w;
            len -= static_cast<size_t>(w);
        }
        return true;
    }

    Output out_;
    PvtRecord status_{};
    int fd_ = -1;
    std::thread thread_;
    std::mutex m_;
    std::condition_variable cv_;
    uint64_t flush_asked_ = 0;  // guarded by m_
    uint64_t flush_done_ = 0;   // guarded by m_
    bool exited_ = false;       // the exit flush was written (this thread's alone)
    PvtRecord batch_[BATCH];
};

// Made once in InitializeInjection and never destroyed (the thread outlives static
// destruction at exit).
inline Writer* g_writer = nullptr;

}  // namespace pvt
