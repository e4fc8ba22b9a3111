"""Strata as PyTorch's CUDA allocator.

    import strata_torch
    strata_torch.install()   # first thing, before any tensor is on the GPU
    ...                      # train as usual

install() loads libstrata_torch.so (the path given, else STRATA_TORCH_LIBRARY,
else next to this file, else the loader's search path), makes it PyTorch's
CUDA allocator with torch.cuda.memory.CUDAPluggableAllocator and wires the
extra hooks (init, empty_cache, set_per_process_memory_fraction,
record_stream) where the installed PyTorch exposes them. Strata reads
STRATA_CONF (docs/configuration.md). Needs only torch.

PyTorch's plugin path turns a failed allocation into a null pointer, not an
exception; code run inside `with strata_torch.out_of_memory_errors():` gets
torch.cuda.OutOfMemoryError with Strata's OOM report instead.
"""

import contextlib
import ctypes
import json
import os

import torch

__all__ = [
    "StrataTorchError",
    "install",
    "installed",
    "memory_stats",
    "memory_summary",
    "snapshot",
    "last_oom_report",
    "empty_cache",
    "out_of_memory_errors",
    "offload",
]

_LIBRARY = "libstrata_torch.so"
_HOOKS = (
    ("set_init_fn", "strata_torch_init"),
    ("set_reset_fn", "strata_torch_empty_cache"),
    ("set_memory_fraction_fn", "strata_torch_set_memory_fraction"),
    ("set_record_stream_fn", "strata_torch_record_stream"),
)
_lib = None


class StrataTorchError(RuntimeError):
    """Strata could not be installed or could not answer."""


def _library_path(path):
    if path:
        return path
    if os.environ.get("STRATA_TORCH_LIBRARY"):
        return os.environ["STRATA_TORCH_LIBRARY"]
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIBRARY)
    return here if os.path.exists(here) else _LIBRARY


def _load(path):
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise StrataTorchError(
            f"cannot load {path}: {e}. Build Strata with the CUDA toolkit and point "
            "STRATA_TORCH_LIBRARY at integrations/torch/libstrata_torch.so"
        ) from e
    lib.strata_torch_malloc.restype = ctypes.c_void_p
    lib.strata_torch_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.strata_torch_free.restype = None
    lib.strata_torch_free.argtypes = [
        ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.strata_torch_empty_cache.restype = None
    for name in ("strata_torch_stats_json", "strata_torch_snapshot_json",
                 "strata_torch_last_oom_report", "strata_torch_memory_summary"):
        getattr(lib, name).restype = ctypes.c_void_p
        getattr(lib, name).argtypes = [ctypes.c_int]
    lib.strata_torch_string_free.argtypes = [ctypes.c_void_p]
    lib.strata_torch_last_error.restype = ctypes.c_char_p
    return lib


def install(path=None):
    """Makes Strata PyTorch's CUDA allocator; returns the hooks wired.

    Must run before CUDA is initialised in this process. Calling it again
    does nothing.
    """
    global _lib
    if _lib is not None:
        return []
    if torch.cuda.is_initialized():
        raise StrataTorchError(
            "strata_torch.install() must run before CUDA is initialised in this process: "
            "a tensor is already on the GPU, or torch.cuda was used, and PyTorch cannot "
            "swap the allocator after that. Call strata_torch.install() first thing in "
            "the program, before any .cuda(), .to('cuda') or torch.cuda call.")
    path = _library_path(path)
    lib = _load(path)
    allocator = torch.cuda.memory.CUDAPluggableAllocator(
        path, "strata_torch_malloc", "strata_torch_free")
    handle = getattr(allocator, "_allocator", None)
    wired = []
    for setter, symbol in _HOOKS:
        hook = getattr(handle, setter, None)
        if hook is not None:
            hook(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value)
            wired.append(setter)
    torch.cuda.memory.change_current_allocator(allocator)
    _lib = lib
    return wired


def installed():
    """True once install() succeeded."""
    return _lib is not None


def _library():
    if _lib is None:
        raise StrataTorchError("strata_torch.install() has not run")
    return _lib


def _device(device):
    if device is None:
        return torch.cuda.current_device()
    return device.index if hasattr(device, "index") else int(device)


def _text(function, device):
    lib = _library()
    pointer = getattr(lib, function)(_device(device))
    if not pointer:
        raise StrataTorchError(lib.strata_torch_last_error().decode())
    try:
        return ctypes.string_at(pointer).decode()
    finally:
        lib.strata_torch_string_free(pointer)


def _offloaded():
    """The active offload() when install() has not run (the sim device)."""
    if _lib is not None:
        return None
    import strata_offload  # pylint: disable=import-outside-toplevel

    return strata_offload.active()


def memory_stats(device=None):
    """Counters with torch.cuda.memory_stats() names, as a dict; with an
    offload() on the sim device, its allocator's, the tiers' ("offload.*")
    and the prefetcher's ("prefetch.*")."""
    off = _offloaded()
    if off is not None:
        return off.memory_stats()
    return json.loads(_text("strata_torch_stats_json", device))


def memory_summary(device=None):
    """The table of torch.cuda.memory_summary(), from Strata (with an
    offload(): its allocator's, with the tiers' and prefetcher's sections)."""
    off = _offloaded()
    if off is not None:
        return off.memory_summary()
    return _text("strata_torch_memory_summary", device)


def snapshot(device=None):
    """Strata's snapshot (docs/allocator.md) as a dict."""
    return json.loads(_text("strata_torch_snapshot_json", device))


def last_oom_report(device=None):
    """The last OOM report as a dict, or None."""
    return json.loads(_text("strata_torch_last_oom_report", device))


def empty_cache():
    """Returns every device's cached memory (torch.cuda.empty_cache does the
    same when PyTorch took the reset hook)."""
    _library().strata_torch_empty_cache()


def _oom_error(device):
    report = last_oom_report(device) or {}
    return torch.cuda.OutOfMemoryError(
        f"CUDA out of memory: Strata could not allocate {report.get('requested', '?')} bytes "
        f"on device {_device(device)}: {report.get('verdict', 'no report')}\n"
        f"Strata's OOM report: {json.dumps(report, indent=1)}")


@contextlib.contextmanager
def out_of_memory_errors(device=None):
    """Raises torch.cuda.OutOfMemoryError, with Strata's report, when an
    allocation fails inside the block (whether PyTorch raised something or
    carried on with a null pointer)."""
    before = memory_stats(device)["num_ooms"]
    try:
        yield
    except RuntimeError as e:
        if memory_stats(device)["num_ooms"] > before:
            raise _oom_error(device) from e
        raise
    if memory_stats(device)["num_ooms"] > before:
        raise _oom_error(device)


def offload(model, **options):
    """Parameters and Adam state in Strata's offload tiers, fetched ahead by
    its prefetcher (strata_offload.py, docs/integrations.md): returns the
    Offload; call its step() where optimizer.step() was."""
    import strata_offload  # pylint: disable=import-outside-toplevel

    return strata_offload.offload(model, **options)
