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
copy), and Adam's two moments for each, with a residency manager (libstrata's C API, strata/residency.h) and steps
a prefetcher over them (strata/prefetch.h). A module's parameters point at
their device buffer from its forward pre-hook until its forward ends, and
again from the moment its backward starts until the next module's backward
starts (autograd has accumulated their gradients by then): the rest of the
time they are released, so the manager may spill them to host memory and
NVMe, and the prefetcher fetches them back ahead of the next use, in the
order the first step recorded. Gradients stay ordinary CPU tensors.

Where each buffer may go is chosen per buffer (strata_placement.py):
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

step() runs Strata's Adam/AdamW host kernel (strata_adam_step_host, the
same operations as torch.optim.Adam/AdamW with foreach=False) on each
parameter and its moments where they live, then ends the prefetcher's step.
For a bf16 parameter the kernel widens its bf16 gradient, updates the fp32
master and writes the parameter as the master rounded to nearest even.

Works on the `sim` device, whose memory is host memory: parameters are CPU
tensors viewing Strata's buffers (as ZeRO-3 re-points .data). Needs
libstrata.so built with the tiers (liburing); no environment variable.

Thread safety: one training loop drives an Offload; its hooks run on the
threads autograd runs them on, one at a time.
"""

import ctypes
import json
import os

import torch

from strata_placement import PlacementError, placements

__all__ = ["Offload", "OffloadError", "offload"]

_PARAMETER = 0
_OPTIMIZER_STATE = 2
# strata_residency_policy for each place
_POLICY = {"device": 1, "host": 2, "nvme": 3, "offload": 0}
_TIERS = {0: "none", 1: "device", 2: "host", 3: "nvme"}
# strata_dtype of the parameters offload() takes, and their element bytes
_DTYPES = {torch.float32: (0, 4), torch.bfloat16: (1, 2)}
_READ_WRITE = 0
_READ_ONLY = 1
_OUT_OF_MEMORY = 2  # STRATA_ERROR_OUT_OF_MEMORY


class OffloadError(RuntimeError):
    """A Strata call failed; the message is Strata's."""


class _AdamOptions(ctypes.Structure):
    _fields_ = [("lr", ctypes.c_double), ("beta1", ctypes.c_double),
                ("beta2", ctypes.c_double), ("eps", ctypes.c_double),
                ("weight_decay", ctypes.c_double), ("decoupled_weight_decay", ctypes.c_int),
                ("maximize", ctypes.c_int), ("amsgrad", ctypes.c_int)]


class _AdamTensors(ctypes.Structure):
    _fields_ = [("params", ctypes.c_void_p), ("grads", ctypes.c_void_p),
                ("grad_type", ctypes.c_int), ("exp_avg", ctypes.c_void_p),
                ("exp_avg_sq", ctypes.c_void_p), ("max_exp_avg_sq", ctypes.c_void_p),
                ("params_out", ctypes.c_void_p), ("out_type", ctypes.c_int),
                ("count", ctypes.c_size_t)]


def _load(path):
    path = path or os.environ.get("STRATA_LIBRARY", "libstrata.so")
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise OffloadError(f"cannot load {path}: {e}") from e
    vp, u64, sz = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t
    out = ctypes.POINTER(vp)
    sigs = {
        "strata_allocator_create": [ctypes.c_char_p, out],
        "strata_allocator_destroy": [vp],
        "strata_stats_json": [vp, ctypes.POINTER(ctypes.c_char_p)],
        "strata_memory_summary": [vp, ctypes.POINTER(ctypes.c_char_p)],
        "strata_stream_synchronize": [vp, vp],
        "strata_residency_create": [vp, ctypes.c_char_p, out],
        "strata_residency_destroy": [vp],
        "strata_residency_register": [vp, sz, ctypes.c_int, ctypes.c_int, ctypes.POINTER(u64)],
        "strata_residency_unregister": [vp, u64],
        "strata_residency_acquire_mode": [vp, u64, vp, ctypes.c_int, out],
        "strata_residency_release": [vp, u64, vp],
        "strata_residency_stats_json": [vp, ctypes.POINTER(ctypes.c_char_p)],
        "strata_prefetcher_create": [vp, ctypes.c_char_p, out],
        "strata_prefetcher_destroy": [vp],
        "strata_prefetcher_begin_step": [vp],
        "strata_prefetcher_end_step": [vp],
        "strata_prefetcher_acquire_mode": [vp, u64, vp, ctypes.c_int, out],
        "strata_prefetcher_release": [vp, u64, vp],
        "strata_prefetcher_stats_json": [vp, ctypes.POINTER(ctypes.c_char_p)],
        "strata_kernels_create": [vp, ctypes.c_uint, out],
        "strata_kernels_destroy": [vp],
        "strata_adam_step_host": [vp, ctypes.POINTER(_AdamTensors),
                                  ctypes.POINTER(_AdamOptions), u64],
    }
    for name, args in sigs.items():
        try:
            fn = getattr(lib, name)
        except AttributeError as e:
            raise OffloadError(f"{path} has no {name}: build libstrata with the offload tiers "
                               "(liburing)") from e
        fn.argtypes = args
        fn.restype = ctypes.c_int
    lib.strata_last_error_message.restype = ctypes.c_char_p
    lib.strata_string_free.argtypes = [ctypes.c_char_p]
    return lib


class _OffloadedLinear(torch.autograd.Function):
    """nn.Linear for offloaded parameters. PyTorch's own saves a view of
    the weight (its transpose) for backward, which keeps pointing at the
    buffer the weight had in forward, long since released and reused; this
    one keeps the parameters themselves, whose .data the backward hook has
    pointed at their buffer again (as DeepSpeed's ZeRO-3 does). Forward is
    torch's; backward computes the same products."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x)
        ctx.params = (weight, bias)
        return torch.nn.functional.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        weight, bias = ctx.params
        g2 = grad.reshape(-1, grad.shape[-1])
        x2 = x.reshape(-1, x.shape[-1])
        grad_x = grad.matmul(weight.data)
        grad_w = x2.t().mm(g2).t()
        grad_b = g2.sum(0) if bias is not None else None
        return grad_x, grad_w, grad_b


class Offload:
    """The residency manager, prefetcher and hooks behind offload()."""

    def __init__(self, model, *, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 adamw=False, device="sim:capacity=1GiB", conf="", library=None,
                 placement=None, parameters="offload", optimizer_state="offload"):
        for p in model.parameters():  # before anything is made
            if p.dtype not in _DTYPES:
                raise OffloadError(f"offload needs fp32 or bf16 parameters, not {p.dtype}")
        try:
            self._places = placements(
                [(n, p.numel() * 4, p.dtype != torch.float32) for n, p in model.named_parameters()],
                placement, parameters, optimizer_state)
        except PlacementError as e:
            raise OffloadError(str(e)) from None
        self._lib = _load(library)
        self._alloc = self._res = self._fetch = self._kernels = None
        self._opts = _AdamOptions(lr, betas[0], betas[1], eps, weight_decay, int(adamw), 0, 0)
        self._steps = {}     # id(parameter) -> its Adam steps (as torch's state["step"])
        self._in_step = False
        # (parameter, its handle, exp_avg's, exp_avg_sq's, its fp32 master's or None)
        self._params = []
        self._handle = {}    # id(parameter) -> handle
        self._backward = []  # modules whose parameters backward holds now
        self._hooks = []
        self._linears = []   # (module, its own forward) for close()
        self._shapes = {}    # id(parameter) -> its shape
        self._names = {}     # handle -> what it holds, for messages
        self._sizes = {}     # handle -> bytes
        self._held = {}      # handle -> acquires not yet released
        self._pinned = []    # handles placed on the device
        self._by_name = {}   # buffer name (as placement patterns see it) -> handle
        try:
            self._alloc = self._make("strata_allocator_create", f"device:{device}".encode())
            self._res = self._make("strata_residency_create", self._alloc, conf.encode())
            self._fetch = self._make("strata_prefetcher_create", self._res, conf.encode())
            self._kernels = self._make("strata_kernels_create", None, ctypes.c_uint(1))
            self._register_all(model)
        except BaseException:
            self.close()  # the model keeps its parameters: nothing was taken from it yet
            raise
        for p, *_handles in self._params:
            p.data = torch.empty(0, dtype=p.dtype)  # the model's own copy is gone: Strata holds it
        for module in model.modules():
            if any(True for _ in module.parameters(recurse=False)):
                self._hooks.append(module.register_forward_pre_hook(self._before_forward))
                self._hooks.append(module.register_forward_hook(self._after_forward))
            if type(module) is torch.nn.Linear:
                self._linears.append((module, module.forward))
                module.forward = (lambda x, m=module:
                                  _OffloadedLinear.apply(x, m.weight, m.bias))
        self._hooks.append(model.register_forward_pre_hook(self._step_begins))

    def _register_all(self, model):
        """Each parameter's bytes, two zeroed moments and (bf16) its fp32
        master copy into the manager."""
        names = {id(p): n for n, p in model.named_parameters()}
        for p in model.parameters():
            name = names.get(id(p), "a parameter")
            n4 = p.numel() * 4
            h = self._register(p.numel() * _DTYPES[p.dtype][1], _PARAMETER, name)
            m = self._register(n4, _OPTIMIZER_STATE, f"{name}.exp_avg")
            v = self._register(n4, _OPTIMIZER_STATE, f"{name}.exp_avg_sq")
            master = None
            if p.dtype != torch.float32:
                master = self._register(n4, _OPTIMIZER_STATE, f"{name}.master")
            self._params.append((p, h, m, v, master))
            self._fill(h, p.detach().contiguous())
            zeros = torch.zeros(p.shape, dtype=torch.float32)
            self._fill(m, zeros)
            self._fill(v, zeros)
            if master is not None:
                self._fill(master, p.detach().float().contiguous())
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
        if status == _OUT_OF_MEMORY:
            message += self._held_on_device()
        raise OffloadError(message)

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
            pinned_note = (f"\nstrata_offload: pinned on the device by placement "
                           f"({pinned / 2**20:.2f} MiB): {', '.join(listed[:4])}{more}")
        else:
            pinned_note = ""
        if not held:
            return ("\nstrata_offload: nothing Strata manages is held on the device: the "
                    "device is too small for one buffer next to what PyTorch itself holds"
                    + pinned_note)
        total = sum(size for _n, _name, size in held)
        names = ", ".join(f"{name} ({size / 2**20:.2f} MiB)" for _n, name, size in held[:8])
        more = f" and {len(held) - 8} more" if len(held) > 8 else ""
        return (f"\nstrata_offload: held on the device, so not offloadable now "
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

    def where(self, name):
        """Where a buffer is now: "device", "host", "nvme" or "none" (never
        used). `name` is a parameter's name or it with ".exp_avg" or
        ".exp_avg_sq" (Adam's moments)."""
        if name not in self._by_name:
            raise OffloadError(f"where: no buffer named {name!r}")
        tier = ctypes.c_int()
        self._check(self._lib.strata_residency_where(self._res, self._by_name[name],
                                                     ctypes.byref(tier)), f"where {name}")
        return _TIERS[tier.value]

    def _acquire(self, h, mode, through_prefetcher=True):
        ptr = ctypes.c_void_p()
        if through_prefetcher:
            status = self._lib.strata_prefetcher_acquire_mode(self._fetch, h, None, mode,
                                                              ctypes.byref(ptr))
        else:
            status = self._lib.strata_residency_acquire_mode(self._res, h, None, mode,
                                                             ctypes.byref(ptr))
        self._check(status, f"acquire of {self._names.get(h, f'buffer {h}')}")
        self._held[h] = self._held.get(h, 0) + 1
        # The fill is stream-ordered; the CPU reads the bytes next.
        self._check(self._lib.strata_stream_synchronize(self._alloc, None), "synchronize")
        return ptr.value

    def _release(self, h, through_prefetcher=True):
        fn = (self._lib.strata_prefetcher_release if through_prefetcher
              else self._lib.strata_residency_release)
        self._check(fn(self._fetch if through_prefetcher else self._res, h, None),
                    f"release of {self._names.get(h, f'buffer {h}')}")
        self._held[h] -= 1

    def _fill(self, h, src):
        ptr = self._acquire(h, _READ_WRITE, through_prefetcher=False)
        ctypes.memmove(ptr, src.data_ptr(), src.numel() * src.element_size())
        self._release(h, through_prefetcher=False)

    @staticmethod
    def _view(ptr, shape_and_dtype):
        # sim device memory is host memory: a CPU tensor over it, no copy.
        shape, dtype = shape_and_dtype
        nbytes = _numel(shape) * _DTYPES[dtype][1]
        return torch.frombuffer((ctypes.c_char * nbytes).from_address(ptr),
                                dtype=dtype).view(shape)

    # --- the hooks -----------------------------------------------------------
    def _point(self, module):
        for p in module.parameters(recurse=False):
            h = self._handle[id(p)]
            ptr = self._acquire(h, _READ_ONLY)
            p.data = self._view(ptr, self._shapes[id(p)])

    def _unpoint(self, module):
        for p in module.parameters(recurse=False):
            self._release(self._handle[id(p)])
            p.data = torch.empty(0, dtype=p.dtype)

    def _step_begins(self, _module, _inputs):
        if not self._in_step:
            self._check(self._lib.strata_prefetcher_begin_step(self._fetch), "begin_step")
            self._in_step = True

    def _before_forward(self, module, _inputs):
        self._point(module)

    def _after_forward(self, module, _inputs, output):
        self._unpoint(module)
        if torch.is_grad_enabled():
            for t in _tensors(output):
                if t.requires_grad:
                    t.register_hook(lambda g, m=module: self._before_backward(m, g))
                    break
        return output

    def _before_backward(self, module, grad):
        # The modules before this one in backward have run, and autograd
        # accumulates their parameters' gradients before it starts another
        # node: they may go.
        self._release_backward()
        self._point(module)
        self._backward.append(module)
        return grad

    def _release_backward(self):
        for m in self._backward:
            self._unpoint(m)
        self._backward = []

    # --- the optimizer -----------------------------------------------------
    def step(self):
        """Adam (or AdamW) on every parameter with a gradient, then the
        prefetcher's step ends; the gradients are cleared."""
        self._release_backward()
        for p, h, m, v, master in self._params:
            if p.grad is None:
                continue  # as torch.optim.Adam: no step for it, its count stays
            step = self._steps.get(id(p), 0) + 1
            self._steps[id(p)] = step
            grad = p.grad.detach().contiguous()
            held = []  # released whatever happens: a failed fill leaves the others as they were
            try:
                ptrs = []
                for handle in (h, m, v) if master is None else (master, m, v, h):
                    ptrs.append(self._acquire(handle, _READ_WRITE))
                    held.append(handle)
                t = _AdamTensors()
                t.params, t.exp_avg, t.exp_avg_sq = ptrs[:3]
                t.grads = grad.data_ptr()
                t.grad_type = _DTYPES[grad.dtype][0]
                if master is not None:  # the new bf16 parameters, from the fp32 master
                    t.params_out = ptrs[3]
                    t.out_type = _DTYPES[self._shapes[id(p)][1]][0]  # p.data is empty now
                t.count = grad.numel()
                self._check(self._lib.strata_adam_step_host(self._kernels, ctypes.byref(t),
                                                            ctypes.byref(self._opts), step),
                            "adam step")
            finally:
                for handle in held:
                    self._release(handle)
            p.grad = None
        if self._in_step:
            self._check(self._lib.strata_prefetcher_end_step(self._fetch), "end_step")
            self._in_step = False

    def parameters(self, master=False):
        """Each parameter's current value, as a CPU copy (for checks); with
        `master`, the fp32 master copies of bf16 parameters instead (fp32
        parameters are their own)."""
        out = []
        for p, h, _m, _v, fp32 in self._params:
            handle, (shape, dtype) = h, self._shapes[id(p)]
            if master and fp32 is not None:
                handle, dtype = fp32, torch.float32
            ptr = self._acquire(handle, _READ_ONLY, through_prefetcher=False)
            out.append(self._view(ptr, (shape, dtype)).clone())
            self._release(handle, through_prefetcher=False)
        return out

    def _string(self, fn, handle):
        text = ctypes.c_char_p()
        self._check(fn(handle, ctypes.byref(text)), fn.__name__)
        value = text.value.decode()
        self._lib.strata_string_free(text)
        return value

    def memory_stats(self):
        """The device allocator's counters with torch.cuda.memory_stats()
        names, then the tiers' as "offload.<name>" and the prefetcher's as
        "prefetch.<name>"."""
        return json.loads(self._string(self._lib.strata_stats_json, self._alloc))

    def memory_summary(self):
        """torch.cuda.memory_summary()'s table, with the tiers' and the
        prefetcher's sections."""
        return self._string(self._lib.strata_memory_summary, self._alloc)

    def stats(self):
        """The residency manager's and the prefetcher's counters."""
        out = {}
        for name, fn, handle in (("offload", self._lib.strata_residency_stats_json, self._res),
                                 ("prefetch", self._lib.strata_prefetcher_stats_json,
                                  self._fetch)):
            text = ctypes.c_char_p()
            self._check(fn(handle, ctypes.byref(text)), "stats")
            out[name] = json.loads(text.value.decode())
            self._lib.strata_string_free(text)
        return out

    def close(self):
        """Removes the hooks and frees everything Strata holds."""
        if self in _active:
            _active.remove(self)
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        for module, forward in self._linears:
            module.forward = forward
        self._linears = []
        self._release_backward()
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
                getattr(self._lib, fn)(getattr(self, name))
                setattr(self, name, None)


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


_active = []  # the Offloads not closed, newest last (strata_torch.memory_stats reads it)


def active():
    """The newest Offload not closed, or None."""
    return _active[-1] if _active else None


def offload(model, **options):
    """Offload `model`'s parameters and Adam state to Strata's tiers; see
    Offload for the options. Returns the Offload: call its step() where
    optimizer.step() was."""
    off = Offload(model, **options)
    _active.append(off)
    return off
