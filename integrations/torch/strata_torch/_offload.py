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
copy), Adam's two moments for each and its gradient, with a residency
manager
(libstrata's C API, strata/residency.h) and steps a prefetcher over them
(strata/prefetch.h). A module's parameters point at
their device buffer from its forward pre-hook until its forward ends; in
backward, from when the module's output gradient arrives (or the first
saved tensor that needs one of them is unpacked, or its gradient arrives)
until autograd has accumulated that parameter's gradient. The rest of the
time they are released, so the manager may spill them to host memory and
NVMe, and the prefetcher fetches them back ahead of the next use, in the
order the first step recorded.

Gradients live in Strata's buffers too, as DeepSpeed's ZeRO keeps them:
once autograd has accumulated a parameter's gradient, backward moves it
into the parameter's gradient buffer (the first of a step overwrites it,
fetching nothing; later ones, gradient accumulation, add to it) and .grad
is None again, so the manager may spill gradients like anything else.
step() reads and uses them up; off.gradients() copies them out,
off.clip_grad_norm_() clips them and off.zero_grad() forgets them
(torch.nn.utils.clip_grad_norm_ over model.parameters() sees no
gradient). requires_grad is read at offload(): a parameter frozen then
has no gradient buffer.

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
`optimizer_state` / `gradients` give the rest by fraction, in the model's
order:

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
the moments are held in pinned host memory, strata_prefetcher_acquire_host,
so the state never crosses to the device; only the gradient comes down
and the parameter goes up at its next use; the holds are part of the
step's order, so the prefetcher reads the state from NVMe ahead of them). A parameter with a buffer
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
    "device". A gradient is PyTorch's CUDA tensor until it is accumulated,
    then copied into its buffer on the stream; with adam="host" step()
    holds it on the host, where the manager brings it off the device.
    Needs NumPy (PyTorch reads the buffers' __cuda_array_interface__).
  - Otherwise the `sim` device, whose memory is host memory: parameters
    are CPU tensors viewing Strata's buffers (as ZeRO-3 re-points .data);
    `adam` defaults to "host".
The handles, the buffers and the tensors over them are _tier_buffers.py's.
Needs libstrata.so built with the tiers (liburing), found as _native.py
says (on CUDA, the one the plugin links); no environment variable.

Thread safety: one training loop drives an Offload; its hooks run on the
threads autograd runs them on, one at a time.
"""

import ctypes
import json
import math
from typing import Any, Dict, List, Optional, Set, Tuple

import torch

from . import _allocator, _native
from ._placement import Placement, Share, placements
from ._offload_hooks import ModuleHooks
from ._tier_buffers import DTYPES, TierBuffers, check_cuda_options
from .enums import AccessMode, BufferKind
from .errors import OffloadError, OptionError

__all__ = ["Offload", "offload", "active"]

_owner: Dict[int, "Offload"] = {}  # id(parameter) -> the Offload holding it (until closed)


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


class Offload(ModuleHooks):
    """The residency manager, prefetcher and hooks behind offload() (the
    hooks: _offload_hooks.py)."""

    def __init__(self, model: torch.nn.Module, *, lr: float = 1e-3,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, adamw: bool = False,
                 device: Optional[str] = None, conf: Optional[str] = "",
                 library: Optional[str] = None, placement: Placement = None,
                 parameters: Share = "offload", optimizer_state: Share = "offload",
                 gradients: Share = "offload", adam: Optional[str] = None) -> None:
        _check_options(lr, betas, eps, weight_decay, device, conf, adam)
        conf = conf or ""
        if _allocator.installed():
            check_cuda_options(device, conf)
        for n, p in model.named_parameters():  # before anything is made
            if id(p) in _owner:
                raise OffloadError(
                    f"offload: parameter {n!r} is already offloaded by an Offload that was not "
                    "closed (the same model offloaded twice?): close() that one first")
            if p.numel() > 0 and p.dtype not in DTYPES:
                raise OffloadError(f"offload needs fp32 or bf16 parameters, not {p.dtype}")
        self._places = placements(
            [(n, p.numel() * 4, p.dtype != torch.float32, p.requires_grad)
             for n, p in model.named_parameters() if p.numel() > 0],
            placement, parameters, optimizer_state, gradients)
        self._t = TierBuffers(library)  # CUDA with install(), else sim
        self._cuda, self._device = self._t.cuda, self._t.device
        self._adam = adam or ("device" if self._cuda else "host")
        self._opts = _native.AdamOptions(lr, betas[0], betas[1], eps, weight_decay, int(adamw),
                                         0, 0)
        # id(parameter) -> its Adam steps (as torch's state["step"])
        self._steps: Dict[int, int] = {}
        self._in_step = False
        # (parameter, its handle, exp_avg's, exp_avg_sq's, its fp32 master's or None)
        self._params: List[Tuple[torch.nn.Parameter, int, int, int, Optional[int]]] = []
        self._handle: Dict[int, int] = {}  # id(parameter) -> handle
        self._grads: Dict[int, int] = {}  # id(parameter) -> its gradient's handle
        # id(parameter) whose update runs on host threads: adam="host" and
        # none of its buffers pinned on the device (fixed at registration)
        self._on_host: Set[int] = set()
        self._grad_ready: Set[int] = set()  # id(parameter): a gradient waits for step()
        self._hooks: List[Any] = []
        self._shapes: Dict[int, Tuple[Tuple[int, ...], torch.dtype]] = {}  # id(parameter) ->
        self._uses: Dict[int, int] = {}  # id(parameter) -> acquires pointing it at its buffer now
        self._by_ptr: Dict[int, torch.nn.Parameter] = {}  # buffer address -> the parameter there
        # (module, its parameters) whose forward holds them now
        self._forward: List[Tuple[torch.nn.Module, List[torch.nn.Parameter]]] = []
        self._backward: Dict[int, torch.nn.Parameter] = {}  # id(parameter) -> held for backward
        self._accumulators: List[Any] = []  # the parameters' AccumulateGrad nodes, kept alive
        self._saving: Any = None  # the saved-tensor hooks while a forward runs, and its module
        self._backward_running = False  # a hook of this step's backward has run
        self._taken = {"in_backward": 0, "after_backward": 0}
        self._closed = False
        try:
            # On sim the allocator obeys conf's allocator keys too
            # (memory_fraction, log_ooms, ...): every key is obeyed by the
            # part it belongs to.
            self._t.open(device, conf)
            self._register_all(model)
        except BaseException:
            self.close()  # the model keeps its parameters: nothing was taken from it yet
            raise
        # The model's own copies, until every parameter's hooks are made:
        # an acquire that fails there (out of memory, an NVMe read) gives
        # each parameter its copy back and closes, as a failure above does.
        own = [(p, p.data) for p, *_handles in self._params]
        try:
            for p, h, *_handles in self._params:
                _owner[id(p)] = self
                if p.requires_grad:
                    # After autograd accumulates p's gradient nothing in
                    # this backward uses p's value: its buffer may go. The
                    # node is kept: autograd holds it weakly.
                    acc = self._accumulator(p, h)
                    acc.register_hook(lambda _gi, _go, p=p: self._accumulated(p))
                    self._accumulators.append(acc)
                    self._hooks.append(p.register_hook(lambda g, p=p: self._grad_arrives(p, g)))
                p.data = torch.empty(0, dtype=p.dtype, device=self._device)
        except BaseException:
            for p, data in own:
                p.data = data
            self.close()
            raise
        del own  # Strata holds the parameters now
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

    def _accumulator(self, p, h):
        """p's AccumulateGrad node, made while p views its buffer: on the
        device it will have from now on, with its shape. Autograd drops
        the node of a parameter whose .data moves to another device (the
        model's CPU copy to CUDA): hooks on a node made before the move
        would never run, and p's gradient would stay in .grad, p held,
        until step(). Autograd checks each gradient against the node's
        shape, so the node is not made over the empty placeholder."""
        ptr = self._t.acquire(h, AccessMode.READ_ONLY, through_prefetcher=False)
        try:
            p.data = self._t.view(ptr, self._shapes[id(p)])
            with torch.enable_grad():
                return p.expand_as(p).grad_fn.next_functions[0][0]
        finally:
            p.data = torch.empty(0, dtype=p.dtype, device=self._device)
            self._t.release(h, through_prefetcher=False)

    def _register_all(self, model):
        """Each parameter's bytes, two zeroed moments, (bf16) its fp32
        master copy and (requiring a gradient) its gradient's buffer into
        the manager."""
        names = {id(p): n for n, p in model.named_parameters()}
        for p in model.parameters():
            if p.numel() == 0:
                continue  # nothing to offload: it stays as it is
            name = names.get(id(p), "a parameter")
            n4 = p.numel() * 4
            state = BufferKind.BUFFER_OPTIMIZER_STATE

            def register(nbytes, kind, key, what):
                return self._t.register(nbytes, kind, key, self._places.get(key, "offload"), what)

            h = register(p.numel() * DTYPES[p.dtype][1], BufferKind.BUFFER_PARAMETER, name, name)
            m = register(n4, state, f"{name}.exp_avg", f"{name}'s exp_avg")
            v = register(n4, state, f"{name}.exp_avg_sq", f"{name}'s exp_avg_sq")
            master = None
            if p.dtype != torch.float32:
                master = register(n4, state, f"{name}.master", f"{name}'s fp32 master")
            self._params.append((p, h, m, v, master))
            self._t.fill(h, p.detach())
            self._t.fill(m, None, p.numel())
            self._t.fill(v, None, p.numel())
            if master is not None:
                self._t.fill(master, p.detach().float())
            if p.requires_grad:  # filled by its first accumulation
                self._grads[id(p)] = register(p.numel() * DTYPES[p.dtype][1],
                                              BufferKind.BUFFER_GRADIENT, f"{name}.grad",
                                              f"{name}'s gradient")
            own = {x for x in (h, m, v, master, self._grads.get(id(p))) if x is not None}
            if self._adam == "host" and self._t.pinned.isdisjoint(own):
                self._on_host.add(id(p))
            self._handle[id(p)] = h
            self._shapes[id(p)] = (tuple(p.shape), p.dtype)

    def where(self, name: str) -> str:
        """Where a buffer is now: "device", "host", "nvme" or "none" (never
        used). `name` is a parameter's name or it with ".exp_avg" or
        ".exp_avg_sq" (Adam's moments), ".master" (a bf16 parameter's fp32
        master) or ".grad" (its gradient)."""
        return self._t.where(name)

    # --- the optimizer -----------------------------------------------------
    def step(self) -> None:
        """Adam (or AdamW) on every parameter with a gradient accumulated
        since the last step, then the prefetcher's step ends; the
        gradients are used up (as zero_grad(set_to_none=True))."""
        self._recover()
        self._release_backward()
        self._take_gradients()
        for p, h, m, v, master in self._params:
            if id(p) not in self._grad_ready:
                continue  # as torch.optim.Adam: no step for it, its count stays
            step = self._steps.get(id(p), 0) + 1
            on_host = id(p) in self._on_host
            # The gradient only read; the rest updated in place.
            holds = [(self._grads[id(p)], AccessMode.READ_ONLY)]
            holds += [(x, AccessMode.READ_WRITE)
                      for x in ((h, m, v) if master is None else (master, m, v, h))]
            held = []  # released whatever happens: a failed fill leaves the others as they were
            try:
                ptrs = []
                for handle, mode in holds:
                    ptrs.append(self._t.acquire_host(handle, mode) if on_host
                                else self._t.acquire(handle, mode))
                    held.append(handle)
                t = _native.AdamTensors()
                t.grads, t.params, t.exp_avg, t.exp_avg_sq = ptrs[:4]
                t.grad_type = DTYPES[self._shapes[id(p)][1]][0]
                if master is not None:  # the new bf16 parameters, from the fp32 master
                    t.params_out = ptrs[4]
                    t.out_type = t.grad_type
                t.count = math.prod(self._shapes[id(p)][0])
                # Host threads for a host update, and on sim (whose device
                # memory they can reach) unless adam="device".
                if on_host or (not self._cuda and self._adam == "host"):
                    self._t.check(self._t.lib.strata_adam_step_host(
                        self._t.kernels, ctypes.byref(t), ctypes.byref(self._opts), step),
                        "adam step")
                else:
                    self._t.check(self._t.lib.strata_adam_step_async(
                        self._t.kernels, self._t.stream(), ctypes.byref(t),
                        ctypes.byref(self._opts), step), "adam step")
                self._steps[id(p)] = step  # counted once its update is done (or queued)
                self._grad_ready.discard(id(p))
            finally:
                for handle in held:
                    if on_host:
                        self._t.release_host(handle)
                    else:
                        self._t.release(handle)
        if self._in_step:
            self._t.check(self._t.lib.strata_prefetcher_end_step(self._t.fetch), "end_step")
            self._in_step = False

    def zero_grad(self) -> None:
        """Forgets the gradients accumulated since the last step() (and
        any left in .grad), as optimizer.zero_grad(): the next backward's
        start the sums afresh."""
        self._grad_ready.clear()
        for p, *_handles in self._params:
            p.grad = None

    def gradients(self) -> List[Optional[torch.Tensor]]:
        """Each parameter's gradient accumulated since the last step(), as
        a CPU copy (None where it has none), in parameters()'s order. They
        live in Strata's buffers, not in .grad (backward moves each there
        once accumulated)."""
        self._take_gradients()
        out: List[Optional[torch.Tensor]] = []
        for p, *_handles in self._params:
            if id(p) not in self._grad_ready:
                out.append(None)
                continue
            view, release = self._gradient(p, AccessMode.READ_ONLY, through_prefetcher=False)
            try:
                out.append(view.cpu() if view.is_cuda else view.clone())
            finally:
                release()
        return out

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> float:
        """torch.nn.utils.clip_grad_norm_ over the gradients accumulated
        since the last step() (Strata's buffers; .grad holds none): their
        total `norm_type` norm, as a float, and each scaled by max_norm /
        (total + 1e-6) where that is below 1. Call it between backward and
        step(). Reads each gradient where its update will (host or device),
        and writes it again only when clipping; the host waits once for
        the device's norms. OptionError for a max_norm that is not a
        finite number >= 0 or a norm_type that is not a positive number or
        inf."""
        for name, value in (("max_norm", max_norm), ("norm_type", norm_type)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
                raise OptionError(f"clip_grad_norm_: {name} must be a number, not {value!r}")
        if not math.isfinite(max_norm) or max_norm < 0:
            raise OptionError(f"clip_grad_norm_: max_norm must be finite and >= 0, not "
                              f"{max_norm!r}")
        if norm_type <= 0:
            raise OptionError(f"clip_grad_norm_: norm_type must be > 0 or inf, not {norm_type!r}")
        self._recover()
        self._release_backward()
        self._take_gradients()
        ready = [p for p, *_handles in self._params if id(p) in self._grad_ready]
        norms = []
        for p in ready:
            view, release = self._gradient(p, AccessMode.READ_ONLY)
            try:
                norms.append(torch.linalg.vector_norm(view, norm_type, dtype=torch.float32)
                             .to(self._device, non_blocking=True))
            finally:
                release()
        if not norms:
            return 0.0
        total = float(torch.linalg.vector_norm(torch.stack(norms), norm_type))
        scale = max_norm / (total + 1e-6)
        if scale < 1.0:
            for p in ready:
                view, release = self._gradient(p, AccessMode.READ_WRITE)
                try:
                    view.mul_(scale)
                finally:
                    release()
        return total

    def parameters(self, master: bool = False) -> List[torch.Tensor]:
        """Each parameter's current value, as a CPU copy (for checks); with
        `master`, the fp32 master copies of bf16 parameters instead (fp32
        parameters are their own)."""
        out = []
        for p, h, _m, _v, fp32 in self._params:
            handle, (shape, dtype) = h, self._shapes[id(p)]
            if master and fp32 is not None:
                handle, dtype = fp32, torch.float32
            ptr = self._t.acquire(handle, AccessMode.READ_ONLY, through_prefetcher=False)
            view = self._t.view(ptr, (shape, dtype))
            out.append(view.cpu() if self._cuda else view.clone())
            self._t.release(handle, through_prefetcher=False)
        return out

    def memory_stats(self) -> Dict[str, int]:
        """The device allocator's counters with torch.cuda.memory_stats()
        names, then the tiers' as "offload.<name>" and the prefetcher's as
        "prefetch.<name>"."""
        return json.loads(self._t.text(self._t.lib.strata_stats_json, self._t.alloc))

    def memory_summary(self) -> str:
        """torch.cuda.memory_summary()'s table, with the tiers' and the
        prefetcher's sections."""
        return self._t.text(self._t.lib.strata_memory_summary, self._t.alloc)

    def stats(self) -> Dict[str, Dict[str, Any]]:
        """The residency manager's counters ("offload"), the prefetcher's
        ("prefetch") and the gradients' ("gradients"): those moved into
        their buffers "in_backward", as autograd accumulated each, or
        "after_backward", taken from .grad by step(), gradients() or
        clip_grad_norm_() (a parameter whose gradient stayed in .grad was
        held on the device, with that gradient, to the end of backward);
        and now, the parameters "held_for_backward" and those with a
        gradient still "in_grad"."""
        out: Dict[str, Dict[str, Any]] = {"gradients": {
            **self._taken, "held_for_backward": len(self._backward),
            "in_grad": sum(p.grad is not None for p, *_handles in self._params)}}
        for name, fn, handle in (("offload", self._t.lib.strata_residency_stats_json, self._t.res),
                                 ("prefetch", self._t.lib.strata_prefetcher_stats_json,
                                  self._t.fetch)):
            out[name] = json.loads(self._t.text(fn, handle))
        return out

    def close(self) -> None:
        """Removes the hooks and frees everything Strata holds."""
        if self in _active:
            _active.remove(self)
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        if not self._closed and self._t.res:
            self._recover()
            self._release_backward()
        self._closed = True
        self._accumulators = []
        for p, *_handles in self._params:
            _owner.pop(id(p), None)
        self._t.close([h for _p, *handles in self._params for h in handles if h is not None]
                      + list(self._grads.values()))
        self._grads = {}
        self._params = []


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
