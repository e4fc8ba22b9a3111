// cuGetProcAddress: the entry points by base name ("cuMemGetInfo" gives
// cuMemGetInfo_v2), as the driver hands them to the CUDA runtime and to
// Strata. The stand-in serves the CUDA 12.0 ABI and later: a request for an
// older version is VERSION_NOT_SUFFICIENT. Per-thread default stream
// variants are the same functions (the default stream is not modelled
// per thread).
#include <array>
#include <cstring>
#include <string>

#include "call_log.hpp"
#include "entry_points.hpp"
#include "fake_driver.hpp"

namespace fakecuda {

namespace {

struct entry {
  const char* name;
  void* fn;
};

template <class F>
void* fn(F* f) {
  return reinterpret_cast<void*>(f);
}

const std::array<entry, 47> table{{
    {"cuInit", fn(&cuInit)},
    {"cuDriverGetVersion", fn(&cuDriverGetVersion)},
    {"cuGetErrorName", fn(&cuGetErrorName)},
    {"cuGetErrorString", fn(&cuGetErrorString)},
    {"cuGetProcAddress", fn(&cuGetProcAddress)},
    {"cuDeviceGetCount", fn(&cuDeviceGetCount)},
    {"cuDeviceGet", fn(&cuDeviceGet)},
    {"cuDeviceGetName", fn(&cuDeviceGetName)},
    {"cuDevicePrimaryCtxRetain", fn(&cuDevicePrimaryCtxRetain)},
    {"cuDevicePrimaryCtxRelease", fn(&cuDevicePrimaryCtxRelease)},
    {"cuCtxGetCurrent", fn(&cuCtxGetCurrent)},
    {"cuCtxSetCurrent", fn(&cuCtxSetCurrent)},
    {"cuCtxGetDevice", fn(&cuCtxGetDevice)},
    {"cuCtxSynchronize", fn(&cuCtxSynchronize)},
    {"cuMemAlloc", fn(&cuMemAlloc)},
    {"cuMemFree", fn(&cuMemFree)},
    {"cuMemAllocAsync", fn(&cuMemAllocAsync)},
    {"cuMemFreeAsync", fn(&cuMemFreeAsync)},
    {"cuMemGetInfo", fn(&cuMemGetInfo)},
    {"cuMemGetAllocationGranularity", fn(&cuMemGetAllocationGranularity)},
    {"cuMemAddressReserve", fn(&cuMemAddressReserve)},
    {"cuMemAddressFree", fn(&cuMemAddressFree)},
    {"cuMemCreate", fn(&cuMemCreate)},
    {"cuMemRelease", fn(&cuMemRelease)},
    {"cuMemMap", fn(&cuMemMap)},
    {"cuMemUnmap", fn(&cuMemUnmap)},
    {"cuMemSetAccess", fn(&cuMemSetAccess)},
    {"cuStreamCreate", fn(&cuStreamCreate)},
    {"cuStreamDestroy", fn(&cuStreamDestroy)},
    {"cuStreamSynchronize", fn(&cuStreamSynchronize)},
    {"cuStreamWaitEvent", fn(&cuStreamWaitEvent)},
    {"cuEventCreate", fn(&cuEventCreate)},
    {"cuEventDestroy", fn(&cuEventDestroy)},
    {"cuEventRecord", fn(&cuEventRecord)},
    {"cuEventQuery", fn(&cuEventQuery)},
    {"cuEventSynchronize", fn(&cuEventSynchronize)},
    {"cuMemcpyAsync", fn(&cuMemcpyAsync)},
    {"cuMemsetD8Async", fn(&cuMemsetD8Async)},
    {"cuMemHostAlloc", fn(&cuMemHostAlloc)},
    {"cuMemFreeHost", fn(&cuMemFreeHost)},
    {"cuMemHostRegister", fn(&cuMemHostRegister)},
    {"cuMemHostUnregister", fn(&cuMemHostUnregister)},
    {"cuLaunchHostFunc", fn(&cuLaunchHostFunc)},
    {"cuModuleLoadData", fn(&cuModuleLoadData)},
    {"cuModuleUnload", fn(&cuModuleUnload)},
    {"cuModuleGetFunction", fn(&cuModuleGetFunction)},
    {"cuLaunchKernel", fn(&cuLaunchKernel)},
}};

constexpr int oldest_version = 12000;

CUresult lookup(const char* symbol, void** pfn, int version, cuuint64_t flags,
                CUdriverProcAddressQueryResult* status) {
  constexpr cuuint64_t known =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (symbol == nullptr || pfn == nullptr || (flags & ~known) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pfn = nullptr;
  for (const entry& e : table) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    if (version < oldest_version) {
      if (status != nullptr) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
      return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = e.fn;
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

std::string described(const char* symbol, int version, cuuint64_t flags) {
  return std::string("symbol=") + (symbol != nullptr ? symbol : "(null)") + ", " +
         args(arg("cudaVersion", version), arg("flags", flags));
}

}  // namespace

}  // namespace fakecuda

extern "C" {

// cuda.h names this cuGetProcAddress_v2 (it takes a status out-parameter).
FAKECUDA_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                          cuuint64_t flags,
                                          CUdriverProcAddressQueryResult* status) {
  using fakecuda::calls;
  CUresult r = calls().begin("cuGetProcAddress");
  if (r == CUDA_SUCCESS) r = fakecuda::lookup(symbol, pfn, version, flags, status);
  calls().end("cuGetProcAddress", fakecuda::described(symbol, version, flags), r);
  return r;
}

#undef cuGetProcAddress
// The CUDA 11.3 form, without the status, which drivers still export.
FAKECUDA_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                          cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, nullptr);
}

}  // extern "C"
