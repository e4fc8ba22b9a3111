"""Replays a PyTorch memory snapshot's allocations through PyTorch itself
(torch.empty and del on CUDA, no kernels) under PyTorch's allocator and under
Strata's plugin, each in its own process, and prints the host time each
takes per allocation or free: what the allocator costs the host that queues
a training step, apart from the step's own work.

    python3 bench/torch_alloc_replay.py bench/traces/h100/gpt2_b8_s1024_amp_sdpa_pytorch2.11.pickle

Every pass replays the snapshot's `alloc` and `free_requested` events in
order (blocks the snapshot started with are not replayed; what is left at a
pass's end is freed, untimed); the first pass is cold, and the median of the
others is reported, less the loop's own cost (the same pass allocating
nothing). The closing line:

    torch alloc replay: strata N ns, native M ns per event (loop L ns); strata / native R

--json keeps every pass's time and, for strata, memory_stats() after each.
It needs a CUDA GPU and PyTorch with CUDA; without them it says so and exits
0.
"""

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODES = ("native", "strata")


def events_of(path, device):
    """The snapshot's allocations and frees on `device`: (True, addr, size)
    or (False, addr, 0), in order."""
    try:
        with open(path, "rb") as f:
            snap = pickle.load(f)
        traces = snap.get("device_traces") or []
        if not 0 <= device < len(traces):
            raise SystemExit(f"torch_alloc_replay: {path} has no trace for device {device}")
        out = []
        for e in traces[device]:
            if e["action"] == "alloc":
                out.append((True, e["addr"], e["size"]))
            elif e["action"] == "free_requested":
                out.append((False, e["addr"], 0))
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, KeyError, TypeError) as e:
        raise SystemExit(f"torch_alloc_replay: {path} is not a PyTorch memory snapshot "
                         f"({type(e).__name__}: {e})") from e
    if not out:
        raise SystemExit(f"torch_alloc_replay: {path} records no allocation on device {device}")
    return out


def one_pass(events, make):
    """Seconds to replay `events` with `make(size)` for each allocation."""
    live = {}
    start = time.perf_counter()
    for is_alloc, addr, size in events:
        if is_alloc:
            live[addr] = make(size)
        else:
            live.pop(addr, None)
    took = time.perf_counter() - start
    live.clear()
    return took


def child(args):
    """One mode's passes, in its own process: prints one JSON line."""
    import torch

    result = {"mode": args.child}
    if args.child == "strata":
        sys.path.insert(0, os.path.join(args.build, "python"))  # the build's package
        import strata_torch

        strata_torch.install()
    events = events_of(args.trace, args.device_index)
    torch.cuda.init()
    result["loop_s"] = [one_pass(events, lambda size: None) for _ in range(args.passes)]
    passes, stats = [], []
    for _ in range(args.passes):
        passes.append(one_pass(
            events, lambda size: torch.empty(size, dtype=torch.uint8, device="cuda")))
        torch.cuda.synchronize()
        if args.child == "strata":
            stats.append(strata_torch.memory_stats())
    result.update(events=len(events), pass_s=passes, per_pass_cumulative=stats)
    print(json.dumps(result), flush=True)


def run_mode(mode, args):
    cmd = [sys.executable, os.path.abspath(__file__), args.trace, "--child", mode,
           "--passes", str(args.passes), "--device-index", str(args.device_index),
           "--build", args.build]
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"mode": mode, "error": f"exit {proc.returncode}: " + " | ".join(tail)}
    return json.loads(lines[-1])


def per_event_ns(r):
    """The warm passes' median, less the loop's, in ns per event."""
    warm = statistics.median(r["pass_s"][1:]) - statistics.median(r["loop_s"])
    return warm / r["events"] * 1e9


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("trace", help="a PyTorch memory snapshot (.pickle)")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--passes", type=int, default=6)
    p.add_argument("--device-index", type=int, default=0, help="which device's trace")
    p.add_argument("--build", default=os.path.join(ROOT, "build", "default"))
    p.add_argument("--json", help="write every mode's results here")
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = p.parse_args()
    if not 2 <= args.passes <= 100:
        raise SystemExit("torch_alloc_replay: --passes must be 2 to 100 (the first is cold)")
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"torch_alloc_replay: unknown mode '{m}' ({', '.join(MODES)})")
    events_of(args.trace, args.device_index)  # a bad trace fails here, before any child
    if args.child:
        child(args)
        return
    try:
        import torch
    except ImportError:
        print("torch alloc replay: skipped: PyTorch is not installed")
        return
    if not torch.cuda.is_available():
        print(f"torch alloc replay: skipped: PyTorch {torch.__version__} sees no CUDA GPU")
        return
    results = {m: run_mode(m, args) for m in modes}
    ns = {}
    for m, r in results.items():
        if "error" in r:
            print(f"  {m:7s} failed: {r['error']}")
            continue
        ns[m] = per_event_ns(r)
        loop = statistics.median(r["loop_s"]) / r["events"] * 1e9
        passes = ", ".join(f"{t * 1e3:.1f}" for t in r["pass_s"])
        print(f"  {m:7s} {ns[m]:.0f} ns per event ({r['events']} events; passes {passes} ms; "
              f"loop {loop:.0f} ns)")
    ratio = f"{ns['strata'] / ns['native']:.2f}" if "strata" in ns and ns.get("native") else "n/a"
    loop = ""
    if "native" in results and "error" not in results["native"]:
        r = results["native"]
        loop = f" (loop {statistics.median(r['loop_s']) / r['events'] * 1e9:.0f} ns)"
    print(f"torch alloc replay: strata {ns.get('strata', float('nan')):.0f} ns, native "
          f"{ns.get('native', float('nan')):.0f} ns per event{loop}; strata / native {ratio}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
