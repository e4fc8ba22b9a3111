/* A decoy libcuda.so.1: put first in the loader's path, it proves that the
 * stand-in's own tests never load a driver by the name libcuda.so.1 (on a
 * GPU host that name is the real driver). Every entry point it has says so
 * and aborts. */
#include <stdio.h>
#include <stdlib.h>

static void loaded(const char* what) {
  fprintf(stderr, "decoy libcuda.so.1: %s called: a test loaded the driver by name\n", what);
  abort();
}

int cuInit(unsigned flags) {
  (void)flags;
  loaded("cuInit");
  return 1;
}

int cuDriverGetVersion(int* version) {
  (void)version;
  loaded("cuDriverGetVersion");
  return 1;
}

int cuGetProcAddress_v2(const char* symbol, void** pfn, int version, unsigned long long flags,
                        void* status) {
  (void)symbol;
  (void)pfn;
  (void)version;
  (void)flags;
  (void)status;
  loaded("cuGetProcAddress_v2");
  return 1;
}
