"""The injection library of ``provetop trace`` builds here, exports what the driver looks up,
and, run against a stand-in driver and CUPTI, writes the stream that ``provetop.sources.trace``
reads.

Why a stand-in: this machine (and CI) has the CUDA headers and CUPTI but no GPU and no
libcuda. Two small libraries take their place on LD_LIBRARY_PATH, ahead of the real CUPTI the
library was linked with: ``libcupti.so.13`` keeps the callback the library subscribes, and
``libcuda.so.1`` answers the few driver calls the library makes (cuMemGetInfo, the pool
attributes, the device's PCI ids, UUID and total memory, cuMemPoolTrimTo) from a table the
harness sets; a trim moves a pool's reserve down to its use and adds what it released to the
free bytes, and the harness's plain allocations succeed only where the free bytes hold them,
so a heal that makes room is seen to work. The harness then calls the callback as CUPTI would,
with the real parameter structs of ``generated_cuda_meta.h``, so everything between the
callback and the bytes on disk or on the socket (records, the ring, the drain thread, the OOM
group, the live map, the re-entry guard, the exit flush, the reader's commands, the heal and
its wait) runs as on the GPU. The GPU test (``test_cuda_inject.py``) covers what only the real
driver can show.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from provetop.kernels.cuda import inject_build
from provetop.sources.trace import records as R
from provetop.sources.trace.events import TraceEvents

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

# Contexts are 0x1000 * (device + 1); device d's default pool is 0xD00 + d. Device d is at PCI
# 0001:(0x17 + d):02.0, its UUID's bytes are 0xA0 + 16 d + i, its memory 96 GiB + d.
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
static int slot_of(CUmemoryPool p) {
    uintptr_t h = reinterpret_cast<uintptr_t>(p);
    return h >= 0xD00 && h < 0xD04 ? int(h - 0xD00) : 3;  // created pools read slot 3
}
extern "C" CUresult cuMemPoolGetAttribute(CUmemoryPool p, CUmemPool_attribute a, void* v) {
    *static_cast<cuuint64_t*>(v) = g_pool[slot_of(p)].v[a];
    return CUDA_SUCCESS;
}
// a trim gives back what the pool holds beyond its use (and minBytesToKeep) to the free bytes
extern "C" CUresult cuMemPoolTrimTo(CUmemoryPool p, size_t keep) {
    uint64_t* v = g_pool[slot_of(p)].v;
    uint64_t used = v[CU_MEMPOOL_ATTR_USED_MEM_CURRENT];
    uint64_t floor = used > keep ? used : keep;
    if (v[CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT] > floor) {
        g_free += v[CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT] - floor;
        v[CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT] = floor;
    }
    return CUDA_SUCCESS;
}
extern "C" uint64_t fake_pool_reserved(int dev) {
    return g_pool[dev].v[CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT];
}
// the driver's side of a plain allocation: whole 2 MiB pages out of the free bytes, or none
extern "C" CUresult fake_alloc(size_t bytes) {
    size_t need = (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    if (need > g_free) return CUDA_ERROR_OUT_OF_MEMORY;
    g_free -= need;
    return CUDA_SUCCESS;
}
extern "C" CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice d) {
    *v = a == CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID ? 1
       : a == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID    ? 0x17 + d
       : a == CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID ? 2
                                                : 0;
    return CUDA_SUCCESS;
}
extern "C" CUresult cuDeviceGetUuid_v2(CUuuid* u, CUdevice d) {
    for (int i = 0; i < 16; i++) u->bytes[i] = static_cast<char>(0xA0 + 16 * d + i);
    return CUDA_SUCCESS;
}
extern "C" CUresult cuDeviceTotalMem_v2(size_t* b, CUdevice d) {
    *b = (96ull << 30) + d;
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

// a plain allocation as the driver runs it: the entry callback (where the heal acts), the fake
// driver's answer from its free bytes, the exit callback with that result
static CUresult (*fake_alloc)(size_t);
static CUresult alloc_call(CUpti_CallbackId id, const void* params, size_t footprint,
                           unsigned long long* out, unsigned long long value) {
    CUpti_CallbackData d;
    memset(&d, 0, sizeof(d));
    CUresult res = CUDA_SUCCESS;
    d.functionParams = params;
    d.functionReturnValue = &res;
    d.context = ctx0;
    d.callbackSite = CUPTI_API_ENTER;
    cb(nullptr, CUPTI_CB_DOMAIN_DRIVER_API, id, &d);
    res = fake_alloc(footprint);
    if (res == CUDA_SUCCESS) *out = value;
    d.callbackSite = CUPTI_API_EXIT;
    cb(nullptr, CUPTI_CB_DOMAIN_DRIVER_API, id, &d);
    return res;
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
    fake_alloc = reinterpret_cast<CUresult (*)(size_t)>(dlsym(RTLD_DEFAULT, "fake_alloc"));
    if (strcmp(mode, "fork") == 0) {  // a child that outlives its parent, holding no stream
        CUdeviceptr p = 0xA000;
        cuMemAlloc_v2_params a = {&p, 1 << 20};
        call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &a, CUDA_SUCCESS);
        usleep(30 * 1000);
        pid_t child = fork();
        if (child == 0) {
            close(1);
            close(2);
            sleep(60);
            _exit(0);
        }
        printf("%d\n", static_cast<int>(child));
        return 7;
    }
    if (strcmp(mode, "trim") == 0) {  // holds 6 MiB unused in its pool until the reader trims it
        CUdeviceptr p = 0xA000;
        cuMemAlloc_v2_params a = {&p, 1 << 20};
        call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &a, CUDA_SUCCESS);  // device 0's context
        set_pool(0, 8 << 20, 2 << 20, ~0ull);
        set(3 << 20, 80 << 20);
        auto reserved =
            reinterpret_cast<uint64_t (*)(int)>(dlsym(RTLD_DEFAULT, "fake_pool_reserved"));
        for (int i = 0; i < 3000 && reserved(0) != (2u << 20); i++) usleep(10 * 1000);  // 30 s
        usleep(50 * 1000);
        return 7;
    }
    if (strcmp(mode, "heal") == 0) {
        // A: 5 MiB (6 MiB of pages) with 3 MiB free and 6 MiB unused in the pool: fits once
        // the pool is trimmed
        set(3 << 20, 80 << 20);
        set_pool(0, 8 << 20, 2 << 20, ~0ull);
        CUdeviceptr a = 0;
        cuMemAlloc_v2_params pa = {&a, 5 << 20};
        alloc_call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &pa, 5 << 20, &a, 0xC000);
        // B: 64 MiB with 3 MiB free and 2 MiB unused: short even so, the reader is asked
        set_pool(0, 4 << 20, 2 << 20, ~0ull);
        CUdeviceptr b = 0;
        cuMemAlloc_v2_params pb = {&b, 64 << 20};
        alloc_call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &pb, 64 << 20, &b, 0xD000);
        // C: cuMemCreate of 4 MiB on device 0 with 1 MiB free and 4 MiB unused
        set(1 << 20, 80 << 20);
        set_pool(0, 6 << 20, 2 << 20, ~0ull);
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof(prop));
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        CUmemGenericAllocationHandle h = 0;
        cuMemCreate_params pc = {&h, 4 << 20, &prop, 0};
        alloc_call(CUPTI_DRIVER_TRACE_CBID_cuMemCreate, &pc, 4 << 20, &h, 0x77);
        // D: a pitched 1000 x 2090 (2,090,000 bytes, under one page) whose 1024-byte rows
        // take two pages: 3 MiB free does not hold them, 2 MiB unused makes it
        set(3 << 20, 80 << 20);
        set_pool(0, 4 << 20, 2 << 20, ~0ull);
        CUdeviceptr dp = 0;
        size_t pitch = 0;
        cuMemAllocPitch_v2_params pd = {&dp, &pitch, 1000, 2090, 4};
        pitch = 1024;
        alloc_call(CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2, &pd, 1024 * 2090, &dp, 0xE000);
        return 7;
    }

    if (strcmp(mode, "heal_async") == 0) {
        // a pool of its own beside the default one (0xE00, the fake's slot 3), 4 MiB unused
        CUmemoryPool made = reinterpret_cast<CUmemoryPool>(0xE00);
        CUmemPoolProps props;
        memset(&props, 0, sizeof(props));
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = 0;
        cuMemPoolCreate_params pc = {&made, &props};
        call(CUPTI_DRIVER_TRACE_CBID_cuMemPoolCreate, &pc, CUDA_SUCCESS);
        set_pool(3, 5 << 20, 1 << 20, 0);
        // E: 4 MiB from the current pool, which holds 6 MiB unused: served from its reserve
        set(1 << 20, 80 << 20);
        set_pool(0, 8 << 20, 2 << 20, ~0ull);
        CUdeviceptr e = 0xE1;
        cuMemAllocAsync_params pe = {&e, 4 << 20, reinterpret_cast<CUstream>(0x55)};
        call(CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, &pe, CUDA_SUCCESS);
        // F: 6 MiB from the current pool (2 MiB unused) with 3 MiB free: the other pool's
        // 4 MiB make room for the current one to grow
        set(3 << 20, 80 << 20);
        set_pool(0, 4 << 20, 2 << 20, ~0ull);
        CUdeviceptr f = 0xF1;
        cuMemAllocAsync_params pf = {&f, 6 << 20, reinterpret_cast<CUstream>(0x55)};
        call(CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, &pf, CUDA_SUCCESS);
        // G: 64 MiB from the made pool (nothing unused now): the default pool's 2 MiB are not
        // enough, the rest is another process's to give
        CUdeviceptr g = 0;
        cuMemAllocFromPoolAsync_params pg = {&g, 64 << 20, made, reinterpret_cast<CUstream>(0x55)};
        call(CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync, &pg, CUDA_ERROR_OUT_OF_MEMORY);
        auto reserved =
            reinterpret_cast<uint64_t (*)(int)>(dlsym(RTLD_DEFAULT, "fake_pool_reserved"));
        printf("%llu %llu\n", static_cast<unsigned long long>(reserved(0)),
               static_cast<unsigned long long>(reserved(3)));
        return 7;
    }

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


def _popen(built: dict[str, Path], out: str, mode: str = "normal", **env: str):
    full = {
        **os.environ,
        "LD_LIBRARY_PATH": str(built["fake"]),
        "PROVETOP_TRACE_OUT": out,
        "PROVETOP_TRACE_INTERVAL_MS": INTERVAL_MS,
        **env,
    }
    return subprocess.Popen(
        [str(built["harness"]), str(built["lib"]), mode],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


WAIT_S = 30.0  # for anything the harness or the library's thread does: a loaded 2-core machine
MIB = 1 << 20


class Reader:
    """The reader's end of one library's connection: decodes the stream as it comes (a thread of
    its own) and sends commands."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.decoder = R.StreamDecoder()
        self.records: list[R.Record] = []
        self.eof = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                data = self.conn.recv(1 << 16)
            except OSError:
                data = b""
            with self._cond:
                if not data:
                    self.eof = True
                else:
                    self.records += self.decoder.feed(data)
                self._cond.notify_all()
            if not data:
                return

    def wait_for(self, what: str, pred: Callable[[R.Record], bool]) -> R.Record:
        """The first record that matches, waiting for it to come."""
        deadline = time.monotonic() + WAIT_S
        with self._cond:
            while True:
                found = next((r for r in self.records if pred(r)), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if self.eof or left <= 0:
                    kinds = [r.kind for r in self.records]
                    pytest.fail(f"no {what} in the stream (eof {self.eof}): kinds {kinds}")
                self._cond.wait(left)

    def wait_eof(self) -> list[R.Record]:
        self._thread.join(WAIT_S)
        assert self.eof, "the library did not end its stream"
        return self.records

    def send(self, data: bytes) -> None:
        self.conn.sendall(data)


@pytest.fixture
def listening() -> Iterator[tuple[str, socket.socket]]:
    """A Unix socket listening where the library is told to connect (``unix:PATH``), in a
    short folder of its own (a socket's path must fit in 108 bytes)."""
    folder = tempfile.mkdtemp(prefix="pvt-", dir="/tmp")
    path = os.path.join(folder, "trace.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(4)
    sock.settimeout(WAIT_S)
    try:
        yield path, sock
    finally:
        sock.close()
        shutil.rmtree(folder, ignore_errors=True)


def _connected(
    built: dict[str, Path], listening: tuple[str, socket.socket], mode: str, **env: str
) -> tuple[subprocess.Popen[str], Reader]:
    path, sock = listening
    proc = _popen(built, f"unix:{path}", mode, **env)
    try:
        conn, _ = sock.accept()
    except TimeoutError:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the library never connected (exit {proc.returncode}): {err}")
    return proc, Reader(conn)


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the harness did not end: {err}")
    return proc.returncode, err


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


# ---- version 2: the socket, the commands, the DEVICE record, the heal --------------------------

UUID0 = bytes(range(0xA0, 0xB0))  # the fake's device 0 (FAKE_CUDA)


def test_socket_output_is_the_whole_stream(
    built: dict[str, Path], listening: tuple[str, socket.socket]
) -> None:
    """Every process that has the environment connects on its own: PROVETOP_TRACE_PID does not
    hold a unix: output back (it names another pid here)."""
    proc, reader = _connected(built, listening, "normal", PROVETOP_TRACE_PID="1")
    records = reader.wait_eof()
    rc, err = _finish(proc)
    assert rc == 7, err  # the program's exit status, unchanged
    h = reader.decoder.header
    assert h is not None and h.pid == proc.pid and h.subscribed
    assert reader.decoder.pending == 0  # ended on a whole record
    assert any(r.kind == R.KIND_EXIT for r in records)
    allocs = [(r.api_name, r.v[1], r.result) for r in records if r.kind == R.KIND_ALLOC]
    assert allocs == [
        ("cuMemAlloc_v2", 1 << 20, 0),
        ("cuMemAllocAsync", 2 << 20, 0),
        ("cuMemAlloc_v2", 12 << 20, R.CUDA_ERROR_OUT_OF_MEMORY),
        ("cuMemAlloc_v2", 5, 1),
        ("cuMemHostRegister_v2", 4096, 0),
    ]
    assert not any(r.kind in (R.KIND_HEAL, R.KIND_HEAL_REQUEST) for r in records)


def test_a_device_is_described_before_its_first_sample(
    built: dict[str, Path], listening: tuple[str, socket.socket]
) -> None:
    proc, reader = _connected(built, listening, "normal")
    records = reader.wait_eof()
    assert _finish(proc)[0] == 7
    devices = [r for r in records if r.kind == R.KIND_DEVICE]
    assert len(devices) == 1  # once, however many samples follow
    (d,) = devices
    assert (d.device, d.api, d.result) == (0, R.API_SAMPLER, 0)
    assert d.v[:3] == (1, 0x17, 2)  # PCI domain, bus, device
    assert d.v[3] == int.from_bytes(UUID0[:8], "little")
    assert d.v[4] == int.from_bytes(UUID0[8:], "little")
    assert d.v[5] == 96 << 30
    first_sample = next(i for i, r in enumerate(records) if r.kind == R.KIND_SAMPLE)
    assert records.index(d) < first_sample


def test_a_trim_command_is_answered_with_a_heal_and_a_sample(
    built: dict[str, Path], listening: tuple[str, socket.socket]
) -> None:
    proc, reader = _connected(built, listening, "trim")
    # the harness's pool holds 6 MiB unused once a sample shows it reserved 8, used 2
    reader.wait_for("the pool's reserve", lambda r: r.kind == R.KIND_POOL and r.v[1] == 8 * MIB)
    reader.send(R.encode_command(99, 0, 5))  # an op this library does not know: ignored
    cmd = R.encode_command(R.OP_TRIM, 0, 77)
    reader.send(cmd[:10])  # in two pieces: the library keeps the first until the rest comes
    time.sleep(0.05)
    reader.send(cmd[10:])
    heal = reader.wait_for("the trim's HEAL", lambda r: r.kind == R.KIND_HEAL)
    records = reader.wait_eof()
    rc, err = _finish(proc)
    assert rc == 7, err
    assert (heal.flags, heal.device, heal.api, heal.result) == (R.HEAL_COMMAND, 0, 0, 0)
    asked, before, after, unused, took_ns, cid, pools = heal.v
    assert (asked, cid, pools) == (0, 77, 1)  # the default pool, which is also the current one
    assert (before, unused) == (3 * MIB, 6 * MIB)
    assert after == before + unused
    assert took_ns < 10**10
    assert [r for r in records if r.kind == R.KIND_HEAL] == [heal]  # one answer, for op 1 only
    at = records.index(heal)
    sample = records[at + 1]  # the fresh picture follows the answer directly
    assert (sample.kind, sample.device, sample.flags, sample.v[0]) == (R.KIND_SAMPLE, 0, 1, after)
    pool = records[at + 2]
    assert pool.kind == R.KIND_POOL and pool.v[1] == pool.v[3] == 2 * MIB  # reserved == used


def test_a_trim_of_every_device(
    built: dict[str, Path], listening: tuple[str, socket.socket]
) -> None:
    proc, reader = _connected(built, listening, "trim")
    reader.wait_for("the pool's reserve", lambda r: r.kind == R.KIND_POOL and r.v[1] == 8 * MIB)
    reader.send(R.encode_command(R.OP_TRIM, -1, 78))
    heal = reader.wait_for("the trim's HEAL", lambda r: r.kind == R.KIND_HEAL)
    reader.wait_eof()
    assert _finish(proc)[0] == 7
    assert (heal.device, heal.v[5], heal.v[2] - heal.v[1]) == (0, 78, 6 * MIB)


def _heal_records(records: list[R.Record]) -> list[R.Record]:
    return [r for r in records if r.kind in (R.KIND_HEAL, R.KIND_HEAL_REQUEST, R.KIND_ALLOC)]


def test_heal_before_allocations_over_a_file(built: dict[str, Path], tmp_path: Path) -> None:
    """The harness's four allocations (HARNESS, mode heal), written to a file: no reader to
    ask, so nobody waits and no HEAL says it asked."""
    out = tmp_path / "trace.bin"
    done = _run(built, str(out), "heal", PROVETOP_TRACE_HEAL="1")
    assert done.returncode == 7, done.stderr
    stream = R.read_file(out)
    assert stream.complete
    seen = [(r.kind, r.api, r.flags, r.result) for r in _heal_records(stream.records)]
    heal, alloc = R.KIND_HEAL, R.KIND_ALLOC
    assert seen == [
        (heal, R.API_MEM_ALLOC, R.HEAL_ALLOC, 0),  # A: trimmed first ...
        (alloc, R.API_MEM_ALLOC, 0, 0),  # ... then it fits
        (heal, R.API_MEM_ALLOC, R.HEAL_ALLOC, 0),  # B: trimmed, still short
        (alloc, R.API_MEM_ALLOC, 0, R.CUDA_ERROR_OUT_OF_MEMORY),
        (heal, R.API_MEM_CREATE, R.HEAL_ALLOC, 0),  # C
        (alloc, R.API_MEM_CREATE, 0, 0),
        (heal, R.API_MEM_ALLOC_PITCH, R.HEAL_ALLOC, 0),  # D: its padded rows did not fit
        (alloc, R.API_MEM_ALLOC_PITCH, 0, 0),
    ]
    heals = [r for r in stream.records if r.kind == R.KIND_HEAL]
    # bytes asked, free before, free after, unused before; pools trimmed
    assert [(r.v[0], r.v[1], r.v[2], r.v[3], r.v[6]) for r in heals] == [
        (5 * MIB, 3 * MIB, 9 * MIB, 6 * MIB, 1),
        (64 * MIB, 3 * MIB, 5 * MIB, 2 * MIB, 1),
        (4 * MIB, 1 * MIB, 5 * MIB, 4 * MIB, 1),
        (1000 * 2090, 3 * MIB, 5 * MIB, 2 * MIB, 1),
    ]
    assert all(r.device == 0 and r.v[5] == 0 for r in heals)


def test_heal_before_stream_ordered_allocations(built: dict[str, Path], tmp_path: Path) -> None:
    """The harness's three stream-ordered allocations (mode heal_async): one its pool serves, one
    that fits once this process's other pool is trimmed (the pool it grows is left alone), one
    still short after that. Over a file nobody is asked."""
    out = tmp_path / "s.bin"
    done = _run(built, str(out), "heal_async", PROVETOP_TRACE_HEAL="1")
    assert done.returncode == 7, done.stderr
    stream = R.read_file(out)
    heals = [r for r in stream.records if r.kind == R.KIND_HEAL]
    assert [(r.api, r.flags, r.v[0], r.v[1], r.v[2], r.v[3], r.v[6]) for r in heals] == [
        (R.API_MEM_ALLOC_ASYNC, R.HEAL_ALLOC, 6 * MIB, 3 * MIB, 7 * MIB, 4 * MIB, 1),  # F
        (R.API_MEM_ALLOC_FROM_POOL, R.HEAL_ALLOC, 64 * MIB, 7 * MIB, 9 * MIB, 2 * MIB, 1),  # G
    ]
    assert not any(r.kind == R.KIND_HEAL_REQUEST for r in stream.records)
    # F trimmed the made pool to its use, G the default pool: each time only the other one
    assert done.stdout.split() == [str(2 * MIB), str(1 * MIB)]


def test_without_heal_stream_ordered_allocations_are_left_alone(
    built: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "s.bin"
    done = _run(built, str(out), "heal_async")
    assert done.returncode == 7, done.stderr
    stream = R.read_file(out)
    assert not any(r.kind in (R.KIND_HEAL, R.KIND_HEAL_REQUEST) for r in stream.records)
    assert done.stdout.split() == [str(4 * MIB), str(5 * MIB)]


def test_a_short_stream_ordered_allocation_asks_the_reader(
    built: dict[str, Path], listening: tuple[str, socket.socket]
) -> None:
    proc, reader = _connected(
        built, listening, "heal_async", PROVETOP_TRACE_HEAL="1", PROVETOP_TRACE_HEAL_WAIT_MS="20000"
    )
    req = reader.wait_for("a HEAL_REQUEST", lambda r: r.kind == R.KIND_HEAL_REQUEST)
    reader.send(R.encode_command(R.OP_HEAL_DONE, req.device, req.v[0], 0))
    records = reader.wait_eof()
    rc, err = _finish(proc)
    assert rc == 7, err
    assert (req.api, req.device, req.v[0], req.v[1], req.v[2]) == (
        R.API_MEM_ALLOC_FROM_POOL, 0, 1, 64 * MIB, 9 * MIB,
    )  # fmt: skip
    (g_heal,) = [r for r in records if r.kind == R.KIND_HEAL and r.v[0] == 64 * MIB]
    assert g_heal.flags == R.HEAL_ALLOC | R.HEAL_ASKED
    assert len([r for r in records if r.kind == R.KIND_HEAL_REQUEST]) == 1  # only G was short


def test_without_heal_nothing_is_trimmed(built: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "trace.bin"
    done = _run(built, str(out), "heal")
    assert done.returncode == 7, done.stderr
    stream = R.read_file(out)
    assert stream.complete
    assert not any(r.kind in (R.KIND_HEAL, R.KIND_HEAL_REQUEST) for r in stream.records)
    allocs = [r for r in stream.records if r.kind == R.KIND_ALLOC]
    assert allocs[0].result == R.CUDA_ERROR_OUT_OF_MEMORY  # A: the phantom the heal removes


def test_a_heal_request_waits_for_its_answer(
    built: dict[str, Path], listening: tuple[str, socket.socket]
) -> None:
    proc, reader = _connected(
        built, listening, "heal", PROVETOP_TRACE_HEAL="1", PROVETOP_TRACE_HEAL_WAIT_MS="20000"
    )
    req = reader.wait_for("a HEAL_REQUEST", lambda r: r.kind == R.KIND_HEAL_REQUEST)
    time.sleep(0.5)  # the allocating thread must still be waiting
    sent_ns = time.monotonic_ns()  # CLOCK_MONOTONIC, the records' clock
    reader.send(R.encode_command(R.OP_HEAL_DONE, req.device, req.v[0], 0))
    records = reader.wait_eof()
    rc, err = _finish(proc)
    assert rc == 7, err
    assert (req.api, req.device, req.v[0], req.v[1], req.v[2]) == (
        R.API_MEM_ALLOC, 0, 1, 64 * MIB, 5 * MIB,
    )  # fmt: skip
    assert req.v[3] == int.from_bytes(UUID0[:8], "little")
    b = next(r for r in records if r.kind == R.KIND_ALLOC and r.v[1] == 64 * MIB)
    assert b.t_ns >= sent_ns  # the call returned only after the answer ...
    assert b.t_ns - sent_ns < 10 * 10**9  # ... because of it (the wait was 20 s)
    assert b.result == R.CUDA_ERROR_OUT_OF_MEMORY  # the result is the driver's, unchanged
    seen = [(r.kind, r.flags) for r in _heal_records(records)]
    assert seen[2:5] == [
        (R.KIND_HEAL, R.HEAL_ALLOC | R.HEAL_ASKED),  # trimmed its own, not enough: asked
        (R.KIND_HEAL_REQUEST, 0),
        (R.KIND_ALLOC, 0),
    ]
    assert len([r for r in records if r.kind == R.KIND_HEAL_REQUEST]) == 1  # only B was short


def test_an_unanswered_heal_request_times_out(
    built: dict[str, Path], listening: tuple[str, socket.socket]
) -> None:
    proc, reader = _connected(
        built, listening, "heal", PROVETOP_TRACE_HEAL="1", PROVETOP_TRACE_HEAL_WAIT_MS="200"
    )
    records = reader.wait_eof()
    rc, err = _finish(proc)
    assert rc == 7, err
    (req,) = [r for r in records if r.kind == R.KIND_HEAL_REQUEST]
    b = next(r for r in records if r.kind == R.KIND_ALLOC and r.v[1] == 64 * MIB)
    assert 200 * 10**6 <= b.t_ns - req.t_ns < 10 * 10**9
    assert any(r.kind == R.KIND_EXIT for r in records)


def test_a_missing_socket_is_reported_and_changes_nothing(
    built: dict[str, Path], tmp_path: Path
) -> None:
    path = tmp_path / "nobody-listens.sock"
    done = _run(built, f"unix:{path}")
    assert done.returncode == 7  # the program's exit status, unchanged
    assert f"provetop trace: cannot connect to {path}: " in done.stderr
    assert "not tracing" in done.stderr
    # with the heal on and a long wait, nobody waits for a reader that is not there
    started = time.monotonic()
    done = _run(
        built, f"unix:{path}", "heal", PROVETOP_TRACE_HEAL="1", PROVETOP_TRACE_HEAL_WAIT_MS="60000"
    )
    assert done.returncode == 7
    assert time.monotonic() - started < WAIT_S


def test_a_forked_child_does_not_hold_the_stream_open(
    built: dict[str, Path], listening: tuple[str, socket.socket]
) -> None:
    """The reader sees the end of the parent's stream when the parent ends, though a fork()ed
    child (which inherited the socket) lives on."""
    proc, reader = _connected(built, listening, "fork")
    out, err = proc.communicate(timeout=WAIT_S)
    child = int(out.split()[0])
    try:
        assert proc.returncode == 7, err
        records = reader.wait_eof()  # within WAIT_S; the child sleeps 60 s
        assert any(r.kind == R.KIND_EXIT for r in records)
    finally:
        os.kill(child, signal.SIGKILL)
