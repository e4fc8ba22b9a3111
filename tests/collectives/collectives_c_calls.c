/* Compiled as C: strata/collectives.h and strata/gradients.h are valid C,
 * and these are calls as a C program makes them
 * (collectives_c_api_test.cpp uses them). */
#include "strata/gradients.h"

/* An fp32 sum all-reduce in place on the default stream. */
strata_status c_sum_in_place(strata_comm* c, float* x, size_t count) {
  return strata_comm_all_reduce(c, x, x, count, STRATA_F32, STRATA_REDUCE_SUM, NULL);
}

/* Marks every parameter ready in reverse order, then finishes the step. */
strata_status c_backward_done(strata_gradient_buckets* b, size_t params) {
  for (size_t p = params; p-- > 0;) {
    strata_status s = strata_gradient_buckets_mark_ready(b, p, NULL);
    if (s != STRATA_OK) return s;
  }
  return strata_gradient_buckets_finish(b, NULL);
}
