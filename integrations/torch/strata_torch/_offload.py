"""Parameters and Adam state that live in Strata's offload tiers.

    import strata_torch
    off = strata_torch.offload(model, lr=1e-3,
                               device="sim:capacity=64MiB",
                               conf="host_capacity:32MiB,nvme_dir:/scratch")
    for batch in data:
        loss = loss_fn(model(batch))
        loss.backward()
        off.step()          # Adam on the host kernel, then the prefetcher's step

offload() registers every parameter (fp32, or bf16 with an fp32 master
copy), and Adam's two moments for each, with a residency manager
(libstrata's C API, strata/residency.h) and steps a prefetcher over them
(strata/prefetch.h). A module's parameters point at
their device buffer from its forward pre-hook until its forward ends; in
backward, from when the module's output gradient arrives (or the first
saved tensor that needs one of them is unpacked, or its gradient arrives)
until autograd has accumulated that parameter's gradient. The rest of the
time they are released, so the manager may spill them to host memory and
NVMe, and the prefetcher fetches them back ahead of the next use, in the
order the first step recorded. Gradients stay ordinary CPU tensors.

Any module is right, whatever it calls: tensors autograd saves in forward
that are views of a parameter's buffer (F.linear saves the weight's
transpose) are saved as "that view of that parameter" (saved-tensor hooks)
and rebuilt over its buffer in backward, wherever the buffer is by then. A
module that holds parameters and calls children keeps its own until their
gradients are accumulated. An exception inside a forward leaves nothing
held: the next forward or step() releases what it left. Zero-size
parameters are left as they are (nothing to offload).

Where each buffer may go is chosen per buffer (_placement.py):
`placement` maps name patterns to a place, and `parameters` /
`optimizer_state` give the rest by fraction, in the model's order:

    strata_torch.offload(model, lr=1e-3,
                         placement={"head.*": "device"},  # patterns first
                         parameters={"device": 0.25},     # then a quarter kept
                         optimizer_state="host")          # moments never on NVMe

The places: "device" (pinned on the device, never spilled), "host" (may
leave the device for host memory, never for NVMe), "nvme" (written to NVMe
whenever its last use ends: the release waits for the write; needs
nvme_dir) and "offload" (the default: host memory, then NVMe, as room
requires).

step() runs Strata's Adam/AdamW kernel (the same operations as
torch.optim.Adam/AdamW with foreach=False) on each parameter and its
moments, then ends the prefetcher's step. `adam` chooses where:
"device" (strata_adam_step_async: queued on the device's stream over the
buffers acquired there, no host wait) or "host" (strata_adam_step_host on
host threads, ZeRO-Offload's way: the parameter, or its fp32 master, and
the moments are held in pinned host memory, strata_residency_acquire_host,
so the state never crosses to the device; only the gradient comes down
and the parameter goes up at its next use). A parameter with a buffer
placed "device" (pinned there) is updated on the device either way. For a
bf16 parameter the kernel widens its bf16 gradient, updates the fp32 master
and writes the parameter as the master rounded to nearest even.

Two devices:
  - With strata_torch.install() active (CUDA), the buffers are in the
    plugin's own allocator of the current CUDA device
    (strata_torch_allocator): the memory PyTorch allocates from, so an
    allocation PyTorch makes spills released buffers to make room.
    Parameters are CUDA tensors viewing Strata's buffers; every acquire
    and release is ordered on PyTorch's current stream (the host never
    waits for a fetch); the model's other tensors (its buffers) move to
    the device. `device` must be left out (STRATA_CONF configures the
    plugin), as must allocator keys in `conf`. `adam` defaults to
    "device". Gradients are PyTorch's own CUDA tensors until step()
    consumes them (with adam="host", each is copied to pinned host memory
    first).
    Needs NumPy (PyTorch reads the buffers' __cuda_array_interface__).
  - Otherwise the `sim` device, whose memory is host memory: parameters
    are CPU tensors viewing Strata's buffers (as ZeRO-3 re-points .data);
    `adam` defaults to "host".
Needs libstrata.so built with the tiers (liburing), found as _native.py
says (on CUDA, the one the plugin links); no environment variable.

Thread safety: one training loop drives an Offload; its hooks run on the
threads autograd runs them on, one at a time.
"""

import ctypes
import json
import math
from typing import Any, Dict, List, Optional, Tuple

import torch

from . import _allocator, _native
from ._placement import Placement, Share, placements
from .enums import AccessMode, BufferKind, DType, ResidencyPolicy, Status, Tier
from .errors import OffloadError, OptionError

__all__ = ["Offload", "offload", "active"]

_owner: Dict[int, "Offload"] = {}  # id(parameter) -> the Offload holding it (until closed)

_POLICY = {"device": ResidencyPolicy.PINNED_ON_DEVICE, "host": ResidencyPolicy.HOST_ONLY,
           "nvme": ResidencyPolicy.NVME_HOME, "offload": ResidencyPolicy.EVICTABLE}
_TIERS = {Tier.TIER_NONE: "none", Tier.TIER_DEVICE: "device", Tier.TIER_HOST: "host",
          Tier.TIER_NVME: "nvme"}
# The kernels' type of the parameters offload() takes, and their element bytes.
_DTYPES = {torch.float32: (DType.F32, 4), torch.bfloat16: (DType.BF16, 2)}


def _check_options(lr: Any, betas: Any, eps: Any, weight_decay: Any, device: Any,
                   conf: Any, adam: Any) -> None:
    """Adam's options as torch.optim.Adam takes them (finite; lr, eps and
    weight_decay at least 0; betas two numbers in [0, 1)), the device and
    conf as strings (either may be None: the default device, no keys), and
    `adam` None, "device" or "host". OptionError names the first that is
    not."""
    def number(value: Any) -> bool:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value))

    for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay)):
        if not number(value) or value < 0:
            raise OptionError(f"offload: {name} must be a finite number >= 0, not {value!r}")
    if (not isinstance(betas, (tuple, list)) or len(betas) != 2
            or not all(number(b) and 0 <= b < 1 for b in betas)):
        raise OptionError(f"offload: betas must be two numbers in [0, 1), not {betas!r}")
    if device is not None and not isinstance(device, str):
        raise OptionError(f"offload: device must be a device spec string such as "
                          f"'sim:capacity=1GiB' (docs/device.md), not {device!r}")
    if adam not in (None, "device", "host"):
        raise OptionError(f"offload: adam must be 'device' or 'host', not {adam!r}")
    if conf is not None and not isinstance(conf, str):
        raise OptionError(f"offload: conf must be STRATA_CONF text (key:value,...), not "
                          f"{conf!r}")


class _SavedView:
    """A tensor autograd saved that views an offloaded parameter's buffer:
    rebuilt over the parameter's buffer when backward unpacks it."""

    __slots__ = ("param", "offset", "size", "stride")

    def __init__(self, param, t):
        self.param = param
        self.offset = t.storage_offset()
        self.size = tuple(t.size())
        self.stride = tuple(t.stride())


def _storage_ptr(t):
    try:
        if hasattr(t, "untyped_storage"):
            return t.untyped_storage().data_ptr()
        return t.storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


class Offload:
    """The residency manager, prefetcher and hooks behind offload()."""

    def __init__(self, model: torch.nn.Module, *, lr: float = 1e-3,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, adamw: bool = False,
                 device: Optional[str] = None, conf: Optional[str] = "",
                 library: Optional[str] = None, placement: Placement = None,
                 parameters: Share = "offload", optimizer_state: Share = "offload",
                 adam: Optional[str] = None) -> None:
        _check_options(lr, betas, eps, weight_decay, device, conf, adam)
        conf = conf or ""
        self._cuda = _allocator.installed()
        if self._cuda:
            _check_cuda_options(device, conf)
            self._device = torch.device("cuda", torch.cuda.current_device())
        else:
            self._device = torch.device("cpu")
        self._adam = adam or ("device" if self._cuda else "host")
        for n, p in model.named_parameters():  # before anything is made
            if id(p) in _owner:
                raise OffloadError(
                    f"offload: parameter {n!r} is already offloaded by an Offload that was not "
                    "closed (the same model offloaded twice?): close() that one first")
            if p.numel() > 0 and p.dtype not in _DTYPES:
                raise OffloadError(f"offload needs fp32 or bf16 parameters, not {p.dtype}")
        self._places = placements(
            [(n, p.numel() * 4, p.dtype != torch.float32)
             for n, p in model.named_parameters() if p.numel() > 0],
            placement, parameters, optimizer_state)
        if self._cuda:
            self._lib = _native.libstrata_of(_allocator._library())  # pylint: disable=protected-access
        else:
            self._lib = _native.load(_native.LIBSTRATA, library, OffloadError)
        self._alloc = self._res = self._fetch = self._kernels = None
        self._own_alloc = not self._cuda  # the plugin's allocator outlives this
        self._opts = _native.AdamOptions(lr, betas[0], betas[1], eps, weight_decay, int(adamw),
                                         0, 0)
        # id(parameter) -> its Adam steps (as torch's state["step"])
        self._steps: Dict[int, int] = {}
        self._in_step = False
        # (parameter, its handle, exp_avg's, exp_avg_sq's, its fp32 master's or None)
        self._params: List[Tuple[torch.nn.Parameter, int, int, int, Optional[int]]] = []
        self._handle: Dict[int, int] = {}  # id(parameter) -> handle
        self._hooks: List[Any] = []
        self._shapes: Dict[int, Tuple[Tuple[int, ...], torch.dtype]] = {}  # id(parameter) ->
        self._names: Dict[int, str] = {}  # handle -> what it holds, for messages
        self._sizes: Dict[int, int] = {}  # handle -> bytes
        self._held: Dict[int, int] = {}  # handle -> acquires not yet released
        self._pinned: List[int] = []  # handles placed on the device
        self._grad_staging: Optional[torch.Tensor] = None  # pinned host bytes for a gradient
        self._by_name: Dict[str, int] = {}  # buffer name (as placement patterns see it) -> handle
        self._uses: Dict[int, int] = {}  # id(parameter) -> acquires pointing it at its buffer now
        self._by_ptr: Dict[int, torch.nn.Parameter] = {}  # buffer address -> the parameter there
        # (module, its parameters) whose forward holds them now
        self._forward: List[Tuple[torch.nn.Module, List[torch.nn.Parameter]]] = []
        self._backward: Dict[int, torch.nn.Parameter] = {}  # id(parameter) -> held for backward
        self._accumulators: List[Any] = []  # the parameters' AccumulateGrad nodes, kept alive
        self._saving: Any = None  # the saved-tensor hooks while a forward runs, and its module
        self._backward_running = False  # a hook of this step's backward has run
        self._closed = False
        try:
            # The allocator obeys conf's allocator keys too (memory_fraction,
            # log_ooms, ...): every key is obeyed by the part it belongs to.
            if self._cuda:
                self._alloc = _plugin_allocator(self._device.index)
            else:
                spec = f"device:{device or 'sim:capacity=1GiB'}" + (f",{conf}" if conf else "")
                self._alloc = self._make("strata_allocator_create", spec.encode())
            self._res = self._make("strata_residency_create", self._alloc, conf.encode())
            self._fetch = self._make("strata_prefetcher_create", self._res, conf.encode())
            # The device kernels queue on the allocator's device; the host
            # ones run on every hardware thread.
            self._kernels = self._make("strata_kernels_create", self._alloc, ctypes.c_uint(0))
            self._register_all(model)
        except BaseException:
            self.close()  # the model keeps its parameters: nothing was taken from it yet
            raise
        for p, *_handles in self._params:
            _owner[id(p)] = self
            if p.requires_grad:
                # After autograd accumulates p's gradient nothing in this
                # backward uses p's value: its buffer may go. The node is
                # kept: autograd holds it weakly.
                with torch.enable_grad():
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                acc.register_hook(lambda _gi, _go, p=p: self._accumulated(p))
                self._accumulators.append(acc)
                self._hooks.append(p.register_hook(lambda g, p=p: self._grad_arrives(p, g)))
            # The model's own copy is gone: Strata holds it.
            p.data = torch.empty(0, dtype=p.dtype, device=self._device)
        if self._cuda:
            model.to(self._device)  # its buffers (the parameters are empty now)
        # The model's own pre-hook first: it cleans up after a forward that
        # raised before this one's modules hold anything.
        self._hooks.append(model.register_forward_pre_hook(self._step_begins))
        for module in model.modules():
            if any(id(p) in self._handle for p in module.parameters(recurse=False)):
                self._hooks.append(module.register_forward_pre_hook(self._before_forward))
                self._hooks.append(module.register_forward_hook(self._after_forward))
        self._hooks.append(model.register_forward_hook(self._forward_ends))

    def _register_all(self, model):
        """Each parameter's bytes, two zeroed moments and (bf16) its fp32
        master copy into the manager."""
        names = {id(p): n for n, p in model.named_parameters()}
        for p in model.parameters():
            if p.numel() == 0:
                continue  # nothing to offload: it stays as it is
            name = names.get(id(p), "a parameter")
            n4 = p.numel() * 4
            h = self._register(p.numel() * _DTYPES[p.dtype][1], BufferKind.BUFFER_PARAMETER, name)
            m = self._register(n4, BufferKind.BUFFER_OPTIMIZER_STATE, f"{name}.exp_avg")
            v = self._register(n4, BufferKind.BUFFER_OPTIMIZER_STATE, f"{name}.exp_avg_sq")
            master = None
            if p.dtype != torch.float32:
                master = self._register(n4, BufferKind.BUFFER_OPTIMIZER_STATE, f"{name}.master")
            self._params.append((p, h, m, v, master))
            self._fill(h, p.detach())
            self._fill(m, None, p.numel())
            self._fill(v, None, p.numel())
            if master is not None:
                self._fill(master, p.detach().float())
            for handle, what, nbytes in ((h, name, p.numel() * _DTYPES[p.dtype][1]),
                                         (m, f"{name}'s exp_avg", n4),
                                         (v, f"{name}'s exp_avg_sq", n4),
                                         (master, f"{name}'s fp32 master", n4)):
                if handle is not None:
                    self._names[handle] = what
                    self._sizes[handle] = nbytes
            self._handle[id(p)] = h
            self._shapes[id(p)] = (tuple(p.shape), p.dtype)

    # --- the C API ---------------------------------------------------------
    def _check(self, status, what):
        if status == 0:
            return
        message = f"{what}: {self._lib.strata_last_error_message().decode()}"
        if status == Status.ERROR_OUT_OF_MEMORY:
            message += self._held_on_device()
        try:
            code: Optional[Status] = Status(status)
        except ValueError:
            code = None
        raise OffloadError(message, code)

    def _held_on_device(self):
        """What an out-of-memory acquire could not move off the device: the
        buffers held by modules running now (their parameters, the
        optimizer's state in step()), largest first."""
        held = sorted(((n, self._names.get(h, f"buffer {h}"), self._sizes[h])
                       for h, n in self._held.items() if n > 0 and h in self._sizes),
                      key=lambda t: -t[2])
        pinned = sum(self._sizes.get(h, 0) for h in self._pinned)
        if pinned:
            held_pinned = {h for h, n in self._held.items() if n > 0}
            listed = [self._names.get(h, f"buffer {h}") for h in self._pinned
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

    def _make(self, fn, *args):
        out = ctypes.c_void_p()
        self._check(getattr(self._lib, fn)(*args, ctypes.byref(out)), fn)
        return out

    def _register(self, nbytes, kind, name):
        place = self._places.get(name, "offload")
        h = ctypes.c_uint64()
        self._check(self._lib.strata_residency_register(self._res, nbytes, kind, _POLICY[place],
                                                        ctypes.byref(h)), f"register {name}")
        self._by_name[name] = h.value
        if place == "device":
            self._pinned.append(h.value)
        return h.value

    def where(self, name: str) -> str:
        """Where a buffer is now: "device", "host", "nvme" or "none" (never
        used). `name` is a parameter's name or it with ".exp_avg" or
        ".exp_avg_sq" (Adam's moments)."""
        if name not in self._by_name:
            raise OffloadError(f"where: no buffer named {name!r}")
        tier = ctypes.c_int()
        self._check(self._lib.strata_residency_where(self._res, self._by_name[name],
                                                     ctypes.byref(tier)), f"where {name}")
        return _TIERS[Tier(tier.value)]

    def _stream(self) -> Optional[ctypes.c_void_p]:
        """Where acquires and releases are ordered: PyTorch's current CUDA
        stream, or the sim device's default stream (None)."""
        if not self._cuda:
            return None
        return ctypes.c_void_p(torch.cuda.current_stream(self._device).cuda_stream)

    def _acquire(self, h: int, mode: AccessMode, through_prefetcher: bool = True) -> int:
        ptr = ctypes.c_void_p()
        stream = self._stream()
        if through_prefetcher:
            status = self._lib.strata_prefetcher_acquire_mode(self._fetch, h, stream, mode,
                                                              ctypes.byref(ptr))
        else:
            status = self._lib.strata_residency_acquire_mode(self._res, h, stream, mode,
                                                             ctypes.byref(ptr))
        self._check(status, f"acquire of {self._names.get(h, f'buffer {h}')}")
        self._held[h] = self._held.get(h, 0) + 1
        if not self._cuda:
            # The fill is stream-ordered; the CPU reads the bytes next. (On
            # CUDA the work that reads them is queued on the same stream.)
            self._check(self._lib.strata_stream_synchronize(self._alloc, None), "synchronize")
        if ptr.value is None:
            raise OffloadError(f"acquire of {self._names.get(h, f'buffer {h}')}: Strata "
                               "returned success with a null pointer")
        return ptr.value

    def _release(self, h, through_prefetcher=True):
        fn = (self._lib.strata_prefetcher_release if through_prefetcher
              else self._lib.strata_residency_release)
        self._check(fn(self._fetch if through_prefetcher else self._res, h, self._stream()),
                    f"release of {self._names.get(h, f'buffer {h}')}")
        self._held[h] -= 1

    def _acquire_host(self, h: int) -> int:
        """Buffer `h` held in pinned host memory for the host Adam kernel."""
        ptr = ctypes.c_void_p()
        self._check(self._lib.strata_residency_acquire_host(self._res, h, AccessMode.READ_WRITE,
                                                            ctypes.byref(ptr)),
                    f"host acquire of {self._names.get(h, f'buffer {h}')}")
        if ptr.value is None:
            raise OffloadError(f"host acquire of {self._names.get(h, f'buffer {h}')}: Strata "
                               "returned success with a null pointer")
        return ptr.value

    def _release_host(self, h: int) -> None:
        self._check(self._lib.strata_residency_release_host(self._res, h),
                    f"host release of {self._names.get(h, f'buffer {h}')}")

    def _host_gradient(self, grad: torch.Tensor) -> torch.Tensor:
        """`grad` where host threads can read it: itself on sim, a copy in
        pinned host memory (reused from one parameter to the next) on CUDA."""
        if not self._cuda:
            return grad
        nbytes = grad.numel() * grad.element_size()
        if self._grad_staging is None or self._grad_staging.numel() < nbytes:
            self._grad_staging = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        host = self._grad_staging[:nbytes].view(grad.dtype).view(grad.shape)
        host.copy_(grad, non_blocking=True)
        torch.cuda.current_stream(self._device).synchronize()
        return host

    def _fill(self, h, src, zeros=0):
        """Buffer `h` = `src`'s values, or `zeros` fp32 zeros (src None)."""
        ptr = self._acquire(h, AccessMode.READ_WRITE, through_prefetcher=False)
        try:
            if src is None:
                self._view(ptr, ((zeros,), torch.float32)).zero_()
            else:
                self._view(ptr, ((src.numel(),), src.dtype)).copy_(src.reshape(-1))
        finally:
            self._release(h, through_prefetcher=False)

    def _view(self, ptr, shape_and_dtype):
        """A tensor of that shape and dtype over the device bytes at `ptr`,
        no copy: a CUDA tensor on CUDA; on sim, whose memory is host
        memory, a CPU tensor."""
        shape, dtype = shape_and_dtype
        nbytes = _numel(shape) * _DTYPES[dtype][1]
        if self._cuda:
            raw = torch.as_tensor(_DeviceBytes(ptr, nbytes), device=self._device)
            return raw.view(dtype).view(shape)
        return torch.frombuffer((ctypes.c_char * nbytes).from_address(ptr),
                                dtype=dtype).view(shape)

    # --- the hooks -----------------------------------------------------------
    def _hold(self, p):
        """One more use of p's buffer; p.data points at it."""
        ptr = self._acquire(self._handle[id(p)], AccessMode.READ_ONLY)
        self._uses[id(p)] = self._uses.get(id(p), 0) + 1
        if self._uses[id(p)] == 1:
            p.data = self._view(ptr, self._shapes[id(p)])
            self._by_ptr[ptr] = p

    def _drop(self, p):
        """Ends one use; at the last, p.data is empty again."""
        self._release(self._handle[id(p)])
        self._uses[id(p)] -= 1
        if self._uses[id(p)] == 0:
            self._by_ptr.pop(p.data.data_ptr(), None)
            p.data = torch.empty(0, dtype=p.dtype, device=self._device)

    def _offloaded_params(self, module):
        return [p for p in module.parameters(recurse=False) if id(p) in self._handle]

    def _pack(self, t):
        p = self._by_ptr.get(_storage_ptr(t)) if self._by_ptr else None
        return t if p is None else _SavedView(p, t)

    def _unpack(self, saved):
        self._backward_running = True
        if not isinstance(saved, _SavedView):
            return saved
        self._hold_for_backward(saved.param)
        return saved.param.data.as_strided(saved.size, saved.stride, saved.offset)

    def _start_saving(self, module):
        if self._saving is None:
            hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
            hooks.__enter__()
            self._saving = (hooks, module)

    def _stop_saving(self, module=None):
        if self._saving is not None and (module is None or self._saving[1] is module):
            self._saving[0].__exit__(None, None, None)
            self._saving = None

    def _recover(self):
        """What a forward that raised left behind: its holds and hooks."""
        self._stop_saving()
        while self._forward:
            _module, params = self._forward.pop()
            for p in params:
                self._drop(p)

    def _step_begins(self, module, _inputs):
        self._backward_running = False
        self._recover()
        if not self._in_step:
            self._check(self._lib.strata_prefetcher_begin_step(self._fetch), "begin_step")
            self._in_step = True
        self._start_saving(module)

    def _forward_ends(self, module, _inputs, _output):
        self._stop_saving(module)

    def _in_backward(self) -> bool:
        """Whether autograd's backward is running (PyTorch 2 says so; on
        older ones, whether this step's backward has reached a hook)."""
        task = getattr(torch._C, "_current_graph_task_id", None)  # pylint: disable=protected-access
        return self._backward_running or (task is not None and task() != -1)

    def _before_forward(self, module, _inputs):
        if self._in_backward():
            # A recompute in backward (activation checkpointing): what it
            # saves is kept by the checkpoint, not by these hooks, and used
            # later in this backward, so the parameters stay where they are
            # until their gradients are accumulated.
            for p in self._offloaded_params(module):
                self._hold_for_backward(p)
            return
        self._start_saving(module)  # a submodule called on its own
        params = self._offloaded_params(module)
        for i, p in enumerate(params):
            try:
                self._hold(p)
            except BaseException:
                for q in params[:i]:
                    self._drop(q)
                raise
        self._forward.append((module, params))

    def _after_forward(self, module, _inputs, output):
        for i in range(len(self._forward) - 1, -1, -1):
            if self._forward[i][0] is module:
                for p in self._forward.pop(i)[1]:
                    self._drop(p)
                break
        self._stop_saving(module)
        if torch.is_grad_enabled():
            for t in _tensors(output):
                if t.requires_grad:
                    t.register_hook(lambda g, m=module: self._before_backward(m, g))
                    break
        return output

    def _hold_for_backward(self, p):
        if id(p) not in self._backward:
            self._hold(p)
            self._backward[id(p)] = p

    def _before_backward(self, module, grad):
        # Its parameters are needed from here (their saved views, their
        # gradients' accumulation): fetched together, early.
        self._backward_running = True
        for p in self._offloaded_params(module):
            self._hold_for_backward(p)
        return grad

    def _grad_arrives(self, p, grad):
        # AccumulateGrad reads p's shape and layout: p points at its buffer.
        self._backward_running = True
        if not self._closed:
            self._hold_for_backward(p)
        return grad

    def _accumulated(self, p):
        if not self._closed and self._backward.pop(id(p), None) is not None:
            self._drop(p)

    def _release_backward(self):
        self._backward_running = False
        for p in list(self._backward.values()):
            del self._backward[id(p)]
            self._drop(p)

    # --- the optimizer -----------------------------------------------------
    def step(self) -> None:
        """Adam (or AdamW) on every parameter with a gradient, then the
        prefetcher's step ends; the gradients are cleared."""
        self._recover()
        self._release_backward()
        # The gradients a device kernel still reads on sim, kept until the
        # stream is synchronized (on CUDA PyTorch frees them in stream order).
        in_flight = []
        for p, h, m, v, master in self._params:
            if p.grad is None:
                continue  # as torch.optim.Adam: no step for it, its count stays
            step = self._steps.get(id(p), 0) + 1
            self._steps[id(p)] = step
            grad = p.grad.detach().contiguous()
            if grad.device != self._device:
                raise OffloadError(f"step: {self._names.get(h, 'a parameter')}'s gradient is on "
                                   f"{grad.device}, its parameter on {self._device}")
            handles = (h, m, v) if master is None else (master, m, v, h)
            # ZeRO-Offload's way unless a buffer is pinned on the device.
            on_host = self._adam == "host" and not any(x in self._pinned for x in handles)
            if on_host:
                grad = self._host_gradient(grad)
            held = []  # released whatever happens: a failed fill leaves the others as they were
            try:
                ptrs = []
                for handle in handles:
                    ptrs.append(self._acquire_host(handle) if on_host
                                else self._acquire(handle, AccessMode.READ_WRITE))
                    held.append(handle)
                t = _native.AdamTensors()
                t.params, t.exp_avg, t.exp_avg_sq = ptrs[:3]
                t.grads = grad.data_ptr()
                t.grad_type = _DTYPES[grad.dtype][0]
                if master is not None:  # the new bf16 parameters, from the fp32 master
                    t.params_out = ptrs[3]
                    t.out_type = _DTYPES[self._shapes[id(p)][1]][0]  # p.data is empty now
                t.count = grad.numel()
                # Host threads for a host update, and on sim (whose device
                # memory they can reach) unless adam="device".
                if on_host or (not self._cuda and self._adam == "host"):
                    self._check(self._lib.strata_adam_step_host(
                        self._kernels, ctypes.byref(t), ctypes.byref(self._opts), step),
                        "adam step")
                else:
                    self._check(self._lib.strata_adam_step_async(
                        self._kernels, self._stream(), ctypes.byref(t), ctypes.byref(self._opts),
                        step), "adam step")
                    in_flight.append(grad)
            finally:
                for handle in held:
                    if on_host:
                        self._release_host(handle)
                    else:
                        self._release(handle)
            p.grad = None
        if in_flight and not self._cuda:
            self._check(self._lib.strata_stream_synchronize(self._alloc, None), "synchronize")
        del in_flight
        if self._in_step:
            self._check(self._lib.strata_prefetcher_end_step(self._fetch), "end_step")
            self._in_step = False

    def parameters(self, master: bool = False) -> List[torch.Tensor]:
        """Each parameter's current value, as a CPU copy (for checks); with
        `master`, the fp32 master copies of bf16 parameters instead (fp32
        parameters are their own)."""
        out = []
        for p, h, _m, _v, fp32 in self._params:
            handle, (shape, dtype) = h, self._shapes[id(p)]
            if master and fp32 is not None:
                handle, dtype = fp32, torch.float32
            ptr = self._acquire(handle, AccessMode.READ_ONLY, through_prefetcher=False)
            view = self._view(ptr, (shape, dtype))
            out.append(view.cpu() if self._cuda else view.clone())
            self._release(handle, through_prefetcher=False)
        return out

    def _string(self, fn: Any, handle: Any) -> str:
        """The text a Strata call returned through its out pointer (freed)."""
        text = ctypes.c_char_p()
        self._check(fn(handle, ctypes.byref(text)), fn.__name__)
        try:
            return (text.value or b"").decode()
        finally:
            self._lib.strata_string_free(text)

    def memory_stats(self) -> Dict[str, int]:
        """The device allocator's counters with torch.cuda.memory_stats()
        names, then the tiers' as "offload.<name>" and the prefetcher's as
        "prefetch.<name>"."""
        return json.loads(self._string(self._lib.strata_stats_json, self._alloc))

    def memory_summary(self) -> str:
        """torch.cuda.memory_summary()'s table, with the tiers' and the
        prefetcher's sections."""
        return self._string(self._lib.strata_memory_summary, self._alloc)

    def stats(self) -> Dict[str, Dict[str, Any]]:
        """The residency manager's and the prefetcher's counters."""
        out = {}
        for name, fn, handle in (("offload", self._lib.strata_residency_stats_json, self._res),
                                 ("prefetch", self._lib.strata_prefetcher_stats_json,
                                  self._fetch)):
            out[name] = json.loads(self._string(fn, handle))
        return out

    def close(self) -> None:
        """Removes the hooks and frees everything Strata holds."""
        if self in _active:
            _active.remove(self)
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        if not self._closed and self._res:
            self._recover()
            self._release_backward()
        self._closed = True
        self._accumulators = []
        for p, *_handles in self._params:
            _owner.pop(id(p), None)
        if self._fetch:
            self._lib.strata_prefetcher_destroy(self._fetch)
            self._fetch = None
        for _p, *handles in self._params:
            for handle in handles:
                if handle is not None:
                    self._lib.strata_residency_unregister(self._res, handle)
        self._params = []
        for fn, name in (("strata_kernels_destroy", "_kernels"),
                         ("strata_residency_destroy", "_res"),
                         ("strata_allocator_destroy", "_alloc")):
            if getattr(self, name):
                if name != "_alloc" or self._own_alloc:  # the plugin's stays the plugin's
                    getattr(self._lib, fn)(getattr(self, name))
                setattr(self, name, None)


class _DeviceBytes:
    """`nbytes` of CUDA memory at `ptr`, as PyTorch reads foreign device
    memory (__cuda_array_interface__, version 2: no stream to wait on)."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 2}


def _check_cuda_options(device: Any, conf: str) -> None:
    """With install() active: no `device` of its own, no allocator key in
    `conf` (STRATA_CONF configures the plugin's allocator)."""
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


def _plugin_allocator(index: int) -> ctypes.c_void_p:
    """The plugin's allocator of CUDA device `index`, as a libstrata handle."""
    plugin = _allocator._library()  # pylint: disable=protected-access
    handle = plugin.strata_torch_allocator(index)
    if not handle:
        raise OffloadError(f"offload: Strata's allocator of cuda:{index}: "
                           f"{plugin.strata_torch_last_error().decode()}")
    return ctypes.c_void_p(handle)


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _tensors(output):
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (tuple, list)):
        return [t for t in output if isinstance(t, torch.Tensor)]
    return []


_active: List[Offload] = []  # the Offloads not closed, newest last (memory_stats reads it)


def active() -> Optional[Offload]:
    """The newest Offload not closed, or None."""
    return _active[-1] if _active else None


def offload(model: torch.nn.Module, **options: Any) -> Offload:
    """Offload `model`'s parameters and Adam state to Strata's tiers; see
    Offload for the options. Returns the Offload: call its step() where
    optimizer.step() was."""
    off = Offload(model, **options)
    _active.append(off)
    return off
