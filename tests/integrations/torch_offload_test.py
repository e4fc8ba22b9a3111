"""strata_torch.offload with a real PyTorch (Debian's python3-torch, CPU) on the
sim device, whose capacity is smaller than the model: every step moves
parameters and Adam state between the device, the host tier and NVMe.

Checks, each against the same model and seed trained plainly with
torch.optim.Adam (foreach=False):
  - 20 steps give the same losses (to 1e-5) and the same final parameters:
    to 1e-5 for the plain model, to lr / 4 = 2.5e-4 for the branching one.
    Strata's Adam kernel does PyTorch's operations in fp32, but its vector
    units may fuse a multiply and an add, so a step may differ in the last
    bits (measured: about 1e-7). A parameter whose first Adam step comes
    after the others have taken one (the branch's) sees gradients that
    differ by those bits, and a first step divides each gradient by its
    own size plus eps: where |g| is near eps = 1e-8 a difference d moves
    the update by up to lr d / (4 eps), so the bound for it is lr / 4;
  - from the second step the prefetcher's hits cover the parameters, late
    fills are counted, and each step moves at least what does not fit on
    the device;
  - a model whose order changes every other step (a branch) still trains
    the same, and the prefetcher counts its re-syncs;
  - an NVMe file overwritten behind Strata's back (through /proc/self/fd)
    is an error at the next use of a buffer on it, naming the extent's
    failed checksum, not bytes used;
  - a device too small for one Adam update is an out-of-memory error that
    names the buffers held on the device (what could not be offloaded);
  - an offload() refused (a bad STRATA_CONF key) leaves the model's
    parameters as they were;
  - bf16 parameters with fp32 masters, against the same bf16 model with
    fp32 masters trained by hand with torch.optim.Adam: the first loss and
    gradients bit for bit, the masters after the first step to 2.4e-7 (2
    ulps of the largest, LayerNorm's weights near 1: the update's last
    bits, as above), every parameter exactly its master
    rounded to nearest even, and the 20 losses to 1e-2. Once a master's
    last bit differs, its rounding to bf16 (8 bits of mantissa) may differ
    by one bf16 ulp, 2^-8 of the value, and training amplifies that
    (measured: 4.4e-3 by step 20 on losses near 2.3);
  - placement: weights pinned on the device by a name pattern stay there,
    moments placed "host" by a fraction never reach NVMe while the others
    do, and the losses are the plain model's; bad placements (a pattern
    matching nothing, an unknown place, fractions out of range) and pinned
    buffers that leave no room are errors naming them; every step writes
    each moment placed "nvme" to NVMe.

  - any module trains exactly like the plain model under memory pressure,
    whatever it calls: one with its own parameters that calls a child
    between their uses, one calling F.linear itself, a subclass of
    nn.Linear, one using matmul on a transposed weight, and a zero-size
    parameter (left alone);
  - an exception inside a module's forward leaks nothing: the next steps
    run on a device that only fits if nothing stayed held;
  - offload(conf=...) obeys allocator keys (memory_fraction) and refuses
    bad ones; offloading one model twice says so; with install() active
    (the plugin loaded as install() leaves it) a device of offload()'s own
    and the plugin's allocator and integration keys are refused, tier and
    prefetch keys pass;
  - a model whose blocks are checkpointed (torch.utils.checkpoint, reentrant
    or not: the recompute in backward holds its parameters until their
    gradients are accumulated) trains like the plain model, to 1e-5;
  - with adam="host" (the default here) the moments are held on the host
    for each update and are never on the device after a step, and the
    prefetcher reads them ahead of their holds (fewer than a tenth of the
    holds read their own buffer);
  - adam="device" (the kernel queued on the device's stream) trains like
    the plain model, to 1e-5 as above;
  - options it cannot take (a NaN or negative learning rate, betas outside
    [0, 1), a device or conf that is not text, a placement that is neither
    a mapping nor pairs, an unknown adam) are OptionErrors that name them,
    and the model keeps its values.

Prints "SKIP: ..." when torch is not installed, "torch_offload_test: OK"
when every check passed. Random choices use seed 20261125.
"""

import os
import sys

SEED = 20261125

try:
    import torch
except ImportError as e:
    print(f"SKIP: torch is not installed ({e}); scripts/install-deps installs python3-torch")
    sys.exit(0)

import torch.utils.checkpoint  # noqa: E402
import strata_torch  # noqa: E402  (after the skip)
from strata_torch.enums import Status  # noqa: E402

HIDDEN = 512
BLOCKS = 4
STEPS = 20
CHECKPOINTED_STEPS = 5


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(HIDDEN, 2 * HIDDEN)
        self.down = torch.nn.Linear(2 * HIDDEN, HIDDEN)
        self.norm = torch.nn.LayerNorm(HIDDEN)

    def forward(self, x):
        return self.norm(x + self.down(torch.nn.functional.gelu(self.up(x))))


class Model(torch.nn.Module):
    """A few million parameters; `branch` adds a block every other step;
    `reentrant` True or False checkpoints every block, of that kind."""

    def __init__(self, branch=False, reentrant=None):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(BLOCKS))
        self.extra = Block() if branch else None
        self.head = torch.nn.Linear(HIDDEN, 10)
        self.reentrant = reentrant

    def forward(self, x, step=0):
        if self.reentrant is not None:
            x = x.detach().requires_grad_()  # a reentrant checkpoint needs an input that does
        for i, b in enumerate(self.blocks):
            if self.reentrant is None:
                x = b(x)
            else:
                x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=self.reentrant)
            if self.extra is not None and i == 1 and step % 2 == 1:
                x = self.extra(x)
        return self.head(x)


def batch(step):
    g = torch.Generator().manual_seed(SEED + step)
    return torch.randn(16, HIDDEN, generator=g), torch.randint(0, 10, (16,), generator=g)


def plain(branch, reentrant=None, steps=STEPS):
    torch.manual_seed(SEED)
    model = Model(branch, reentrant)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    losses = []
    for s in range(steps):
        x, y = batch(s)
        loss = torch.nn.functional.cross_entropy(model(x, s), y)
        opt.zero_grad(set_to_none=True)  # as Offload.step() clears them
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()]


def offload(model, nvme_dir, capacity="8MiB", **places):
    """`model` offloaded onto a sim device of `capacity` (smaller than the
    model), a 24 MiB host tier and NVMe in `nvme_dir`."""
    return strata_torch.offload(
        model, lr=1e-3, device=f"sim:capacity={capacity},granularity=64KiB",
        conf=f"host_capacity:24MiB,host_chunk:64KiB,host_large:4KiB,nvme_dir:{nvme_dir},"
             "nvme_block_size:64KiB", **places)


def train_step(model, off, s, dtype=None):
    """Step `s` of the offloaded `model` (inputs cast to `dtype`): the loss."""
    x, y = batch(s)
    if dtype is not None:
        x = x.to(dtype)
    loss = torch.nn.functional.cross_entropy(model(x, s).float(), y)
    loss.backward()
    off.step()
    return loss.item()


def overwrite_nvme_files(nvme_dir):
    """Overwrites the NVMe store's (unnamed) file behind Strata's back."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(os.path.realpath(nvme_dir) + "/"):
            w = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY)
            os.pwrite(w, b"\xa5" * os.fstat(w).st_size, 0)
            os.fsync(w)
            os.close(w)


def offloaded(branch, nvme_dir):
    torch.manual_seed(SEED)
    model = Model(branch)
    total = sum(p.numel() * 4 for p in model.parameters())
    off = offload(model, nvme_dir)
    losses, moved, hits, pinned = [], [], [], []
    for s in range(STEPS):
        losses.append(train_step(model, off, s))
        st = off.stats()["prefetch"]
        moved.append(st["step_bytes_from_host"] + st["step_bytes_from_nvme"])
        hits.append(st["hits"])
        calls = strata_torch.memory_stats()
        pinned.append(calls["driver_calls.host_alloc"] + calls["driver_calls.host_free"])
    params = off.parameters()
    stats = off.stats()
    # Adam on the host (the default on sim): the moments are held on the
    # host for each update and never cross to the device.
    on_device = [n for n, _p in model.named_parameters()
                 for k in ("exp_avg", "exp_avg_sq") if off.where(f"{n}.{k}") == "device"]
    check("host Adam leaves the moments off the device", not on_device, str(on_device[:4]))
    torch_stats = strata_torch.memory_stats()
    check("memory_stats has the tiers and the prefetcher",
          torch_stats.get("offload.spills_to_nvme", 0) > 0 and "prefetch.hits" in torch_stats
          and "allocated_bytes.all.peak" in torch_stats, str(sorted(torch_stats)[:8]))
    summary = strata_torch.memory_summary()
    check("memory_summary has their sections", "offload" in summary and "prefetch" in summary)
    off.close()
    return losses, params, stats, moved, hits, total, pinned


def corrupted(nvme_dir):
    """The OffloadError of the step after the NVMe file was overwritten."""
    torch.manual_seed(SEED)
    model = Model()
    off = offload(model, nvme_dir)
    try:
        for s in range(3):
            if s == 2:
                overwrite_nvme_files(nvme_dir)
            train_step(model, off, s)
        return None
    except strata_torch.OffloadError as e:
        return str(e)
    finally:
        off.close()


def too_small(nvme_dir):
    """The OffloadError of a device too small for a 2 MiB weight, held for
    its gradient's accumulation, next to that gradient's buffer and the
    rest of a step (a 5 MiB device), with Adam on the device (adam="host"
    holds the update's buffers on the host instead)."""
    torch.manual_seed(SEED)
    model = Model()
    off = offload(model, nvme_dir, capacity="5MiB", adam="device")
    try:
        train_step(model, off, 0)
        return None, None
    except strata_torch.OffloadError as e:
        return str(e), e.status
    finally:
        off.close()


def refused_conf():
    """offload() with a bad STRATA_CONF key: the error, and whether the
    model kept every parameter's values."""
    torch.manual_seed(SEED)
    model = Model()
    before = [p.detach().clone() for p in model.parameters()]
    try:
        strata_torch.offload(model, conf="no_such_key:1")
        return None, False
    except strata_torch.OffloadError as e:
        intact = all(torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))
        return str(e), intact


def placed(nvme_dir, want_losses):
    """Block 0's weights pinned on the device by a pattern, a quarter of Adam's
    moments kept off NVMe by a fraction: the same losses, and every buffer
    stays where its place allows after every step."""
    torch.manual_seed(SEED)
    model = Model()
    names = [n for n, _p in model.named_parameters()]
    pinned = ["blocks.0.up.weight", "blocks.0.down.weight"]
    sizes = {f"{n}.{m}": p.numel() * 4 for n, p in model.named_parameters()
             for m in ("exp_avg", "exp_avg_sq")}
    moments = list(sizes)
    quarter = sum(sizes.values()) / 4
    kept, start = [], 0
    for name in moments:  # the first quarter of the moments' bytes, in order
        if start < quarter:
            kept.append(name)
        start += sizes[name]
    off = offload(model, nvme_dir, capacity="12MiB", placement={"blocks.0.*.weight": "device"},
                  optimizer_state={"host": 0.25})
    losses, seen = [], set()
    try:
        for s in range(STEPS):
            losses.append(train_step(model, off, s))
            where = {n: off.where(n) for n in names + moments}
            check("pinned weights stay on the device",
                  all(where[n] == "device" for n in pinned), str({n: where[n] for n in pinned}))
            check("host-placed moments never reach NVMe",
                  all(where[n] != "nvme" for n in kept),
                  str([n for n in kept if where[n] == "nvme"]))
            seen.update(n for n, w in where.items() if w == "nvme")
        stats = off.stats()["offload"]
    finally:
        off.close()
    worst = max(abs(a - b) for a, b in zip(losses, want_losses))
    check("placed: losses", worst <= 1e-5, f"differ by {worst}")
    check("placed: the other buffers go to NVMe", any(n not in kept for n in seen), str(seen))
    return worst, len(kept), len(seen), stats["spills_to_nvme"]


def bf16_backward(model, s, off=None):
    """Forward and backward of step `s` of a bf16 model: the loss, and on
    step 0 a copy of the gradients (offloaded by `off`: off.gradients())."""
    x, y = batch(s)
    loss = torch.nn.functional.cross_entropy(model(x.bfloat16()).float(), y)
    loss.backward()
    grads = None
    if s == 0:
        grads = off.gradients() if off else [p.grad.clone() for p in model.parameters()]
    return loss.item(), grads


def bf16_reference():
    """bf16 parameters with an fp32 master copy trained by hand: Adam
    (torch.optim.Adam, foreach=False) on the masters with the bf16
    gradients widened, then each parameter = its master rounded to bf16."""
    torch.manual_seed(SEED)
    model = Model().to(torch.bfloat16)
    masters = [p.detach().float().clone().requires_grad_(True) for p in model.parameters()]
    opt = torch.optim.Adam(masters, lr=1e-3, foreach=False)
    losses, first_grads, first_masters = [], None, None
    for s in range(STEPS):
        loss, grads = bf16_backward(model, s)
        first_grads = first_grads or grads
        for p, m in zip(model.parameters(), masters):
            m.grad = p.grad.float()
            p.grad = None
        opt.step()
        with torch.no_grad():
            for p, m in zip(model.parameters(), masters):
                p.copy_(m.to(torch.bfloat16))
        if s == 0:
            first_masters = [m.detach().clone() for m in masters]
        losses.append(loss)
    return losses, first_grads, first_masters


def bf16_offloaded(nvme_dir):
    """The same bf16 model offloaded: its losses, step 0's gradients, the
    masters after step 0, and at the end the parameters and the masters."""
    torch.manual_seed(SEED)
    model = Model().to(torch.bfloat16)
    off = offload(model, nvme_dir)
    losses, first_grads, first_masters = [], None, None
    try:
        for s in range(STEPS):
            loss, grads = bf16_backward(model, s, off)
            first_grads = first_grads or grads
            off.step()
            if s == 0:
                first_masters = off.parameters(master=True)
            losses.append(loss)
        params, masters = off.parameters(), off.parameters(master=True)
        spills = off.stats()["offload"]["spills_to_nvme"]
    finally:
        off.close()
    return losses, first_grads, first_masters, params, masters, spills


def checkpointed(nvme_dir, reentrant):
    """Every block checkpointed (recomputed in backward, whose saved
    tensors the checkpoint keeps): the losses."""
    torch.manual_seed(SEED)
    model = Model(reentrant=reentrant)
    off = offload(model, nvme_dir)
    try:
        return [train_step(model, off, s) for s in range(CHECKPOINTED_STEPS)]
    finally:
        off.close()


def device_adam(nvme_dir):
    """adam="device": Strata's Adam queued on the device's stream
    (strata_adam_step_async) instead of host threads: the losses and the
    final parameters."""
    torch.manual_seed(SEED)
    model = Model()
    off = offload(model, nvme_dir, adam="device")
    losses = [train_step(model, off, s) for s in range(STEPS)]
    params = off.parameters()
    off.close()
    return losses, params


def nvme_placed(nvme_dir, want_losses):
    """Adam's moments placed "nvme": every step writes each of them to NVMe
    when its update releases it (the prefetcher may read them ahead again
    for the next step), and the losses are the plain model's. Five steps."""
    torch.manual_seed(SEED)
    model = Model()
    moment_bytes = sum(p.numel() * 8 for p in model.parameters())
    off = offload(model, nvme_dir, optimizer_state="nvme")
    losses, written = [], []
    try:
        before = off.stats()["offload"]["bytes_to_nvme"]
        for s in range(5):
            losses.append(train_step(model, off, s))
            now = off.stats()["offload"]["bytes_to_nvme"]
            written.append(now - before)
            before = now
    finally:
        off.close()
    check("nvme-placed: each step writes every moment to NVMe", min(written) >= moment_bytes,
          f"{min(written)} < {moment_bytes}")
    worst = max(abs(a - b) for a, b in zip(losses, want_losses))
    check("nvme-placed: losses", worst <= 1e-5, f"differ by {worst}")
    return worst, min(written), moment_bytes


def placement_errors(nvme_dir):
    """The PlacementError text of each bad placement, and the OffloadError
    of a device that the pinned parameters fill."""
    errors = []
    for places in ({"placement": {"no_such.*": "device"}},
                   {"placement": {"blocks.0.*": "gpu"}},
                   {"parameters": {"device": 0.7, "host": 0.5}},
                   {"optimizer_state": {"host": -0.1}}):
        torch.manual_seed(SEED)
        try:
            offload(Model(), nvme_dir, **places).close()
            errors.append(None)
        except strata_torch.PlacementError as e:  # an OffloadError, and a ValueError
            errors.append(str(e))
    torch.manual_seed(SEED)
    model = Model()
    try:  # 16.8 MB pinned on 8 MiB: the moments find no room
        offload(model, nvme_dir, parameters="device").close()
        errors.append(None)
    except strata_torch.OffloadError as e:
        errors.append(str(e))
    return errors


def bad_options():
    """Each option offload() cannot take: (the error's class, its text), or
    None where it was accepted; and whether the model kept its values."""
    torch.manual_seed(SEED)
    model = Model()
    before = [p.detach().clone() for p in model.parameters()]
    out = []
    for options in ({"lr": float("nan")}, {"lr": -1.0}, {"lr": "x"}, {"betas": (0.9,)},
                    {"betas": (0.9, 1.0)}, {"eps": float("inf")}, {"device": 5},
                    {"conf": 5}, {"placement": 123}, {"placement": [("blocks.*",)]},
                    {"adam": "gpu"}):
        try:
            strata_torch.offload(model, **options).close()
            out.append(None)
        except strata_torch.OptionError as e:
            out.append((type(e).__name__, str(e)))
    intact = all(torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))
    return out, intact


H = 256


class OwnAndChild(torch.nn.Module):
    """Its own parameters, used before and after a child's."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(H, H) * 0.05)
        self.child = torch.nn.Linear(H, H)
        self.b = torch.nn.Parameter(torch.zeros(H))

    def forward(self, x):
        return self.child(torch.tanh(x @ self.w.t())) * self.b.sigmoid()


class FunctionalLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(H, H) * 0.05)
        self.bias = torch.nn.Parameter(torch.zeros(H))

    def forward(self, x):
        return torch.nn.functional.linear(x, self.weight, self.bias)


class ScaledLinear(torch.nn.Linear):
    def forward(self, x):
        return super().forward(x) * 0.5


class TransposedMatmul(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(H, H) * 0.05)
        self.nothing = torch.nn.Parameter(torch.zeros(0))

    def forward(self, x):
        return torch.matmul(x, self.w.t()) + self.nothing.sum()


class Hostile(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([OwnAndChild(), FunctionalLinear(), ScaledLinear(H, H),
                                           TransposedMatmul(), OwnAndChild()])
        self.head = torch.nn.Linear(H, 10)
        self.fail = False

    def forward(self, x, _step=0):
        for i, layer in enumerate(self.layers):
            x = torch.nn.functional.gelu(layer(x))
            if self.fail and i == 2:
                raise RuntimeError("a forward that fails")
        return self.head(x)


def hostile_batch(step):
    g = torch.Generator().manual_seed(SEED + 1000 + step)
    return torch.randn(8, H, generator=g), torch.randint(0, 10, (8,), generator=g)


def hostile_losses(nvme_dir, steps=6, offloaded=True, fail_at=None):
    """Losses of Hostile trained plainly or offloaded onto a device that holds
    a fraction of it; `fail_at`: that step's forward raises (and is retried)."""
    torch.manual_seed(SEED)
    model = Hostile()
    if offloaded:
        off = strata_torch.offload(
            model, lr=1e-3, device="sim:capacity=1536KiB,granularity=64KiB",
            conf=f"host_capacity:2MiB,host_chunk:64KiB,host_large:4KiB,nvme_dir:{nvme_dir},"
                 "nvme_block_size:64KiB")
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    losses = []
    try:
        for s in range(steps):
            x, y = hostile_batch(s)
            if s == fail_at:
                model.fail = True
                try:
                    model(x)
                except RuntimeError:
                    pass
                model.fail = False
            loss = torch.nn.functional.cross_entropy(model(x), y)
            if not offloaded:
                opt.zero_grad(set_to_none=True)
            loss.backward()
            if offloaded:
                off.step()
                check("nothing stays held after step()",
                      not any(n > 0 for n in off._t.held.values()), str(off._t.held))
            else:
                opt.step()
            losses.append(loss.item())
    finally:
        if offloaded:
            off.close()
    return losses


def cuda_options():
    """What offload() refuses with install() active, checked against the
    plugin itself (CPU PyTorch cannot install it: the check takes the
    loaded library): (device given, an allocator key, an integration key,
    tier and prefetch keys) -> each one's OptionError text, or None."""
    from strata_torch import _native  # pylint: disable=import-outside-toplevel
    from strata_torch import _tier_buffers  # pylint: disable=import-outside-toplevel

    saved = strata_torch._allocator._lib  # pylint: disable=protected-access
    strata_torch._allocator._lib = _native.load(_native.TORCH_PLUGIN)  # as install() leaves it
    out = []
    try:
        for device, conf in (("sim:capacity=8MiB", ""),
                             (None, "host_capacity:1GiB,memory_fraction:0.5"),
                             (None, "report_on_exit:/tmp/r.txt"),
                             (None, "host_capacity:1GiB,nvme_dir:/tmp,prefetch_inflight:2")):
            try:
                _tier_buffers.check_cuda_options(device, conf)
                out.append(None)
            except strata_torch.OptionError as e:
                out.append(str(e))
    finally:
        strata_torch._allocator._lib = saved  # pylint: disable=protected-access
    return out


def conf_keys(nvme_dir):
    """The errors of offload(conf=...) with allocator keys: memory_fraction
    obeyed (no room), a bad value refused; and of offloading a model twice."""
    torch.manual_seed(SEED)
    model = Hostile()
    off = None
    try:  # 1% of 8 MiB: not even the registration's first fill fits
        off = strata_torch.offload(model, device="sim:capacity=8MiB,granularity=64KiB",
                                   conf="memory_fraction:0.01,log_ooms:false")
        x, y = hostile_batch(0)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        off.step()
        obeyed = None
    except strata_torch.OffloadError as e:
        obeyed = str(e)
    finally:
        if off is not None:
            off.close()
    torch.manual_seed(SEED)
    model = Hostile()
    try:
        strata_torch.offload(model, conf="memory_fraction:2").close()
        refused = None
    except strata_torch.OffloadError as e:
        refused = str(e)
    first = strata_torch.offload(model, conf=f"nvme_dir:{nvme_dir}")
    try:
        strata_torch.offload(model).close()
        twice = None
    except strata_torch.OffloadError as e:
        twice = str(e)
    finally:
        first.close()
    return obeyed, refused, twice


def check(name, ok, detail=""):
    if not ok:
        print(f"torch_offload_test: FAILED: {name} {detail} (seed {SEED})")
        sys.exit(1)


def main():
    nvme_dir = os.environ.get("STRATA_TEST_SCRATCH_DIR", "/var/tmp") + "/torch-offload"
    os.makedirs(nvme_dir, exist_ok=True)
    for branch in (False, True):
        want_losses, want_params = plain(branch)
        losses, params, stats, moved, hits, total, pinned = offloaded(branch, nvme_dir)
        label = "branching model" if branch else "model"
        worst = max(abs(a - b) for a, b in zip(losses, want_losses))
        check(f"{label}: losses", worst <= 1e-5, f"differ by {worst}")
        drift = max((a - b).abs().max().item() for a, b in zip(params, want_params))
        bound = 2.5e-4 if branch else 1e-5  # see the module's doc
        check(f"{label}: final parameters", drift <= bound, f"differ by {drift}")
        p = stats["prefetch"]
        o = stats["offload"]
        check(f"{label}: spills to NVMe", o["spills_to_nvme"] > 0, str(o))
        check(f"{label}: hits from the second step", hits[-1] > hits[0] and p["hits"] > 0, str(p))
        # The device holds 8 MiB of 3 x `total` bytes: each step must bring
        # back at least the rest of the parameters.
        least = total - (8 << 20)
        check(f"{label}: bytes moved per step", min(moved[1:]) >= least,
              f"{min(moved[1:])} < {least}")
        if branch:
            check("branching model: re-syncs counted", p["resyncs"] + p["unrecorded"] > 0, str(p))
        else:
            # Host Adam's holds are steps of the order: the prefetcher reads
            # the state from NVMe ahead of them (before, 1558 of 2080 holds
            # read their own buffer).
            check("host Adam: the state is read ahead of its holds",
                  o["host_holds_read"] * 10 < o["host_holds"], str(o))
        print(f"torch_offload_test: {label}: {total / 1e6:.1f} MB of parameters, "
              f"losses within {worst:.1e}, parameters within {drift:.1e}; "
              f"hits {p['hits']}, late fills {p['late_fills']}, re-syncs {p['resyncs']}, "
              f"min bytes moved per step {min(moved[1:]) / 1e6:.1f} MB; "
              f"spills to host {o['spills_to_host']}, to NVMe {o['spills_to_nvme']}; "
              f"host holds {o['host_holds']}, of which read their own buffer "
              f"{o['host_holds_read']}; pinned host memory calls {pinned[0]} in the first "
              f"step, {(pinned[-1] - pinned[len(pinned) // 2]) / (len(pinned) - 1 - len(pinned) // 2):.0f} "
              f"a step in the second half")
    for reentrant in (False, True):
        want = plain(False, reentrant, CHECKPOINTED_STEPS)[0]
        worst = max(abs(a - b) for a, b in zip(checkpointed(nvme_dir, reentrant), want))
        check(f"checkpointed blocks (reentrant {reentrant}): losses", worst <= 1e-5,
              f"differ by {worst}")
        print(f"torch_offload_test: checkpointed blocks, reentrant {reentrant}: the plain "
              f"model's losses within {worst:.1e}")
    want_losses, want_params = plain(False)
    losses, params = device_adam(nvme_dir)
    worst = max(abs(a - b) for a, b in zip(losses, want_losses))
    drift = max((a - b).abs().max().item() for a, b in zip(params, want_params))
    check("adam on the device: losses", worst <= 1e-5, f"differ by {worst}")
    check("adam on the device: final parameters", drift <= 1e-5, f"differ by {drift}")
    print(f"torch_offload_test: adam on the device's stream: losses within {worst:.1e}, "
          f"parameters within {drift:.1e}")
    os.makedirs(nvme_dir + "-corrupt", exist_ok=True)
    error = corrupted(nvme_dir + "-corrupt")
    check("a corrupted extent", error is not None and "failed its checksum" in error, str(error))
    print(f"torch_offload_test: a corrupted extent: {error}")
    error, status = too_small(nvme_dir)
    check("an out-of-memory error names what is held",
          error is not None and "out of memory" in error and "held on the device" in error
          and "up.weight" in error, str(error))
    check("an out-of-memory error's status", status == Status.ERROR_OUT_OF_MEMORY, str(status))
    print(f"torch_offload_test: a device too small: {error.splitlines()[-1]}")
    worst, kept, went, spills = placed(nvme_dir, plain(False)[0])
    print(f"torch_offload_test: placed: losses within {worst:.1e}; block 0's weights stayed "
          f"on the device; {kept} moments kept off NVMe; {went} other buffers reached NVMe "
          f"({spills} spills)")
    want_losses, want_grads, want_masters = bf16_reference()
    losses, grads, first_masters, params, masters, spills = bf16_offloaded(nvme_dir)
    check("bf16: the first loss and gradients are the reference's, bit for bit",
          losses[0] == want_losses[0] and all(torch.equal(a, b) for a, b in zip(grads, want_grads)))
    # The one fp32 update may differ in the last bits, as for fp32: 2 ulps
    # of the largest masters (LayerNorm's weights, near 1).
    first = max((a - b).abs().max().item() for a, b in zip(first_masters, want_masters))
    check("bf16: the masters after one step", first <= 2.4e-7, f"differ by {first}")
    check("bf16: every parameter is its master rounded to nearest even",
          all(torch.equal(p, m.to(torch.bfloat16)) for p, m in zip(params, masters)))
    worst = max(abs(a - b) for a, b in zip(losses, want_losses))
    check("bf16: losses", worst <= 1e-2, f"differ by {worst}")
    check("bf16: spills to NVMe", spills > 0)
    print(f"torch_offload_test: bf16 with fp32 masters: first step exact, masters after it "
          f"within {first:.1e}, losses within {worst:.1e} over {STEPS} steps")
    worst, least, moments = nvme_placed(nvme_dir, plain(False)[0])
    print(f"torch_offload_test: nvme-placed: at least {least / 1e6:.1f} MB written to NVMe a "
          f"step ({moments / 1e6:.1f} MB of moments), losses within {worst:.1e}")
    errors = placement_errors(nvme_dir)
    wanted = ["matches no parameter", "unknown place 'gpu'", "add up to 1.2",
              "must be in [0, 1]", "pinned on the device by placement"]
    for error, want in zip(errors, wanted):
        check(f"placement error: {want}", error is not None and want in error, str(error))
    print(f"torch_offload_test: placement errors: {errors[0]}; {errors[2]}")
    refused, intact = bad_options()
    wanted = ["lr must be a finite number", "lr must be a finite number",
              "lr must be a finite number", "betas must be two numbers in [0, 1)",
              "betas must be two numbers in [0, 1)", "eps must be a finite number",
              "device must be a device spec string", "conf must be STRATA_CONF text",
              "(pattern, place) pairs, not 123", "each entry is (a pattern string, a place)",
              "adam must be 'device' or 'host', not 'gpu'"]
    for got, want in zip(refused, wanted):
        check(f"bad option: {want}", got is not None and want in got[1], str(got))
    check("bad options: every one refused", len(refused) == len(wanted), str(refused))
    check("bad options: placements are PlacementErrors",
          [g[0] for g in refused[-3:-1]] == ["PlacementError", "PlacementError"], str(refused))
    check("bad options leave the model as it was", intact)
    print(f"torch_offload_test: bad options refused: {refused[0][1]}; {refused[8][1]}")
    want = hostile_losses(nvme_dir, offloaded=False)
    got = hostile_losses(nvme_dir)
    worst = max(abs(a - b) for a, b in zip(got, want))
    check("any module: the plain model's losses", worst <= 1e-5, f"differ by {worst}")
    print(f"torch_offload_test: a parent calling a child, F.linear, an nn.Linear subclass, a "
          f"transposed matmul and a zero-size parameter: losses within {worst:.1e}")
    after = hostile_losses(nvme_dir, fail_at=2)
    worst = max(abs(a - b) for a, b in zip(after, want))
    check("a forward that raised leaks nothing", worst <= 1e-5, f"differ by {worst}")
    print(f"torch_offload_test: a forward that raised: the next steps' losses within {worst:.1e}")
    refused = cuda_options()
    check("CUDA: a device of its own is refused",
          refused[0] is not None and "leave device=" in refused[0], str(refused[0]))
    check("CUDA: an allocator key is refused",
          refused[1] is not None and "'memory_fraction' configures the allocator" in refused[1],
          str(refused[1]))
    check("CUDA: an integration key is refused",
          refused[2] is not None and "'report_on_exit'" in refused[2], str(refused[2]))
    check("CUDA: tier and prefetch keys pass", refused[3] is None, str(refused[3]))
    print(f"torch_offload_test: on CUDA, refused: {refused[1]}")
    obeyed, refused, twice = conf_keys(nvme_dir)
    check("conf: memory_fraction is obeyed", obeyed is not None and "out of memory" in obeyed,
          str(obeyed))
    check("conf: a bad allocator value is refused",
          refused is not None and "memory_fraction" in refused, str(refused))
    check("offloading a model twice says so",
          twice is not None and "already offloaded" in twice, str(twice))
    print(f"torch_offload_test: conf keys obeyed or refused; twice: {twice}")
    error, intact = refused_conf()
    check("a refused offload leaves the model whole",
          error is not None and "no_such_key" in error and intact, str(error))
    print("torch_offload_test: OK")


if __name__ == "__main__":
    main()
