/* Strata's C API: a caching GPU memory allocator.
 *
 * Every function returns a strata_status; STRATA_OK is 0. On failure the
 * calling thread's last error message says what went wrong
 * (strata_last_error_message). Sizes are in bytes. Streams are native
 * stream handles (cudaStream_t / CUstream on CUDA; on the sim device, handles
 * from its create_stream); NULL is the default stream.
 *
 * Thread safety: every function may be called from any thread at any time,
 * except that strata_allocator_destroy must not race with other calls on the
 * same allocator. After destroy, calls with the old handle return
 * STRATA_ERROR_INVALID_ARGUMENT (the handle itself stays valid memory).
 */
#ifndef STRATA_STRATA_H
#define STRATA_STRATA_H

/* A C header: C's headers and typedefs on purpose. */
/* NOLINTBEGIN(modernize-deprecated-headers,modernize-use-using) */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define STRATA_C_API extern "C" __attribute__((visibility("default")))
#else
#define STRATA_C_API __attribute__((visibility("default")))
#endif

typedef enum strata_status {
  STRATA_OK = 0,
  STRATA_ERROR_INVALID_ARGUMENT = 1, /* bad pointer, size, stream, config */
  STRATA_ERROR_OUT_OF_MEMORY = 2,    /* the message has the numbers */
  STRATA_ERROR_NOT_SUPPORTED = 3,
  STRATA_ERROR_NO_DRIVER = 4,
  STRATA_ERROR_NO_DEVICE = 5,
  STRATA_ERROR_DEVICE = 6,         /* a device call failed */
  STRATA_ERROR_INJECTED_FAULT = 7, /* sim device fault injection */
  STRATA_ERROR_IO = 8,             /* a storage tier's read or write failed */
  STRATA_ERROR_COMM = 9            /* a collective failed on some rank, or timed out */
} strata_status;

typedef struct strata_allocator strata_allocator;

/* A static string naming `code`, e.g. "out_of_memory". Never NULL. */
STRATA_C_API const char* strata_error_string(strata_status code);

/* The message of the calling thread's last failed call ("" if none). Valid
 * until that thread's next failing call. */
STRATA_C_API const char* strata_last_error_message(void);

/* Creates an allocator configured by `conf` in STRATA_CONF syntax
 * (docs/configuration.md); NULL reads the STRATA_CONF environment variable. */
STRATA_C_API strata_status strata_allocator_create(const char* conf, strata_allocator** out);

/* Waits for the device, returns all memory to it and destroys the allocator.
 * Pointers it handed out become invalid. INVALID_ARGUMENT while a residency
 * manager (strata/residency.h) still uses it. */
STRATA_C_API strata_status strata_allocator_destroy(strata_allocator* a);

/* Device-wide allocation and free, like cudaMalloc/cudaFree: a freed block
 * is reused only after all work queued before the free on every stream the
 * allocator has seen has finished. Size 0 gives NULL; freeing NULL is a
 * no-op. Blocks are at least 512-byte aligned. */
STRATA_C_API strata_status strata_malloc(strata_allocator* a, size_t size, void** out);
STRATA_C_API strata_status strata_free(strata_allocator* a, void* ptr);

/* Stream-ordered allocation and free, like cudaMallocAsync/cudaFreeAsync. */
STRATA_C_API strata_status strata_malloc_async(strata_allocator* a, size_t size, void* stream,
                                               void** out);
STRATA_C_API strata_status strata_free_async(strata_allocator* a, void* ptr, void* stream);

/* The free of `ptr` will also wait for work queued on `stream` up to it. */
STRATA_C_API strata_status strata_record_stream(strata_allocator* a, void* ptr, void* stream);

/* Waits until the work queued on `stream` of the allocator's device (NULL:
 * the default stream) is done, as cudaStreamSynchronize: what a program
 * reading device memory on the host (the sim device) calls after a
 * stream-ordered fill. INVALID_ARGUMENT for a stream the device does not
 * know. */
STRATA_C_API strata_status strata_stream_synchronize(strata_allocator* a, void* stream);

/* Returns every idle cached page to the device (waits for pending frees). */
STRATA_C_API strata_status strata_empty_cache(strata_allocator* a);
/* Returns idle pages until at most `keep_bytes` of them remain cached. */
STRATA_C_API strata_status strata_trim(strata_allocator* a, size_t keep_bytes);
/* Limits the memory the allocator holds to `fraction` of the device's. */
STRATA_C_API strata_status strata_set_memory_fraction(strata_allocator* a, double fraction);

/* One counter by its torch.cuda.memory_stats() name, e.g.
 * "allocated_bytes.all.current", or a layer's counter by "<section>.<name>"
 * (the residency manager's "offload.*", the prefetcher's "prefetch.*").
 * Unknown names are INVALID_ARGUMENT. */
STRATA_C_API strata_status strata_get_stat(strata_allocator* a, const char* name, int64_t* value);
STRATA_C_API strata_status strata_reset_peak_stats(strata_allocator* a);

/* Text and JSON reports, returned as strings the caller frees with
 * strata_string_free. The stats JSON and the memory summary include the
 * counters of the layers above registered with the allocator (the residency
 * manager's "offload" section, the prefetcher's "prefetch"). */
STRATA_C_API strata_status strata_stats_json(strata_allocator* a, char** out);
STRATA_C_API strata_status strata_memory_summary(strata_allocator* a, char** out);
STRATA_C_API strata_status strata_snapshot_json(strata_allocator* a, char** out);
STRATA_C_API void strata_string_free(char* s);

/* The event trace as JSON (docs/allocator.md; empty unless trace_buffer > 0)
 * and the last OOM's report as JSON ("null" if none), freed with
 * strata_string_free. */
STRATA_C_API strata_status strata_trace_json(strata_allocator* a, char** out);
STRATA_C_API strata_status strata_last_oom_report(strata_allocator* a, char** out);

/* The snapshot as a pickle in the structure of PyTorch's _dump_snapshot:
 * `*out` gets `*size` bytes (not NUL-terminated), freed with
 * strata_string_free. */
STRATA_C_API strata_status strata_snapshot_pickle(strata_allocator* a, char** out, size_t* size);

/* A pressure handler: asked to free `bytes` of device memory when a request
 * would fail; returns the bytes it freed. Runs on the failing thread with no
 * allocator lock held and may free through the allocator. While handlers
 * free something and the retry still fails (freed bytes may share pages
 * with live blocks), they are asked again, each time for at least twice as
 * much. */
typedef size_t (*strata_pressure_fn)(void* context, size_t bytes);
/* Registers `fn` (not NULL) with `context`; `*id` names it for removal. */
STRATA_C_API strata_status strata_add_pressure_handler(strata_allocator* a, strata_pressure_fn fn,
                                                       void* context, uint64_t* id);
/* INVALID_ARGUMENT for an unknown id. */
STRATA_C_API strata_status strata_remove_pressure_handler(strata_allocator* a, uint64_t id);

/* NOLINTEND(modernize-deprecated-headers,modernize-use-using) */
#endif /* STRATA_STRATA_H */
