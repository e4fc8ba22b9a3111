// What the preload shim's hooks share: the per-device allocators and the
// translation of Strata's errors into CUDA's results.
//
// Thread safety: as device_allocators; the translations are pure.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "device_allocators.hpp"
#include "strata/error.hpp"

namespace strata::preload {

/// The shim's allocators, one per device (configured from STRATA_CONF).
integration::device_allocators& allocators();

/// A Strata error as the runtime reports it.
cudaError_t runtime_error(errc code);
/// A Strata error as the driver reports it.
CUresult driver_error(errc code);

/// Frees `ptr` through whichever allocator owns it: `free_in(a)` on the
/// current device's allocator first, then on the owner. Returns false when
/// no allocator owns `ptr` (the caller passes it through); `code` is then
/// untouched, else errc::ok or the error.
template <class FreeIn>
bool free_owned(allocator* current, const void* ptr, FreeIn free_in, errc& code) {
  if (current != nullptr) {
    try {
      free_in(*current);
      code = errc::ok;
      return true;
    } catch (const error& e) {
      if (e.code() != errc::invalid_argument) {
        code = e.code();
        return true;
      }
    }
  }
  allocator* owner = allocators().owner_of(ptr);
  if (owner == nullptr) return false;
  if (owner == current) {
    code = errc::invalid_argument;  // ours, but not live: a double free
    return true;
  }
  try {
    free_in(*owner);
    code = errc::ok;
  } catch (const error& e) {
    code = e.code();
  }
  return true;
}

}  // namespace strata::preload
