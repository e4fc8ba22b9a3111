"""The C API's enums (include/strata/*.h), the one place Python spells them.

tests/integrations/python_enums_test.py checks every member against the
headers, so a value changed there fails the suite instead of drifting here.
"""

import enum

__all__ = ["Status", "BufferKind", "ResidencyPolicy", "AccessMode", "Tier", "DType"]


class Status(enum.IntEnum):
    """strata_status (strata.h): what a C API call returned."""

    OK = 0
    ERROR_INVALID_ARGUMENT = 1
    ERROR_OUT_OF_MEMORY = 2
    ERROR_NOT_SUPPORTED = 3
    ERROR_NO_DRIVER = 4
    ERROR_NO_DEVICE = 5
    ERROR_DEVICE = 6
    ERROR_INJECTED_FAULT = 7
    ERROR_IO = 8
    ERROR_COMM = 9


class BufferKind(enum.IntEnum):
    """strata_buffer_kind (residency.h): what a registered buffer holds."""

    BUFFER_PARAMETER = 0
    BUFFER_GRADIENT = 1
    BUFFER_OPTIMIZER_STATE = 2
    BUFFER_OTHER = 3


class ResidencyPolicy(enum.IntEnum):
    """strata_residency_policy (residency.h): where a buffer may go."""

    EVICTABLE = 0
    PINNED_ON_DEVICE = 1
    HOST_ONLY = 2
    NVME_HOME = 3


class AccessMode(enum.IntEnum):
    """strata_access_mode (residency.h): how an acquire uses the buffer."""

    READ_WRITE = 0
    READ_ONLY = 1
    OVERWRITE = 2


class Tier(enum.IntEnum):
    """strata_tier (residency.h): where a buffer is now."""

    TIER_NONE = 0
    TIER_DEVICE = 1
    TIER_HOST = 2
    TIER_NVME = 3


class DType(enum.IntEnum):
    """strata_dtype (kernels.h): element types of the kernels."""

    F32 = 0
    BF16 = 1
    F16 = 2
