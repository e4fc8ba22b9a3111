// The CUDA kernels of one device: the embedded fatbin loaded with the
// device's load_module, and each kernel's handle. Launching one queues it on
// a stream with its argument struct (kernel_arguments.hpp) as its one
// parameter, over a bounded grid.
#pragma once

#include "kernel_arguments.hpp"
#include "strata/device.hpp"

namespace strata::kernels {

struct gpu_kernels {
  kernel_handle adam;
  kernel_handle cast;
  kernel_handle pack;
  kernel_handle axpy;
};

// Loads the embedded fatbin on `dev` and finds the kernels. Errors:
// not_supported when libstrata was built without the CUDA toolkit; the
// device's (no module support, an image the driver refuses).
result<gpu_kernels> load_gpu_kernels(device& dev);

status launch_adam(device& dev, const gpu_kernels& k, stream_handle stream, const adam_args& a);
status launch_cast(device& dev, const gpu_kernels& k, stream_handle stream, const cast_args& a);
status launch_pack(device& dev, const gpu_kernels& k, stream_handle stream, const pack_args& a);
status launch_axpy(device& dev, const gpu_kernels& k, stream_handle stream, const axpy_args& a);

}  // namespace strata::kernels
