// The kernels on a CUDA GPU, compiled by nvcc into a fatbin (sm_80, sm_90,
// and PTX for later GPUs) that libstrata embeds and loads through the driver
// API (cuModuleLoadData): libstrata links no CUDA runtime. Each kernel does
// what its host twin does (the *_host.cpp files), element by element in the
// same order of fp32 operations; launch_kernels.cpp passes the arguments
// in the layouts of kernel_arguments.hpp.
//
// Grids are grid-stride loops over a bounded number of blocks; the pack
// kernel takes up to pack_batch tensors per launch (multi-tensor-apply
// style) and spreads their 64 KiB chunks over its blocks.
#include <cstdint>

#include "float_formats.hpp"
#include "kernel_arguments.hpp"

namespace {

using strata::kernels::bf16_to_f32;
using strata::kernels::f16_to_f32;
using strata::kernels::f32_to_bf16;
using strata::kernels::f32_to_f16;

__device__ float load(const void* base, std::size_t i, int type) {
  if (type == strata::kernels::type_f32) return static_cast<const float*>(base)[i];
  const std::uint16_t h = static_cast<const std::uint16_t*>(base)[i];
  return type == strata::kernels::type_bf16 ? bf16_to_f32(h) : f16_to_f32(h);
}

__device__ void store(void* base, std::size_t i, int type, float v) {
  if (type == strata::kernels::type_f32) {
    static_cast<float*>(base)[i] = v;
  } else {
    static_cast<std::uint16_t*>(base)[i] =
        type == strata::kernels::type_bf16 ? f32_to_bf16(v) : f32_to_f16(v);
  }
}

__device__ std::size_t first_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ std::size_t stride() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

}  // namespace

// The explicit __fmul_rn/__fadd_rn/__fdiv_rn/__fsqrt_rn keep nvcc from
// contracting a multiply and an add into an FMA, so the results are those
// of the host kernels.
extern "C" __global__ void strata_adam(strata::kernels::adam_args a) {
  using strata::kernels::adam_args;
  for (std::size_t i = first_index(); i < a.count; i += stride()) {
    float g = __fmul_rn(a.sign, load(a.grads, i, a.grad_type));
    float p = a.params[i];
    if (a.decoupled) p = __fmul_rn(p, a.decay_factor);
    if (a.l2) g = __fadd_rn(g, __fmul_rn(a.weight_decay, p));
    const float m = __fadd_rn(__fmul_rn(a.exp_avg[i], a.beta1), __fmul_rn(a.one_minus_beta1, g));
    const float v = __fadd_rn(__fmul_rn(a.exp_avg_sq[i], a.beta2),
                              __fmul_rn(__fmul_rn(a.one_minus_beta2, g), g));
    float vd = v;
    if (a.amsgrad) {
      vd = a.max_exp_avg_sq[i] > v ? a.max_exp_avg_sq[i] : v;
      a.max_exp_avg_sq[i] = vd;
    }
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vd), a.bias2_sqrt), a.eps);
    p = __fadd_rn(p, __fmul_rn(a.neg_step_size, __fdiv_rn(m, denom)));
    a.exp_avg[i] = m;
    a.exp_avg_sq[i] = v;
    a.params[i] = p;
    if (a.params_out != nullptr) store(a.params_out, i, a.out_type, p);
  }
}

extern "C" __global__ void strata_cast(strata::kernels::cast_args a) {
  for (std::size_t i = first_index(); i < a.count; i += stride()) {
    store(a.dst, i, a.to, load(a.src, i, a.from));
  }
}

extern "C" __global__ void strata_pack(strata::kernels::pack_args a) {
  // Chunk c of the batch is bytes [c * chunk, (c + 1) * chunk) of the
  // concatenated tensors; blocks take chunks in turn.
  constexpr std::size_t chunk = strata::kernels::pack_chunk_bytes;
  for (std::size_t c = blockIdx.x; c * chunk < a.total; c += gridDim.x) {
    const std::size_t lo = c * chunk;
    const std::size_t hi = lo + chunk < a.total ? lo + chunk : a.total;
    std::size_t at = 0;
    for (int t = 0; t < a.n && at < hi; at += a.bytes[t], ++t) {
      const std::size_t from = lo > at ? lo : at;
      const std::size_t to = hi < at + a.bytes[t] ? hi : at + a.bytes[t];
      if (from >= to) continue;
      unsigned char* tensor = static_cast<unsigned char*>(a.tensors[t]) + (from - at);
      unsigned char* flat = a.flat + a.offsets[t] + (from - at);
      unsigned char* dst = a.unpack ? tensor : flat;
      const unsigned char* src = a.unpack ? flat : tensor;
      for (std::size_t k = threadIdx.x; k < to - from; k += blockDim.x) dst[k] = src[k];
    }
  }
}

extern "C" __global__ void strata_axpy(strata::kernels::axpy_args a) {
  for (std::size_t i = first_index(); i < a.count; i += stride()) {
    a.y[i] = a.x == nullptr ? __fmul_rn(a.y[i], a.a) : __fadd_rn(a.y[i], __fmul_rn(a.a, a.x[i]));
  }
}
