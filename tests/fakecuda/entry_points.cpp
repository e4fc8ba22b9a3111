// The driver functions the stand-in exports, under the names cuda.h gives
// them (cuMemGetInfo is cuMemGetInfo_v2, ...), with cuda.h's parameter names
// where they are not self-explanatory. Each one counts and records
// the call under its base name ("cuMemGetInfo"), applies an injected
// failure, checks what the call needs (cuInit, a current context), then
// runs the rule-checking implementation in fake_driver.
#include "entry_points.hpp"

#include <pthread.h>

#include <atomic>
#include <utility>

#include "call_log.hpp"
#include "fake_driver.hpp"

namespace fakecuda {

namespace {

// As a real driver: a process forked after the driver was used cannot use
// it; every call in the child fails, touching none of the parent's state
// (its locks may be held by threads that do not exist in the child).
std::atomic<bool> forked{false};
const int fork_rule = pthread_atfork(nullptr, nullptr, [] { forked.store(true); });

template <class Body>
CUresult call(const char* name, needs n, std::string described, Body&& body) {
  if (forked.load()) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = calls().begin(name);
  if (r == CUDA_SUCCESS) r = fake_driver::get().check(n);
  if (r == CUDA_SUCCESS) r = std::forward<Body>(body)();
  calls().end(name, std::move(described), r);
  return r;
}

fake_driver& drv() {
  return fake_driver::get();
}

}  // namespace

}  // namespace fakecuda

using fakecuda::arg;
using fakecuda::args;
using fakecuda::call;
using fakecuda::drv;
using fakecuda::needs;

extern "C" {

FAKECUDA_EXPORT CUresult cuInit(unsigned int flags) {
  return call("cuInit", needs::nothing, args(arg("flags", flags)),
              [&] { return drv().init(flags); });
}

FAKECUDA_EXPORT CUresult cuDriverGetVersion(int* version) {
  return call("cuDriverGetVersion", needs::nothing, args(arg("version", version)),
              [&] { return fakecuda::fake_driver::driver_version(version); });
}

FAKECUDA_EXPORT CUresult cuGetErrorName(CUresult error, const char** str) {
  return call("cuGetErrorName", needs::nothing, args(arg("error", error)), [&] {
    if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *str = fakecuda::result_name(error);
    return *str != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  });
}

FAKECUDA_EXPORT CUresult cuGetErrorString(CUresult error, const char** str) {
  return call("cuGetErrorString", needs::nothing, args(arg("error", error)), [&] {
    if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *str = fakecuda::result_text(error);
    return *str != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  });
}

FAKECUDA_EXPORT CUresult cuDeviceGetCount(int* count) {
  return call("cuDeviceGetCount", needs::init, args(arg("count", count)),
              [&] { return drv().device_count(count); });
}

FAKECUDA_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  return call("cuDeviceGet", needs::init, args(arg("device", device), arg("ordinal", ordinal)),
              [&] { return drv().device_get(device, ordinal); });
}

FAKECUDA_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  return call("cuDeviceGetName", needs::init,
              args(arg("name", name), arg("len", len), arg("dev", dev)),
              [&] { return drv().device_name(name, len, dev); });
}

FAKECUDA_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  return call("cuDevicePrimaryCtxRetain", needs::init, args(arg("ctx", ctx), arg("dev", dev)),
              [&] { return drv().primary_retain(ctx, dev); });
}

FAKECUDA_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return call("cuDevicePrimaryCtxRelease", needs::init, args(arg("dev", dev)),
              [&] { return drv().primary_release(dev); });
}

FAKECUDA_EXPORT CUresult cuCtxGetCurrent(CUcontext* ctx) {
  return call("cuCtxGetCurrent", needs::init, args(arg("ctx", ctx)),
              [&] { return fakecuda::fake_driver::ctx_get_current(ctx); });
}

FAKECUDA_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  return call("cuCtxSetCurrent", needs::init, args(arg("ctx", ctx)),
              [&] { return drv().ctx_set_current(ctx); });
}

FAKECUDA_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  return call("cuCtxGetDevice", needs::context, args(arg("device", device)),
              [&] { return fakecuda::fake_driver::ctx_get_device(device); });
}

FAKECUDA_EXPORT CUresult cuCtxSynchronize() {
  return call("cuCtxSynchronize", needs::context, "", [&] { return drv().ctx_synchronize(); });
}

FAKECUDA_EXPORT CUresult cuMemGetInfo(size_t* free, size_t* total) {
  return call("cuMemGetInfo", needs::context, args(arg("free", free), arg("total", total)),
              [&] { return drv().mem_get_info(free, total); });
}

FAKECUDA_EXPORT CUresult cuMemAlloc(CUdeviceptr* dptr, size_t bytesize) {
  return call("cuMemAlloc", needs::context, args(arg("dptr", dptr), arg("bytesize", bytesize)),
              [&] { return drv().mem_alloc(dptr, bytesize); });
}

FAKECUDA_EXPORT CUresult cuMemFree(CUdeviceptr dptr) {
  return call("cuMemFree", needs::context, args(arg("dptr", dptr)),
              [&] { return drv().mem_free(dptr); });
}

FAKECUDA_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return call("cuMemAllocAsync", needs::context,
              args(arg("dptr", dptr), arg("bytesize", bytesize), arg("stream", hStream)), [&] {
                return drv().stream_known(hStream) ? drv().mem_alloc(dptr, bytesize)
                                                   : CUDA_ERROR_INVALID_HANDLE;
              });
}

FAKECUDA_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return call(
      "cuMemFreeAsync", needs::context, args(arg("dptr", dptr), arg("stream", hStream)), [&] {
        return drv().stream_known(hStream) ? drv().mem_free(dptr) : CUDA_ERROR_INVALID_HANDLE;
      });
}

FAKECUDA_EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity,
                                                       const CUmemAllocationProp* prop,
                                                       CUmemAllocationGranularity_flags option) {
  return call("cuMemGetAllocationGranularity", needs::init,
              args(arg("granularity", granularity), arg("prop", prop), arg("option", option)),
              [&] { return drv().granularity(granularity, prop, option); });
}

FAKECUDA_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                             CUdeviceptr addr, unsigned long long flags) {
  return call("cuMemAddressReserve", needs::context,
              args(arg("ptr", ptr), arg("size", size), arg("alignment", alignment),
                   arg("addr", addr), arg("flags", flags)),
              [&] { return drv().address_reserve(ptr, size, alignment, addr, flags); });
}

FAKECUDA_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  return call("cuMemAddressFree", needs::context, args(arg("ptr", ptr), arg("size", size)),
              [&] { return drv().address_free(ptr, size); });
}

FAKECUDA_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                     const CUmemAllocationProp* prop, unsigned long long flags) {
  return call(
      "cuMemCreate", needs::context,
      args(arg("handle", handle), arg("size", size), arg("prop", prop), arg("flags", flags)),
      [&] { return drv().mem_create(handle, size, prop, flags); });
}

FAKECUDA_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  return call("cuMemRelease", needs::context, args(arg("handle", handle)),
              [&] { return drv().mem_release(handle); });
}

FAKECUDA_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                  CUmemGenericAllocationHandle handle, unsigned long long flags) {
  return call("cuMemMap", needs::context,
              args(arg("ptr", ptr), arg("size", size), arg("offset", offset), arg("handle", handle),
                   arg("flags", flags)),
              [&] { return drv().mem_map(ptr, size, offset, handle, flags); });
}

FAKECUDA_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  return call("cuMemUnmap", needs::context, args(arg("ptr", ptr), arg("size", size)),
              [&] { return drv().mem_unmap(ptr, size); });
}

FAKECUDA_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                        size_t count) {
  return call("cuMemSetAccess", needs::context,
              args(arg("ptr", ptr), arg("size", size), arg("desc", desc), arg("count", count)),
              [&] { return drv().mem_set_access(ptr, size, desc, count); });
}

FAKECUDA_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  return call("cuStreamCreate", needs::context, args(arg("stream", stream), arg("flags", flags)),
              [&] { return drv().stream_create(stream, flags); });
}

FAKECUDA_EXPORT CUresult cuStreamDestroy(CUstream stream) {
  return call("cuStreamDestroy", needs::context, args(arg("stream", stream)),
              [&] { return drv().stream_destroy(stream); });
}

FAKECUDA_EXPORT CUresult cuStreamSynchronize(CUstream stream) {
  return call("cuStreamSynchronize", needs::context, args(arg("stream", stream)),
              [&] { return drv().stream_synchronize(stream); });
}

FAKECUDA_EXPORT CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  return call("cuStreamWaitEvent", needs::context,
              args(arg("stream", stream), arg("event", event), arg("flags", flags)),
              [&] { return drv().stream_wait_event(stream, event, flags); });
}

FAKECUDA_EXPORT CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  return call("cuEventCreate", needs::context, args(arg("event", event), arg("flags", flags)),
              [&] { return drv().event_create(event, flags); });
}

FAKECUDA_EXPORT CUresult cuEventDestroy(CUevent event) {
  return call("cuEventDestroy", needs::context, args(arg("event", event)),
              [&] { return drv().event_destroy(event); });
}

FAKECUDA_EXPORT CUresult cuEventRecord(CUevent event, CUstream stream) {
  return call("cuEventRecord", needs::context, args(arg("event", event), arg("stream", stream)),
              [&] { return drv().event_record(event, stream); });
}

FAKECUDA_EXPORT CUresult cuEventQuery(CUevent event) {
  return call("cuEventQuery", needs::context, args(arg("event", event)),
              [&] { return drv().event_query(event); });
}

FAKECUDA_EXPORT CUresult cuEventSynchronize(CUevent event) {
  return call("cuEventSynchronize", needs::context, args(arg("event", event)),
              [&] { return drv().event_synchronize(event); });
}

FAKECUDA_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                       CUstream hStream) {
  return call(
      "cuMemcpyAsync", needs::context,
      args(arg("dst", dst), arg("src", src), arg("bytes", ByteCount), arg("stream", hStream)),
      [&] { return drv().memcpy_async(dst, src, ByteCount, hStream); });
}

FAKECUDA_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char uc, size_t N,
                                         CUstream hStream) {
  return call("cuMemsetD8Async", needs::context,
              args(arg("dst", dst), arg("value", uc), arg("bytes", N), arg("stream", hStream)),
              [&] { return drv().memset_async(dst, uc, N, hStream); });
}

FAKECUDA_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  return call("cuMemHostAlloc", needs::context,
              args(arg("ptr", pp), arg("size", bytesize), arg("flags", Flags)),
              [&] { return drv().host_alloc(pp, bytesize, Flags); });
}

FAKECUDA_EXPORT CUresult cuMemFreeHost(void* ptr) {
  return call("cuMemFreeHost", needs::context, args(arg("ptr", ptr)),
              [&] { return drv().free_host(ptr); });
}

FAKECUDA_EXPORT CUresult cuMemHostRegister(void* ptr, size_t size, unsigned int flags) {
  return call("cuMemHostRegister", needs::context,
              args(arg("ptr", ptr), arg("size", size), arg("flags", flags)),
              [&] { return drv().host_register(ptr, size, flags); });
}

FAKECUDA_EXPORT CUresult cuMemHostUnregister(void* ptr) {
  return call("cuMemHostUnregister", needs::context, args(arg("ptr", ptr)),
              [&] { return drv().host_unregister(ptr); });
}

FAKECUDA_EXPORT CUresult cuLaunchHostFunc(CUstream stream, CUhostFn fn, void* data) {
  return call(
      "cuLaunchHostFunc", needs::context,
      args(arg("stream", stream), arg("fn", reinterpret_cast<void*>(fn)), arg("data", data)),
      [&] { return drv().launch_host_func(stream, fn, data); });
}

FAKECUDA_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  return call("cuModuleLoadData", needs::context, args(arg("module", module), arg("image", image)),
              [&] { return drv().module_load_data(module, image); });
}

FAKECUDA_EXPORT CUresult cuModuleUnload(CUmodule hmod) {
  return call("cuModuleUnload", needs::context, args(arg("module", hmod)),
              [&] { return drv().module_unload(hmod); });
}

FAKECUDA_EXPORT CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  return call("cuModuleGetFunction", needs::context,
              args(arg("function", hfunc), arg("module", hmod), arg("name", name)),
              [&] { return drv().module_get_function(hfunc, hmod, name); });
}

FAKECUDA_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                        unsigned int gridDimZ, unsigned int blockDimX,
                                        unsigned int blockDimY, unsigned int blockDimZ,
                                        unsigned int sharedMemBytes, CUstream hStream,
                                        void** kernelParams, void** extra) {
  // The stand-in's kernels are 1-D: any other shape is refused.
  const unsigned extra_dims =
      gridDimY == 1 && gridDimZ == 1 && blockDimY == 1 && blockDimZ == 1 ? 1 : 0;
  return call("cuLaunchKernel", needs::context,
              args(arg("function", f), arg("blocks", gridDimX), arg("threads", blockDimX),
                   arg("stream", hStream)),
              [&] {
                return drv().launch_kernel(f, gridDimX, blockDimX, extra_dims, sharedMemBytes,
                                           hStream, kernelParams, extra);
              });
}

}  // extern "C"
