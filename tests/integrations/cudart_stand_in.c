/* A stand-in for the CUDA runtime, for the preload shim's tests on the sim
 * device: the "real" library the shim passes foreign pointers and every call
 * to when Strata is off. Memory is host memory; streams are distinct
 * handles; every call is counted (stand_in_rt_calls). As CUDA, it refuses
 * use in a child after fork (cudaErrorInitializationError).
 *
 * Thread safety: every function may be called concurrently. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static atomic_ulong mallocs;
static atomic_ulong frees;
static _Thread_local int device;
static atomic_int forked;

static void in_forked_child(void) { atomic_store(&forked, 1); }

__attribute__((constructor)) static void watch_fork(void) {
  pthread_atfork(NULL, NULL, in_forked_child);
}

/* Calls of `name` ("cudaMalloc", "cudaFree") so far. */
EXPORT unsigned long stand_in_rt_calls(const char* name) {
  if (strcmp(name, "cudaMalloc") == 0) return atomic_load(&mallocs);
  if (strcmp(name, "cudaFree") == 0) return atomic_load(&frees);
  return 0;
}

/* A pointer of this runtime's own, made without going through cudaMalloc
 * (so without the shim): what the tests free as a foreign pointer. */
EXPORT void* stand_in_rt_foreign(size_t size) {
  return aligned_alloc(256, (size + 255) / 256 * 256);
}

EXPORT cudaError_t cudaMalloc(void** ptr, size_t size) {
  atomic_fetch_add(&mallocs, 1);
  if (atomic_load(&forked)) return cudaErrorInitializationError;
  if (ptr == NULL) return cudaErrorInvalidValue;
  *ptr = size == 0 ? NULL : aligned_alloc(256, (size + 255) / 256 * 256);
  return size == 0 || *ptr != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

EXPORT cudaError_t cudaFree(void* ptr) {
  atomic_fetch_add(&frees, 1);
  if (atomic_load(&forked)) return cudaErrorInitializationError;
  free(ptr);
  return cudaSuccess;
}

EXPORT cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  (void)stream;
  return cudaMalloc(ptr, size);
}

EXPORT cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  (void)stream;
  return cudaFree(ptr);
}

EXPORT cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  *free_bytes = (size_t)1 << 29;
  *total = (size_t)1 << 30;
  return cudaSuccess;
}

EXPORT cudaError_t cudaGetDevice(int* d) {
  *d = device;
  return cudaSuccess;
}

EXPORT cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d > 1) return cudaErrorInvalidDevice;
  device = d;
  return cudaSuccess;
}

EXPORT cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  /* Any distinct non-null value: the sim device adopts it (adopt_streams). */
  *stream = (cudaStream_t)malloc(64);
  return *stream != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  free(stream);
  return cudaSuccess;
}

EXPORT const char* cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "stand-in runtime error";
}
