/* Calls libstrata_torch.so exactly as PyTorch's CUDAPluggableAllocator does:
 * init(device_count), alloc(size, device, current stream), free(ptr, size,
 * device, stream) with the allocation's own values, record_stream,
 * empty_cache (reset), set_memory_fraction; a randomized sequence with data
 * checks, then an out-of-memory request and the stats.
 *
 *   torch_harness LIBRARY sim|cuda
 * sim: streams are distinct handles the sim device adopts; cuda: streams
 * from the (stand-in) driver. The seed is printed; exits 1 on the first
 * failure, naming it. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "driver_streams.h"

typedef struct CUstream_st* stream_t;

static void* (*t_malloc)(ssize_t, int, stream_t);
static void (*t_free)(void*, ssize_t, int, stream_t);
static void (*t_record_stream)(void*, stream_t);
static void (*t_empty_cache)(void);
static void (*t_set_memory_fraction)(double, int);
static void (*t_init)(int);
static char* (*t_stats_json)(int);
static char* (*t_snapshot_json)(int);
static char* (*t_last_oom_report)(int);
static void (*t_string_free)(char*);
static const char* (*t_last_error)(void);

static unsigned seed_used;

static void fail(const char* what, long detail) {
  fprintf(stderr, "torch_harness: FAILED (seed %u): %s (%ld)\n", seed_used, what, detail);
  exit(1);
}

static void* need(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  if (p == NULL) fail(name, 0);
  return p;
}

static int pattern(unsigned char* p, size_t n, unsigned seed, int write) {
  const size_t offsets[2] = {0, n > 32 ? n - 32 : 0};
  for (int k = 0; k < 2; ++k) {
    for (size_t i = offsets[k]; i < offsets[k] + 32 && i < n; ++i) {
      const unsigned char v = (unsigned char)(seed + i * 7);
      if (write) {
        p[i] = v;
      } else if (p[i] != v) {
        return 0;
      }
    }
  }
  return 1;
}

static stream_t streams[3]; /* [0] is the default stream */

static void make_streams(int on_driver) {
  if (!on_driver) {
    streams[1] = (stream_t)malloc(64);
    streams[2] = (stream_t)malloc(64);
    return;
  }
  const char* what = NULL;
  if (driver_streams(&streams[1], 2, &what) == NULL) fail(what, 0);
}

struct block {
  void* p;
  ssize_t size;
  stream_t stream;
  unsigned seed;
};

int main(int argc, char** argv) {
  if (argc < 3) fail("usage: torch_harness LIBRARY sim|cuda", 0);
  seed_used = 20261122;
  printf("torch_harness: seed %u\n", seed_used);
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) fail(dlerror(), 0);
  t_malloc = (void* (*)(ssize_t, int, stream_t))need(lib, "strata_torch_malloc");
  t_free = (void (*)(void*, ssize_t, int, stream_t))need(lib, "strata_torch_free");
  t_record_stream = (void (*)(void*, stream_t))need(lib, "strata_torch_record_stream");
  t_empty_cache = (void (*)(void))need(lib, "strata_torch_empty_cache");
  t_set_memory_fraction = (void (*)(double, int))need(lib, "strata_torch_set_memory_fraction");
  t_init = (void (*)(int))need(lib, "strata_torch_init");
  t_stats_json = (char* (*)(int))need(lib, "strata_torch_stats_json");
  t_snapshot_json = (char* (*)(int))need(lib, "strata_torch_snapshot_json");
  t_last_oom_report = (char* (*)(int))need(lib, "strata_torch_last_oom_report");
  t_string_free = (void (*)(char*))need(lib, "strata_torch_string_free");
  t_last_error = (const char* (*)(void))need(lib, "strata_torch_last_error");
  make_streams(strcmp(argv[2], "cuda") == 0);

  t_init(1);
  if (t_last_error()[0] != '\0') fail("init(1) failed", 0);
  enum { ops = 3000, max_live = 64 };
  struct block live[max_live];
  int n = 0;
  unsigned rng = seed_used;
  for (int op = 0; op < ops; ++op) {
    const int r = rand_r(&rng) % 100;
    if (n < max_live && (n == 0 || r < 55)) {
      const int kind = rand_r(&rng) % 100;
      ssize_t size = kind < 70 ? 1 + rand_r(&rng) % 65536 : 65536 + rand_r(&rng) % (8 << 20);
      stream_t s = streams[rand_r(&rng) % 3];
      void* p = t_malloc(size, 0, s);
      if (p == NULL) fail(t_last_error(), op);
      live[n] = (struct block){p, size, s, (unsigned)rand_r(&rng)};
      pattern(p, (size_t)size, live[n].seed, 1);
      ++n;
    } else {
      const int k = rand_r(&rng) % n;
      struct block b = live[k];
      live[k] = live[--n];
      if (!pattern(b.p, (size_t)b.size, b.seed, 0)) fail("a block lost its bytes", op);
      if (rand_r(&rng) % 5 == 0) t_record_stream(b.p, streams[(rand_r(&rng) % 2) + 1]);
      t_free(b.p, b.size, 0, b.stream);
    }
    if (op % 1000 == 999) t_empty_cache();
  }
  for (int k = 0; k < n; ++k) t_free(live[k].p, live[k].size, 0, live[k].stream);
  printf("sequence: %d operations, bytes intact\n", ops);

  t_set_memory_fraction(2.0, 0);
  if (t_last_error()[0] == '\0') fail("set_memory_fraction(2.0) was accepted", 0);
  t_set_memory_fraction(1.0, 0);
  if (t_malloc((ssize_t)1 << 50, 0, streams[0]) != NULL) fail("a 1 PiB request succeeded", 0);
  if (strstr(t_last_error(), "out of memory") == NULL) fail(t_last_error(), 0);
  char* report = t_last_oom_report(0);
  if (report == NULL || strstr(report, "\"requested\"") == NULL) fail("no OOM report", 0);
  t_string_free(report);
  printf("out of memory: NULL, with the report kept\n");

  int local = 0;
  t_free(&local, sizeof local, 0, streams[0]); /* not Strata's: refused, no crash */
  t_empty_cache();
  char* stats = t_stats_json(0);
  if (stats == NULL) fail("no stats", 0);
  if (strstr(stats, "\"num_ooms\":1") == NULL) fail("num_ooms is not 1", 0);
  if (strstr(stats, "\"allocated_bytes.all.current\":0,") == NULL)
    fail("memory still allocated", 0);
  t_string_free(stats);
  char* snapshot = t_snapshot_json(0);
  if (snapshot == NULL || snapshot[0] != '{') fail("no snapshot", 0);
  t_string_free(snapshot);
  printf("torch_harness: OK\n");
  return 0;
}
