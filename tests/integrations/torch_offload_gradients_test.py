"""strata_torch.offload's gradients in Strata's tiers, with a real PyTorch
(Debian's python3-torch, CPU) on a sim device smaller than the model, each
check against the same model and seed trained plainly
(offload_test_model.py's Model, batches and tiers):

  - after backward every .grad is None and the gradients are Strata's
    buffers, some of them spilled off the device, each taken in backward
    (stats()["gradients"]); off.gradients() equals
    the plain model's .grad bit for bit (same operations, same order);
  - two backward passes before step() (gradient accumulation) sum as
    PyTorch's .grad does, bit for bit, and zero_grad() forgets them;
  - off.clip_grad_norm_ returns torch.nn.utils.clip_grad_norm_'s total
    norm (to 1e-6 relative) and leaves the same clipped gradients (to
    1e-7), and 5 steps trained with clipping keep the plain model's losses
    (to 1e-5), with Adam on the host and on the device; off.gradients()
    in the first step only does not put the prefetcher's order out of
    step (no re-sync, no unrecorded acquire);
  - a gradient of a parameter that did not require one at offload() (it
    has no buffer), and clip_grad_norm_ values it cannot take, are errors
    that say so.

Prints "SKIP: ..." when torch is not installed, "torch_offload_gradients_test:
OK" when every check passed. Random choices use offload_test_model's seed.
"""

import os
import sys

try:
    import torch
except ImportError as e:
    print(f"SKIP: torch is not installed ({e}); scripts/install-deps installs python3-torch")
    sys.exit(0)

import strata_torch  # noqa: E402  (after the skip)
from offload_test_model import SEED, Model, batch, offload  # noqa: E402

CLIP = 0.5  # below the model's gradient norms (6.5 at the first step): every step clips


def check(name, ok, detail=""):
    if not ok:
        print(f"torch_offload_gradients_test: FAILED: {name} {detail} (seed {SEED})")
        sys.exit(1)


def backward(model, s):
    x, y = batch(s)
    loss = torch.nn.functional.cross_entropy(model(x, s), y)
    loss.backward()
    return loss.item()


def plain_grads(micro_batches):
    """The plain model's .grad after backward of batches 0..micro_batches-1."""
    torch.manual_seed(SEED)
    model = Model()
    for s in range(micro_batches):
        backward(model, s)
    return [p.grad.clone() for p in model.parameters()]


def held_in_tiers(nvme_dir):
    """One backward, then two, offloaded: .grad left anywhere, where the
    buffers are, off.gradients() after each, and after zero_grad()."""
    torch.manual_seed(SEED)
    model = Model()
    off = offload(model, nvme_dir)
    try:
        backward(model, 0)
        left = [n for n, p in model.named_parameters() if p.grad is not None]
        places = {off.where(f"{n}.grad") for n, _p in model.named_parameters()}
        taken = off.stats()["gradients"]
        one = off.gradients()
        backward(model, 1)
        two = off.gradients()
        off.zero_grad()
        none = off.gradients()
        return left, places, taken, one, two, none
    finally:
        off.close()


def clipped(nvme_dir, steps, adam):
    """`steps` steps with clipping, plainly and offloaded (adam: where
    Adam runs): each one's losses, step 0's total norms and clipped
    gradients."""
    torch.manual_seed(SEED)
    model = Model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    want, want_norm, want_grads = [], None, None
    for s in range(steps):
        opt.zero_grad(set_to_none=True)
        want.append(backward(model, s))
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP))
        if s == 0:
            want_norm, want_grads = norm, [p.grad.clone() for p in model.parameters()]
        opt.step()
    torch.manual_seed(SEED)
    model = Model()
    off = offload(model, nvme_dir, adam=adam)
    got, got_norm, got_grads = [], None, None
    try:
        for s in range(steps):
            got.append(backward(model, s))
            norm = off.clip_grad_norm_(CLIP)
            if s == 0:  # a look outside the loop's own uses: not in the order
                got_norm, got_grads = norm, off.gradients()
            off.step()
        fetch = off.stats()["prefetch"]
    finally:
        off.close()
    return want, got, (want_norm, got_norm), (want_grads, got_grads), fetch


def misuse(nvme_dir):
    """(the step() error after backward gave a gradient to a parameter
    frozen at offload(), the clip_grad_norm_ errors)."""
    torch.manual_seed(SEED)
    model = Model()
    model.head.bias.requires_grad_(False)
    off = offload(model, nvme_dir)
    try:
        model.head.bias.requires_grad_(True)
        backward(model, 0)
        frozen = None
        try:
            off.step()
        except strata_torch.OffloadError as e:
            frozen = str(e)
        off.zero_grad()
        refused = []
        for args in ((float("nan"),), (-1.0,), ("x",), (1.0, 0.0), (float("inf"),)):
            try:
                off.clip_grad_norm_(*args)
                refused.append(None)
            except strata_torch.OptionError as e:
                refused.append(str(e))
        return frozen, refused
    finally:
        off.close()


def main():
    nvme_dir = os.environ.get("STRATA_TEST_SCRATCH_DIR", "/var/tmp") + "/torch-offload-grads"
    os.makedirs(nvme_dir, exist_ok=True)
    left, places, taken, one, two, none = held_in_tiers(nvme_dir)
    check("no .grad is left after backward", not left, str(left[:4]))
    params = len(list(Model().parameters()))
    check("every gradient was taken in backward, as autograd accumulated it",
          taken == {"in_backward": params, "after_backward": 0, "held_for_backward": 0,
                    "in_grad": 0}, str(taken))
    check("some gradients left the device", places - {"device"}, str(places))
    for label, got, want in (("one backward", one, plain_grads(1)),
                             ("two backward passes", two, plain_grads(2))):
        check(f"{label}: the plain model's gradients, bit for bit",
              all(torch.equal(a, b) for a, b in zip(got, want)) and len(got) == len(want))
    check("zero_grad() forgets them", all(g is None for g in none))
    print(f"torch_offload_gradients_test: gradients in the tiers ({sorted(places)}), equal to "
          ".grad's bit for bit after one and two backward passes")
    for adam in ("host", "device"):
        want, got, (want_norm, got_norm), (want_grads, got_grads), fetch = clipped(nvme_dir, 5,
                                                                                   adam)
        check(f"clip ({adam} Adam): the total norm",
              abs(got_norm - want_norm) <= 1e-6 * want_norm and want_norm > CLIP,
              f"{got_norm} against {want_norm}")
        drift = max((a - b).abs().max().item() for a, b in zip(got_grads, want_grads))
        check(f"clip ({adam} Adam): the clipped gradients", drift <= 1e-7, f"differ by {drift}")
        worst = max(abs(a - b) for a, b in zip(got, want))
        check(f"clip ({adam} Adam): losses", worst <= 1e-5, f"differ by {worst}")
        check(f"clip ({adam} Adam): gradients() is not in the prefetcher's order",
              fetch["resyncs"] + fetch["unrecorded"] == 0, str(fetch))
        print(f"torch_offload_gradients_test: clip_grad_norm_ with {adam} Adam: norm "
              f"{got_norm:.6f} (torch {want_norm:.6f}), gradients within {drift:.1e}, "
              f"5 steps' losses within {worst:.1e}")
    frozen, refused = misuse(nvme_dir)
    check("a gradient of a frozen parameter is refused",
          frozen is not None and "did not require one" in frozen, str(frozen))
    check("clip_grad_norm_'s bad values are refused", all(refused), str(refused))
    print(f"torch_offload_gradients_test: refused: {frozen}; {refused[1]}; {refused[3]}")
    print("torch_offload_gradients_test: OK")


if __name__ == "__main__":
    main()
