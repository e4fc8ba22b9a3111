/* Strata's C API for bucketed gradient reduction (strata/gradient_buckets.hpp
 * has the full contract; docs/gradients.md): the gradients of a model's
 * parameters in one contiguous device buffer, all-reduced in buckets on a
 * communication stream as backward marks them ready. Conventions as in
 * strata.h: every function returns a strata_status, the calling thread's
 * last error message says why, streams are native handles.
 *
 * Buckets borrow their communicator: it cannot be destroyed before them.
 *
 * Thread safety: every function may be called from any thread (calls on one
 * handle are serialized inside), except that strata_gradient_buckets_destroy
 * must not race with other calls on the same handle; after it, calls with
 * the old handle return INVALID_ARGUMENT.
 */
#ifndef STRATA_GRADIENTS_H
#define STRATA_GRADIENTS_H

/* NOLINTBEGIN(modernize-use-using) */

#include "strata/collectives.h"

typedef struct strata_gradient_buckets strata_gradient_buckets;

/* One parameter's gradient: `count` elements of `type`. */
typedef struct strata_gradient_param {
  size_t count;
  strata_dtype type;
} strata_gradient_param;

/* Buckets over the gradients of `params[0..n)` on `comm`'s device, reduced
 * on `comm_stream` with the average. `conf` (STRATA_CONF syntax; NULL reads
 * STRATA_CONF) sets first_bucket_bytes, bucket_bytes, buckets_inflight,
 * bucket_reduce_dtype and gradient_as_bucket_view; other keys are accepted
 * and ignored. Every rank creates its buckets alike. Errors:
 * INVALID_ARGUMENT (null or destroyed comm, no or bad parameters, bad
 * conf), OUT_OF_MEMORY, the communicator's. */
STRATA_C_API strata_status strata_gradient_buckets_create(strata_comm* comm,
                                                          const strata_gradient_param* params,
                                                          size_t n, void* comm_stream,
                                                          const char* conf,
                                                          strata_gradient_buckets** out);
/* Waits for the communication stream, then frees the buffers. */
STRATA_C_API strata_status strata_gradient_buckets_destroy(strata_gradient_buckets* b);

/* Parameter `p`'s gradient (device memory; it moves at the rebuild after
 * the first step). INVALID_ARGUMENT for an unknown `p`. */
STRATA_C_API strata_status strata_gradient_buckets_grad(strata_gradient_buckets* b, size_t p,
                                                        void** out);
/* Zeroes every gradient in `stream` order, after queued reductions. */
STRATA_C_API strata_status strata_gradient_buckets_zero(strata_gradient_buckets* b, void* stream);
/* Gradient `p` is complete once `producer` reaches this point. */
STRATA_C_API strata_status strata_gradient_buckets_mark_ready(strata_gradient_buckets* b, size_t p,
                                                              void* producer);
/* Ends the step: `consumer` waits for every bucket's reduction. */
STRATA_C_API strata_status strata_gradient_buckets_finish(strata_gradient_buckets* b,
                                                          void* consumer);
/* Nonzero: steps accumulate without reducing (gradient accumulation). */
STRATA_C_API strata_status strata_gradient_buckets_no_sync(strata_gradient_buckets* b, int on);
/* The counters as one JSON object, freed with strata_string_free. */
STRATA_C_API strata_status strata_gradient_buckets_stats_json(strata_gradient_buckets* b,
                                                              char** out);

/* NOLINTEND(modernize-use-using) */

#endif /* STRATA_GRADIENTS_H */
