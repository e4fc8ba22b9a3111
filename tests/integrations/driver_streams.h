/* Streams from the (stand-in) CUDA driver for the integrations' C test
 * programs: the real runtime cannot start over the stand-in, so a program
 * that needs streams there makes the primary context of device 0 current
 * and creates them with the driver (a cudaStream_t is a CUstream). */
#ifndef STRATA_TEST_DRIVER_STREAMS_H
#define STRATA_TEST_DRIVER_STREAMS_H

#include <cuda.h>
#include <dlfcn.h>

/* Fills streams[0..count) and returns the driver's handle, or NULL with
 * *what naming the step that failed. */
static void* driver_streams(CUstream* streams, int count, const char** what) {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW);
  *what = "dlopen libcuda.so.1";
  if (driver == NULL) return NULL;
  CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(driver, "cuInit");
  CUresult (*retain)(CUcontext*, CUdevice) =
      (CUresult(*)(CUcontext*, CUdevice))dlsym(driver, "cuDevicePrimaryCtxRetain");
  CUresult (*set)(CUcontext) = (CUresult(*)(CUcontext))dlsym(driver, "cuCtxSetCurrent");
  CUresult (*create)(CUstream*, unsigned) =
      (CUresult(*)(CUstream*, unsigned))dlsym(driver, "cuStreamCreate");
  *what = "driver entry points";
  if (init == NULL || retain == NULL || set == NULL || create == NULL) return NULL;
  CUcontext ctx = NULL;
  *what = "driver context";
  if (init(0) != CUDA_SUCCESS || retain(&ctx, 0) != CUDA_SUCCESS || set(ctx) != CUDA_SUCCESS) {
    return NULL;
  }
  *what = "cuStreamCreate";
  for (int i = 0; i < count; ++i) {
    if (create(&streams[i], CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return NULL;
  }
  *what = "";
  return driver;
}

#endif
