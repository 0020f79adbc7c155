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
// own signal handlers never run on it (a socket is written with MSG_NOSIGNAL besides).
//
// Over a socket (PROVETOP_TRACE_OUT=unix:PATH) the same thread also reads the reader's
// commands (records.h, PvtCommand), between two drains, without waiting for them: a trim of
// this process's pools (answered by a HEAL record written straight into the stream, then a
// fresh SAMPLE group), and the answer to a heal request, which wakes the program thread that
// waits for it (inject.cpp, heal_before).
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
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
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
    char path[4096] = {0};  // the file, FIFO or socket to open (empty: fd is given)
    int fd = -1;            // an inherited descriptor ("fd:N")
    bool socket = false;    // "unix:PATH": connect a stream socket to path
};

// Program threads waiting at once for an answer to their heal request; one more does not
// wait (its allocation goes ahead as if it had timed out).
constexpr int HEAL_WAITERS = 64;
// Commands buffered between two reads: a partial one waits for the rest of its bytes.
constexpr size_t COMMAND_BUFFER = 16 * PVT_COMMAND_SIZE;

class Writer {
  public:
    Ring ring;
    PvtHeader header{};
    std::atomic<bool> broken{false};  // the output failed: callbacks stop recording

    void start(const Output& out, PvtRecord status) {
        out_ = out;
        socket_ = out.socket;
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

    // True when a heal request can be answered: the output is a socket, still working, and
    // the reader has not closed its side.
    bool can_ask() const {
        return socket_ && !broken.load() && !commands_closed_.load();
    }

    // A program thread's heal request, in three steps: wait_begin (before its HEAL_REQUEST is
    // pushed, so that no answer can come before the thread is listening; -1: no room, do not
    // wait), kick (the writer drains now, not at its next period), wait_end (waits at most
    // `ms` for PVT_OP_HEAL_DONE with that id; true when it came).
    int wait_begin(uint64_t id) {
        std::lock_guard<std::mutex> g(heal_m_);
        for (int i = 0; i < HEAL_WAITERS; i++)
            if (waiters_[i].id == 0) {
                waiters_[i].id = id;
                waiters_[i].done = false;
                return i;
            }
        return -1;
    }

    void kick() {
        std::lock_guard<std::mutex> g(m_);
        kicked_ = true;
        cv_.notify_all();
    }

    bool wait_end(int slot, uint32_t ms) {
        std::unique_lock<std::mutex> g(heal_m_);
        heal_cv_.wait_for(g, std::chrono::milliseconds(ms), [&] {
            return waiters_[slot].done || broken.load() || commands_closed_.load();
        });
        const bool done = waiters_[slot].done;
        waiters_[slot].id = 0;
        waiters_[slot].done = false;
        return done;
    }

    // In a fork()ed child (no writer thread there): let go of the socket, so the reader sees
    // the end of the parent's stream when the parent ends, however long the child lives.
    void forget_in_child() {
        const int fd = published_fd_.load();
        if (socket_ && fd >= 0) close(fd);
    }

  private:
    void run() {
        t_in_hook = true;  // this thread records nothing of its own driver calls
        const int mode = 0600;  // the trace may name pointers and sizes: the user's alone
        if (socket_) {
            fd_ = connect_socket(out_.path);
            if (fd_ < 0) {
                fprintf(stderr, "provetop trace: cannot connect to %s: %s; not tracing\n",
                        out_.path, strerror(errno));
                set_broken();
                return;
            }
        } else {
            fd_ = out_.fd >= 0 ? out_.fd
                               : open(out_.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
            if (fd_ < 0) {
                fprintf(stderr, "provetop trace: cannot open %s: %s; not tracing\n", out_.path,
                        strerror(errno));
                set_broken();
                return;
            }
        }
        published_fd_.store(fd_);
        if (out_.fd >= 0) fcntl(fd_, F_SETFD, FD_CLOEXEC);  // exec'd children don't write to it
        if (!put(&header, sizeof(header)) || !put(&status_, sizeof(status_))) return;
        const uint64_t interval_ns = static_cast<uint64_t>(header.interval_ms) * 1000000ull;
        uint64_t next_sample = mono_ns();
        for (;;) {
            uint64_t asked;
            {
                std::unique_lock<std::mutex> g(m_);
                cv_.wait_for(g, std::chrono::milliseconds(DRAIN_MS),
                             [&] { return flush_asked_ > flush_done_ || kicked_; });
                asked = flush_asked_;
                kicked_ = false;
            }
            // a device's DEVICE record before the records of its first calls, where it can
            // (they are in the ring already when the context came between this and the drain)
            if (!exited_ &&
                !put_out(g_registry->describe_new(head(PVT_KIND_DEVICE), out_buf_)))
                return;
            if (!drain()) return;
            if (socket_ && !commands()) return;
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

    PvtRecord head(uint16_t kind, uint64_t now = 0) {
        PvtRecord h{};
        h.t_ns = now != 0 ? now : mono_ns();
        h.kind = kind;
        h.api = PVT_API_SAMPLER;
        h.device = -1;
        if (tid_ == 0) tid_ = static_cast<uint32_t>(syscall(SYS_gettid));
        h.tid = tid_;
        return h;
    }

    // Records the registry copied out (DEVICE, HEAL, SAMPLE groups), written after its lock
    // was released; each SAMPLE head gets the drop count.
    bool put_out(uint32_t n) {
        const uint64_t dropped = ring.dropped();
        for (uint32_t i = 0; i < n; i++)
            if (out_buf_[i].kind == PVT_KIND_SAMPLE) out_buf_[i].v[6] = dropped;
        return put(out_buf_, n * sizeof(PvtRecord));
    }

    bool sample(uint64_t now) {
        return put_out(g_registry->sample_all(head(PVT_KIND_SAMPLE, now), out_buf_));
    }

    // The reader's commands that have arrived (none waited for); false when writing an answer
    // failed.
    bool commands() {
        while (!commands_closed_.load()) {
            const ssize_t got = recv(fd_, cmd_buf_ + cmd_have_, sizeof(cmd_buf_) - cmd_have_,
                                     MSG_DONTWAIT);
            if (got < 0 && errno == EINTR) continue;
            if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
            if (got <= 0) {  // the reader shut its side: no answer will come, stop waiting
                close_commands();
                return true;
            }
            cmd_have_ += static_cast<size_t>(got);
            const size_t whole = cmd_have_ - cmd_have_ % PVT_COMMAND_SIZE;
            for (size_t at = 0; at < whole; at += PVT_COMMAND_SIZE) {
                PvtCommand c;
                memcpy(&c, cmd_buf_ + at, sizeof(c));
                if (!command(c)) return false;
            }
            memmove(cmd_buf_, cmd_buf_ + whole, cmd_have_ - whole);
            cmd_have_ -= whole;
        }
        return true;
    }

    bool command(const PvtCommand& c) {
        switch (c.op) {
            case PVT_OP_TRIM:
                if (exited_) return true;  // no driver calls once the exit flush is written
                return put_out(g_registry->trim_command(c.device, c.id, head(PVT_KIND_HEAL),
                                                        out_buf_));
            case PVT_OP_HEAL_DONE: {
                std::lock_guard<std::mutex> g(heal_m_);
                for (Waiter& w : waiters_)
                    if (w.id == c.id && c.id != 0) w.done = true;
                heal_cv_.notify_all();
                return true;
            }
            default:
                return true;  // a newer reader's command: ignored
        }
    }

    static int connect_socket(const char* path) {
        sockaddr_un addr;
        memset(&addr, 0, sizeof(addr));
        addr.sun_family = AF_UNIX;
        if (strlen(path) >= sizeof(addr.sun_path)) {
            errno = ENAMETOOLONG;
            return -1;
        }
        strcpy(addr.sun_path, path);
        const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return -1;
        int res;
        do {
            res = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
        } while (res < 0 && errno == EINTR);
        if (res < 0) {
            const int err = errno;
            close(fd);
            errno = err;
            return -1;
        }
        return fd;
    }

    void close_commands() {
        commands_closed_.store(true);
        std::lock_guard<std::mutex> g(heal_m_);
        heal_cv_.notify_all();
    }

    // The output failed: callbacks stop recording, a waiting exit handler and waiting heal
    // requests are woken.
    void set_broken() {
        broken.store(true);
        {
            std::lock_guard<std::mutex> g(m_);
            cv_.notify_all();
        }
        std::lock_guard<std::mutex> g(heal_m_);
        heal_cv_.notify_all();
    }

    // Writes all of `len` bytes; on failure marks the output broken (set_broken).
    bool put(const void* data, size_t len) {
        const char* p = static_cast<const char*>(data);
        while (len > 0) {
            const ssize_t w = socket_ ? send(fd_, p, len, MSG_NOSIGNAL) : write(fd_, p, len);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                set_broken();
                return false;
            }
            p += w;
            len -= static_cast<size_t>(w);
        }
        return true;
    }

    struct Waiter {
        uint64_t id = 0;  // 0: a free slot
        bool done = false;
    };

    Output out_;
    bool socket_ = false;
    PvtRecord status_{};
    int fd_ = -1;
    std::atomic<int> published_fd_{-1};  // fd_, for a fork()ed child to close
    uint32_t tid_ = 0;
    std::thread thread_;
    std::mutex m_;
    std::condition_variable cv_;
    uint64_t flush_asked_ = 0;  // guarded by m_
    uint64_t flush_done_ = 0;   // guarded by m_
    bool kicked_ = false;       // guarded by m_: a heal request wants a drain now
    bool exited_ = false;       // the exit flush was written (this thread's alone)
    std::atomic<bool> commands_closed_{false};  // the reader shut its side of the socket
    char cmd_buf_[COMMAND_BUFFER];
    size_t cmd_have_ = 0;
    std::mutex heal_m_;
    std::condition_variable heal_cv_;
    Waiter waiters_[HEAL_WAITERS];  // guarded by heal_m_
    PvtRecord batch_[BATCH];
    PvtRecord out_buf_[Registry::MAX_OUT];
};

// Made once in InitializeInjection and never destroyed (the thread outlives static
// destruction at exit).
inline Writer* g_writer = nullptr;

}  // namespace pvt
