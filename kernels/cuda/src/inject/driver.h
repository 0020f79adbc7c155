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

    // True when every entry point the samples need was found (cuCtxGetDevice_v2 is optional:
    // drivers before CUDA 12.5 lack it, and the current context's device serves in callbacks).
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
