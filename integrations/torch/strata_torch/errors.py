"""The errors strata_torch raises: one hierarchy under StrataError.

    StrataError (RuntimeError)          anything Strata refused or could not do
    ├── StrataTorchError                install(), or the plugin could not answer
    └── OffloadError                    offload(): a Strata call, or the options
        └── PlacementError (+ValueError) a placement that cannot be honoured

`status` is the C API's strata_status (enums.Status) when a Strata call
failed, else None.
"""

from typing import Optional

from .enums import Status

__all__ = ["StrataError", "StrataTorchError", "OffloadError", "PlacementError"]


class StrataError(RuntimeError):
    """Strata refused something or could not do it; the message says what
    and why."""

    def __init__(self, message: str, status: Optional[Status] = None) -> None:
        super().__init__(message)
        self.status = status


class StrataTorchError(StrataError):
    """Strata could not be installed as PyTorch's allocator, or could not
    answer a question about it."""


class OffloadError(StrataError):
    """offload() or one of its calls failed; the message is Strata's, and
    for an out-of-memory one says what was held on the device."""


class PlacementError(OffloadError, ValueError):
    """A placement that cannot be honoured; the message says which and why."""
