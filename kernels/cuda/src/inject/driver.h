// The few driver entry points the library calls itself, taken from the libcuda the program
// already has loaded.
//
// Why not link libcuda: the driver loads this library from inside its own cuInit, so libcuda
// is in the process by then; taking its symbols from that copy means the library never pulls
// in another one (a stub from a toolkit, a different version in LD_LIBRARY_PATH), and it builds
// on machines with no driver at all. The exported names are the versioned ones (cuda.h maps
// cuMemGetInfo to cuMemGetInfo_v2 and so on), looked up as such.
#pragma once
#include <cuda.h>
#include <dlfcn.h>

namespace pvt {

struct Driver {
    CUresult (*memGetInfo)(size_t*, size_t*) = nullptr;               // cuMemGetInfo_v2
    CUresult (*ctxGetDevice)(CUdevice*) = nullptr;                     // cuCtxGetDevice
    CUresult (*ctxGetDeviceOf)(CUdevice*, CUcontext) = nullptr;       // cuCtxGetDevice_v2
    CUresult (*ctxPush)(CUcontext) = nullptr;                          // cuCtxPushCurrent_v2
    CUresult (*ctxPop)(CUcontext*) = nullptr;                          // cuCtxPopCurrent_v2
    CUresult (*defaultPool)(CUmemoryPool*, CUdevice) = nullptr;        // cuDeviceGetDefaultMemPool
    CUresult (*currentPool)(CUmemoryPool*, CUdevice) = nullptr;        // cuDeviceGetMemPool
    CUresult (*poolGetAttr)(CUmemoryPool, CUmemPool_attribute, void*) = nullptr;
    // Optional (a missing one leaves its figures at zero, or its action undone): the DEVICE
    // record's identity and the heal's trim. cuda.h maps cuDeviceGetUuid to
    // cuDeviceGetUuid_v2 and cuDeviceTotalMem to cuDeviceTotalMem_v2; cuMemPoolTrimTo and
    // cuDeviceGetAttribute have one form only (no _v2, no _ptsz).
    CUresult (*poolTrimTo)(CUmemoryPool, size_t) = nullptr;            // cuMemPoolTrimTo
    CUresult (*deviceGetAttr)(int*, CUdevice_attribute, CUdevice) = nullptr;
    CUresult (*deviceGetUuid)(CUuuid*, CUdevice) = nullptr;            // cuDeviceGetUuid_v2
    CUresult (*deviceTotalMem)(size_t*, CUdevice) = nullptr;           // cuDeviceTotalMem_v2

    // True when every entry point the samples need was found (cuCtxGetDevice_v2 is optional:
    // drivers before CUDA 12.5 lack it, and the current context's device serves in callbacks;
    // so are the ones above marked optional).
    bool load() {
        void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_NOW);
        if (lib == nullptr) return false;
        find(lib, "cuMemGetInfo_v2", memGetInfo);
        find(lib, "cuCtxGetDevice", ctxGetDevice);
        find(lib, "cuCtxGetDevice_v2", ctxGetDeviceOf);
        find(lib, "cuCtxPushCurrent_v2", ctxPush);
        find(lib, "cuCtxPopCurrent_v2", ctxPop);
        find(lib, "cuDeviceGetDefaultMemPool", defaultPool);
        find(lib, "cuDeviceGetMemPool", currentPool);
        find(lib, "cuMemPoolGetAttribute", poolGetAttr);
        find(lib, "cuMemPoolTrimTo", poolTrimTo);
        find(lib, "cuDeviceGetAttribute", deviceGetAttr);
        find(lib, "cuDeviceGetUuid_v2", deviceGetUuid);
        if (deviceGetUuid == nullptr) find(lib, "cuDeviceGetUuid", deviceGetUuid);  // same args
        find(lib, "cuDeviceTotalMem_v2", deviceTotalMem);
        return memGetInfo && ctxGetDevice && ctxPush && ctxPop && defaultPool && currentPool &&
               poolGetAttr;
    }

  private:
    template <typename F>
    static void find(void* lib, const char* name, F& out) {
        out = reinterpret_cast<F>(dlsym(lib, name));
    }
};

inline Driver g_driver;

// Set while this thread is inside the library (a callback, or always on the library's own
// thread): driver calls made from there must not record themselves.
inline thread_local bool t_in_hook = false;

}  // namespace pvt
