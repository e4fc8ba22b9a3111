"""bench/torch_train.py's offloaded-training modes: a model whose training
does not fit the --limit-gib cap, trained anyway.

  offload           strata_torch.install(), then strata_torch.offload(model):
                    parameters and AdamW state in Strata's tiers over the
                    plugin's allocator, Strata's AdamW on the GPU (or, with
                    --offload-adam host, on host threads over state held in
                    host memory), autocast bf16 over fp32 weights as the
                    native run.
  fsdp-cpu-offload  the anchor: FSDP2 (fully_shard per decoder layer and the
                    root, CPUOffloadPolicy, bf16 parameters with fp32
                    reduction, one process), torch.optim.AdamW on the host,
                    as ../shared/calibration/scripts/fsdp_offload.py.

Both take AdamW's lr 1e-4 and weight decay 0.01 (torch.optim.AdamW's
default), as the native run. torch_train.py times their steps as any
mode's, and compares their losses with an uncapped native run.
"""

import os

MODES = ("offload", "fsdp-cpu-offload")
# FSDP2's one-process group.
FSDP_PORT = "29533"


def offload_step(args, model, data, held):
    """Offloads `model` (on the host, not yet on the GPU) to Strata's tiers
    and returns one training step."""
    import strata_torch  # installed by the caller
    import torch

    off = strata_torch.offload(model, lr=1e-4, adamw=True, weight_decay=0.01,
                               adam=args.offload_adam)
    held["offload"] = off

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.precision == "amp"):
            held["out"] = model(input_ids=data, labels=data)
        held["out"].loss.backward()
        off.step()

    return step


def fsdp_step(_args, model, data, held):
    """Shards `model` (on the host) with FSDP2 and CPU offload in a
    one-process group and returns one training step."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", FSDP_PORT)
    dist.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    inner = getattr(model, "model", None) or model.transformer  # Qwen2's, or GPT-2's
    for layer in getattr(inner, "layers", None) or inner.h:
        fully_shard(layer, offload_policy=CPUOffloadPolicy(), mp_policy=mp)
    fully_shard(model, offload_policy=CPUOffloadPolicy(), mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        held["out"] = model(input_ids=data, labels=data)
        held["out"].loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def offload_state(held):
    """What an offloaded run holds after its steps (or where one failed):
    Offload.stats(), the tiers', the prefetcher's and the gradients'
    counters (how many were taken in backward, how many parameters are
    held for backward or have a gradient in .grad now). None for a mode
    that is not Strata's offload."""
    off = held.get("offload")
    if off is None:
        return None
    try:
        return off.stats()
    except Exception as e:  # noqa: BLE001 - the counters of a broken run are a bonus
        return {"stats_error": str(e)[:200]}


def make_step(args, model, data, held):
    """The step of offloaded mode args.child over `model`, built on the host."""
    if args.child == "offload":
        return offload_step(args, model, data, held)
    return fsdp_step(args, model, data, held)


def max_loss_difference(result, reference):
    """The largest |loss - reference loss| over the steps both ran, or None."""
    a, b = result.get("losses") or [], reference.get("losses") or []
    n = min(len(a), len(b))
    return max(abs(x - y) for x, y in zip(a[:n], b[:n])) if n else None


def gradients_line(results):
    """offload: gradients taken in backward N, after backward M (the
    offload's last state; M above 0 means parameters stayed held, with
    their gradients in .grad, to the end of backward)."""
    taken = ((results.get("offload") or {}).get("offload_state") or {}).get("gradients")
    if not taken:
        return "offload: gradients taken n/a"
    return (f"offload: gradients taken in backward {taken['in_backward']}, "
            f"after backward {taken['after_backward']}")


def summary_line(results, reference, step_time, ratio):
    """offload: step strata / fsdp-cpu-offload R; device peak GiB strata S,
    fsdp F; loss difference D (Strata's losses against the uncapped native
    run's). `step_time` and `ratio` are torch_train's."""
    s, f = results.get("offload") or {}, results.get("fsdp-cpu-offload") or {}
    ok = lambda r: r and "error" not in r and not r.get("oom")  # noqa: E731
    r = ratio(step_time(s), step_time(f)) if ok(s) and ok(f) else "n/a"
    peak = lambda r: f"{r['peak_allocated_gib']:.2f}" if ok(r) else "n/a"  # noqa: E731
    d = max_loss_difference(s, reference) if ok(s) and reference and ok(reference) else None
    d_text = f"{d:.2e}" if d is not None else "n/a"
    return (f"offload: step strata / fsdp-cpu-offload {r}; device peak GiB strata {peak(s)}, "
            f"fsdp {peak(f)}; loss difference {d_text}")
