"""The injection library of ``provetop trace`` builds here, exports what the driver looks up,
and, run against a stand-in driver and CUPTI, writes the stream that ``sources.trace`` reads.

Why a stand-in: this machine (and CI) has the CUDA headers and CUPTI but no GPU and no
libcuda. Two small libraries take their place on LD_LIBRARY_PATH, ahead of the real CUPTI the
library was linked with: ``libcupti.so.13`` keeps the callback the library subscribes, and
``libcuda.so.1`` answers the few driver calls the library makes (cuMemGetInfo, the pool
attributes) from a table the harness sets. The harness then calls the callback as CUPTI would,
with the real parameter structs of ``generated_cuda_meta.h``, so everything between the
callback and the bytes on disk (records, the ring, the drain thread, the OOM group, the live
map, the re-entry guard, the exit flush) runs as on the GPU. The GPU test
(``test_cuda_inject.py``) covers what only the real driver can show.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from kernels.cuda import inject_build
from sources.trace import records as R
from sources.trace.events import TraceEvents

FAKE_CUPTI = r"""
#include <cupti.h>
#include <stdlib.h>
static CUpti_CallbackFunc g_cb = nullptr;
static int g_enabled = 0;
extern "C" CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* sub, CUpti_CallbackFunc cb,
                                               void*) {
    if (getenv("FAKE_CUPTI_BUSY")) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    g_cb = cb;
    *sub = reinterpret_cast<CUpti_SubscriberHandle>(&g_cb);
    return CUPTI_SUCCESS;
}
extern "C" CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t, CUpti_SubscriberHandle,
                                                    CUpti_CallbackDomain, CUpti_CallbackId) {
    g_enabled++;
    return CUPTI_SUCCESS;
}
extern "C" CUpti_CallbackFunc fake_cupti_callback() { return g_cb; }
extern "C" int fake_cupti_enabled() { return g_enabled; }
"""

# Contexts are 0x1000 * (device + 1); device d's default pool is 0xD00 + d.
FAKE_CUDA = r"""
#include <cuda.h>
#include <cupti.h>
#include <stdint.h>
#include <string.h>
extern "C" CUpti_CallbackFunc fake_cupti_callback();
struct Attrs { uint64_t v[16]; };  // indexed by CUmemPool_attribute (1..8)
static Attrs g_pool[4];
static size_t g_free = 1000, g_total = 4000;
extern "C" void fake_set(size_t free_b, size_t total_b) { g_free = free_b; g_total = total_b; }
extern "C" void fake_set_pool(int dev, uint64_t reserved, uint64_t used, uint64_t threshold) {
    g_pool[dev].v[CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT] = reserved;
    g_pool[dev].v[CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH] = reserved;
    g_pool[dev].v[CU_MEMPOOL_ATTR_USED_MEM_CURRENT] = used;
    g_pool[dev].v[CU_MEMPOOL_ATTR_USED_MEM_HIGH] = used;
    g_pool[dev].v[CU_MEMPOOL_ATTR_RELEASE_THRESHOLD] = threshold;
}
// a driver whose own queries raise callbacks: the library's guard must keep them unrecorded
static void reenter() {
    CUpti_CallbackFunc cb = fake_cupti_callback();
    if (!cb) return;
    CUdeviceptr p = 0xBAD;
    cuMemAlloc_v2_params prm = {&p, 777};
    CUresult res = CUDA_SUCCESS;
    CUpti_CallbackData d;
    memset(&d, 0, sizeof(d));
    d.callbackSite = CUPTI_API_EXIT;
    d.functionParams = &prm;
    d.functionReturnValue = &res;
    d.context = reinterpret_cast<CUcontext>(0x1000);
    cb(nullptr, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &d);
}
extern "C" CUresult cuMemGetInfo_v2(size_t* f, size_t* t) {
    reenter();
    *f = g_free;
    *t = g_total;
    return CUDA_SUCCESS;
}
extern "C" CUresult cuCtxGetDevice(CUdevice* d) { *d = 0; return CUDA_SUCCESS; }
extern "C" CUresult cuCtxGetDevice_v2(CUdevice* d, CUcontext c) {
    *d = static_cast<int>(reinterpret_cast<uintptr_t>(c) / 0x1000) - 1;
    return CUDA_SUCCESS;
}
extern "C" CUresult cuCtxPushCurrent_v2(CUcontext) { return CUDA_SUCCESS; }
extern "C" CUresult cuCtxPopCurrent_v2(CUcontext* c) { *c = nullptr; return CUDA_SUCCESS; }
extern "C" CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* p, CUdevice d) {
    *p = reinterpret_cast<CUmemoryPool>(0xD00 + d);
    return CUDA_SUCCESS;
}
extern "C" CUresult cuDeviceGetMemPool(CUmemoryPool* p, CUdevice d) {
    return cuDeviceGetDefaultMemPool(p, d);
}
extern "C" CUresult cuMemPoolGetAttribute(CUmemoryPool p, CUmemPool_attribute a, void* v) {
    uintptr_t h = reinterpret_cast<uintptr_t>(p);
    int dev = h >= 0xD00 && h < 0xD04 ? int(h - 0xD00) : 3;  // created pools read slot 3
    *static_cast<cuuint64_t*>(v) = g_pool[dev].v[a];
    return CUDA_SUCCESS;
}
"""

HARNESS = r"""
#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef CUpti_CallbackFunc (*GetCb)();
static CUpti_CallbackFunc cb;
static CUcontext ctx0 = reinterpret_cast<CUcontext>(0x1000);

static void call(CUpti_CallbackId id, const void* params, CUresult res, bool both = true) {
    CUpti_CallbackData d;
    memset(&d, 0, sizeof(d));
    d.functionParams = params;
    d.functionReturnValue = &res;
    d.context = ctx0;
    if (both) {
        d.callbackSite = CUPTI_API_ENTER;
        cb(nullptr, CUPTI_CB_DOMAIN_DRIVER_API, id, &d);
    }
    d.callbackSite = CUPTI_API_EXIT;
    cb(nullptr, CUPTI_CB_DOMAIN_DRIVER_API, id, &d);
}

// mode "threads": THREADS threads push CALLS allocation records each, as fast as they can
#define THREADS 4
#define CALLS 50000
static void* hammer(void* arg) {
    const uint64_t base = reinterpret_cast<uint64_t>(arg) << 32;
    for (uint64_t i = 0; i < CALLS; i++) {
        CUdeviceptr p = base + i;
        cuMemAllocAsync_params a = {&p, base + i, nullptr};
        call(CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, &a, CUDA_SUCCESS, false);
    }
    return nullptr;
}

int main(int argc, char** argv) {
    const char* mode = argc > 2 ? argv[2] : "normal";
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!cuda) { fprintf(stderr, "fake libcuda: %s\n", dlerror()); return 90; }
    void* lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) { fprintf(stderr, "library: %s\n", dlerror()); return 91; }
    int (*init)() = reinterpret_cast<int (*)()>(dlsym(lib, "InitializeInjection"));
    if (!init || init() != 1) return 92;
    GetCb get = reinterpret_cast<GetCb>(dlsym(RTLD_DEFAULT, "fake_cupti_callback"));
    cb = get ? get() : nullptr;
    if (!cb) return strcmp(mode, "busy") == 0 ? 5 : 93;
    if (strcmp(mode, "threads") == 0) {
        pthread_t t[THREADS];
        for (uintptr_t i = 0; i < THREADS; i++)
            pthread_create(&t[i], nullptr, hammer, reinterpret_cast<void*>(i + 1));
        for (int i = 0; i < THREADS; i++) pthread_join(t[i], nullptr);
        return 7;
    }
    auto set_pool = reinterpret_cast<void (*)(int, uint64_t, uint64_t, uint64_t)>(
        dlsym(RTLD_DEFAULT, "fake_set_pool"));
    auto set = reinterpret_cast<void (*)(size_t, size_t)>(dlsym(RTLD_DEFAULT, "fake_set"));

    CUdeviceptr p1 = 0xA000;
    cuMemAlloc_v2_params a1 = {&p1, 1 << 20};
    call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &a1, CUDA_SUCCESS);
    CUdeviceptr p2 = 0xB000;
    cuMemAllocAsync_params a2 = {&p2, 2 << 20, reinterpret_cast<CUstream>(0x55)};
    call(CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, &a2, CUDA_SUCCESS);
    set_pool(0, 8 << 20, 2 << 20, ~0ull);
    set(3 << 20, 80 << 20);
    CUdeviceptr p3 = 0;
    cuMemAlloc_v2_params a3 = {&p3, 12 << 20};
    call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &a3, CUDA_ERROR_OUT_OF_MEMORY);
    cuMemAlloc_v2_params bad = {nullptr, 5};  // a null out-pointer: the driver's error, no crash
    call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &bad, CUDA_ERROR_INVALID_VALUE);
    char host[4096];
    cuMemHostRegister_v2_params h = {host, sizeof(host), 0};
    call(CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2, &h, CUDA_SUCCESS);
    CUmemoryPool made = reinterpret_cast<CUmemoryPool>(0xE00);
    CUmemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    cuMemPoolCreate_params pc = {&made, &props};
    call(CUPTI_DRIVER_TRACE_CBID_cuMemPoolCreate, &pc, CUDA_SUCCESS);
    cuMemPoolTrimTo_params tr = {made, 1 << 20};
    call(CUPTI_DRIVER_TRACE_CBID_cuMemPoolTrimTo, &tr, CUDA_SUCCESS);
    usleep(60 * 1000);  // a few samples (interval 10 ms) and drains (5 ms)
    cuMemFree_v2_params f1 = {p1};
    call(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, &f1, CUDA_SUCCESS);
    cuMemFreeAsync_params f2 = {p2, reinterpret_cast<CUstream>(0x55)};
    call(CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, &f2, CUDA_SUCCESS);
    if (strcmp(mode, "kill") == 0) {
        usleep(60 * 1000);  // drained, then killed: no exit handler runs
        raise(SIGKILL);
    }
    return 7;  // the program's own exit status, which the library must not change
}
"""

INTERVAL_MS = "10"  # several samples inside the harness's 60 ms pause


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The library (built once per test module by inject_build), the two stand-ins and the
    harness; skips with inject_build's reason where this machine cannot build it."""
    folder = tmp_path_factory.mktemp("inject")
    result = inject_build.build(folder / "cache")
    if not result.ok:
        pytest.skip(f"cannot build the injection library here: {result.reason}")
    assert result.cupti is not None and result.cuda_include is not None
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no host C++ compiler for the stand-in driver and harness")
    inc = [f"-I{result.cupti.include}", f"-I{result.cuda_include}"]
    fake = folder / "fake"
    fake.mkdir()

    def cc(name: str, source: str, out: Path, *extra: str) -> None:
        src = folder / f"{name}.cpp"
        src.write_text(source)
        done = subprocess.run(
            [cxx, "-std=c++17", "-O1", "-w", *inc, str(src), "-o", str(out), *extra],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.fail(f"building {name} failed:\n{done.stderr}")

    cupti_so = fake / result.cupti.library.name
    cc("fake_cupti", FAKE_CUPTI, cupti_so, "-shared", "-fPIC", f"-Wl,-soname,{cupti_so.name}")
    cc(
        "fake_cuda", FAKE_CUDA, fake / "libcuda.so.1", "-shared", "-fPIC",
        "-Wl,-soname,libcuda.so.1", f"-L{fake}", f"-l:{cupti_so.name}", f"-Wl,-rpath,{fake}",
    )  # fmt: skip
    cc("harness", HARNESS, folder / "harness", "-ldl", "-pthread")
    return {"lib": result.path, "fake": fake, "harness": folder / "harness", "dir": folder}


def _run(built: dict[str, Path], out: str, mode: str = "normal", **env: str):
    full = {
        **os.environ,
        "LD_LIBRARY_PATH": str(built["fake"]),
        "PROVETOP_TRACE_OUT": out,
        "PROVETOP_TRACE_INTERVAL_MS": INTERVAL_MS,
        **env,
    }
    return subprocess.run(
        [str(built["harness"]), str(built["lib"]), mode],
        env=full,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_build_reports_a_path_or_a_reason() -> None:
    result = inject_build.build(Path("/nonexistent-folder-for-provetop-tests"))
    assert result.ok or result.reason  # never raises; one or the other


def test_exports_initialize_injection_only(built: dict[str, Path]) -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm on PATH")
    out = subprocess.run(
        [nm, "-D", "--defined-only", str(built["lib"])], capture_output=True, text=True
    )
    names = [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]
    assert names == ["InitializeInjection"]


def test_cli_prints_the_path(built: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    rc = inject_build.main(["--dir", str(built["lib"].parent)])
    assert rc == 0
    assert capsys.readouterr().out.strip() == str(built["lib"])  # the cached build


def test_the_stream_of_a_run(built: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "trace-%p.bin"
    done = _run(built, str(out))
    assert done.returncode == 7, done.stderr  # the program's exit status, unchanged
    files = list(tmp_path.glob("trace-*.bin"))
    assert len(files) == 1 and files[0].name != out.name  # %p became the pid
    stream = R.read_file(files[0])
    assert stream.complete
    h = stream.header
    assert h is not None and h.subscribed and h.interval_ms == int(INTERVAL_MS)
    assert files[0].name == f"trace-{h.pid}.bin"
    recs = stream.records
    status = recs[0]
    assert (status.kind, status.v[0]) == (R.KIND_STATUS, R.STATUS_SUBSCRIBED)
    allocs = [r for r in recs if r.kind == R.KIND_ALLOC]
    assert [(r.api_name, r.v[1], r.result) for r in allocs] == [
        ("cuMemAlloc_v2", 1 << 20, 0),
        ("cuMemAllocAsync", 2 << 20, 0),
        ("cuMemAlloc_v2", 12 << 20, R.CUDA_ERROR_OUT_OF_MEMORY),
        ("cuMemAlloc_v2", 5, 1),  # CUDA_ERROR_INVALID_VALUE, pointer not read
        ("cuMemHostRegister_v2", 4096, 0),
    ]
    assert allocs[0].v[0] == 0xA000 and allocs[1].v[3] == 0x55 and allocs[3].v[0] == 0
    assert all(r.device == 0 for r in allocs[:4]) and allocs[4].device == -1
    assert not any(r.kind == R.KIND_ALLOC and r.v[1] == 777 for r in recs)  # guard held
    frees = [r for r in recs if r.kind == R.KIND_FREE]
    assert [(r.api_name, r.v[0], r.v[1]) for r in frees] == [
        ("cuMemFree_v2", 0xA000, 1 << 20),  # the size the library kept
        ("cuMemFreeAsync", 0xB000, 0),  # the pool's count is the authority
    ]
    trims = [r for r in recs if r.kind == R.KIND_POOL_TRIM]
    assert [(t.v[0], t.v[1]) for t in trims] == [(0xE00, 1 << 20)]
    items = R.Grouper().push(recs)
    ooms = [i for i in items if isinstance(i, R.Oom)]
    assert len(ooms) == 1 and ooms[0].state is not None and ooms[0].state.complete
    state = ooms[0].state
    assert (state.driver_free, state.driver_total, state.plain) == (3 << 20, 80 << 20, 1 << 20)
    assert [(p.handle, p.flags) for p in state.pools] == [(0xD00, R.POOL_DEFAULT | R.POOL_CURRENT)]
    assert state.pool_unused == 6 << 20
    samples = [i for i in items if isinstance(i, R.DeviceState)]
    assert samples and all(s.complete for s in samples)
    last = samples[-1]  # after the frees: the final sample of the exit flush
    assert last.plain == 0 and last.pinned_host == 4096
    assert {p.handle for p in samples[-2].pools} == {0xD00, 0xE00}  # the created pool too


def test_events_of_a_run(built: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "trace.bin"
    assert _run(built, str(out)).returncode == 7
    stream = R.read_file(out)
    assert stream.header is not None
    conv = TraceEvents(stream.header, alloc_min=0)
    events = conv.feed(stream.records) + conv.close()
    assert conv.exited and conv.ooms == 1
    faults = [e for e in events if e["k"] == "fault"]
    assert len(faults) == 1
    f = faults[0]
    assert f["kind"] == "oom" and f["requested"] == 12 << 20 and f["phantom"] == 6 << 20
    assert f["pools"]["async_reserved"] == 8 << 20 and f["pools"]["async_used"] == 2 << 20
    memory = [e for e in events if e["k"] == "memory"]
    assert memory, "no memory event"
    last = memory[-1]  # the exit flush's sample, after the frees
    assert (last["sync_used"], last["driver_total"], last["pinned_host"]) == (0, 80 << 20, 4096)
    assert last["async_reserved"] == 8 << 20 and last["unobserved"] == ["sync_cached", "ballast"]
    allocs = [e for e in events if e["k"] == "alloc"]
    assert [(e["site"], e["pool"], e["decision"]) for e in allocs] == [
        ("cuMemAlloc_v2", "sync", "ok"),
        ("cuMemAllocAsync", "async", "ok"),
        ("cuMemHostRegister_v2", "host", "ok"),
        ("cuMemPoolTrimTo", "async", "trim"),
    ]


def test_many_threads_lose_nothing_uncounted(built: dict[str, Path], tmp_path: Path) -> None:
    """A ring far too small for the burst: every record is either in the stream, in its
    thread's call order, or counted as dropped."""
    out = tmp_path / "trace.bin"
    done = _run(built, str(out), "threads", PROVETOP_TRACE_RING="1024")
    assert done.returncode == 7, done.stderr
    stream = R.read_file(out)
    assert stream.complete and stream.header is not None and stream.header.ring_slots == 1024
    allocs = [r for r in stream.records if r.kind == R.KIND_ALLOC]
    (exit_rec,) = [r for r in stream.records if r.kind == R.KIND_EXIT]
    threads, calls = 4, 50_000  # THREADS and CALLS of the harness
    dropped = exit_rec.v[6]
    assert dropped > 0  # 1024 slots cannot hold the burst: the accounting is exercised
    notes = [r for r in stream.records if r.kind == R.KIND_STATUS and r.v[0] == R.STATUS_RING_FULL]
    assert all(n.v[1] == 1024 for n in notes)
    # the first drop also tries a STATUS note, which counts like any record
    assert len(allocs) + len(notes) + dropped == threads * calls + 1
    by_thread: dict[int, list[int]] = {}
    for r in allocs:
        by_thread.setdefault(r.v[1] >> 32, []).append(r.v[1] & 0xFFFFFFFF)
    assert set(by_thread) <= {1, 2, 3, 4}
    assert all(seq == sorted(seq) for seq in by_thread.values())  # each thread's call order


def test_killed_program_leaves_a_readable_stream(built: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "trace.bin"
    done = _run(built, str(out), "kill")
    assert done.returncode == -signal.SIGKILL
    stream = R.read_file(out)
    assert stream.header is not None and not stream.exited
    assert [r.api_name for r in stream.records if r.kind == R.KIND_FREE] == [
        "cuMemFree_v2",
        "cuMemFreeAsync",
    ]  # written as it went, not at exit


def test_another_subscriber_is_reported(built: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "trace.bin"
    done = _run(built, str(out), "busy", FAKE_CUPTI_BUSY="1")
    assert done.returncode == 5, done.stderr
    stream = R.read_file(out)
    assert stream.header is not None and stream.header.cupti_result == 39
    assert not stream.header.subscribed and stream.exited
    status = stream.records[0]
    assert (status.v[0], status.v[1]) == (R.STATUS_NO_CUPTI, 39)
    events = TraceEvents(stream.header).feed(stream.records)
    assert [e["kind"] for e in events] == ["source"] and "another tool" in events[0]["message"]


def test_a_descendant_does_not_write_into_its_parents_stream(
    built: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "trace.bin"
    done = _run(built, str(out), PROVETOP_TRACE_PID="1")  # not the harness's pid
    assert done.returncode == 93  # no callback subscribed: the library stayed idle
    assert not out.exists()


def test_fifo_output(built: dict[str, Path], tmp_path: Path) -> None:
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    chunks: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as f:
            while data := f.read(4096):
                chunks.append(data)

    reader = threading.Thread(target=read)
    reader.start()
    done = _run(built, str(fifo))
    reader.join(timeout=10)
    assert done.returncode == 7
    dec = R.StreamDecoder()
    recs = [r for c in chunks for r in dec.feed(c)]
    assert dec.header is not None and dec.pending == 0
    assert any(r.kind == R.KIND_EXIT for r in recs)
