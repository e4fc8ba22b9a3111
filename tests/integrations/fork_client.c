/* A CUDA program that forks under the preload shim, as data-loader workers
 * do: the parent allocates through Strata and forks; the child's
 * cudaMalloc and cudaFree must return (Strata is off in the child, the
 * calls reach the runtime, which refuses use after fork as CUDA does), and
 * the parent goes on with its memory intact.
 *
 *   fork_client sim    linked with the stand-in runtime (cudart_stand_in),
 *                      which counts the child's calls and refuses them
 *   fork_client cuda   the real runtime over the stand-in driver, which
 *                      answers CUDA_ERROR_NOT_INITIALIZED after fork
 * A hang is killed by alarm() and fails the test. Exits 1 on the first
 * failure, naming it; prints "fork_client: OK" on success. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef CLIENT_WITH_STAND_IN_RUNTIME
unsigned long stand_in_rt_calls(const char* name);
#define RUNTIME_CALLS(name) stand_in_rt_calls(name)
#else
#define RUNTIME_CALLS(name) 0UL
#endif

#define SIZE (1u << 20)

static void fail(const char* what, long detail) {
  fprintf(stderr, "fork_client: FAILED: %s (%ld)\n", what, detail);
  exit(1);
}

static int child(void* parents, unsigned long mallocs_before) {
  alarm(20);
  void* q = NULL;
  const cudaError_t m = cudaMalloc(&q, SIZE);
  const unsigned long reached = RUNTIME_CALLS("cudaMalloc") - mallocs_before;
  printf("child: cudaMalloc -> %d, reached the runtime: %lu\n", (int)m, reached);
  if (m == cudaSuccess) cudaFree(q);
  printf("child: cudaFree of the parent's pointer -> %d\n", (int)cudaFree(parents));
  fflush(stdout);
  if (m == cudaSuccess) return 4; /* the runtime must refuse, as after a real fork */
#ifdef CLIENT_WITH_STAND_IN_RUNTIME
  if (reached != 1) return 3; /* the call must have passed through */
#endif
  return 0;
}

int main(void) {
  alarm(60);
  unsigned char* p = NULL;
  if (cudaMalloc((void**)&p, SIZE) != cudaSuccess) fail("cudaMalloc before fork", 0);
  memset(p, 0x5a, SIZE);
  const unsigned long mallocs_before = RUNTIME_CALLS("cudaMalloc");
  fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) fail("fork", pid);
  if (pid == 0) _exit(child(p, mallocs_before));
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) fail("waitpid", 0);
  if (!WIFEXITED(status)) fail("the child did not exit (hung and killed?)", status);
  if (WEXITSTATUS(status) != 0) fail("the child's check", WEXITSTATUS(status));
  printf("child exited 0\n");
  for (unsigned i = 0; i < SIZE; i += 4096) {
    if (p[i] != 0x5a) fail("the parent's bytes after fork", (long)i);
  }
  void* q = NULL;
  if (cudaMalloc(&q, SIZE) != cudaSuccess || cudaFree(q) != cudaSuccess || cudaFree(p) != cudaSuccess) {
    fail("the parent's calls after fork", 0);
  }
  if (RUNTIME_CALLS("cudaMalloc") != mallocs_before) fail("the parent's calls reached the runtime", 0);
  printf("parent: Strata still serves it\nfork_client: OK\n");
  return 0;
}
