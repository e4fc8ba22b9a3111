/* Strata's C API for the kernels over training state (strata/kernels.hpp
 * has the full contract): the Adam/AdamW step, cast-copy between fp32, bf16
 * and fp16, multi-tensor pack/unpack, scale and axpy. Conventions as in
 * strata.h: every function returns a strata_status, the calling thread's
 * last error message says why, sizes are bytes unless named counts (in
 * elements), streams are native handles (NULL: the default stream).
 *
 * Each kernel has a host form (`_host`: runs now, on the calling thread and
 * the handle's threads, on host memory) and a stream-ordered form
 * (`_async`: queued on a stream of the allocator's device given at create;
 * on the sim device the host code runs in stream order, on a GPU the CUDA
 * kernel).
 *
 * Thread safety: every function may be called from any thread, except that
 * strata_kernels_destroy must not race with other calls on the same handle.
 * After destroy, calls with the old handle return INVALID_ARGUMENT.
 */
#ifndef STRATA_KERNELS_H
#define STRATA_KERNELS_H

/* NOLINTBEGIN(modernize-use-using) */

#include "strata/strata.h" /* size_t, uint64_t */

typedef struct strata_kernels strata_kernels;

typedef enum strata_dtype { STRATA_F32 = 0, STRATA_BF16 = 1, STRATA_F16 = 2 } strata_dtype;

/* PyTorch's Adam hyperparameters; strata_adam_defaults() fills PyTorch's
 * defaults. Nonzero ints are true. */
typedef struct strata_adam_options {
  double lr;
  double beta1;
  double beta2;
  double eps;
  double weight_decay;
  int decoupled_weight_decay; /* AdamW */
  int maximize;
  int amsgrad;
} strata_adam_options;

/* The buffers of one step, `count` elements each; max_exp_avg_sq only with
 * amsgrad; params_out optional (NULL), written as out_type. */
typedef struct strata_adam_tensors {
  float* params;
  const void* grads;
  strata_dtype grad_type;
  float* exp_avg;
  float* exp_avg_sq;
  float* max_exp_avg_sq;
  void* params_out;
  strata_dtype out_type;
  size_t count;
} strata_adam_tensors;

typedef struct strata_pack_entry {
  void* tensor;
  size_t bytes;
  size_t offset; /* in the flat buffer */
} strata_pack_entry;

STRATA_C_API strata_adam_options strata_adam_defaults(void);

/* A kernels handle with `threads` host threads in all (0: one per hardware
 * thread). With a non-NULL `allocator`, the _async forms queue on its
 * device's streams (destroy the handle before the allocator); with NULL,
 * only the _host forms work. */
STRATA_C_API strata_status strata_kernels_create(strata_allocator* allocator, unsigned threads,
                                                 strata_kernels** out);
/* Waits for the allocator's device (kernels still queued run on the
 * handle's threads), then frees the handle. */
STRATA_C_API strata_status strata_kernels_destroy(strata_kernels* k);

/* `step` is the step number after this update (1 for the first). */
STRATA_C_API strata_status strata_adam_step_host(strata_kernels* k, const strata_adam_tensors* t,
                                                 const strata_adam_options* o, uint64_t step);
STRATA_C_API strata_status strata_adam_step_async(strata_kernels* k, void* stream,
                                                  const strata_adam_tensors* t,
                                                  const strata_adam_options* o, uint64_t step);
STRATA_C_API strata_status strata_cast_copy_host(strata_kernels* k, void* dst, strata_dtype to,
                                                 const void* src, strata_dtype from, size_t count);
STRATA_C_API strata_status strata_cast_copy_async(strata_kernels* k, void* stream, void* dst,
                                                  strata_dtype to, const void* src,
                                                  strata_dtype from, size_t count);
STRATA_C_API strata_status strata_pack_host(strata_kernels* k, const strata_pack_entry* entries,
                                            size_t n, void* flat, size_t flat_bytes);
STRATA_C_API strata_status strata_pack_async(strata_kernels* k, void* stream,
                                             const strata_pack_entry* entries, size_t n, void* flat,
                                             size_t flat_bytes);
STRATA_C_API strata_status strata_unpack_host(strata_kernels* k, const strata_pack_entry* entries,
                                              size_t n, const void* flat, size_t flat_bytes);
STRATA_C_API strata_status strata_unpack_async(strata_kernels* k, void* stream,
                                               const strata_pack_entry* entries, size_t n,
                                               const void* flat, size_t flat_bytes);
/* x *= a; y += a * x (fp32, `count` elements). */
STRATA_C_API strata_status strata_scale_host(strata_kernels* k, float* x, float a, size_t count);
STRATA_C_API strata_status strata_scale_async(strata_kernels* k, void* stream, float* x, float a,
                                              size_t count);
STRATA_C_API strata_status strata_axpy_host(strata_kernels* k, float* y, float a, const float* x,
                                            size_t count);
STRATA_C_API strata_status strata_axpy_async(strata_kernels* k, void* stream, float* y, float a,
                                             const float* x, size_t count);

/* NOLINTEND(modernize-use-using) */

#endif /* STRATA_KERNELS_H */
