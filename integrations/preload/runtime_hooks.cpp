// The CUDA runtime's allocation calls, served by Strata (the current
// device's allocator): cudaMalloc/cudaFree keep their device-wide meaning,
// cudaMallocAsync/cudaFreeAsync are stream-ordered, cudaMemGetInfo counts
// Strata's cached memory as free. A pointer Strata did not hand out, and
// every call while Strata is off, goes to the real runtime.
//
// Cost over Strata's own call: one cudaGetDevice.
#include <optional>

#include "real_cuda.hpp"
#include "shim_state.hpp"

namespace {

using strata::preload::current_device;
using strata::preload::real;
using strata::preload::runtime_error;

constexpr auto no_runtime_function = cudaErrorNotSupported;  // no real runtime function

// Allocates through Strata; nullopt when Strata is off (pass it through).
std::optional<cudaError_t> allocate(void** ptr, size_t size, cudaStream_t stream, bool async) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  auto r = strata::preload::strata_allocate(current_device(), size, stream, async);
  if (!r) return std::nullopt;
  if (!*r) return runtime_error(r->code());
  *ptr = **r;
  return cudaSuccess;
}

// Frees through Strata; nullopt when the pointer is not Strata's.
std::optional<cudaError_t> release(void* ptr, cudaStream_t stream, bool async) {
  auto code = strata::preload::strata_free(current_device(), ptr, stream, async);
  if (!code) return std::nullopt;
  return runtime_error(*code);
}

cudaError_t malloc_async(void** ptr, size_t size, cudaStream_t stream,
                         decltype(&cudaMallocAsync) passthrough, cudaStream_t per_thread_null) {
  if (auto r = allocate(ptr, size, stream != nullptr ? stream : per_thread_null, true)) {
    return *r;
  }
  return passthrough != nullptr ? passthrough(ptr, size, stream) : no_runtime_function;
}

cudaError_t free_async(void* ptr, cudaStream_t stream, decltype(&cudaFreeAsync) passthrough) {
  if (ptr == nullptr) return cudaSuccess;
  if (auto r = release(ptr, stream, true)) return *r;
  return passthrough != nullptr ? passthrough(ptr, stream) : no_runtime_function;
}

}  // namespace

extern "C" {

[[gnu::visibility("default")]] cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (auto r = allocate(devPtr, size, nullptr, false)) return *r;
  return real().malloc != nullptr ? real().malloc(devPtr, size) : no_runtime_function;
}

[[gnu::visibility("default")]] cudaError_t cudaFree(void* devPtr) {
  if (devPtr == nullptr) return cudaSuccess;
  if (auto r = release(devPtr, nullptr, false)) return *r;
  return real().free != nullptr ? real().free(devPtr) : no_runtime_function;
}

[[gnu::visibility("default")]] cudaError_t cudaMallocAsync(void** devPtr, size_t size,
                                                           cudaStream_t hStream) {
  return malloc_async(devPtr, size, hStream, real().malloc_async, nullptr);
}

[[gnu::visibility("default")]] cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  return free_async(devPtr, hStream, real().free_async);
}

// Programs built with --default-stream per-thread call these: their null
// stream is the per-thread default stream.
[[gnu::visibility("default")]] cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size,
                                                                cudaStream_t hStream) {
  return malloc_async(devPtr, size, hStream, real().malloc_async_ptsz, cudaStreamPerThread);
}

[[gnu::visibility("default")]] cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t hStream) {
  return free_async(devPtr, hStream != nullptr ? hStream : cudaStreamPerThread,
                    real().free_async_ptsz);
}

[[gnu::visibility("default")]] cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return cudaErrorInvalidValue;
  auto info = strata::preload::strata_memory(current_device());
  if (!info) {
    return real().mem_get_info != nullptr ? real().mem_get_info(free, total) : no_runtime_function;
  }
  if (!*info) return runtime_error(info->code());
  *free = (*info)->free;
  *total = (*info)->total;
  return cudaSuccess;
}

}  // extern "C"
