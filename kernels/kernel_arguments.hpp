// The kernels' arguments as plain structs, one per kernel, shared by the
// host kernels (their job), the CUDA kernels (their one parameter) and the
// code that launches them: the layout is the contract between the host
// compiler and nvcc, so it holds only pointers, sizes, ints and floats.
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata::kernels {

// Element types, as ints the CUDA kernels read (strata::dtype's order).
enum : int { type_f32 = 0, type_bf16 = 1, type_f16 = 2 };

// One Adam step: the buffers, and the fp32 scalars computed once in double
// (adam_host.cpp: adam_args_of).
struct adam_args {
  float* params;
  const void* grads;
  float* exp_avg;
  float* exp_avg_sq;
  float* max_exp_avg_sq;  // amsgrad only
  void* params_out;       // null: none
  std::size_t count;
  int grad_type;
  int out_type;
  int amsgrad;
  int l2;         // Adam with weight decay: g += wd * p
  int decoupled;  // AdamW with weight decay: p *= 1 - lr * wd
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float weight_decay;
  float decay_factor;
  float neg_step_size;  // -lr / (1 - beta1^step)
  float bias2_sqrt;     // sqrt(1 - beta2^step)
  float eps;
  float sign;  // -1 when maximizing
};

struct cast_args {
  void* dst;
  const void* src;
  std::size_t count;
  int to;
  int from;
};

// Tensors per pack launch (the parameter block stays far below CUDA's 4 KiB
// limit), and the bytes one block copies at a time.
constexpr int pack_batch = 64;
constexpr std::size_t pack_chunk_bytes = std::size_t{64} << 10;

struct pack_args {
  void* tensors[pack_batch];
  std::size_t bytes[pack_batch];
  std::size_t offsets[pack_batch];
  unsigned char* flat;
  std::size_t total;  // sum of bytes[0, n)
  int n;
  int unpack;  // 0: tensors -> flat; 1: flat -> tensors
};

// y = y + a * x, or y = y * a when x is null.
struct axpy_args {
  float* y;
  const float* x;
  std::size_t count;
  float a;
};

}  // namespace strata::kernels
