/* A CUDA program for the preload shim's tests: several threads allocate
 * with cudaMalloc and cudaMallocAsync on two streams, write, read back and
 * free; then cudaMemGetInfo, a foreign pointer, a double free and (on cuda)
 * the driver's entry points. Device memory is written from the host, which
 * the sim device and the stand-in driver allow.
 *
 *   preload_client sim    linked with the stand-in runtime (cudart_stand_in)
 *   preload_client cuda   linked with the real runtime, libcuda.so.1 being
 *                         the stand-in driver
 * A third argument "off" says Strata is off: every call must reach the
 * runtime.
 * Prints what it checked; exits 1 on the first failure, naming it. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_streams.h"

#define THREADS 4
#define ITERATIONS 200

#ifdef CLIENT_WITH_STAND_IN_RUNTIME
unsigned long stand_in_rt_calls(const char* name);
void* stand_in_rt_foreign(size_t size);
#endif

static cudaStream_t streams[2];
static void* driver;

static void fail(const char* what, long detail) {
  fprintf(stderr, "preload_client: FAILED: %s (%ld)\n", what, detail);
  exit(1);
}

/* Writes (or checks) a few stripes of [p, p+n). */
static int pattern(unsigned char* p, size_t n, unsigned seed, int write) {
  const size_t offsets[3] = {0, n / 2, n > 64 ? n - 64 : 0};
  for (int k = 0; k < 3; ++k) {
    for (size_t i = offsets[k]; i < offsets[k] + 64 && i < n; ++i) {
      const unsigned char v = (unsigned char)((size_t)seed * 31 + i);
      if (write) {
        p[i] = v;
      } else if (p[i] != v) {
        return 0;
      }
    }
  }
  return 1;
}

static void* work(void* arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  for (int i = 0; i < ITERATIONS; ++i) {
    const size_t size = 512 + (size_t)rand_r(&seed) % (4u << 20);
    cudaStream_t s = streams[i % 2];
    void* p = NULL;
    void* q = NULL;
    if (cudaMalloc(&p, size) != cudaSuccess || p == NULL) fail("cudaMalloc", (long)size);
    if (cudaMallocAsync(&q, size / 3 + 1, s) != cudaSuccess || q == NULL) {
      fail("cudaMallocAsync", (long)size);
    }
    pattern(p, size, seed, 1);
    pattern(q, size / 3 + 1, seed + 1, 1);
    if (!pattern(p, size, seed, 0)) fail("cudaMalloc memory lost its bytes", (long)size);
    if (!pattern(q, size / 3 + 1, seed + 1, 0)) fail("cudaMallocAsync memory lost its bytes", 0);
    if (cudaFreeAsync(q, s) != cudaSuccess) fail("cudaFreeAsync", 0);
    if (cudaFree(p) != cudaSuccess) fail("cudaFree", 0);
  }
  return NULL;
}

static void make_streams(int on_driver) {
  if (!on_driver) {
    for (int i = 0; i < 2; ++i) {
      if (cudaStreamCreate(&streams[i]) != cudaSuccess) fail("cudaStreamCreate", i);
    }
    return;
  }
  const char* what = NULL;
  driver = driver_streams((CUstream*)streams, 2, &what);
  if (driver == NULL) fail(what, 0);
}

/* The driver's allocation calls as a program finds them: through the
 * dynamic linker (the shim's) and through cuGetProcAddress. */
static void check_driver_entry_points(void) {
  typedef CUresult (*alloc_fn)(CUdeviceptr*, size_t);
  typedef CUresult (*free_fn)(CUdeviceptr);
  typedef CUresult (*proc_fn)(const char*, void**, int, cuuint64_t,
                              CUdriverProcAddressQueryResult*);
  unsigned long long (*calls)(const char*) =
      (unsigned long long (*)(const char*))dlsym(driver, "fakecuda_call_count");
  alloc_fn shim_alloc = (alloc_fn)dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
  free_fn shim_free = (free_fn)dlsym(RTLD_DEFAULT, "cuMemFree_v2");
  alloc_fn real_alloc = (alloc_fn)dlsym(driver, "cuMemAlloc_v2");
  proc_fn proc = (proc_fn)dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2");
  if (calls == NULL || shim_alloc == NULL || shim_free == NULL || real_alloc == NULL ||
      proc == NULL) {
    fail("driver entry points missing", 0);
  }
  const unsigned long long driver_allocs = calls("cuMemAlloc");
  CUdeviceptr d = 0;
  if (shim_alloc(&d, 1 << 20) != CUDA_SUCCESS || d == 0) fail("cuMemAlloc", 0);
  if (calls("cuMemAlloc") != driver_allocs) fail("cuMemAlloc reached the driver", 0);
  pattern((unsigned char*)(uintptr_t)d, 1 << 20, 7, 1);
  if (!pattern((unsigned char*)(uintptr_t)d, 1 << 20, 7, 0)) fail("cuMemAlloc memory", 0);
  if (shim_free(d) != CUDA_SUCCESS) fail("cuMemFree", 0);
  void* found = NULL;
  if (proc("cuMemAlloc", &found, 12000, 0, NULL) != CUDA_SUCCESS || found != (void*)shim_alloc) {
    fail("cuGetProcAddress(cuMemAlloc) is not Strata's", 0);
  }
  printf("driver entry points: Strata's, also through cuGetProcAddress\n");
  CUdeviceptr foreign = 0;
  if (real_alloc(&foreign, 4096) != CUDA_SUCCESS) fail("the driver's own cuMemAlloc", 0);
  const unsigned long long driver_frees = calls("cuMemFree");
  if (shim_free(foreign) != CUDA_SUCCESS || calls("cuMemFree") != driver_frees + 1) {
    fail("a foreign cuMemFree did not reach the driver", 0);
  }
  printf("foreign pointer: cuMemFree passed through\n");
}

int main(int argc, char** argv) {
  if (argc < 2) fail("usage: preload_client sim|cuda [off]", 0);
  const int on_driver = strcmp(argv[1], "cuda") == 0;
  const int strata_off = argc > 2 && strcmp(argv[2], "off") == 0;
  make_streams(on_driver);
  pthread_t threads[THREADS];
  for (int t = 0; t < THREADS; ++t) {
    pthread_create(&threads[t], NULL, work, (void*)(uintptr_t)(1234 + t));
  }
  for (int t = 0; t < THREADS; ++t) pthread_join(threads[t], NULL);
  printf("allocations: %d threads x %d, bytes intact\n", THREADS, ITERATIONS * 2);

  size_t free_bytes = 0;
  size_t total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) fail("cudaMemGetInfo", 0);
  if (free_bytes > total) fail("cudaMemGetInfo: free above total", (long)free_bytes);
  printf("cudaMemGetInfo: total=%zu free=%zu\n", total, free_bytes);

  void* p = NULL;
  if (cudaMalloc(&p, 1000) != cudaSuccess) fail("cudaMalloc", 1000);
  if (cudaFree(p) != cudaSuccess) fail("cudaFree", 1000);
  if (!strata_off) {
    const cudaError_t again = cudaFree(p);
    if (again != cudaErrorInvalidValue) fail("a double free was not refused", (long)again);
    printf("double free: cudaErrorInvalidValue\n");
  }

#ifdef CLIENT_WITH_STAND_IN_RUNTIME
  void* foreign = stand_in_rt_foreign(1024);
  const unsigned long before = stand_in_rt_calls("cudaFree");
  if (cudaFree(foreign) != cudaSuccess || stand_in_rt_calls("cudaFree") != before + 1) {
    fail("a foreign cudaFree did not reach the runtime", 0);
  }
  printf("foreign pointer: cudaFree passed through\n");
  if (!strata_off) {
    /* Device 1 has its own allocator; a free made while device 0 is current
     * still finds it. */
    void* on_one = NULL;
    if (cudaSetDevice(1) != cudaSuccess || cudaMalloc(&on_one, 1 << 20) != cudaSuccess) {
      fail("cudaMalloc on device 1", 0);
    }
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(on_one) != cudaSuccess) {
      fail("cudaFree of device 1's pointer from device 0", 0);
    }
    printf("device 1: its own allocator, freed from device 0\n");
  }
  const unsigned long passed = stand_in_rt_calls("cudaMalloc");
  if (strata_off != (passed > 0)) fail("cudaMalloc calls that reached the runtime", (long)passed);
  printf("cudaMalloc calls that reached the runtime: %lu\n", passed);
#endif
  if (on_driver) check_driver_entry_points();
  printf("preload_client: OK\n");
  return 0;
}
