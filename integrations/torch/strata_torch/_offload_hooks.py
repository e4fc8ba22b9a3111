"""The module and autograd hooks behind strata_torch.offload (Offload, in
_offload.py). Before a module's forward its offloaded parameters are
acquired (their .data points at their buffers) and after it released; a
tensor autograd saves that views a parameter's buffer is kept as a view and
rebuilt over the buffer when backward unpacks it; in backward a module's
parameters are held from its output's gradient until autograd has
accumulated theirs, and their gradients then go into their own buffers.
Nothing here depends on how a module computes: only on the parameters it
holds, the tensors autograd saves, and the gradients it accumulates.
"""

from typing import Any, Dict, List, Optional, Set, Tuple

import torch

from ._tier_buffers import TierBuffers
from .enums import AccessMode
from .errors import OffloadError


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


def _tensors(output):
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (tuple, list)):
        return [t for t in output if isinstance(t, torch.Tensor)]
    return []



class ModuleHooks:
    """The hooks' half of Offload. Its state is Offload's, made in
    Offload.__init__ and declared here for the type checker."""

    _t: TierBuffers
    _device: torch.device
    _in_step: bool
    _params: List[Tuple[torch.nn.Parameter, int, int, int, Optional[int]]]
    _handle: Dict[int, int]
    _grads: Dict[int, int]
    _on_host: Set[int]
    _grad_ready: Set[int]
    _shapes: Dict[int, Tuple[Tuple[int, ...], torch.dtype]]
    _uses: Dict[int, int]
    _by_ptr: Dict[int, torch.nn.Parameter]
    _forward: List[Tuple[torch.nn.Module, List[torch.nn.Parameter]]]
    _backward: Dict[int, torch.nn.Parameter]
    _saving: Any
    _backward_running: bool
    _closed: bool
    # Gradients moved into their buffers: by the hook that runs once
    # autograd accumulated them ("in_backward"), or later from .grad, at
    # step(), gradients() or clip_grad_norm_() ("after_backward": each of
    # those held its parameter and its PyTorch tensor on the device
    # through the rest of backward)
    _taken: Dict[str, int]

    def _hold(self, p):
        """One more use of p's buffer; p.data points at it."""
        ptr = self._t.acquire(self._handle[id(p)], AccessMode.READ_ONLY)
        self._uses[id(p)] = self._uses.get(id(p), 0) + 1
        if self._uses[id(p)] == 1:
            p.data = self._t.view(ptr, self._shapes[id(p)])
            self._by_ptr[ptr] = p

    def _drop(self, p):
        """Ends one use; at the last, p.data is empty again."""
        self._t.release(self._handle[id(p)])
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
            self._t.check(self._t.lib.strata_prefetcher_begin_step(self._t.fetch), "begin_step")
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
        if self._closed:
            return
        if p.grad is not None and id(p) in self._grads:
            self._take_gradient(p)
            self._taken["in_backward"] += 1
        if self._backward.pop(id(p), None) is not None:
            self._drop(p)

    def _take_gradient(self, p):
        """p.grad into p's gradient buffer, ordered on the current stream
        (the first of a step overwrites it: nothing is fetched; later ones
        add), then PyTorch's tensor goes."""
        grad, h = p.grad, self._grads[id(p)]
        if grad.layout != torch.strided:
            raise OffloadError(f"offload: {self._t.names[h]} is {grad.layout}: only dense "
                               "gradients can be offloaded (Adam takes no sparse ones)")
        first = id(p) not in self._grad_ready
        ptr = self._t.acquire(h, AccessMode.OVERWRITE if first else AccessMode.READ_WRITE,
                              through_prefetcher=False)
        try:
            view = self._t.view(ptr, self._shapes[id(p)])
            if first:
                view.copy_(grad)
            else:
                view.add_(grad)
        finally:
            self._t.release(h, through_prefetcher=False)
        self._grad_ready.add(id(p))
        p.grad = None

    def _take_gradients(self):
        """Gradients PyTorch left in .grad (a take in backward that failed,
        or a parameter unfrozen after offload()) join the buffers; a wrong
        device, or a gradient of a parameter that did not require one at
        offload(), is an error before anything changes."""
        for p, h, *_state in self._params:
            if p.grad is None:
                continue
            name = self._t.names.get(h, "a parameter")
            if p.grad.device != self._device:
                raise OffloadError(f"step: {name}'s gradient is on {p.grad.device}, its "
                                   f"parameter on {self._device}")
            if id(p) not in self._grads:
                raise OffloadError(f"step: {name} has a gradient, but did not require one "
                                   "when offload() registered it (requires_grad False)")
        for p, *_handles in self._params:
            if p.grad is not None:
                self._take_gradient(p)
                self._taken["after_backward"] += 1

    def _gradient(self, p, mode, through_prefetcher=True):
        """p's gradient buffer acquired where its update reads it (the
        host or the device), through the prefetcher as recorded use unless
        `through_prefetcher` is False: a tensor over it, and the call that
        ends the hold."""
        h = self._grads[id(p)]
        if id(p) in self._on_host:
            ptr = self._t.acquire_host(h, mode, through_prefetcher)
            return (self._t.view(ptr, self._shapes[id(p)], host=True),
                    lambda: self._t.release_host(h, through_prefetcher))
        ptr = self._t.acquire(h, mode, through_prefetcher)
        return (self._t.view(ptr, self._shapes[id(p)]),
                lambda: self._t.release(h, through_prefetcher))

    def _release_backward(self):
        self._backward_running = False
        for p in list(self._backward.values()):
            del self._backward[id(p)]
            self._drop(p)
