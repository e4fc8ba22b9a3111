"""The one loader of Strata's shared libraries, with every C function's
signature declared once.

A library is looked for, in order: the path the caller gave; the override
variable (STRATA_TORCH_LIBRARY for libstrata_torch.so, STRATA_LIBRARY for
libstrata.so: for testing another build, never needed); the directories
the build wrote into _library_dirs.py (the build tree's, or the installed
library directory, relative to this package); then the dynamic loader's
search path. Loaded once per path.
"""

import ctypes
import functools
import os
from typing import Any, Dict, List, Optional, Tuple, Type

from .errors import StrataError

__all__ = ["TORCH_PLUGIN", "LIBSTRATA", "AdamOptions", "AdamTensors", "find", "libstrata_of",
           "load"]

TORCH_PLUGIN = "libstrata_torch.so"
LIBSTRATA = "libstrata.so"
_OVERRIDE = {TORCH_PLUGIN: "STRATA_TORCH_LIBRARY", LIBSTRATA: "STRATA_LIBRARY"}


class AdamOptions(ctypes.Structure):
    """strata_adam_options (kernels.h)."""

    _fields_ = [("lr", ctypes.c_double), ("beta1", ctypes.c_double),
                ("beta2", ctypes.c_double), ("eps", ctypes.c_double),
                ("weight_decay", ctypes.c_double), ("decoupled_weight_decay", ctypes.c_int),
                ("maximize", ctypes.c_int), ("amsgrad", ctypes.c_int)]


class AdamTensors(ctypes.Structure):
    """strata_adam_tensors (kernels.h)."""

    _fields_ = [("params", ctypes.c_void_p), ("grads", ctypes.c_void_p),
                ("grad_type", ctypes.c_int), ("exp_avg", ctypes.c_void_p),
                ("exp_avg_sq", ctypes.c_void_p), ("max_exp_avg_sq", ctypes.c_void_p),
                ("params_out", ctypes.c_void_p), ("out_type", ctypes.c_int),
                ("count", ctypes.c_size_t)]


_vp, _u64, _sz, _int = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int
_out = ctypes.POINTER(_vp)
_text = ctypes.POINTER(ctypes.c_char_p)

# name -> (restype, argtypes), per library.
_SIGNATURES: Dict[str, Dict[str, Tuple[Any, List[Any]]]] = {
    TORCH_PLUGIN: {
        "strata_torch_malloc": (_vp, [ctypes.c_ssize_t, _int, _vp]),
        "strata_torch_free": (None, [_vp, ctypes.c_ssize_t, _int, _vp]),
        "strata_torch_empty_cache": (None, []),
        "strata_torch_stats_json": (_vp, [_int]),
        "strata_torch_snapshot_json": (_vp, [_int]),
        "strata_torch_trace_json": (_vp, [_int]),
        "strata_torch_last_oom_report": (_vp, [_int]),
        "strata_torch_memory_summary": (_vp, [_int]),
        "strata_torch_string_free": (None, [_vp]),
        "strata_torch_last_error": (ctypes.c_char_p, []),
        "strata_torch_allocator": (_vp, [_int]),
        "strata_torch_is_allocator_key": (_int, [ctypes.c_char_p]),
    },
    LIBSTRATA: {
        "strata_allocator_create": (_int, [ctypes.c_char_p, _out]),
        "strata_allocator_destroy": (_int, [_vp]),
        "strata_stats_json": (_int, [_vp, _text]),
        "strata_memory_summary": (_int, [_vp, _text]),
        "strata_stream_synchronize": (_int, [_vp, _vp]),
        "strata_residency_create": (_int, [_vp, ctypes.c_char_p, _out]),
        "strata_residency_destroy": (_int, [_vp]),
        "strata_residency_register": (_int, [_vp, _sz, _int, _int, ctypes.POINTER(_u64)]),
        "strata_residency_unregister": (_int, [_vp, _u64]),
        "strata_residency_acquire_mode": (_int, [_vp, _u64, _vp, _int, _out]),
        "strata_residency_release": (_int, [_vp, _u64, _vp]),
        "strata_residency_acquire_host": (_int, [_vp, _u64, _int, _out]),
        "strata_residency_release_host": (_int, [_vp, _u64]),
        "strata_residency_where": (_int, [_vp, _u64, ctypes.POINTER(_int)]),
        "strata_residency_stats_json": (_int, [_vp, _text]),
        "strata_prefetcher_create": (_int, [_vp, ctypes.c_char_p, _out]),
        "strata_prefetcher_destroy": (_int, [_vp]),
        "strata_prefetcher_begin_step": (_int, [_vp]),
        "strata_prefetcher_end_step": (_int, [_vp]),
        "strata_prefetcher_acquire_mode": (_int, [_vp, _u64, _vp, _int, _out]),
        "strata_prefetcher_release": (_int, [_vp, _u64, _vp]),
        "strata_prefetcher_acquire_host": (_int, [_vp, _u64, _int, _out]),
        "strata_prefetcher_release_host": (_int, [_vp, _u64]),
        "strata_prefetcher_stats_json": (_int, [_vp, _text]),
        "strata_kernels_create": (_int, [_vp, ctypes.c_uint, _out]),
        "strata_kernels_destroy": (_int, [_vp]),
        "strata_adam_step_host": (_int, [_vp, ctypes.POINTER(AdamTensors),
                                         ctypes.POINTER(AdamOptions), _u64]),
        "strata_adam_step_async": (_int, [_vp, _vp, ctypes.POINTER(AdamTensors),
                                          ctypes.POINTER(AdamOptions), _u64]),
        "strata_last_error_message": (ctypes.c_char_p, []),
        "strata_string_free": (None, [ctypes.c_char_p]),
    },
}

# What each library needs that a build may leave out, for the message.
_BUILT_WITH = {TORCH_PLUGIN: "the CUDA toolkit", LIBSTRATA: "the offload tiers (liburing)"}


def _build_dirs() -> List[str]:
    """The directories the build or the install wrote down, absolute."""
    try:
        from ._library_dirs import LIBRARY_DIRS  # pylint: disable=import-outside-toplevel
    except ImportError:  # the source tree's package: no build wrote it
        return []
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.normpath(os.path.join(here, d)) for d in LIBRARY_DIRS]


def find(name: str, path: Optional[str] = None) -> str:
    """Where `name` (TORCH_PLUGIN or LIBSTRATA) will be loaded from: a path,
    or the bare name for the dynamic loader to search."""
    if path:
        return path
    override = os.environ.get(_OVERRIDE[name])
    if override:
        return override
    for directory in _build_dirs():
        candidate = os.path.join(directory, name)
        if os.path.exists(candidate):
            return candidate
    return name


@functools.lru_cache(maxsize=None)
def _load(path: str, name: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    for function, (restype, argtypes) in _SIGNATURES[name].items():
        fn = getattr(lib, function)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def libstrata_of(plugin: ctypes.CDLL) -> ctypes.CDLL:
    """libstrata's functions as the loaded plugin links them: the copy of
    Strata whose allocator PyTorch allocates from (strata_torch_allocator
    hands out its handles), with their signatures set. A CDLL of its own,
    so the plugin's functions keep theirs."""
    lib = ctypes.CDLL(plugin._name)  # pylint: disable=protected-access
    for function, (restype, argtypes) in _SIGNATURES[LIBSTRATA].items():
        fn = getattr(lib, function)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def load(name: str, path: Optional[str] = None,
         error: Type[StrataError] = StrataError) -> ctypes.CDLL:
    """`name` (TORCH_PLUGIN or LIBSTRATA), loaded from find(name, path),
    with its functions' signatures set. Raises `error` when it cannot be
    loaded or lacks a function, saying where it looked."""
    where = find(name, path)
    try:
        return _load(where, name)
    except OSError as e:
        looked = _build_dirs() or ["no build directory recorded"]
        raise error(f"cannot load {where}: {e} (looked in: {', '.join(looked)}, then the "
                    f"loader's search path). Build Strata with {_BUILT_WITH[name]}, or pass "
                    "the library's path") from e
    except AttributeError as e:
        raise error(f"{where} is not the {name} this package needs ({e}): build it with "
                    f"{_BUILT_WITH[name]}") from e

