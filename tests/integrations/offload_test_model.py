"""The model, batches and offload setup strata_torch.offload's tests share
(torch_offload_test.py, torch_offload_hostile_test.py,
torch_offload_gradients_test.py): a few blocks of Linear-GELU-Linear-
LayerNorm on a sim device smaller than the model, a 24 MiB host tier and
NVMe. Import it after checking that torch imports. Random choices use
seed 20261125.
"""

import sys

import torch
import torch.utils.checkpoint
import strata_torch

SEED = 20261125
HIDDEN = 512
BLOCKS = 4
STEPS = 20
CHECKPOINTED_STEPS = 5


def checker(program):
    """check(name, ok, detail): prints "<program>: FAILED: ..." with the seed
    and exits 1 unless `ok`."""
    def check(name, ok, detail=""):
        if not ok:
            print(f"{program}: FAILED: {name} {detail} (seed {SEED})")
            sys.exit(1)
    return check


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
