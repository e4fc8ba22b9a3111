#include "shim_state.hpp"

#include "device_allocators.hpp"

namespace strata::preload {

namespace {

// The shim's allocators, one per device.
integration::device_allocators& allocators() {
  static integration::device_allocators all("strata preload");
  return all;
}

// Runs `free_in(a)`; errc::ok or the error it threw.
template <class FreeIn>
errc freed_by(allocator& a, FreeIn free_in) {
  try {
    free_in(a);
    return errc::ok;
  } catch (const error& e) {
    return e.code();
  }
}

}  // namespace

cudaError_t runtime_error(errc code) {
  switch (code) {
    case errc::ok:
      return cudaSuccess;
    case errc::out_of_memory:
      return cudaErrorMemoryAllocation;
    case errc::invalid_argument:
      return cudaErrorInvalidValue;
    default:
      return cudaErrorUnknown;
  }
}

CUresult driver_error(errc code) {
  switch (code) {
    case errc::ok:
      return CUDA_SUCCESS;
    case errc::out_of_memory:
      return CUDA_ERROR_OUT_OF_MEMORY;
    case errc::invalid_argument:
      return CUDA_ERROR_INVALID_VALUE;
    default:
      return CUDA_ERROR_UNKNOWN;
  }
}

std::optional<result<void*>> strata_allocate(int device, std::size_t size, void* stream,
                                             bool async) {
  allocator* a = allocators().get(device);
  if (a == nullptr) return std::nullopt;
  try {
    return result<void*>(async ? a->malloc_async(size, stream) : a->malloc(size));
  } catch (const error& e) {
    return result<void*>(status{e.code(), e.what()});
  }
}

std::optional<errc> strata_free(int device, void* ptr, void* stream, bool async) {
  allocator* current = allocators().get(device);
  if (current == nullptr && !allocators().on()) return std::nullopt;
  const auto free_in = [&](allocator& a) {
    if (async) {
      a.free_async(ptr, stream);
    } else {
      a.free(ptr);
    }
  };
  if (current != nullptr) {
    // The common case: a pointer of the current device's allocator.
    const errc code = freed_by(*current, free_in);
    if (code != errc::invalid_argument) return code;
  }
  allocator* owner = allocators().owner_of(ptr);
  if (owner == nullptr) return std::nullopt;
  if (owner == current) return errc::invalid_argument;  // ours, not live: a double free
  return freed_by(*owner, free_in);
}

std::optional<result<memory_info>> strata_memory(int device) {
  allocator* a = allocators().get(device);
  if (a == nullptr) return std::nullopt;
  try {
    return result<memory_info>(a->available_memory());
  } catch (const error& e) {
    return result<memory_info>(status{e.code(), e.what()});
  }
}

}  // namespace strata::preload
