"""Strata as PyTorch's CUDA allocator: install() and what it answers.

install() loads libstrata_torch.so (_native.py says where from), makes it
PyTorch's CUDA allocator with torch.cuda.memory.CUDAPluggableAllocator and
wires the extra hooks (init, empty_cache, set_per_process_memory_fraction,
record_stream) where the installed PyTorch exposes them. Strata reads
STRATA_CONF (docs/configuration.md).

PyTorch's plugin path passes a null pointer on unchecked, so the allocation
function wired in (strata_torch_malloc_or_throw) throws instead: a failed
allocation is a RuntimeError whose message begins "CUDA out of memory." (the
plugin path cannot raise torch.cuda.OutOfMemoryError itself); code run
inside `with out_of_memory_errors():` gets torch.cuda.OutOfMemoryError with
Strata's OOM report.

Thread safety: install() once, from the main thread, before CUDA starts;
the rest may be called from any thread (each call asks the library, which
is thread safe).
"""

import contextlib
import ctypes
import json
from typing import Any, Dict, Iterator, List, Optional, Union

import torch

from . import _native
from .errors import StrataTorchError

Device = Union[None, int, str, "torch.device"]

_HOOKS = (
    ("set_init_fn", "strata_torch_init"),
    ("set_reset_fn", "strata_torch_empty_cache"),
    ("set_memory_fraction_fn", "strata_torch_set_memory_fraction"),
    ("set_record_stream_fn", "strata_torch_record_stream"),
)
_lib: Optional[ctypes.CDLL] = None


def install(path: Optional[str] = None) -> List[str]:
    """Makes Strata PyTorch's CUDA allocator; returns the hooks wired.

    `path`: libstrata_torch.so to load (default: found as _native.find
    says). Must run before CUDA is initialised in this process, else
    StrataTorchError; so does a library that cannot be loaded. Calling it
    again does nothing and returns [].
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
    pluggable = getattr(torch.cuda.memory, "CUDAPluggableAllocator", None)
    if pluggable is None:
        raise StrataTorchError(
            f"strata_torch.install() needs PyTorch 2.0 or later: PyTorch "
            f"{getattr(torch, '__version__', '?')} "
            "has no torch.cuda.memory.CUDAPluggableAllocator to put Strata under it (the "
            "preload shim, libstrata_preload.so, works with any version)")
    where = _native.find(_native.TORCH_PLUGIN, path)
    lib = _native.load(_native.TORCH_PLUGIN, where, StrataTorchError)
    allocator = pluggable(where, "strata_torch_malloc_or_throw", "strata_torch_free")
    handle = getattr(allocator, "_allocator", None)
    wired = []
    for setter, symbol in _HOOKS:
        hook = getattr(handle, setter, None)
        if hook is not None:
            hook(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value)
            wired.append(setter)
    torch.cuda.memory.change_current_allocator(allocator)  # type: ignore[attr-defined]
    _lib = lib
    return wired


def installed() -> bool:
    """True once install() succeeded."""
    return _lib is not None


def _library() -> ctypes.CDLL:
    if _lib is None:
        raise StrataTorchError("strata_torch.install() has not run")
    return _lib


def _device(device: Device) -> int:
    """The CUDA device index `device` names, as torch.cuda's functions take
    it: None (the current one), an index, "cuda", "cuda:N" or a
    torch.device of type cuda. StrataTorchError for anything else."""
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    kind, index = None, None
    if isinstance(device, str):
        kind, _, text = device.partition(":")
        index = int(text) if text.isdigit() else (None if text == "" else -1)
    elif hasattr(device, "type") and hasattr(device, "index"):
        kind, index = device.type, device.index
    if kind != "cuda" or (index is not None and index < 0):
        raise StrataTorchError(f"not a CUDA device: {device!r} (an index, 'cuda', 'cuda:N' "
                               "or a torch.device of type cuda)")
    return torch.cuda.current_device() if index is None else index


def _text(function: str, device: Device) -> str:
    lib = _library()
    pointer = getattr(lib, function)(_device(device))
    if not pointer:
        raise StrataTorchError(lib.strata_torch_last_error().decode())
    try:
        return ctypes.string_at(pointer).decode()
    finally:
        lib.strata_torch_string_free(pointer)


def _offloaded() -> Any:
    """The active offload() when install() has not run (the sim device)."""
    if _lib is not None:
        return None
    from . import _offload  # pylint: disable=import-outside-toplevel

    return _offload.active()


def memory_stats(device: Device = None) -> Dict[str, int]:
    """Counters with torch.cuda.memory_stats() names, as a dict; with an
    offload() on the sim device, its allocator's, the tiers' ("offload.*")
    and the prefetcher's ("prefetch.*"). StrataTorchError when neither
    install() nor offload() has run."""
    off = _offloaded()
    if off is not None:
        return off.memory_stats()
    return json.loads(_text("strata_torch_stats_json", device))


def memory_summary(device: Device = None) -> str:
    """The table of torch.cuda.memory_summary(), from Strata (with an
    offload(): its allocator's, with the tiers' and prefetcher's sections)."""
    off = _offloaded()
    if off is not None:
        return off.memory_summary()
    return _text("strata_torch_memory_summary", device)


def snapshot(device: Device = None) -> Dict[str, Any]:
    """Strata's snapshot (docs/allocator.md) as a dict."""
    return json.loads(_text("strata_torch_snapshot_json", device))


def trace(device: Device = None) -> Dict[str, Any]:
    """Strata's event trace (docs/allocator.md, "Event trace") as a dict:
    the last N allocations, frees, mappings and stitches where STRATA_CONF
    sets trace_buffer:N, else no events."""
    return json.loads(_text("strata_torch_trace_json", device))


def last_oom_report(device: Device = None) -> Optional[Dict[str, Any]]:
    """The last OOM report as a dict, or None."""
    return json.loads(_text("strata_torch_last_oom_report", device))


def empty_cache() -> None:
    """Returns every device's cached memory (torch.cuda.empty_cache does the
    same when PyTorch took the reset hook)."""
    _library().strata_torch_empty_cache()


def _oom_error(device: Device) -> Exception:
    report = last_oom_report(device) or {}
    return torch.cuda.OutOfMemoryError(  # type: ignore[call-arg,return-value]
        f"CUDA out of memory: Strata could not allocate {report.get('requested', '?')} bytes "
        f"on device {_device(device)}: {report.get('verdict', 'no report')}\n"
        f"Strata's OOM report: {json.dumps(report, indent=1)}")


@contextlib.contextmanager
def out_of_memory_errors(device: Device = None) -> Iterator[None]:
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
