#!/usr/bin/env python3
"""Writes a synthetic training trace whose sequence length changes every
step, as fine-tuning with dynamic padding makes it, in Strata's trace JSON
(`strata replay` reads it; docs/replay.md).

The loop is shaped like GPT-2 small (12 layers, width 768, vocabulary
50257, batch 8) under autocast, with the calibration's loop
(../shared/calibration/scripts/train.py): each layer saves eight bf16
activations and frees two fp32 temporaries; the bf16 logits are held until
the next step's forward pass returns; the loss makes fp32 logits and their
log-softmax, the backward their gradients, each layer's activation
gradients and its weights' fp32 gradients; AdamW (foreach) makes its state
once and two rounds of temporaries each step; zero_grad frees the
gradients. Each step takes 80 ms, its calls evenly spaced.

It is not a recording: sizes and order follow the model's shapes, not
PyTorch's exact requests. Every step but the sequence length is the same,
so with --min-seq equal to --max-seq the steps repeat exactly.

    bench/dynamic_padding_trace.py --steps 40 --seed 1 [--longest-first 1] > trace.json
    strata replay trace.json --timeline
"""
import argparse
import json
import random
import sys

BATCH, WIDTH, LAYERS, VOCAB, POSITIONS = 8, 768, 12, 50257, 1024
STEP_NS = 80_000_000


class Trace:
    """The events, with addresses that are never reused and times that
    move on by `gap` nanoseconds a call."""

    def __init__(self, gap):
        self.events, self.next, self.time, self.gap = [], 0x1000, 0, gap

    def alloc(self, size):
        addr, self.next = self.next, self.next + 0x1000
        self.time += self.gap
        self.events.append({"time_ns": self.time, "action": "alloc", "address": hex(addr),
                            "size": size, "stream": "0x0"})
        return (addr, size)

    def free(self, block):
        self.time += self.gap
        self.events.append({"time_ns": self.time, "action": "free_requested",
                            "address": hex(block[0]), "size": block[1], "stream": "0x0"})


def step(t, seq, params, state):
    """One training step at sequence length `seq`; `state` holds what
    outlives it (the logits, Adam's state)."""
    tokens = BATCH * seq
    acts = []
    for _ in range(LAYERS):
        for k, width in enumerate((1, 3, 1, 1, 1, 4, 4, 1)):
            tmp = t.alloc(tokens * WIDTH * 4) if k in (0, 4) else None  # layer norms' fp32
            acts.append(t.alloc(tokens * width * WIDTH * 2))
            if tmp:
                t.free(tmp)
    logits = t.alloc(tokens * VOCAB * 2)
    fp32 = t.alloc(tokens * VOCAB * 4)
    log_softmax = t.alloc(tokens * VOCAB * 4)
    t.free(fp32)
    if state.get("logits"):
        t.free(state["logits"])  # `out = model(...)` drops the last step's
    state["logits"] = logits
    grad = t.alloc(tokens * VOCAB * 4)
    t.free(log_softmax)
    grad16 = t.alloc(tokens * VOCAB * 2)
    t.free(grad)
    flowing = t.alloc(tokens * WIDTH * 2)
    t.free(grad16)
    grads = [None] * len(params)
    for layer in reversed(range(LAYERS)):
        for k in range(8):
            nxt = t.alloc(tokens * (4 if k in (1, 2) else 1) * WIDTH * 2)
            t.free(flowing)
            flowing = nxt
            t.free(acts.pop())
        for j in range(4):
            grads[2 + 4 * layer + j] = t.alloc(params[2 + 4 * layer + j][1])
    grads[0], grads[1] = t.alloc(params[0][1]), t.alloc(params[1][1])
    t.free(flowing)
    if "adam" not in state:
        state["adam"] = [t.alloc(p[1]) for p in params] + [t.alloc(p[1]) for p in params]
    for _ in range(2):
        temps = [t.alloc(p[1]) for p in params]
        for x in temps:
            t.free(x)
    for g in grads:
        t.free(g)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1, help="the sequence lengths' random seed")
    ap.add_argument("--min-seq", type=int, default=512)
    ap.add_argument("--max-seq", type=int, default=1024)
    ap.add_argument("--multiple", type=int, default=64, help="sequence lengths are multiples of it")
    ap.add_argument("--longest-first", type=int, default=0, metavar="N",
                    help="the first N steps at --max-seq (the Trainer's group_by_length "
                         "sampler puts the longest batch first)")
    a = ap.parse_args()
    if not 1 <= a.steps <= 10_000:
        ap.error("--steps must be 1 to 10000")
    if not 0 <= a.longest_first <= a.steps:
        ap.error("--longest-first must be 0 to --steps")
    if not 0 < a.multiple <= a.min_seq <= a.max_seq <= POSITIONS:
        ap.error(f"need 0 < --multiple <= --min-seq <= --max-seq <= {POSITIONS}")
    lengths = range(a.min_seq, a.max_seq + 1, a.multiple)
    rng = random.Random(a.seed)
    t = Trace(gap=15_000)
    params = [t.alloc(VOCAB * WIDTH * 4), t.alloc(POSITIONS * WIDTH * 4)]
    for _ in range(LAYERS):
        params += [t.alloc(n * WIDTH * WIDTH * 4) for n in (3, 1, 4, 4)]
    state = {}
    for k in range(a.steps):
        start = t.time
        seq = a.max_seq if k < a.longest_first else rng.choice(lengths)
        step(t, seq, params, state)
        t.time = max(t.time, start + STEP_NS)
    json.dump({"events": t.events}, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
