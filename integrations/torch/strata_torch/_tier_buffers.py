"""The buffers of one offload() in Strata's tiers, through libstrata's C API
(strata/residency.h, strata/prefetch.h, strata/kernels.h): the allocator,
residency manager, prefetcher and kernels handles, each buffer's name, size
and holds, and tensors over the bytes an acquire hands out.

Two devices (_offload.py says what each means for training):
  - CUDA, with strata_torch.install() active: the plugin's own allocator of
    the current CUDA device (strata_torch_allocator), libstrata's functions
    looked up through the plugin (the copy of Strata it links); acquires
    and releases are ordered on PyTorch's current stream, and the bytes
    are CUDA tensors (PyTorch reads __cuda_array_interface__, which needs
    NumPy).
  - sim: an allocator of its own over a sim device, whose memory is host
    memory: the bytes are CPU tensors, and the host waits for each fill.

Every failing call is an OffloadError with Strata's message (and, for an
out-of-memory, what was held on the device).

Thread safety: one training loop drives it, its hooks one at a time.
"""

import ctypes
import math
from typing import Any, Dict, List, Optional, Set, Tuple

import torch

from . import _allocator, _native
from .enums import AccessMode, DType, ResidencyPolicy, Status, Tier
from .errors import OffloadError, OptionError

__all__ = ["DTYPES", "TierBuffers", "check_cuda_options"]

_POLICY = {"device": ResidencyPolicy.PINNED_ON_DEVICE, "host": ResidencyPolicy.HOST_ONLY,
           "nvme": ResidencyPolicy.NVME_HOME, "offload": ResidencyPolicy.EVICTABLE}
_TIERS = {Tier.TIER_NONE: "none", Tier.TIER_DEVICE: "device", Tier.TIER_HOST: "host",
          Tier.TIER_NVME: "nvme"}
# The kernels' type of the parameters offload() takes, and their element bytes.
DTYPES = {torch.float32: (DType.F32, 4), torch.bfloat16: (DType.BF16, 2)}


class TierBuffers:
    """The handles of one offload() and its registered buffers."""

    def __init__(self, library: Optional[str]) -> None:
        """On CUDA when install() has run, else on sim (libstrata.so found
        as _native.py says, or at `library`)."""
        self.cuda = _allocator.installed()
        if self.cuda:
            self.device = torch.device("cuda", torch.cuda.current_device())
            plugin = _allocator._library()  # pylint: disable=protected-access
            self.lib = _native.libstrata_of(plugin)
        else:
            self.device = torch.device("cpu")
            self.lib = _native.load(_native.LIBSTRATA, library, OffloadError)
        self.alloc: Any = None
        self.res: Any = None
        self.fetch: Any = None
        self.kernels: Any = None
        self.names: Dict[int, str] = {}  # handle -> what it holds, for messages
        self.sizes: Dict[int, int] = {}  # handle -> bytes
        self.held: Dict[int, int] = {}  # handle -> device acquires not yet released
        self.pinned: Set[int] = set()  # handles placed on the device
        self.by_name: Dict[str, int] = {}  # buffer name (as placement patterns see it) -> handle

    def open(self, device: Optional[str], conf: str) -> None:
        """The allocator (sim: of `device`, obeying conf's allocator keys;
        CUDA: the plugin's), then the manager, prefetcher and kernels, each
        obeying its keys of `conf`."""
        if self.cuda:
            plugin = _allocator._library()  # pylint: disable=protected-access
            index = self.device.index
            handle = plugin.strata_torch_allocator(index)
            if not handle:
                raise OffloadError(f"offload: Strata's allocator of cuda:{index}: "
                                   f"{plugin.strata_torch_last_error().decode()}")
            self.alloc = ctypes.c_void_p(handle)
        else:
            spec = f"device:{device or 'sim:capacity=1GiB'}" + (f",{conf}" if conf else "")
            self.alloc = self.make("strata_allocator_create", spec.encode())
        self.res = self.make("strata_residency_create", self.alloc, conf.encode())
        self.fetch = self.make("strata_prefetcher_create", self.res, conf.encode())
        # The device kernels queue on the allocator's device; the host ones
        # run on every hardware thread.
        self.kernels = self.make("strata_kernels_create", self.alloc, ctypes.c_uint(0))

    def check(self, status: int, what: str) -> None:
        if status == 0:
            return
        message = f"{what}: {self.lib.strata_last_error_message().decode()}"
        if status == Status.ERROR_OUT_OF_MEMORY:
            message += self._held_on_device()
        try:
            code: Optional[Status] = Status(status)
        except ValueError:
            code = None
        raise OffloadError(message, code)

    def _held_on_device(self) -> str:
        """What an out-of-memory acquire could not move off the device: the
        buffers held by modules running now (their parameters, the
        optimizer's state in step()), largest first."""
        held = sorted(((n, self.names.get(h, f"buffer {h}"), self.sizes[h])
                       for h, n in self.held.items() if n > 0 and h in self.sizes),
                      key=lambda t: -t[2])
        pinned = sum(self.sizes.get(h, 0) for h in self.pinned)
        if pinned:
            held_pinned = {h for h, n in self.held.items() if n > 0}
            listed = [self.names.get(h, f"buffer {h}") for h in sorted(self.pinned)
                      if h not in held_pinned]
            more = f" and {len(listed) - 4} more" if len(listed) > 4 else ""
            pinned_note = (f"\nstrata_torch.offload: pinned on the device by placement "
                           f"({pinned / 2**20:.2f} MiB): {', '.join(listed[:4])}{more}")
        else:
            pinned_note = ""
        if not held:
            return ("\nstrata_torch.offload: nothing Strata manages is held on the device: the "
                    "device is too small for one buffer next to what PyTorch itself holds"
                    + pinned_note)
        total = sum(size for _n, _name, size in held)
        names = ", ".join(f"{name} ({size / 2**20:.2f} MiB)" for _n, name, size in held[:8])
        more = f" and {len(held) - 8} more" if len(held) > 8 else ""
        return (f"\nstrata_torch.offload: held on the device, so not offloadable now "
                f"({total / 2**20:.2f} MiB): {names}{more}. Everything else Strata holds "
                "was free to move to the host tier and NVMe: a larger device, or smaller "
                "modules, would fit" + pinned_note)

    def make(self, fn: str, *args: Any) -> ctypes.c_void_p:
        out = ctypes.c_void_p()
        self.check(getattr(self.lib, fn)(*args, ctypes.byref(out)), fn)
        return out

    def register(self, nbytes: int, kind: int, name: str, place: str, what: str) -> int:
        """A new buffer of `nbytes` named `name` (for placement patterns and
        where()), `what` in messages, placed at `place`."""
        h = ctypes.c_uint64()
        self.check(self.lib.strata_residency_register(self.res, nbytes, kind, _POLICY[place],
                                                      ctypes.byref(h)), f"register {name}")
        self.by_name[name] = h.value
        self.names[h.value] = what
        self.sizes[h.value] = nbytes
        if place == "device":
            self.pinned.add(h.value)
        return h.value

    def where(self, name: str) -> str:
        """Where buffer `name` is now: "device", "host", "nvme" or "none"."""
        if name not in self.by_name:
            raise OffloadError(f"where: no buffer named {name!r}")
        tier = ctypes.c_int()
        self.check(self.lib.strata_residency_where(self.res, self.by_name[name],
                                                   ctypes.byref(tier)), f"where {name}")
        return _TIERS[Tier(tier.value)]

    def stream(self) -> Optional[ctypes.c_void_p]:
        """Where acquires and releases are ordered: PyTorch's current CUDA
        stream, or the sim device's default stream (None)."""
        if not self.cuda:
            return None
        return ctypes.c_void_p(torch.cuda.current_stream(self.device).cuda_stream)

    def _name(self, h: int) -> str:
        return self.names.get(h, f"buffer {h}")

    def acquire(self, h: int, mode: AccessMode, through_prefetcher: bool = True) -> int:
        """Buffer `h` on the device: its address."""
        ptr = ctypes.c_void_p()
        stream = self.stream()
        if through_prefetcher:
            status = self.lib.strata_prefetcher_acquire_mode(self.fetch, h, stream, mode,
                                                             ctypes.byref(ptr))
        else:
            status = self.lib.strata_residency_acquire_mode(self.res, h, stream, mode,
                                                            ctypes.byref(ptr))
        self.check(status, f"acquire of {self._name(h)}")
        self.held[h] = self.held.get(h, 0) + 1
        if not self.cuda:
            # The fill is stream-ordered; the CPU reads the bytes next. (On
            # CUDA the work that reads them is queued on the same stream.)
            self.check(self.lib.strata_stream_synchronize(self.alloc, None), "synchronize")
        if ptr.value is None:
            raise OffloadError(f"acquire of {self._name(h)}: Strata returned success with a "
                               "null pointer")
        return ptr.value

    def release(self, h: int, through_prefetcher: bool = True) -> None:
        fn = (self.lib.strata_prefetcher_release if through_prefetcher
              else self.lib.strata_residency_release)
        self.check(fn(self.fetch if through_prefetcher else self.res, h, self.stream()),
                   f"release of {self._name(h)}")
        self.held[h] -= 1

    def acquire_host(self, h: int, mode: AccessMode = AccessMode.READ_WRITE,
                     through_prefetcher: bool = True) -> int:
        """Buffer `h` held in pinned host memory for a host kernel, through
        the prefetcher (a hold of the step's order: later steps read it
        from NVMe ahead of it) unless `through_prefetcher` is False (a
        look outside the training loop's own uses)."""
        ptr = ctypes.c_void_p()
        if through_prefetcher:
            status = self.lib.strata_prefetcher_acquire_host(self.fetch, h, mode,
                                                             ctypes.byref(ptr))
        else:
            status = self.lib.strata_residency_acquire_host(self.res, h, mode, ctypes.byref(ptr))
        self.check(status, f"host acquire of {self._name(h)}")
        if ptr.value is None:
            raise OffloadError(f"host acquire of {self._name(h)}: Strata returned success "
                               "with a null pointer")
        return ptr.value

    def release_host(self, h: int, through_prefetcher: bool = True) -> None:
        status = (self.lib.strata_prefetcher_release_host(self.fetch, h) if through_prefetcher
                  else self.lib.strata_residency_release_host(self.res, h))
        self.check(status, f"host release of {self._name(h)}")

    def fill(self, h: int, src: Optional[torch.Tensor], zeros: int = 0) -> None:
        """Buffer `h` = `src`'s values, or `zeros` fp32 zeros (src None)."""
        ptr = self.acquire(h, AccessMode.READ_WRITE, through_prefetcher=False)
        try:
            if src is None:
                self.view(ptr, ((zeros,), torch.float32)).zero_()
            else:
                self.view(ptr, ((src.numel(),), src.dtype)).copy_(src.reshape(-1))
        finally:
            self.release(h, through_prefetcher=False)

    def view(self, ptr: int, shape_and_dtype: Tuple[Tuple[int, ...], torch.dtype],
             host: bool = False) -> torch.Tensor:
        """A tensor of that shape and dtype over the device bytes at `ptr`
        (with `host`, the pinned host bytes acquire_host gave), no copy: a
        CUDA tensor for device bytes on CUDA, else (sim's device memory is
        host memory) a CPU tensor."""
        shape, dtype = shape_and_dtype
        nbytes = math.prod(shape) * DTYPES[dtype][1]
        if self.cuda and not host:
            raw = torch.as_tensor(_DeviceBytes(ptr, nbytes), device=self.device)
            return raw.view(dtype).view(shape)
        return torch.frombuffer((ctypes.c_char * nbytes).from_address(ptr),
                                dtype=dtype).view(shape)

    def text(self, fn: Any, handle: Any) -> str:
        """The text a Strata call returned through its out pointer (freed)."""
        out = ctypes.c_char_p()
        self.check(fn(handle, ctypes.byref(out)), fn.__name__)
        try:
            return (out.value or b"").decode()
        finally:
            self.lib.strata_string_free(out)

    def close(self, handles: List[int]) -> None:
        """Destroys the prefetcher, unregisters `handles`, destroys the
        kernels, the manager and (sim) the allocator; the plugin's stays
        the plugin's."""
        if self.fetch:
            self.lib.strata_prefetcher_destroy(self.fetch)
            self.fetch = None
        if self.res:
            for handle in handles:
                self.lib.strata_residency_unregister(self.res, handle)
        for fn, name in (("strata_kernels_destroy", "kernels"),
                         ("strata_residency_destroy", "res"),
                         ("strata_allocator_destroy", "alloc")):
            if getattr(self, name):
                if name != "alloc" or not self.cuda:
                    getattr(self.lib, fn)(getattr(self, name))
                setattr(self, name, None)


class _DeviceBytes:
    """`nbytes` of CUDA memory at `ptr`, as PyTorch reads foreign device
    memory (__cuda_array_interface__, version 2: no stream to wait on)."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 2}


def check_cuda_options(device: Any, conf: str) -> None:
    """With install() active: no `device` of its own, no allocator key in
    `conf` (STRATA_CONF configures the plugin's allocator). OptionError
    otherwise."""
    if device is not None:
        raise OptionError(
            "offload: with strata_torch.install() active, offload() uses the plugin's allocator "
            f"of the current CUDA device (configured by STRATA_CONF): leave device={device!r} "
            "out")
    plugin = _allocator._library()  # pylint: disable=protected-access
    for item in conf.split(","):
        key = item.split(":", 1)[0].strip()
        if "=" not in key and plugin.strata_torch_is_allocator_key(key.encode()):
            raise OptionError(
                f"offload: conf key {key!r} configures the allocator, which on CUDA is the "
                "plugin's: set it in STRATA_CONF before strata_torch.install()")
