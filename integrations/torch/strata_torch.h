/* libstrata_torch.so: Strata as PyTorch's CUDA allocator, through
 * torch.cuda.memory.CUDAPluggableAllocator (integrations/torch/strata_torch/_allocator.py
 * does the wiring; docs/integrations.md).
 *
 * One Strata allocator per device, configured from STRATA_CONF, created on
 * first use. `stream` is the cudaStream_t PyTorch passes (the current stream
 * of the allocation).
 *
 * Thread safety: every function may be called from any thread at any time.
 * Errors never escape as crashes: allocation failures return NULL (or throw,
 * from strata_torch_malloc_or_throw), and the reason is kept
 * (strata_torch_last_error for the calling thread,
 * strata_torch_last_oom_report per device). */
#ifndef STRATA_TORCH_H
#define STRATA_TORCH_H

/* A C header: C's headers and typedefs on purpose. */
/* NOLINTBEGIN(modernize-deprecated-headers,modernize-use-using) */
#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
#define STRATA_TORCH_API extern "C" __attribute__((visibility("default")))
#else
#define STRATA_TORCH_API __attribute__((visibility("default")))
#endif

typedef struct CUstream_st* strata_torch_stream;  /* cudaStream_t */
typedef struct strata_allocator strata_allocator; /* strata/strata.h */
/* NOLINTEND(modernize-deprecated-headers,modernize-use-using) */

/* alloc_fn: `size` bytes on `device`, stream-ordered on `stream`. NULL for
 * size 0 and on failure (out of memory: the report is kept). */
STRATA_TORCH_API void* strata_torch_malloc(ssize_t size, int device, strata_torch_stream stream);
/* alloc_fn as install() wires it: strata_torch_malloc, except that a
 * failure throws a C++ exception (std::runtime_error) instead of returning
 * NULL, because PyTorch's plugin path passes NULL on unchecked (a tensor
 * "whose data is not allocated yet", a null cuBLAS workspace). An
 * out-of-memory's message begins "CUDA out of memory." as PyTorch's own
 * does, so code that recognises OOMs by that text (Accelerate's and
 * Lightning's batch-size finders) recognises Strata's; Python sees a
 * RuntimeError. NULL, without a throw, for size 0 only. C++ callers only:
 * C code calls strata_torch_malloc. */
STRATA_TORCH_API void* strata_torch_malloc_or_throw(ssize_t size, int device,
                                                    strata_torch_stream stream);
/* free_fn: PyTorch passes the allocation's size, device and stream; the
 * free is stream-ordered on that stream. A pointer Strata does not know is
 * reported on stderr and left alone. */
STRATA_TORCH_API void strata_torch_free(void* ptr, ssize_t size, int device,
                                        strata_torch_stream stream);
/* record_stream_fn: the free of `ptr` also waits for work queued on
 * `stream` until then. */
STRATA_TORCH_API void strata_torch_record_stream(void* ptr, strata_torch_stream stream);
/* reset_fn (torch.cuda.empty_cache): returns every device's cached pages. */
STRATA_TORCH_API void strata_torch_empty_cache(void);
/* memory_fraction_fn: limits device `device` to `fraction` (0, 1] of its
 * memory. */
STRATA_TORCH_API void strata_torch_set_memory_fraction(double fraction, int device);
/* init_fn: PyTorch says how many devices there are; Strata starts the
 * allocator of the current device's index lazily, so this only checks the
 * count. */
STRATA_TORCH_API void strata_torch_init(int device_count);

/* The allocator of device `device` as a libstrata C handle (strata/strata.h),
 * for building libstrata's other C APIs over the memory PyTorch allocates
 * from: strata_residency_create, strata_prefetcher_create and
 * strata_kernels_create (strata_torch.offload does). The plugin's
 * allocators are libstrata.so's, which this library links, so call those
 * functions through this library's handle (dlsym on it finds them) or a
 * libstrata.so the loader shares with it. One handle per device, made on
 * first call and kept for the process's life; strata_allocator_destroy on
 * it ends the handle, never the allocator (a later call here returns the
 * same, ended handle: do not destroy it). NULL, with strata_torch_last_error
 * saying why, when Strata is off or `device` is out of range. */
STRATA_TORCH_API strata_allocator* strata_torch_allocator(int device);

/* 1 when `key` is a STRATA_CONF key of the plugin's own allocator (the
 * allocator's and the integrations' keys: docs/configuration.md), which
 * only STRATA_CONF sets; 0 for any other text, NULL included. */
STRATA_TORCH_API int strata_torch_is_allocator_key(const char* key);

/* JSON texts for device `device` (free with strata_torch_string_free); NULL
 * when Strata is off or the device has no allocator yet. */
STRATA_TORCH_API char* strata_torch_stats_json(int device);
STRATA_TORCH_API char* strata_torch_snapshot_json(int device);
/* The event trace (docs/allocator.md, "Event trace"): empty unless
 * STRATA_CONF sets trace_buffer:N. */
STRATA_TORCH_API char* strata_torch_trace_json(int device);
STRATA_TORCH_API char* strata_torch_last_oom_report(int device);
/* The table of torch.cuda.memory_summary(). */
STRATA_TORCH_API char* strata_torch_memory_summary(int device);
STRATA_TORCH_API void strata_torch_string_free(char* s);
/* The calling thread's last failure ("" if none); valid until its next call. */
STRATA_TORCH_API const char* strata_torch_last_error(void);

#endif
