// The CUDA driver's allocation calls, served by Strata (the allocator of the
// current context's device): cuMemAlloc/cuMemFree device-wide,
// cuMemAllocAsync/cuMemFreeAsync stream-ordered, cuMemGetInfo counting
// Strata's cached memory as free. cuGetProcAddress hands out these same
// functions for those names, so code that finds the driver's entry points
// through it (the runtime since CUDA 11.3, frameworks) reaches Strata too,
// as far as it calls cuGetProcAddress through the dynamic linker. Foreign
// pointers and every call while Strata is off go to the real driver.
#include <cstring>
#include <optional>

#include "real_cuda.hpp"
#include "shim_state.hpp"

namespace {

using strata::preload::current_context_device;
using strata::preload::driver_error;
using strata::preload::real;

constexpr auto no_driver_function = CUDA_ERROR_NOT_SUPPORTED;  // no real driver function

void* as_ptr(CUdeviceptr p) {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
}

// Allocates through Strata; nullopt when Strata is off (pass it through).
std::optional<CUresult> allocate(CUdeviceptr* ptr, size_t size, CUstream stream, bool async) {
  if (ptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto r = strata::preload::strata_allocate(current_context_device(), size, stream, async);
  if (!r) return std::nullopt;
  if (!*r) return driver_error(r->code());
  *ptr = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(**r));
  return CUDA_SUCCESS;
}

// Frees through Strata; nullopt when the pointer is not Strata's.
std::optional<CUresult> release(CUdeviceptr ptr, CUstream stream, bool async) {
  auto code = strata::preload::strata_free(current_context_device(), as_ptr(ptr), stream, async);
  if (!code) return std::nullopt;
  return driver_error(*code);
}

}  // namespace

extern "C" {

[[gnu::visibility("default")]] CUresult cuMemAlloc(CUdeviceptr* dptr, size_t bytesize) {
  if (auto r = allocate(dptr, bytesize, nullptr, false)) return *r;
  return real().mem_alloc != nullptr ? real().mem_alloc(dptr, bytesize) : no_driver_function;
}

[[gnu::visibility("default")]] CUresult cuMemFree(CUdeviceptr dptr) {
  if (dptr == 0) return CUDA_SUCCESS;
  if (auto r = release(dptr, nullptr, false)) return *r;
  return real().mem_free != nullptr ? real().mem_free(dptr) : no_driver_function;
}

[[gnu::visibility("default")]] CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize,
                                                        CUstream hStream) {
  if (auto r = allocate(dptr, bytesize, hStream, true)) return *r;
  return real().mem_alloc_async != nullptr ? real().mem_alloc_async(dptr, bytesize, hStream)
                                           : no_driver_function;
}

[[gnu::visibility("default")]] CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  if (dptr == 0) return CUDA_SUCCESS;
  if (auto r = release(dptr, hStream, true)) return *r;
  return real().mem_free_async != nullptr ? real().mem_free_async(dptr, hStream)
                                          : no_driver_function;
}

[[gnu::visibility("default")]] CUresult cuMemGetInfo(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto info = strata::preload::strata_memory(current_context_device());
  if (!info) {
    return real().cu_mem_get_info != nullptr ? real().cu_mem_get_info(free, total)
                                             : no_driver_function;
  }
  if (!*info) return driver_error(info->code());
  *free = (*info)->free;
  *total = (*info)->total;
  return CUDA_SUCCESS;
}

}  // extern "C"

namespace {

// The driver's answer, with Strata's function in place of the real one for
// the names above (only when the driver handed out exactly the version the
// hook implements).
void substitute(void** pfn) {
  const auto& r = real();
  const struct {
    void* real;
    void* ours;
  } swaps[] = {
      {reinterpret_cast<void*>(r.mem_alloc), reinterpret_cast<void*>(&cuMemAlloc)},
      {reinterpret_cast<void*>(r.mem_free), reinterpret_cast<void*>(&cuMemFree)},
      {reinterpret_cast<void*>(r.mem_alloc_async), reinterpret_cast<void*>(&cuMemAllocAsync)},
      {reinterpret_cast<void*>(r.mem_free_async), reinterpret_cast<void*>(&cuMemFreeAsync)},
      {reinterpret_cast<void*>(r.cu_mem_get_info), reinterpret_cast<void*>(&cuMemGetInfo)},
  };
  for (const auto& s : swaps) {
    if (s.real != nullptr && *pfn == s.real) *pfn = s.ours;
  }
}

}  // namespace

extern "C" {

// cuda.h names this cuGetProcAddress_v2.
[[gnu::visibility("default")]] CUresult cuGetProcAddress(const char* symbol, void** pfn,
                                                         int cudaVersion, cuuint64_t flags,
                                                         CUdriverProcAddressQueryResult* status) {
  if (real().get_proc_address == nullptr) return no_driver_function;
  const CUresult r = real().get_proc_address(symbol, pfn, cudaVersion, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr) substitute(pfn);
  return r;
}

#undef cuGetProcAddress
// The CUDA 11.3 form, without the status.
[[gnu::visibility("default")]] CUresult cuGetProcAddress(const char* symbol, void** pfn,
                                                         int cudaVersion, cuuint64_t flags) {
  if (real().get_proc_address_v1 == nullptr) return no_driver_function;
  const CUresult r = real().get_proc_address_v1(symbol, pfn, cudaVersion, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) substitute(pfn);
  return r;
}

}  // extern "C"
