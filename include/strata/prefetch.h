/* Strata's C API for the prefetcher (docs/prefetch.md): buffers of a
 * residency manager (strata/residency.h) fetched ahead of the acquires that
 * need them, in the order the first step recorded. Conventions as in
 * strata.h: every function returns a strata_status, the calling thread's
 * last error message says why, sizes are bytes, streams are native handles.
 *
 * Present in libstrata when it was built with the tiers.
 *
 * Thread safety: every function may be called from any thread at any time,
 * except that strata_prefetcher_destroy must not race with other calls on
 * the same prefetcher. After destroy, calls with the old handle return
 * STRATA_ERROR_INVALID_ARGUMENT.
 */
#ifndef STRATA_PREFETCH_H
#define STRATA_PREFETCH_H

#include "strata/collectives.h"
#include "strata/residency.h"

/* NOLINTBEGIN(modernize-use-using) */

typedef struct strata_prefetcher strata_prefetcher;

/* A prefetcher over `residency`, configured by the prefetch keys of `conf`
 * in STRATA_CONF syntax (prefetch_bytes, prefetch_inflight, host_lookahead,
 * device_lookahead, reuse_distance; other keys are accepted and ignored);
 * NULL reads STRATA_CONF. It becomes the manager's eviction oracle and adds
 * the "prefetch" section to the allocator's stats. The residency manager
 * cannot be destroyed before it. Errors: INVALID_ARGUMENT (bad conf, a
 * destroyed manager). */
STRATA_C_API strata_status strata_prefetcher_create(strata_residency* residency, const char* conf,
                                                    strata_prefetcher** out);
STRATA_C_API strata_status strata_prefetcher_destroy(strata_prefetcher* p);

/* A training step begins (the first records the order of acquires) and
 * ends. INVALID_ARGUMENT for a begin without an end before it, or an end
 * without a begin. */
STRATA_C_API strata_status strata_prefetcher_begin_step(strata_prefetcher* p);
STRATA_C_API strata_status strata_prefetcher_end_step(strata_prefetcher* p);

/* strata_residency_acquire, then the buffers needed next are fetched
 * ahead. Errors as strata_residency_acquire's. */
STRATA_C_API strata_status strata_prefetcher_acquire(strata_prefetcher* p, uint64_t handle,
                                                     void* stream, void** out);
/* The same with an access mode (strata_residency_acquire_mode). */
STRATA_C_API strata_status strata_prefetcher_acquire_mode(strata_prefetcher* p, uint64_t handle,
                                                          void* stream, strata_access_mode mode,
                                                          void** out);
/* strata_residency_release. */
STRATA_C_API strata_status strata_prefetcher_release(strata_prefetcher* p, uint64_t handle,
                                                     void* stream);
/* strata_residency_acquire_host (same result and errors), recorded in the
 * order as a host hold: later steps read the buffer from NVMe into host
 * memory ahead of it (within host_lookahead), never to the device. */
STRATA_C_API strata_status strata_prefetcher_acquire_host(strata_prefetcher* p, uint64_t handle,
                                                          strata_access_mode mode, void** out);
/* strata_residency_release_host. */
STRATA_C_API strata_status strata_prefetcher_release_host(strata_prefetcher* p, uint64_t handle);
/* A hint: fetch `handle` to the device now, within the budgets. Not issuing
 * it (over budget, no room, already there) is not an error. Errors:
 * INVALID_ARGUMENT (unknown handle). */
STRATA_C_API strata_status strata_prefetcher_hint(strata_prefetcher* p, uint64_t handle);

/* Makes `handle` (this rank's shard, the same size on every rank) a
 * sharded parameter: acquiring it (read-only) returns the whole parameter,
 * all-gathered by `comm` on `comm_stream` as `type` elements, ahead of use
 * once the order is known (strata/prefetcher.hpp, docs/prefetch.md). The
 * prefetcher borrows `comm` until it is destroyed. Errors:
 * INVALID_ARGUMENT (unknown handle, already sharded, a shard that is not
 * whole elements, a null or destroyed comm, a comm on another device). */
STRATA_C_API strata_status strata_prefetcher_add_sharded(strata_prefetcher* p, uint64_t handle,
                                                         strata_comm* comm, void* comm_stream,
                                                         strata_dtype type);

/* The prefetcher's counters as one JSON object, freed with
 * strata_string_free. */
STRATA_C_API strata_status strata_prefetcher_stats_json(strata_prefetcher* p, char** out);

/* NOLINTEND(modernize-use-using) */

#endif /* STRATA_PREFETCH_H */
