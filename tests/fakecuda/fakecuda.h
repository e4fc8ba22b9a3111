/* Test controls of the stand-in CUDA driver (tests/fakecuda, never
 * installed). A test finds them with dlsym on the handle of libcuda.so.1; on a
 * real driver they are absent, which is how a test tells the two apart.
 *
 * Thread safety: every function may be called concurrently with each other
 * and with driver calls. */
#ifndef STRATA_FAKECUDA_H
#define STRATA_FAKECUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Calls of driver function `name` (e.g. "cuMemMap") since the last reset,
 * whatever their result; `name` NULL counts every call. */
unsigned long long fakecuda_call_count(const char* name);

/* Forgets the recorded calls and any failure not yet injected. */
void fakecuda_reset_calls(void);

/* Makes the `nth` call (1 = the next) of `name` from now return `result`
 * (a CUresult) without doing anything, once. Replaces an earlier setting for
 * the same name. Returns 0, or -1 for a null name, nth 0 or result 0. */
int fakecuda_fail_call(const char* name, unsigned long long nth, int result);

/* Writes the last `last` recorded calls, one per line,
 * "cuMemMap(ptr=0x..., size=2097152, ...) -> CUDA_SUCCESS", into `buf`
 * (NUL-terminated, truncated to `size`). Returns the bytes the whole text
 * needs, without the NUL. */
size_t fakecuda_format_calls(char* buf, size_t size, size_t last);

/* Re-creates device `ordinal` as the sim device described by `sim_options`
 * (the text after "sim:", see docs/device.md: capacity, granularity,
 * op_delay_us, ...). Refused (-1) while any context of the device is
 * retained or any of its memory, stream or event is alive. Returns 0. */
int fakecuda_configure(int ordinal, const char* sim_options);

/* Driver objects alive now on all devices: memory handles not yet freed,
 * reservations, streams, events, pinned host buffers and registrations. */
unsigned long long fakecuda_live_objects(void);

/* The distinct physical allocations (cuMemCreate handles, cuMemAlloc
 * blocks) backing [ptr, ptr + bytes) of device memory, writing the owning
 * device's ordinal to `ordinal` (may be NULL). 0 when any byte is not mapped
 * device memory or the range spans two devices. The stand-in NCCL uses it to
 * enforce NCCL's rules on buffers. */
int fakecuda_backing_allocations(unsigned long long ptr, size_t bytes, int* ordinal);

#ifdef __cplusplus
}
#endif

#endif
