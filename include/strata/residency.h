/* Strata's C API for the offload tiers: buffers that live on the device when
 * in use and move to pinned host memory, then to NVMe, when device memory
 * is needed (docs/tiers.md). Conventions as in strata.h: every function
 * returns a strata_status, the calling thread's last error message says
 * why, sizes are bytes, streams are native handles (NULL: the default
 * stream).
 *
 * Present in libstrata when it was built with the tiers (liburing found;
 * docs/building.md).
 *
 * Thread safety: every function may be called from any thread at any time,
 * except that strata_residency_destroy must not race with other calls on
 * the same manager. After destroy, calls with the old handle return
 * STRATA_ERROR_INVALID_ARGUMENT.
 */
#ifndef STRATA_RESIDENCY_H
#define STRATA_RESIDENCY_H

/* NOLINTBEGIN(modernize-use-using) */

#include "strata/strata.h"

typedef struct strata_residency strata_residency;

typedef enum strata_buffer_kind {
  STRATA_BUFFER_PARAMETER = 0,
  STRATA_BUFFER_GRADIENT = 1,
  STRATA_BUFFER_OPTIMIZER_STATE = 2,
  STRATA_BUFFER_OTHER = 3
} strata_buffer_kind;

typedef enum strata_residency_policy {
  STRATA_EVICTABLE = 0,        /* may be spilled while released, to host memory and NVMe */
  STRATA_PINNED_ON_DEVICE = 1, /* never spilled */
  STRATA_HOST_ONLY = 2,        /* may be spilled to host memory, never to NVMe */
  STRATA_NVME_HOME = 3         /* written to NVMe at its last release (needs nvme_dir) */
} strata_residency_policy;

/* How an acquire uses the buffer. */
typedef enum strata_access_mode {
  /* may write it: a later spill copies the device bytes back */
  STRATA_READ_WRITE = 0,
  /* only reads it (parameters in forward and backward): the copies it was
   * filled from (pinned host memory, an NVMe extent) stay valid, so
   * spilling it moves no bytes. Writes made under it are lost at the next
   * spill. */
  STRATA_READ_ONLY = 1,
  /* writes every byte before reading any (a gradient's first accumulation
   * of a step): a spilled buffer is not filled back and its copies below
   * are freed, so the bytes handed out are undefined; spilled later like
   * STRATA_READ_WRITE */
  STRATA_OVERWRITE = 2
} strata_access_mode;

typedef enum strata_tier {
  STRATA_TIER_NONE = 0, /* registered, never acquired */
  STRATA_TIER_DEVICE = 1,
  STRATA_TIER_HOST = 2,
  STRATA_TIER_NVME = 3
} strata_tier;

/* A residency manager over `allocator`'s device, configured by the offload
 * keys of `conf` in STRATA_CONF syntax (host_capacity, nvme_dir, ...;
 * docs/configuration.md; the allocator's own keys are accepted and
 * ignored); NULL reads the STRATA_CONF environment variable. It registers a
 * pressure handler with the allocator: allocations that would fail spill
 * released buffers first. Destroy it before the allocator. Errors:
 * INVALID_ARGUMENT (bad conf, destroyed allocator), IO (the NVMe file cannot
 * be set up). */
STRATA_C_API strata_status strata_residency_create(strata_allocator* allocator, const char* conf,
                                                   strata_residency** out);
/* Frees every managed buffer wherever it is and removes the pressure
 * handler. INVALID_ARGUMENT while a prefetcher (strata/prefetch.h) is built
 * over it: destroy that first. */
STRATA_C_API strata_status strata_residency_destroy(strata_residency* r);

/* A new buffer of `bytes` (> 0, at most the device's memory); no storage
 * until the first acquire. `*handle` names it. */
STRATA_C_API strata_status strata_residency_register(strata_residency* r, size_t bytes,
                                                     strata_buffer_kind kind,
                                                     strata_residency_policy policy,
                                                     uint64_t* handle);
/* `*out` = the buffer on the device, valid for work queued on `stream` from
 * now on; a spilled buffer is filled back (the copy is queued in stream
 * order: the call returns before it is done). The first acquire gives fresh
 * memory with undefined contents. Acquires nest. Errors: INVALID_ARGUMENT
 * (unknown handle, a stream the device does not know), OUT_OF_MEMORY (nothing left to spill), IO
 * (an NVMe read failed or its checksum did not match; the buffer stays where it was). */
STRATA_C_API strata_status strata_residency_acquire(strata_residency* r, uint64_t handle,
                                                    void* stream, void** out);
/* strata_residency_acquire with an access mode (strata_residency_acquire
 * is STRATA_READ_WRITE). INVALID_ARGUMENT also for an unknown mode. */
STRATA_C_API strata_status strata_residency_acquire_mode(strata_residency* r, uint64_t handle,
                                                         void* stream, strata_access_mode mode,
                                                         void** out);
/* Ends one acquire: once none is left and the work queued on `stream` so
 * far is done, the buffer may be spilled. The last release of a
 * STRATA_NVME_HOME buffer also writes it to NVMe (after `stream`'s work)
 * and returns once it is there; a failed write (IO, OUT_OF_MEMORY) leaves
 * it where it was, released. */
STRATA_C_API strata_status strata_residency_release(strata_residency* r, uint64_t handle,
                                                    void* stream);
/* `*out` = the buffer's bytes in pinned host memory, for the host's own
 * work (an optimizer step on host threads): the buffer comes up to the host
 * tier (read from NVMe, or copied off the device after the work its
 * releasing stream queued) and stays there, neither spilled nor
 * prefetched, until strata_residency_release_host. Holds nest; returns
 * when the bytes are there. STRATA_READ_WRITE drops the copies below (the
 * host writes it); STRATA_OVERWRITE also reads nothing from NVMe (fresh
 * host memory, contents undefined). INVALID_ARGUMENT for an unknown handle or mode, a
 * STRATA_PINNED_ON_DEVICE buffer or one acquired on the device;
 * OUT_OF_MEMORY when the host tier cannot hold it; IO_ERROR when its NVMe
 * read fails the checksum (it stays on NVMe). */
STRATA_C_API strata_status strata_residency_acquire_host(strata_residency* r, uint64_t handle,
                                                         strata_access_mode mode, void** out);
/* Ends one strata_residency_acquire_host; the last makes the buffer
 * movable again (a STRATA_NVME_HOME buffer goes home to NVMe now).
 * INVALID_ARGUMENT if unknown or not acquired on the host. */
STRATA_C_API strata_status strata_residency_release_host(strata_residency* r, uint64_t handle);
/* Frees the buffer wherever it is. INVALID_ARGUMENT if unknown or still
 * acquired. */
STRATA_C_API strata_status strata_residency_unregister(strata_residency* r, uint64_t handle);
/* Where the buffer is now. INVALID_ARGUMENT for an unknown handle. */
STRATA_C_API strata_status strata_residency_where(strata_residency* r, uint64_t handle,
                                                  strata_tier* out);
/* The manager's counters as JSON (bytes per tier, spills and fills per
 * direction, bytes moved, staging bytes, fill wait), freed with
 * strata_string_free. */
STRATA_C_API strata_status strata_residency_stats_json(strata_residency* r, char** out);

/* NOLINTEND(modernize-use-using) */
#endif /* STRATA_RESIDENCY_H */
