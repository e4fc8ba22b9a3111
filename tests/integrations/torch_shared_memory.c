/* strata_torch_allocator: a residency manager built over the plugin's own
 * allocator shares one device memory with what PyTorch allocates through
 * the plugin. Buffers it holds are spilled to host memory when a PyTorch
 * allocation needs their room, and come back intact; destroying the handle
 * leaves the plugin's allocator serving PyTorch.
 *
 *   torch_shared_memory LIBRARY
 * STRATA_CONF names a 256 MiB device whose memory the host can read (sim,
 * or cuda over the stand-in driver), so the bytes are checked directly. libstrata's functions are
 * looked up through the plugin's handle: the copy of Strata the plugin links. Exits 1 on the first
 * failure, naming it. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "strata/residency.h"

static void fail(const char* what, long detail) {
  fprintf(stderr, "torch_shared_memory: FAILED: %s (%ld)\n", what, detail);
  exit(1);
}

static void* need(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  if (p == NULL) fail(name, 0);
  return p;
}

enum { buffers = 3, mib = 1 << 20, buffer_bytes = 64 * mib };

static unsigned char value_at(int buffer, size_t i) {
  return (unsigned char)(buffer * 31 + i * 7);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: torch_shared_memory LIBRARY\n");
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) fail(dlerror(), 0);
  strata_allocator* (*allocator_of)(int) = need(lib, "strata_torch_allocator");
  void* (*t_malloc)(ssize_t, int, void*) = need(lib, "strata_torch_malloc");
  void (*t_free)(void*, ssize_t, int, void*) = need(lib, "strata_torch_free");
  const char* (*t_last_error)(void) = need(lib, "strata_torch_last_error");
  int (*res_create)(strata_allocator*, const char*, strata_residency**) =
      need(lib, "strata_residency_create");
  int (*res_destroy)(strata_residency*) = need(lib, "strata_residency_destroy");
  int (*res_register)(strata_residency*, size_t, int, int, uint64_t*) =
      need(lib, "strata_residency_register");
  int (*res_acquire)(strata_residency*, uint64_t, void*, int, void**) =
      need(lib, "strata_residency_acquire_mode");
  int (*res_release)(strata_residency*, uint64_t, void*) = need(lib, "strata_residency_release");
  int (*res_where)(strata_residency*, uint64_t, int*) = need(lib, "strata_residency_where");
  int (*allocator_destroy)(strata_allocator*) = need(lib, "strata_allocator_destroy");
  int (*synchronize)(strata_allocator*, void*) = need(lib, "strata_stream_synchronize");
  const char* (*last_message)(void) = need(lib, "strata_last_error_message");

  strata_allocator* a = allocator_of(0);
  if (a == NULL) fail(t_last_error(), 0);
  if (allocator_of(0) != a) fail("a second call gives another handle", 0);
  if (allocator_of(-1) != NULL || strstr(t_last_error(), "out of range") == NULL) {
    fail("device -1 is not refused as out of range", 0);
  }

  strata_residency* r = NULL;
  if (res_create(a, "host_capacity:1GiB", &r) != 0) fail(last_message(), 0);
  uint64_t h[buffers];
  for (int b = 0; b < buffers; ++b) {
    void* p = NULL;
    if (res_register(r, buffer_bytes, STRATA_BUFFER_PARAMETER, STRATA_EVICTABLE, &h[b]) != 0 ||
        res_acquire(r, h[b], NULL, STRATA_READ_WRITE, &p) != 0) {
      fail(last_message(), b);
    }
    for (size_t i = 0; i < buffer_bytes; i += 4093) ((unsigned char*)p)[i] = value_at(b, i);
    if (res_release(r, h[b], NULL) != 0) fail(last_message(), b);
  }

  /* 200 MiB through PyTorch's path on a 256 MiB device that holds 192 MiB
   * of released buffers: the manager must make room by spilling them. */
  void* big = t_malloc(200 * (ssize_t)mib, 0, NULL);
  if (big == NULL) fail(t_last_error(), 0);
  int on_host = 0;
  for (int b = 0; b < buffers; ++b) {
    int tier = 0;
    if (res_where(r, h[b], &tier) != 0) fail(last_message(), b);
    on_host += tier == STRATA_TIER_HOST;
  }
  if (on_host < 2) fail("buffers spilled to the host for PyTorch's allocation", on_host);
  if (allocator_destroy(a) == 0) fail("the handle was destroyed while a manager uses it", 0);
  t_free(big, 200 * (ssize_t)mib, 0, NULL);

  for (int b = 0; b < buffers; ++b) {
    void* p = NULL;
    if (res_acquire(r, h[b], NULL, STRATA_READ_WRITE, &p) != 0) fail(last_message(), b);
    /* The fill is ordered on the stream: the host reads after it. */
    if (synchronize(a, NULL) != 0) fail(last_message(), b);
    for (size_t i = 0; i < buffer_bytes; i += 4093) {
      if (((unsigned char*)p)[i] != value_at(b, i)) fail("a buffer's bytes after its spill", b);
    }
    if (res_release(r, h[b], NULL) != 0) fail(last_message(), b);
  }
  if (res_destroy(r) != 0) fail(last_message(), 0);

  /* Ending the handle leaves the allocator serving PyTorch. */
  if (allocator_destroy(a) != 0) fail(last_message(), 0);
  void* after = t_malloc(8 * (ssize_t)mib, 0, NULL);
  if (after == NULL) fail(t_last_error(), 0);
  t_free(after, 8 * (ssize_t)mib, 0, NULL);
  printf("torch_shared_memory: %d of %d buffers spilled for PyTorch's allocation\n", on_host,
         buffers);
  printf("torch_shared_memory: OK\n");
  return 0;
}
