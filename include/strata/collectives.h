/* Strata's C API for collectives (strata/communicator.hpp and
 * strata/nccl.hpp have the full contract; docs/collectives.md): all-reduce,
 * reduce-scatter, all-gather and broadcast between the ranks of a job, in
 * stream order, over the `local` communicator (every rank a sim device of
 * this process) or the `nccl` one (NCCL loaded at run time). Conventions as
 * in strata.h: every function returns a strata_status, the calling thread's
 * last error message says why, counts are elements, streams are native
 * handles (NULL: the default stream).
 *
 * A communicator borrows the allocator it was made on: the allocator
 * cannot be destroyed before it (INVALID_ARGUMENT).
 *
 * Thread safety: one communicator (one rank) is called by one thread at a
 * time, as an NCCL communicator; different ranks' communicators may be
 * called concurrently; strata_comm_async_error, _rank and _size from any
 * thread. strata_comm_destroy must not race with other calls on the same
 * handle; after it, calls with the old handle return INVALID_ARGUMENT.
 */
#ifndef STRATA_COLLECTIVES_H
#define STRATA_COLLECTIVES_H

/* NOLINTBEGIN(modernize-use-using) */

#include "strata/kernels.h" /* strata_dtype */
#include "strata/strata.h"

typedef struct strata_comm strata_comm;

typedef enum strata_reduce_op {
  STRATA_REDUCE_SUM = 0, /* the sum over ranks */
  STRATA_REDUCE_AVG = 1  /* the sum divided by the number of ranks */
} strata_reduce_op;

/* Options of the local communicators (strata::local_comm_options). */
typedef struct strata_local_comm_options {
  int64_t timeout_ms; /* how long a collective waits for the other ranks (> 0) */
  double link_gbps;   /* modeled link rate between devices, GB/s; 0: none, else 1e-3 to 1e6 */
  double latency_us;  /* modeled latency per collective, 0 to 1e6 us */
} strata_local_comm_options;

/* The defaults: 60 s, no modeled link. */
STRATA_C_API strata_local_comm_options strata_local_comm_defaults(void);

/* `n` local communicators: out[r] is rank r, on allocators[r]'s device
 * (distinct sim devices). `options` NULL: the defaults. Errors:
 * INVALID_ARGUMENT (null or destroyed allocators, n < 1, a repeated
 * device, bad options), NOT_SUPPORTED (a device the host cannot read). */
STRATA_C_API strata_status strata_comm_create_local(strata_allocator* const* allocators, int n,
                                                    const strata_local_comm_options* options,
                                                    strata_comm** out);

/* NCCL's unique id: 128 bytes made once (by one rank) and given to every
 * rank. Errors: NOT_SUPPORTED (no usable NCCL), COMM. */
STRATA_C_API strata_status strata_nccl_unique_id(unsigned char id[128]);
/* Rank `rank` of `size` on `allocator`'s device (a `cuda` device) from
 * the id; blocks until every rank joined. Errors: INVALID_ARGUMENT,
 * NOT_SUPPORTED (no usable NCCL), COMM (NCCL's message). */
STRATA_C_API strata_status strata_comm_create_nccl(strata_allocator* allocator, int rank, int size,
                                                   const unsigned char id[128], strata_comm** out);
/* The same from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
 * MASTER_ADDR, MASTER_PORT): rank 0 serves the id over TCP. Errors: as
 * above, INVALID_ARGUMENT naming a missing variable, COMM for a
 * failed bootstrap. */
STRATA_C_API strata_status strata_comm_create_nccl_from_env(strata_allocator* allocator,
                                                            strata_comm** out);

/* Leaves the group; queued collectives still run (synchronize their
 * streams first). INVALID_ARGUMENT while gradient buckets or a prefetcher
 * use it. */
STRATA_C_API strata_status strata_comm_destroy(strata_comm* c);
STRATA_C_API strata_status strata_comm_rank(strata_comm* c, int* rank);
STRATA_C_API strata_status strata_comm_size(strata_comm* c, int* size);

/* The collectives (NCCL's semantics; strata/communicator.hpp). `count`:
 * elements each rank sends (all-reduce, all-gather, broadcast) or receives
 * (reduce-scatter). */
STRATA_C_API strata_status strata_comm_all_reduce(strata_comm* c, const void* send, void* recv,
                                                  size_t count, strata_dtype type,
                                                  strata_reduce_op op, void* stream);
STRATA_C_API strata_status strata_comm_reduce_scatter(strata_comm* c, const void* send, void* recv,
                                                      size_t recv_count, strata_dtype type,
                                                      strata_reduce_op op, void* stream);
STRATA_C_API strata_status strata_comm_all_gather(strata_comm* c, const void* send, void* recv,
                                                  size_t send_count, strata_dtype type,
                                                  void* stream);
STRATA_C_API strata_status strata_comm_broadcast(strata_comm* c, const void* send, void* recv,
                                                 size_t count, strata_dtype type, int root,
                                                 void* stream);
/* Group calls (ncclGroupStart/End). */
STRATA_C_API strata_status strata_comm_group_start(strata_comm* c);
STRATA_C_API strata_status strata_comm_group_end(strata_comm* c);
/* Buffer registration (ncclCommRegister); NOT_SUPPORTED on NCCL < 2.19. */
STRATA_C_API strata_status strata_comm_register(strata_comm* c, void* ptr, size_t bytes,
                                                uint64_t* handle);
STRATA_C_API strata_status strata_comm_deregister(strata_comm* c, uint64_t handle);
/* STRATA_OK, or the COMM the communicator failed with. Never blocks. */
STRATA_C_API strata_status strata_comm_async_error(strata_comm* c);

/* NOLINTEND(modernize-use-using) */

#endif /* STRATA_COLLECTIVES_H */
