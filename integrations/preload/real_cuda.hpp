// The CUDA functions the preload shim stands in front of, as the program
// would have reached them without it: looked up once with
// dlsym(RTLD_NEXT, name), the driver's also in libcuda.so.1 itself when the
// program reaches the driver only through dlopen (as the runtime does).
// A function the process does not have is null.
//
// Thread safety: `real()` may be called concurrently; the table is filled
// once and never changes.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace strata::preload {

struct real_cuda {
  // The runtime.
  decltype(&::cudaMalloc) malloc = nullptr;
  decltype(&::cudaFree) free = nullptr;
  decltype(&::cudaMallocAsync) malloc_async = nullptr;
  decltype(&::cudaFreeAsync) free_async = nullptr;
  decltype(&::cudaMallocAsync) malloc_async_ptsz = nullptr;
  decltype(&::cudaFreeAsync) free_async_ptsz = nullptr;
  decltype(&::cudaMemGetInfo) mem_get_info = nullptr;
  decltype(&::cudaGetDevice) get_device = nullptr;
  // The driver.
  decltype(&::cuMemAlloc) mem_alloc = nullptr;
  decltype(&::cuMemFree) mem_free = nullptr;
  decltype(&::cuMemAllocAsync) mem_alloc_async = nullptr;
  decltype(&::cuMemFreeAsync) mem_free_async = nullptr;
  decltype(&::cuMemGetInfo) cu_mem_get_info = nullptr;
  decltype(&::cuCtxGetDevice) ctx_get_device = nullptr;
  decltype(&::cuGetProcAddress) get_proc_address = nullptr;  // the _v2 form
  CUresult (*get_proc_address_v1)(const char*, void**, int, cuuint64_t) = nullptr;
};

/// The real functions (see above).
const real_cuda& real();

/// The caller's current device: the runtime's (cudaGetDevice), else the
/// device of the driver's current context, else 0.
int current_device();

/// The driver's current device for driver-API calls: the current context's
/// device, else 0.
int current_context_device();

}  // namespace strata::preload
