"""The errors strata_torch raises: one hierarchy under StrataError.

    StrataError (RuntimeError)          anything Strata refused or could not do
    ├── StrataTorchError                install(), or the plugin could not answer
    └── OffloadError                    offload(): a Strata call, or the options
        └── OptionError (+ValueError)   an option offload() cannot take
            └── PlacementError          a placement that cannot be honoured

`status` is the C API's strata_status (enums.Status) when a Strata call
failed, else None.
"""

from typing import Optional

from .enums import Status

__all__ = ["StrataError", "StrataTorchError", "OffloadError", "OptionError", "PlacementError"]


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


class OptionError(OffloadError, ValueError):
    """An option offload() cannot take (a learning rate that is not a finite
    number, betas outside [0, 1), ...); raised before anything is made."""


class PlacementError(OptionError):
    """A placement that cannot be honoured; the message says which and why."""
