// The kernels in stream order.
//   - A device whose memory is host memory (`sim`): the host implementation
//     is queued as a host callback on the stream. It runs after everything
//     queued before it and before everything queued after, with real data.
//   - A GPU (`cuda`): the CUDA kernel is launched on the stream, from the
//     fatbin embedded in libstrata, loaded at the first launch.
// The arguments are checked at the call, and turned into the kernel's
// argument struct (kernel_arguments.hpp) there: both paths run the same
// struct. A pack of more than pack_batch tensors is several launches.
//
// Cost: one heap allocation per kernel queued on `sim` (its arguments, held
// until the stream runs it); none per launch on a GPU.
#include <algorithm>
#include <memory>
#include <mutex>

#include "argument_checks.hpp"
#include "gpu_kernels.hpp"
#include "host_runners.hpp"
#include "strata/kernels.hpp"

namespace strata {

namespace {

template <class Args>
struct queued_kernel {
  kernel_pool* pool;
  Args args;
  void (*run)(kernel_pool&, const Args&);
};

template <class Args>
void run_queued(void* arg) {
  const std::unique_ptr<queued_kernel<Args>> k(static_cast<queued_kernel<Args>*>(arg));
  k->run(*k->pool, k->args);
}

}  // namespace

struct stream_kernels::state {
  std::once_flag once;
  result<kernels::gpu_kernels> gpu{status{errc::not_supported, "not loaded"}};

  // Queues the kernel with `args` on `stream`: `run` on the host, or
  // `launch` on a GPU; on a timing-only device its modeled cost, `bytes`
  // (what it reads and writes) at the device's memory rate.
  template <class Args>
  status enqueue(device& dev, kernel_pool& pool, stream_handle stream, const Args& args,
                 void (*run)(kernel_pool&, const Args&),
                 status (*launch)(device&, const kernels::gpu_kernels&, stream_handle, const Args&),
                 double bytes) {
    if (dev.timing_only()) return dev.queue_modeled_kernel(stream, 0, bytes);
    if (dev.memory_is_host()) {
      auto k = std::make_unique<queued_kernel<Args>>(queued_kernel<Args>{&pool, args, run});
      if (auto s = dev.launch_host_fn(stream, &run_queued<Args>, k.get()); !s) return s;
      (void)k.release();  // run_queued owns it now
      return {};
    }
    std::call_once(once, [&] { gpu = kernels::load_gpu_kernels(dev); });
    if (!gpu) return gpu.error();
    return launch(dev, *gpu, stream, args);
  }
};

stream_kernels::stream_kernels(device& dev, kernel_pool& pool)
    : dev_(dev), pool_(pool), state_(std::make_unique<state>()) {}

stream_kernels::~stream_kernels() = default;

status stream_kernels::adam_step(stream_handle stream, const adam_tensors& t, const adam_options& o,
                                 std::uint64_t step) {
  if (auto s = kernels::check_adam(t, o, step); !s) return s;
  if (t.count == 0) return {};
  // fp32 parameters and both moments read and written, the gradient read,
  // the optional copy of the parameters written.
  const std::size_t element = 6 * sizeof(float) + dtype_size(t.grad_type) +
                              (t.params_out != nullptr ? dtype_size(t.out_type) : 0);
  return state_->enqueue(dev_, pool_, stream, kernels::adam_args_of(t, o, step), &kernels::run_adam,
                         &kernels::launch_adam, static_cast<double>(element * t.count));
}

status stream_kernels::cast_copy(stream_handle stream, void* dst, dtype to, const void* src,
                                 dtype from, std::size_t count) {
  if (auto s = kernels::check_cast(dst, to, src, from, count); !s) return s;
  if (count == 0 || (dst == src && from == to)) return {};
  return state_->enqueue(
      dev_, pool_, stream,
      kernels::cast_args{dst, src, count, static_cast<int>(to), static_cast<int>(from)},
      &kernels::run_cast, &kernels::launch_cast,
      static_cast<double>(count * (dtype_size(to) + dtype_size(from))));
}

status stream_kernels::pack_batches(stream_handle stream, const pack_entry* entries, std::size_t n,
                                    void* flat, bool unpack) {
  for (std::size_t first = 0; first < n; first += kernels::pack_batch) {
    const std::size_t count = std::min<std::size_t>(n - first, kernels::pack_batch);
    double bytes = 0;  // each tensor read once and written once
    for (std::size_t i = first; i < first + count; ++i) {
      bytes += 2.0 * static_cast<double>(entries[i].bytes);
    }
    if (auto s = state_->enqueue(dev_, pool_, stream,
                                 kernels::pack_batch_of(entries + first, count, flat, unpack),
                                 &kernels::run_pack, &kernels::launch_pack, bytes);
        !s) {
      return s;
    }
  }
  return {};
}

status stream_kernels::pack(stream_handle stream, const pack_entry* entries, std::size_t n,
                            void* flat, std::size_t flat_bytes) {
  if (auto s = kernels::check_pack("pack", entries, n, flat, flat_bytes); !s) return s;
  return pack_batches(stream, entries, n, flat, false);
}

status stream_kernels::unpack(stream_handle stream, const pack_entry* entries, std::size_t n,
                              const void* flat, std::size_t flat_bytes) {
  if (auto s = kernels::check_pack("unpack", entries, n, flat, flat_bytes); !s) return s;
  // The flat buffer is only read by an unpack.
  return pack_batches(stream, entries, n, const_cast<void*>(flat), true);
}

status stream_kernels::scale(stream_handle stream, float* x, float a, std::size_t count) {
  if (auto s = kernels::check_axpy("scale", x, x, count); !s) return s;
  if (count == 0) return {};
  return state_->enqueue(dev_, pool_, stream, kernels::axpy_args{x, nullptr, count, a},
                         &kernels::run_axpy, &kernels::launch_axpy,
                         2.0 * sizeof(float) * static_cast<double>(count));
}

status stream_kernels::axpy(stream_handle stream, float* y, float a, const float* x,
                            std::size_t count) {
  if (auto s = kernels::check_axpy("axpy", y, x, count); !s) return s;
  if (count == 0) return {};
  return state_->enqueue(dev_, pool_, stream, kernels::axpy_args{y, x, count, a},
                         &kernels::run_axpy, &kernels::launch_axpy,
                         3.0 * sizeof(float) * static_cast<double>(count));
}

}  // namespace strata
