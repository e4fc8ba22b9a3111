// The host kernels run over their argument structs (kernel_arguments.hpp):
// what the public *_host functions call once the arguments are checked, and
// what the test stand-in for the CUDA driver runs when a Strata kernel is
// launched on it. The arguments must already be valid.
#pragma once

#include "kernel_arguments.hpp"
#include "strata/kernels.hpp"

namespace strata::kernels {

void run_adam(kernel_pool& pool, const adam_args& a);
void run_cast(kernel_pool& pool, const cast_args& a);
void run_pack(kernel_pool& pool, const pack_args& a);
void run_axpy(kernel_pool& pool, const axpy_args& a);

}  // namespace strata::kernels
