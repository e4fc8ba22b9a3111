// Built without the CUDA toolkit: there are no CUDA kernels to load, and a
// kernel queued on a GPU says so.
#include "gpu_kernels.hpp"

namespace strata::kernels {

namespace {

status none() {
  return {errc::not_supported,
          "the CUDA kernels are not in this build of libstrata (configured without the CUDA "
          "toolkit); the host kernels run on host memory"};
}

}  // namespace

result<gpu_kernels> load_gpu_kernels(device& /*dev*/) {
  return none();
}
status launch_adam(device&, const gpu_kernels&, stream_handle, const adam_args&) {
  return none();
}
status launch_cast(device&, const gpu_kernels&, stream_handle, const cast_args&) {
  return none();
}
status launch_pack(device&, const gpu_kernels&, stream_handle, const pack_args&) {
  return none();
}
status launch_axpy(device&, const gpu_kernels&, stream_handle, const axpy_args&) {
  return none();
}

}  // namespace strata::kernels
