#include "shim_state.hpp"

namespace strata::preload {

integration::device_allocators& allocators() {
  static integration::device_allocators all("strata preload");
  return all;
}

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

}  // namespace strata::preload
