"""Strata under PyTorch: its CUDA allocator, and offloaded training.

    import strata_torch
    strata_torch.install()   # first thing, before any tensor is on the GPU
    ...                      # train as usual

or, on the sim device, parameters and Adam state in Strata's tiers:

    off = strata_torch.offload(model, lr=1e-3, device="sim:capacity=64MiB")
    ...                      # loss.backward(); off.step()

Everything public is here; errors are in strata_torch.errors (all
StrataError), the C API's enums in strata_torch.enums. Needs only torch and
Strata's libraries, which the package finds where the build or the install
put them (no environment variable). docs/integrations.md has the whole
story.
"""

from typing import Any

from . import enums, errors
from ._allocator import (empty_cache, install, installed, last_oom_report, memory_stats,
                         memory_summary, out_of_memory_errors, snapshot, trace)
from ._placement import PLACES, placements
from .errors import OffloadError, OptionError, PlacementError, StrataError, StrataTorchError

__all__ = [
    "PLACES",
    "Offload",
    "OffloadError",
    "OptionError",
    "PlacementError",
    "StrataError",
    "StrataTorchError",
    "empty_cache",
    "enums",
    "errors",
    "install",
    "installed",
    "last_oom_report",
    "memory_stats",
    "memory_summary",
    "offload",
    "out_of_memory_errors",
    "placements",
    "snapshot",
    "trace",
]


def offload(model: Any, **options: Any) -> Any:
    """Parameters and Adam state in Strata's offload tiers, fetched ahead by
    its prefetcher (_offload.py, docs/integrations.md): returns the
    Offload; call its step() where optimizer.step() was. Errors:
    OffloadError (OptionError for an option it cannot take, PlacementError
    for a placement)."""
    from . import _offload  # pylint: disable=import-outside-toplevel

    return _offload.offload(model, **options)


def __getattr__(name: str) -> Any:
    # Offload is imported when asked for: the allocator alone needs no more
    # of torch than CUDAPluggableAllocator.
    if name == "Offload":
        from ._offload import Offload  # pylint: disable=import-outside-toplevel

        return Offload
    raise AttributeError(f"module 'strata_torch' has no attribute {name!r}")
