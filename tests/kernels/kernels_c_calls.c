/* Compiled as C: strata/kernels.h is valid C, and these are calls as a C
 * program makes them (kernels_c_api_test.cpp uses them). */
#include "strata/kernels.h"

/* One AdamW step of `n` fp32 parameters with a bf16 copy, on the host. */
strata_status c_adamw_step(strata_kernels* k, float* p, const float* g, float* m, float* v,
                           uint16_t* out, size_t n) {
  strata_adam_options o = strata_adam_defaults();
  o.weight_decay = 0.01;
  o.decoupled_weight_decay = 1;
  strata_adam_tensors t = {p, g, STRATA_F32, m, v, NULL, out, STRATA_BF16, n};
  return strata_adam_step_host(k, &t, &o, 1);
}

/* A cast with a dtype that is no strata_dtype, as C allows. */
strata_status c_cast_with_bad_dtype(strata_kernels* k, uint16_t* dst, const float* src, size_t n) {
  return strata_cast_copy_host(k, dst, (strata_dtype)7, src, STRATA_F32, n);
}
