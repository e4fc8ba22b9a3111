"""strata_torch.offload on bad input and hostile modules, with a real PyTorch
(Debian's python3-torch, CPU) on the sim device (offload_test_model.py's
model unless said):
  - an NVMe file overwritten behind Strata's back (through /proc/self/fd)
    is an error at the next use of a buffer on it, naming the extent's
    failed checksum, not bytes used;
  - a device too small for one Adam update is an out-of-memory error that
    names the buffers held on the device (what could not be offloaded);
  - an offload() refused (a bad STRATA_CONF key), or failing while it
    hooks the parameters, leaves the model's parameters as they were, and
    the model offloads and trains again;
  - bad placements (a pattern matching nothing, an unknown place, fractions
    out of range) and pinned buffers that leave no room are errors naming
    them;
  - options it cannot take (a NaN or negative learning rate, betas outside
    [0, 1), a device or conf that is not text, a placement that is neither
    a mapping nor pairs, an unknown adam) are OptionErrors that name them,
    and the model keeps its values;
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
    prefetch keys pass.

Prints "SKIP: ..." when torch is not installed, "torch_offload_hostile_test:
OK" when every check passed. Random choices use seed 20261125.
"""

import os
import sys

try:
    import torch
except ImportError as e:
    print(f"SKIP: torch is not installed ({e}); scripts/install-deps installs python3-torch")
    sys.exit(0)

import strata_torch  # noqa: E402  (after the skip)
from strata_torch.enums import Status  # noqa: E402
from offload_test_model import SEED, Model, checker, offload, train_step  # noqa: E402

check = checker("torch_offload_hostile_test")


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


def failed_while_hooking(nvme_dir):
    """offload() whose third acquire for a parameter's autograd hook fails
    (a full device, a failed NVMe read): the error, whether the model kept
    every parameter's values, and whether offloading it again then works
    (nothing of the failed one still claims its parameters)."""
    torch.manual_seed(SEED)
    model = Model()
    before = [p.detach().clone() for p in model.parameters()]
    real = strata_torch._offload.Offload._accumulator  # pylint: disable=protected-access
    calls = []

    def failing(self, p, h):
        calls.append(h)
        if len(calls) == 3:
            raise strata_torch.OffloadError("acquire: injected failure")
        return real(self, p, h)

    strata_torch._offload.Offload._accumulator = failing  # pylint: disable=protected-access
    try:
        strata_torch.offload(model, conf=f"nvme_dir:{nvme_dir}")
        return None, False, False
    except strata_torch.OffloadError as e:
        error = str(e)
    finally:
        strata_torch._offload.Offload._accumulator = real  # pylint: disable=protected-access
    intact = all(torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))
    off = offload(model, nvme_dir)
    try:
        loss = train_step(model, off, 0)
        # Trained: a finite loss, and Adam moved the values it started from.
        again = loss == loss and any(not torch.equal(a, b)
                                     for a, b in zip(before, off.parameters()))
    finally:
        off.close()
    return error, intact, again


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


def main():
    nvme_dir = os.environ.get("STRATA_TEST_SCRATCH_DIR", "/var/tmp") + "/torch-offload"
    os.makedirs(nvme_dir, exist_ok=True)
    os.makedirs(nvme_dir + "-corrupt", exist_ok=True)
    error = corrupted(nvme_dir + "-corrupt")
    check("a corrupted extent", error is not None and "failed its checksum" in error, str(error))
    print(f"torch_offload_hostile_test: a corrupted extent: {error}")
    error, status = too_small(nvme_dir)
    check("an out-of-memory error names what is held",
          error is not None and "out of memory" in error and "held on the device" in error
          and "up.weight" in error, str(error))
    check("an out-of-memory error's status", status == Status.ERROR_OUT_OF_MEMORY, str(status))
    print(f"torch_offload_hostile_test: a device too small: {error.splitlines()[-1]}")
    errors = placement_errors(nvme_dir)
    wanted = ["matches no parameter", "unknown place 'gpu'", "add up to 1.2",
              "must be in [0, 1]", "pinned on the device by placement"]
    for error, want in zip(errors, wanted):
        check(f"placement error: {want}", error is not None and want in error, str(error))
    print(f"torch_offload_hostile_test: placement errors: {errors[0]}; {errors[2]}")
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
    print(f"torch_offload_hostile_test: bad options refused: {refused[0][1]}; {refused[8][1]}")
    want = hostile_losses(nvme_dir, offloaded=False)
    got = hostile_losses(nvme_dir)
    worst = max(abs(a - b) for a, b in zip(got, want))
    check("any module: the plain model's losses", worst <= 1e-5, f"differ by {worst}")
    print(f"torch_offload_hostile_test: a parent calling a child, F.linear, an nn.Linear subclass, a "
          f"transposed matmul and a zero-size parameter: losses within {worst:.1e}")
    after = hostile_losses(nvme_dir, fail_at=2)
    worst = max(abs(a - b) for a, b in zip(after, want))
    check("a forward that raised leaks nothing", worst <= 1e-5, f"differ by {worst}")
    print(f"torch_offload_hostile_test: a forward that raised: the next steps' losses within {worst:.1e}")
    refused = cuda_options()
    check("CUDA: a device of its own is refused",
          refused[0] is not None and "leave device=" in refused[0], str(refused[0]))
    check("CUDA: an allocator key is refused",
          refused[1] is not None and "'memory_fraction' configures the allocator" in refused[1],
          str(refused[1]))
    check("CUDA: an integration key is refused",
          refused[2] is not None and "'report_on_exit'" in refused[2], str(refused[2]))
    check("CUDA: tier and prefetch keys pass", refused[3] is None, str(refused[3]))
    print(f"torch_offload_hostile_test: on CUDA, refused: {refused[1]}")
    obeyed, refused, twice = conf_keys(nvme_dir)
    check("conf: memory_fraction is obeyed", obeyed is not None and "out of memory" in obeyed,
          str(obeyed))
    check("conf: a bad allocator value is refused",
          refused is not None and "memory_fraction" in refused, str(refused))
    check("offloading a model twice says so",
          twice is not None and "already offloaded" in twice, str(twice))
    print(f"torch_offload_hostile_test: conf keys obeyed or refused; twice: {twice}")
    error, intact = refused_conf()
    check("a refused offload leaves the model whole",
          error is not None and "no_such_key" in error and intact, str(error))
    error, intact, again = failed_while_hooking(nvme_dir)
    check("an offload failing while it hooks the parameters leaves the model whole",
          error is not None and "injected failure" in error and intact, str(error))
    check("the model offloads and trains again after that", again)
    print("torch_offload_hostile_test: OK")


if __name__ == "__main__":
    main()
