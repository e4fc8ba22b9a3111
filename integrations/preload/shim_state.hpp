// What the preload shim's hooks share: allocation, free and memory info
// through the per-device allocators (configured from STRATA_CONF), and the
// translation of Strata's errors into CUDA's results.
//
// Thread safety: as device_allocators; the translations are pure.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <optional>

#include "strata/device.hpp"
#include "strata/error.hpp"

namespace strata::preload {

/// A Strata error as the runtime reports it.
cudaError_t runtime_error(errc code);
/// A Strata error as the driver reports it.
CUresult driver_error(errc code);

/// An allocation through Strata on device `device` (async: stream-ordered
/// on `stream`): nullopt while Strata is off (the hook passes the call
/// through), else the pointer or Strata's error.
std::optional<result<void*>> strata_allocate(int device, std::size_t size, void* stream,
                                             bool async);
/// A free through Strata: the allocator of `device` first, then whichever
/// owns `ptr` (a pointer freed while another device is current). nullopt
/// when no Strata allocator owns `ptr` (the hook passes it through); a
/// second free of a Strata pointer is invalid_argument.
std::optional<errc> strata_free(int device, void* ptr, void* stream, bool async);
/// What cudaMemGetInfo reports under Strata for `device`; nullopt while
/// Strata is off.
std::optional<result<memory_info>> strata_memory(int device);

}  // namespace strata::preload
