"""Trains a transformers causal LM built from its config (random weights,
autocast bf16, AdamW) under each allocator in its own process, and compares
their step time and memory.

    python3 bench/torch_train.py --model gpt2 --batch 8 --seq 1024 --steps 8
    python3 bench/torch_train.py --model qwen2.5-0.5b --batch 4 --seq 2048 --limit-gib 35.51

Modes (--modes, default all four): `native` (PyTorch's caching allocator),
`expandable` (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), `strata`
(strata_torch.install(): Strata's plugin as PyTorch's allocator) and
`preload` (LD_PRELOAD=libstrata_preload.so under PyTorch's own caching).
--limit-gib caps each process with torch.cuda.set_per_process_memory_fraction.

Two more modes train a model that does not fit the cap
(bench/torch_offload_modes.py): `offload` (strata_torch.offload over the
plugin: parameters and AdamW state in Strata's tiers, AdamW on the GPU)
and `fsdp-cpu-offload` (FSDP2 with CPUOffloadPolicy, one process: the
anchor). With either, an uncapped native run follows, for the losses, and

    offload: step strata / fsdp-cpu-offload R; device peak GiB strata S, fsdp F; loss difference D

(D: the largest difference between Strata's losses and the uncapped run's).

Per mode it prints the median step time (steps after the first), the
median of the last half of the steps (the steady state: an allocator that
warms up over its first steps shows there what a long run pays) and how
long the host took to queue a step (near the step time, the GPU waits for
the host), the peak allocated and reserved bytes (PyTorch's max_memory_*,
or Strata's stats) and the device memory used (total - cudaMemGetInfo
free, with the CUDA context), then

    torch train: last half of the steps, strata / native R2
    torch train: step strata / native R; device memory strata / native M1, strata / expandable M2

--rounds N runs the modes N times, interleaved (native, strata, native,
strata, ...): a PyTorch step moves between levels from process to process
(an H100's Qwen2.5 native step was 157 ms in one run, 143 in the next), so
one process per mode cannot tell a few percent apart. A mode's step time
is then the median of its rounds' medians, and one more line gives each
round's ratio:

    torch train: rounds, step strata / native: R1, R2, ...

The run is the calibration's (../shared/calibration/scripts/train.py): the
model under --attn (sdpa, or eager), optionally with LoRA adapters of rank
--lora on the attention projections (peft: attn.c_attn and attn.c_proj for
GPT-2, q/k/v/o_proj for Qwen2.5), autocast bf16 over fp32 weights (--precision
amp) or plain fp32 (fp32), AdamW over the trainable parameters, and the
loop's `out = model(...)`: the previous step's output, its logits with it,
goes when the next forward returns. `strata plan` models that loop.

--snapshot PATH makes the native run record PyTorch's memory history from
the weights on and write it as a snapshot (torch.cuda.memory._dump_snapshot),
as the shared H100 snapshots were made: `strata replay` replays it and
`strata plan` is calibrated against such runs.

--strata-trace PATH makes the strata run keep Strata's event trace
(STRATA_CONF trace_buffer, docs/allocator.md, "Event trace": every call,
mapping and stitch, with its time) and write it here as JSON. With the
trace on, every call takes the locked path, so the step times are not
Strata's.

For strata, a second line gives each step's time, virtual-memory driver
calls and locked calls' time, so a step that remaps shows in the output.

--json keeps every step's time, host time and loss and, for strata,
Strata's memory_stats() after each step (`per_step_cumulative`: driver
calls and their time by kind, stitches, waits), so a steady state that
still calls the driver shows which call. --profile runs one more step per
mode under torch.profiler and reports the GPU's kernel time against the
span it ran over: kernels that take longer under one allocator (memory
layout) and a GPU that waits for the host (allocator time) look different
there.

It needs a CUDA GPU, PyTorch with CUDA and transformers; without them it
says what is missing and exits 0 (scripts/gpu-check relies on that).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import torch_offload_modes

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODES = ("native", "expandable", "strata", "preload")
ALL_MODES = MODES + torch_offload_modes.MODES
# PyTorch 2.11 fails a checkpointed backward pass while its memory history
# records Python frames (run_backward "returned NULL without setting an
# exception"; seen on an H200 with transformers' gradient checkpointing).
FRAMES_BUG = "returned NULL without setting an exception"
FRAMES_BUG_NOTE = "PyTorch 2.11 with checkpointing, like pytorch/pytorch#179536"
GIB = 2**30
# --strata-trace's ring: every event of about 16 Qwen2.5-0.5B steps.
TRACE_CONF = "trace_buffer:1000000"


def model_config(name, seq):
    """The published config of `name` (weights are random)."""
    from transformers import GPT2Config, Qwen2Config

    if name == "gpt2":
        return GPT2Config(n_positions=max(1024, seq))
    if name == "gpt2-medium":
        return GPT2Config(n_positions=max(1024, seq), n_embd=1024, n_layer=24, n_head=16)
    qwen = dict(vocab_size=151936, max_position_embeddings=32768, tie_word_embeddings=True,
                rope_theta=1000000.0, num_key_value_heads=2)
    if name == "qwen2.5-0.5b":
        return Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                           num_attention_heads=14, **qwen)
    if name == "qwen2.5-1.5b":
        return Qwen2Config(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                           num_attention_heads=12, **qwen)
    raise SystemExit(f"torch_train: unknown model '{name}' (gpt2, gpt2-medium, qwen2.5-0.5b, "
                     "qwen2.5-1.5b)")


def missing(lora=False):
    """Why this machine cannot run the harness (with LoRA: peft too), or None."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return f"PyTorch {torch.__version__} sees no CUDA GPU"
    try:
        import transformers  # noqa: F401
    except ImportError:
        return "transformers is not installed"
    if lora:
        try:
            import peft  # noqa: F401
        except ImportError:
            return "peft is not installed (--lora needs it)"
    return None


def child(args):
    """One mode's run, in its own process: prints one JSON line."""
    import time

    import torch

    result = {"mode": args.child}
    strata = args.child in ("strata", "offload")  # Strata's plugin is PyTorch's allocator
    if strata:
        sys.path.insert(0, os.path.join(args.build, "python"))  # the build's package
        import strata_torch

        strata_torch.install()  # the package finds the build's libstrata_torch.so
    from transformers import AutoModelForCausalLM

    if args.limit_gib:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.limit_gib * GIB / total))
    snapshot = args.snapshot and args.child == "native"
    if snapshot:  # every allocation from the weights on, with Python frames
        if args.snapshot_stacks == "none":  # the events without tracebacks
            torch.cuda.memory._record_memory_history(max_entries=400000, context=None)
        else:
            torch.cuda.memory._record_memory_history(max_entries=400000, stacks="python")
    torch.manual_seed(0)
    cfg = model_config(args.model, args.seq)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=args.attn)
    if args.child not in torch_offload_modes.MODES:  # those move it themselves
        model = model.cuda()
    if args.checkpointing:
        model.gradient_checkpointing_enable()
    if args.lora:
        from peft import LoraConfig, get_peft_model

        # The attention projections only, as `strata plan --lora` models
        # them (the calibration's train.py also matched GPT-2's mlp.c_proj).
        targets = (["attn.c_attn", "attn.c_proj"] if args.model.startswith("gpt2")
                   else ["q_proj", "k_proj", "v_proj", "o_proj"])
        model = get_peft_model(model, LoraConfig(r=args.lora, lora_alpha=2 * args.lora,
                                                 target_modules=targets, lora_dropout=0.0))
    model.train()
    data = torch.randint(0, cfg.vocab_size, (args.batch, args.seq),
                         generator=torch.Generator().manual_seed(1)).cuda()
    _, total = torch.cuda.mem_get_info()
    times, host, losses, used, per_step = [], [], [], [], []

    # The loop's `out`: the previous step's output is dropped when the next
    # forward returns, as the calibration loop's `out = model(...)` does.
    held = {}

    if args.child in torch_offload_modes.MODES:
        step = torch_offload_modes.make_step(args, model, data, held)
    else:
        opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-4)

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.precision == "amp"):
                held["out"] = model(input_ids=data, labels=data)
            held["out"].loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    try:
        for _ in range(args.steps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            step()
            # The host has queued the whole step: near the step time, the
            # host (the allocator among it) is what the GPU waits for.
            host.append(time.perf_counter() - start)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            losses.append(held["out"].loss.item())
            free, _ = torch.cuda.mem_get_info()
            used.append(total - free)
            if strata:  # per step: is the steady state free of driver calls?
                per_step.append(strata_torch.memory_stats())
    except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
        result["oom"] = str(e).splitlines()[0][:300]
        result["oom_text"] = str(e)[:6000]
    state = torch_offload_modes.offload_state(held)
    if state is not None:
        result["offload_state"] = state
    if args.strata_trace and args.child == "strata":
        with open(args.strata_trace, "w") as f:
            json.dump(strata_torch.trace(), f)
        result["strata_trace"] = args.strata_trace
    if snapshot:
        torch.cuda.memory._dump_snapshot(args.snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
        result["snapshot"] = args.snapshot
        result["snapshot_stacks"] = args.snapshot_stacks
    if args.profile and "oom" not in result:
        try:
            result["profile"] = profile_step(step)
        except Exception as e:  # noqa: BLE001 - a profiler that fails is reported, not fatal
            result["profile_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    result["step_s"] = times
    result["host_s"] = host
    result["losses"] = losses
    result["device_used_gib"] = max(used) / GIB if used else None
    if strata:
        stats = strata_torch.memory_stats()
        result["peak_allocated_gib"] = stats.get("allocated_bytes.all.peak", 0) / GIB
        result["peak_reserved_gib"] = stats.get("reserved_bytes.all.peak", 0) / GIB
        result["stitches"] = stats.get("num_stitches", 0)
        result["driver_calls"] = stats.get("driver_calls.all", 0)
        result["device_wait_ms"] = stats.get("device_wait_ns", 0) / 1e6
        # The host's cost beyond the fast path: the median over steps 2 on,
        # as for the step time (step 2 still pays the warm-up's driver calls,
        # which a mean would spread over the steady steps).
        if len(per_step) > 1:
            def per_step_median(key, scale=1.0):
                return statistics.median((b.get(key, 0) - a.get(key, 0)) * scale
                                         for a, b in zip(per_step, per_step[1:]))
            result["locked_calls_per_step"] = per_step_median("num_locked_calls")
            result["locked_call_ms_per_step"] = per_step_median("locked_call_ns", 1e-6)
        result["per_step_cumulative"] = per_step
    else:
        result["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / GIB
        result["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / GIB
    print(json.dumps(result), flush=True)


def profile_step(step):
    """One more step under torch.profiler: the GPU's kernel time and the
    kernels that took most, so two allocators' steps can be told apart by
    whether the GPU computed longer or waited for the host."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = {}
    spans = []
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        kernels[e.name] = kernels.get(e.name, 0.0) + e.time_range.elapsed_us()
        spans.append((e.time_range.start, e.time_range.end))
    busy_us = sum(kernels.values())
    span_us = max(e for _, e in spans) - min(s for s, _ in spans) if spans else 0
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:12]
    return {"gpu_kernel_ms": busy_us / 1e3, "gpu_span_ms": span_us / 1e3,
            "gpu_kernels": len(spans), "top_kernels_ms": [[n[:80], t / 1e3] for n, t in top]}


def run_mode(mode, args, stacks="python"):
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if mode == "expandable":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if mode in ("strata", "offload") and args.strata_trace:
        env["STRATA_CONF"] = ",".join(c for c in (env.get("STRATA_CONF"), TRACE_CONF) if c)
    if mode == "preload":
        env["LD_PRELOAD"] = os.path.join(args.build, "integrations", "preload",
                                         "libstrata_preload.so")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, "--model", args.model,
           "--batch", str(args.batch), "--seq", str(args.seq), "--steps", str(args.steps),
           "--limit-gib", str(args.limit_gib), "--build", args.build, "--attn", args.attn,
           "--lora", str(args.lora), "--precision", args.precision,
           "--offload-adam", args.offload_adam]
    if args.checkpointing:
        cmd.append("--checkpointing")
    if args.profile:
        cmd.append("--profile")
    if args.strata_trace:
        cmd += ["--strata-trace", args.strata_trace]
    if args.snapshot:
        cmd += ["--snapshot", args.snapshot, "--snapshot-stacks", stacks]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        error = f"exit {proc.returncode}: " + " | ".join(tail)
        if mode == "native" and args.snapshot and stacks == "python" and FRAMES_BUG in error:
            print("  native     recording Python frames broke the backward pass "
                  f"({FRAMES_BUG_NOTE}): recording the snapshot without them")
            return run_mode(mode, args, "none")
        return {"mode": mode, "error": error}
    return json.loads(lines[-1])


def step_time(r):
    steps = r.get("step_s") or []
    return statistics.median(steps[1:]) if len(steps) > 1 else None


def last_half_time(r):
    """The median of the last half of the steps (at least two): the steady
    state, where step_time also counts an allocator's warm-up steps."""
    steps = r.get("step_s") or []
    half = steps[len(steps) - max(2, len(steps) // 2):] if len(steps) >= 3 else []
    return statistics.median(half) if half else None


def ratio(a, b):
    return f"{a / b:.3f}" if a is not None and b else "n/a"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt2")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--limit-gib", type=float, default=0.0)
    p.add_argument("--checkpointing", action="store_true")
    p.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa",
                   help="transformers' attention implementation")
    p.add_argument("--lora", type=int, default=0,
                   help="LoRA rank on the attention projections (peft); 0: full fine-tuning")
    p.add_argument("--precision", choices=("amp", "fp32"), default="amp",
                   help="autocast bf16 over fp32 weights, or plain fp32")
    p.add_argument("--offload-adam", choices=("device", "host"), default="device",
                   help="offload mode: Strata's AdamW on the GPU, or on host threads over state "
                   "held in host memory (ZeRO-Offload's way)")
    p.add_argument("--profile", action="store_true",
                   help="profile one more step per mode: GPU kernel time against the step's span")
    p.add_argument("--snapshot", help="native mode: write its PyTorch memory snapshot (the "
                   "timed steps, Python frames) here, for strata replay and strata plan")
    p.add_argument("--snapshot-stacks", choices=("python", "none"), default="python",
                   help="the snapshot's frames: Python's (default; where PyTorch fails a "
                   "checkpointed run with them, the run is repeated without) or none")
    p.add_argument("--strata-trace", help="strata mode: write Strata's event trace (every "
                   "call, mapping and stitch) here as JSON")
    p.add_argument("--modes", default=",".join(MODES),
                   help=f"of {', '.join(ALL_MODES)} (bench/torch_offload_modes.py has the last "
                   "two: with either, an uncapped native run gives the losses to compare)")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the modes this many times, interleaved; a mode's step is the "
                   "median of its rounds'")
    p.add_argument("--build", default=os.path.join(ROOT, "build", "default"))
    p.add_argument("--json", help="write every mode's results here")
    p.add_argument("--child", choices=ALL_MODES, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.steps < 2:
        raise SystemExit("torch_train: --steps must be at least 2 (the first is not timed)")
    if not 1 <= args.rounds <= 16:
        raise SystemExit("torch_train: --rounds must be 1 to 16")
    if not 0 <= args.lora <= 4096:
        raise SystemExit("torch_train: --lora must be a rank of 0 to 4096 (0: no adapters)")
    if args.child:
        child(args)
        return
    why = missing(args.lora > 0)
    if why:
        print(f"torch train: skipped: {why}")
        return
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in ALL_MODES:
            raise SystemExit(f"torch_train: unknown mode '{m}' ({', '.join(ALL_MODES)})")
    offloaded = [m for m in modes if m in torch_offload_modes.MODES]
    if offloaded and args.lora:
        raise SystemExit(f"torch_train: {offloaded[0]} trains every parameter: no --lora")
    results = {}
    rounds = {m: [] for m in modes}  # every round's result, in order
    cap = f", cap {args.limit_gib:g} GiB" if args.limit_gib else ", uncapped"
    print(f"torch train: {args.model}, batch {args.batch} x {args.seq}{cap}")
    for n in range(args.rounds):
        for m in modes:
            r = run_mode(m, args)
            rounds[m].append(r)
            results.setdefault(m, r)
            print_mode(m if args.rounds == 1 else f"{m} #{n + 1}", r)
    get = lambda m, f: (results.get(m) or {}).get(f) if "error" not in (results.get(m) or {}) else None
    step = {m: median_step(rounds[m]) for m in modes}
    if args.rounds > 1 and "strata" in rounds and "native" in rounds:
        pairs = [ratio(step_time(s), step_time(n)) if "error" not in s and "error" not in n
                 else "n/a" for s, n in zip(rounds["strata"], rounds["native"])]
        print(f"torch train: rounds, step strata / native: {', '.join(pairs)}")
    last = {m: median_of([last_half_time(r) for r in rounds[m] if "error" not in r])
            for m in modes}
    print(f"torch train: last half of the steps, strata / native "
          f"{ratio(last.get('strata'), last.get('native'))}")
    print(f"torch train: step strata / native {ratio(step.get('strata'), step.get('native'))}; "
          f"device memory strata / native "
          f"{ratio(get('strata', 'device_used_gib'), get('native', 'device_used_gib'))}, "
          f"strata / expandable "
          f"{ratio(get('strata', 'device_used_gib'), get('expandable', 'device_used_gib'))}")
    if offloaded:
        reference = run_mode("native", argparse.Namespace(**{**vars(args), "limit_gib": 0.0}))
        print_mode("native uncapped (the losses offloading must keep)", reference)
        results["native_uncapped"] = reference
        print(torch_offload_modes.summary_line(results, reference, step_time, ratio))
        if "offload" in results:
            print(torch_offload_modes.gradients_line(results))
    if args.json:
        out = {"args": vars(args), "results": results}
        if args.rounds > 1:
            out["rounds"] = rounds
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)


def median_of(values):
    """The median of the values that are not None, or None."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def median_step(runs):
    """The median of the runs' step times (those that trained), or None."""
    return median_of([step_time(r) for r in runs if "error" not in r])


def print_mode(m, r):
    """One mode's line: step time, host time, memory, Strata's counters."""
    if "error" in r:
        print(f"  {m:10s} failed: {r['error']}")
        return
    st = step_time(r)
    hs = r.get("host_s") or []
    host_ms = f" (host queues it in {statistics.median(hs[1:]) * 1e3:.1f})" if len(hs) > 1 else ""
    lh = last_half_time(r)
    host_ms += f", last half {lh * 1e3:.1f} ms" if lh is not None else ""
    line = (f"  {m:10s} step {st * 1e3:.1f} ms{host_ms}" if st else f"  {m:10s} step n/a") + (
        f", peak allocated {r['peak_allocated_gib']:.2f} GiB, reserved "
        f"{r['peak_reserved_gib']:.2f} GiB, device used {r['device_used_gib'] or 0:.2f} GiB")
    if "stitches" in r:
        line += (f", {r['stitches']} stitches, {r['driver_calls']} driver calls, "
                 f"{r['device_wait_ms']:.1f} ms of waits")
        if "locked_call_ms_per_step" in r:
            line += (f", {r['locked_calls_per_step']:.0f} locked calls a step taking "
                     f"{r['locked_call_ms_per_step']:.1f} ms")
    if r.get("oom"):
        line += f"; OOM: {r['oom']}"
    if r.get("profile_error"):
        line += f"; profiling failed: {r['profile_error']}"
    if r.get("profile"):
        pr = r["profile"]
        line += (f"; profiled step: kernels {pr['gpu_kernel_ms']:.1f} ms over a GPU span of "
                 f"{pr['gpu_span_ms']:.1f} ms ({pr['gpu_kernels']} kernels)")
    print(line)
    if r.get("per_step_cumulative"):
        print(per_step_line(r))


# The virtual-memory calls among Strata's driver-call counters.
MEMORY_CALLS = ("reserve", "free_reservation", "create_pages", "release_pages", "map", "unmap",
                "set_access")


def per_step_line(r):
    """Strata's run step by step: step time, virtual-memory driver calls and
    the locked calls' time, so a step that remaps shows in the output."""
    steps = r["per_step_cumulative"]
    before = [{}] + steps[:-1]

    def each(key_of, scale=1.0, digits=0):
        return ", ".join(f"{sum(b.get(k, 0) - a.get(k, 0) for k in key_of) * scale:.{digits}f}"
                         for a, b in zip(before, steps))

    times = ", ".join(f"{t * 1e3:.0f}" for t in r.get("step_s", []))
    return (f"             per step: ms {times}; memory driver calls "
            f"{each([f'driver_calls.{k}' for k in MEMORY_CALLS])}; locked ms "
            f"{each(['locked_call_ns'], 1e-6, 1)}")


if __name__ == "__main__":
    main()
