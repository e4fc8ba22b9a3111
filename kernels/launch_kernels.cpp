// Launching the CUDA kernels (cuda_kernels.cu) through the device's driver
// API: the fatbin embedded at build time (cuda_kernels_fatbin.cpp) is loaded
// once per stream_kernels object, and each launch passes the kernel's
// argument struct by value. Grids: 256 threads per block, at most 2048
// blocks for element-wise kernels and 1024 for pack (grid-stride loops
// cover the rest).
#include <algorithm>

#include "gpu_kernels.hpp"

namespace strata::kernels {

extern const unsigned char cuda_fatbin[];
extern const std::size_t cuda_fatbin_size;

namespace {

constexpr unsigned threads_per_block = 256;

launch_shape shape_for(std::size_t work_items, std::size_t per_block, unsigned max_blocks) {
  const std::size_t blocks = std::max<std::size_t>(1, (work_items + per_block - 1) / per_block);
  return {static_cast<unsigned>(std::min<std::size_t>(blocks, max_blocks)), threads_per_block};
}

template <class Args>
status launch(device& dev, kernel_handle kernel, stream_handle stream, launch_shape shape,
              const Args& a) {
  Args copy = a;  // the driver copies the value at the call
  void* params[] = {&copy};
  return dev.launch_kernel(stream, kernel, shape, params);
}

}  // namespace

result<gpu_kernels> load_gpu_kernels(device& dev) {
  auto module = dev.load_module(cuda_fatbin);
  if (!module) return module.error();
  gpu_kernels k;
  struct named {
    const char* name;
    kernel_handle* handle;
  };
  for (const named n : {named{"strata_adam", &k.adam}, named{"strata_cast", &k.cast},
                        named{"strata_pack", &k.pack}, named{"strata_axpy", &k.axpy}}) {
    auto h = dev.get_kernel(*module, n.name);
    if (!h) return h.error();
    *n.handle = *h;
  }
  return k;
}

status launch_adam(device& dev, const gpu_kernels& k, stream_handle stream, const adam_args& a) {
  return launch(dev, k.adam, stream, shape_for(a.count, threads_per_block, 2048), a);
}

status launch_cast(device& dev, const gpu_kernels& k, stream_handle stream, const cast_args& a) {
  return launch(dev, k.cast, stream, shape_for(a.count, threads_per_block, 2048), a);
}

status launch_pack(device& dev, const gpu_kernels& k, stream_handle stream, const pack_args& a) {
  return launch(dev, k.pack, stream, shape_for(a.total, pack_chunk_bytes, 1024), a);
}

status launch_axpy(device& dev, const gpu_kernels& k, stream_handle stream, const axpy_args& a) {
  return launch(dev, k.axpy, stream, shape_for(a.count, threads_per_block, 2048), a);
}

}  // namespace strata::kernels
