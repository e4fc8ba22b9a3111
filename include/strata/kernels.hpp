// Kernels over training state that Strata holds: the Adam/AdamW optimizer
// step, cast-copy between fp32, bf16 and fp16, multi-tensor pack/unpack (the
// gradient-bucket flatten), and scale/accumulate.
//
// Two ways to run them:
//   - on the host, now: the `*_host` functions, over a `kernel_pool` of
//     threads the caller sizes. No heap allocation per call.
//   - in stream order: `stream_kernels` queues a kernel on a device stream.
//     On the `sim` device the host implementation runs as a host callback on
//     that stream (after the copies and kernels queued before it, before the
//     ones queued after). On the `cuda` device the CUDA kernel is launched:
//     nvcc builds them into a fatbin (sm_80, sm_90, PTX) that libstrata
//     embeds and loads through the driver API at the first launch.
//
// On a timing-only device (`sim:...,data=none`) `stream_kernels` checks the
// arguments and queues the kernel's modeled cost instead
// (`device::queue_modeled_kernel`): these kernels are memory-bound, so the
// cost is the bytes they read and write at the device's memory rate.
//
// Memory: the host functions touch their buffers with the CPU: pageable or
// pinned host memory, or `sim` device memory (host memory). Through
// `stream_kernels` on `sim` the same holds; on `cuda` the buffers must be
// device memory or pinned host memory (mapped, as cuMemHostAlloc gives);
// either way they must stay alive and untouched by the host until the
// stream has run the kernel.
//
// Numerics (tests/kernels/kernels_host_test.cpp checks them against a plain
// scalar reference): casts round to nearest even, keep NaN a NaN (quiet) and
// infinities, and overflow to infinity as the hardware does; fp16
// subnormals are exact. The Adam step follows PyTorch's single-tensor Adam
// (`torch.optim.Adam`/`AdamW`, foreach=False) operation by operation in
// fp32; its results are within 4 ulp of the scalar reference (the vector
// units may contract a multiply and an add).
//
// Errors: invalid_argument for null buffers with a nonzero count, a step of
// 0, an amsgrad step without its buffer, overlapping pack regions; nothing
// is written then.
//
// Thread safety: a `kernel_pool` runs one call at a time (concurrent calls
// wait their turn); the `*_host` functions may be called from any thread.
// Every `stream_kernels` call may be made from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "strata/device.hpp"
#include "strata/error.hpp"
#include "strata/export.hpp"
#include "strata/kernels.h"

namespace strata {

/// Element types of the kernels.
enum class dtype : std::uint8_t {
  f32,   ///< IEEE binary32
  bf16,  ///< bfloat16: the top half of a binary32
  f16,   ///< IEEE binary16
};
/// Bytes per element of `t`.
constexpr std::size_t dtype_size(dtype t) noexcept {
  return t == dtype::f32 ? 4 : 2;
}

/// A fixed set of threads that host kernels split their work over. The
/// calling thread works too: a pool of N threads starts N - 1 workers.
class STRATA_API kernel_pool {
 public:
  /// `threads` in all, the caller included; 0 means one per hardware
  /// thread. Errors: invalid_argument above 1024; the system's when a
  /// thread cannot be started.
  static result<std::unique_ptr<kernel_pool>> create(unsigned threads = 0);
  kernel_pool(const kernel_pool&) = delete;
  kernel_pool& operator=(const kernel_pool&) = delete;
  kernel_pool(kernel_pool&&) = delete;
  kernel_pool& operator=(kernel_pool&&) = delete;
  /// Stops and joins the workers. No call may be running.
  ~kernel_pool();

  [[nodiscard]] unsigned threads() const noexcept;

  /// A piece of work: `body(context, begin, end)` over a part of [0, n).
  using range_fn = void (*)(void* context, std::size_t begin, std::size_t end);
  /// Runs `body` over [0, n) in parts of whole multiples of `grain` (the
  /// last part may be shorter), spread over the pool; returns when every
  /// part is done. No allocation. Parts may run in any order and at once.
  void parallel_for(std::size_t n, std::size_t grain, range_fn body, void* context);

 private:
  struct state;
  explicit kernel_pool(std::unique_ptr<state> s);
  std::unique_ptr<state> s_;
};

/// The hyperparameters of one Adam/AdamW step (PyTorch's names and
/// defaults). Doubles, as Python's floats are: the derived scalars (1 -
/// beta1, the bias corrections, the step size) are computed in double and
/// rounded to fp32 once, as PyTorch does.
struct adam_options {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  /// false: Adam's L2 penalty (grad += weight_decay * param); true: AdamW's
  /// decoupled decay (param *= 1 - lr * weight_decay).
  bool decoupled_weight_decay = false;
  bool maximize = false;
  bool amsgrad = false;
};

/// The buffers of one Adam step: `count` elements each.
struct adam_tensors {
  float* params = nullptr;          ///< fp32 master parameters, updated in place
  const void* grads = nullptr;      ///< gradients of `grad_type`, read only
  dtype grad_type = dtype::f32;     ///< f32, bf16 or f16 (converted on the fly)
  float* exp_avg = nullptr;         ///< first moment, updated
  float* exp_avg_sq = nullptr;      ///< second moment, updated
  float* max_exp_avg_sq = nullptr;  ///< amsgrad's running maximum (amsgrad only)
  void* params_out = nullptr;       ///< optional: the new parameters again, as `out_type`
  dtype out_type = dtype::bf16;     ///< f32, bf16 or f16
  std::size_t count = 0;
};

/// One Adam/AdamW step. `step` is the step number after this update (1 for
/// the first, as PyTorch's state["step"]). Buffers must not overlap, except
/// `params_out` may be `params` when `out_type` is f32 (a no-op copy).
STRATA_API status adam_step_host(kernel_pool& pool, const adam_tensors& t, const adam_options& o,
                                 std::uint64_t step);

/// Converts `count` elements of `src` (type `from`) into `dst` (type `to`).
/// `dst` and `src` must not overlap unless they are the same buffer and
/// `from == to` (a no-op), and each must be aligned to its element size.
/// Errors: invalid_argument (null, misaligned or overlapping buffers, an
/// unknown dtype, a count whose bytes overflow).
STRATA_API status cast_copy_host(kernel_pool& pool, void* dst, dtype to, const void* src,
                                 dtype from, std::size_t count);

/// One tensor of a pack: `bytes` at `tensor`, at `offset` in the flat buffer.
struct pack_entry {
  void* tensor = nullptr;
  std::size_t bytes = 0;
  std::size_t offset = 0;
};
/// Copies every tensor into `flat` at its offset, in one call. Regions in
/// `flat` must not overlap one another, nor any tensor. `flat_bytes` bounds
/// the offsets (invalid_argument if an entry ends past it).
STRATA_API status pack_host(kernel_pool& pool, const pack_entry* entries, std::size_t n, void* flat,
                            std::size_t flat_bytes);
/// The reverse: copies each tensor's region of `flat` back into the tensor.
/// The tensors, which it writes, must not overlap one another either.
STRATA_API status unpack_host(kernel_pool& pool, const pack_entry* entries, std::size_t n,
                              const void* flat, std::size_t flat_bytes);

/// x *= a over `count` fp32 elements (gradient averaging).
STRATA_API status scale_host(kernel_pool& pool, float* x, float a, std::size_t count);
/// y += a * x over `count` fp32 elements (gradient accumulation). `x` and
/// `y` must not overlap unless they are the same buffer.
STRATA_API status axpy_host(kernel_pool& pool, float* y, float a, const float* x,
                            std::size_t count);

/// The kernels above, queued in stream order on a device's streams.
class STRATA_API stream_kernels {
 public:
  /// `dev` and `pool` (used on `sim` only) must outlive this object and
  /// every kernel it queued.
  stream_kernels(device& dev, kernel_pool& pool);
  stream_kernels(const stream_kernels&) = delete;
  stream_kernels& operator=(const stream_kernels&) = delete;
  stream_kernels(stream_kernels&&) = delete;
  stream_kernels& operator=(stream_kernels&&) = delete;
  ~stream_kernels();

  /// As the host functions, queued on `stream`: the arguments are checked
  /// now (errors: the host function's; the device's when the stream cannot
  /// take the work; on a GPU, not_supported when libstrata was built
  /// without the CUDA toolkit, or the driver's when it refuses the
  /// kernels); the buffers are read and written when the stream reaches the
  /// kernel. Pack entries are copied at the call.
  status adam_step(stream_handle stream, const adam_tensors& t, const adam_options& o,
                   std::uint64_t step);
  status cast_copy(stream_handle stream, void* dst, dtype to, const void* src, dtype from,
                   std::size_t count);
  status pack(stream_handle stream, const pack_entry* entries, std::size_t n, void* flat,
              std::size_t flat_bytes);
  status unpack(stream_handle stream, const pack_entry* entries, std::size_t n, const void* flat,
                std::size_t flat_bytes);
  status scale(stream_handle stream, float* x, float a, std::size_t count);
  status axpy(stream_handle stream, float* y, float a, const float* x, std::size_t count);

 private:
  struct state;  // the CUDA kernels, loaded at the first launch
  status pack_batches(stream_handle stream, const pack_entry* entries, std::size_t n, void* flat,
                      bool unpack);
  device& dev_;
  kernel_pool& pool_;
  std::unique_ptr<state> state_;
};

namespace c_api {
/// The dtype a C caller named (by reference: copying an out-of-range enum
/// is already undefined). Errors: invalid_argument (not a strata_dtype).
STRATA_API result<dtype> dtype_of(const strata_dtype& type);
}  // namespace c_api

}  // namespace strata
