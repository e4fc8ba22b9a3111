"""The strata_torch package against a stub of torch
(tests/integrations/torch_stub) and the real libstrata_torch.so on the sim
device. Run by ctest with PYTHONPATH (the build tree's package, the stub)
and STRATA_CONF set, STRATA_TORCH_LIBRARY unset: the package finds the
library the build wrote down. argv[1]: the library the build made."""
import ctypes
import os
import sys

import strata_torch
import torch


def check(condition, what):
    if not condition:
        print(f"strata_torch_test: FAILED: {what}")
        sys.exit(1)


torch.cuda.initialized = True
try:
    strata_torch.install()
    check(False, "install() after CUDA initialisation must fail")
except strata_torch.StrataTorchError as e:
    check("before CUDA is initialised" in str(e), f"unclear error: {e}")
    check(isinstance(e, strata_torch.StrataError), "StrataTorchError is not a StrataError")
check(not strata_torch.installed(), "a refused install left Strata installed")

torch.cuda.initialized = False
# A PyTorch without the pluggable allocator (before 2.0) is told so.
memory_type = type(torch.cuda.memory)
pluggable = memory_type.CUDAPluggableAllocator
del memory_type.CUDAPluggableAllocator
try:
    strata_torch.install()
    check(False, "install() without CUDAPluggableAllocator must fail")
except strata_torch.StrataTorchError as e:
    check("needs PyTorch 2.0 or later" in str(e), f"unclear error: {e}")
memory_type.CUDAPluggableAllocator = pluggable
check(not strata_torch.installed(), "a refused install left Strata installed")

wired = strata_torch.install()
allocator = torch.cuda.memory.current
check(allocator is not None, "change_current_allocator was not called")
check(os.path.realpath(allocator.path) == os.path.realpath(sys.argv[1]),
      f"library {allocator.path}, not {sys.argv[1]}")
check((allocator.alloc_fn_name, allocator.free_fn_name) ==
      ("strata_torch_malloc_or_throw", "strata_torch_free"), "alloc/free function names")
check(sorted(wired) == sorted(allocator._allocator.hooks), "hooks reported vs wired")
check(len(wired) == 4 and all(allocator._allocator.hooks.values()), f"hooks: {wired}")
check(strata_torch.install() == [], "a second install() must do nothing")

lib = ctypes.CDLL(sys.argv[1])
lib.strata_torch_malloc.restype = ctypes.c_void_p
lib.strata_torch_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
lib.strata_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                  ctypes.c_void_p]
p = lib.strata_torch_malloc(3 << 20, 0, None)
check(p, "a 3 MiB allocation failed")
stats = strata_torch.memory_stats()
check(stats["allocated_bytes.all.current"] == 3 << 20, f"allocated {stats}")
check("Strata memory summary" in strata_torch.memory_summary(), "memory_summary")
check(strata_torch.memory_stats("cuda:0") == strata_torch.memory_stats(0) ==
      strata_torch.memory_stats("cuda"), "devices named as torch.cuda names them")
for bad in ("cpu", "cuda:x", "cuda:-1", 1.5):
    try:
        strata_torch.memory_stats(bad)
        check(False, f"memory_stats({bad!r}) must fail")
    except strata_torch.StrataTorchError as e:
        check("not a CUDA device" in str(e), f"unclear error: {e}")
check(isinstance(strata_torch.snapshot(), dict), "snapshot")
# The event trace (ctest sets trace_buffer:64): the 3 MiB allocation is in it.
trace = strata_torch.trace()
check(trace["capacity"] == 64, f"trace capacity {trace.get('capacity')}")
check(any(e["action"] == "alloc" and e["size"] == 3 << 20 and int(e["address"], 16) == p
          for e in trace["events"]), f"the allocation is not in the trace: {trace['events']}")
check(strata_torch.last_oom_report() is None, "an OOM report before any OOM")
lib.strata_torch_free(p, 3 << 20, 0, None)
strata_torch.empty_cache()
check(strata_torch.memory_stats()["reserved_bytes.all.current"] == 0, "empty_cache")

with strata_torch.out_of_memory_errors():
    q = lib.strata_torch_malloc(1 << 20, 0, None)
    lib.strata_torch_free(q, 1 << 20, 0, None)
try:
    with strata_torch.out_of_memory_errors():
        check(not lib.strata_torch_malloc(1 << 50, 0, None), "a 1 PiB allocation succeeded")
    check(False, "an OOM inside the block raised nothing")
except torch.cuda.OutOfMemoryError as e:
    check("CUDA out of memory: Strata could not allocate 1125899906842624 bytes" in str(e),
          f"message: {e}")
    check("verdict" in str(e), "the report is not in the message")
try:
    with strata_torch.out_of_memory_errors():
        lib.strata_torch_malloc(1 << 50, 0, None)
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    check(False, "the RuntimeError vanished")
except torch.cuda.OutOfMemoryError as e:
    check(isinstance(e.__cause__, RuntimeError), "the original error is not the cause")
print("strata_torch_test: OK")
