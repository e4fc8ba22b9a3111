#!/usr/bin/python3
"""PyTorch's CPU Adam step, timed: the baseline of bench/kernels_bench.

Usage: torch_adam.py THREADS N [N ...]
Prints one JSON object per line: {"n": N, "foreach": bool, "seconds": s},
the median of the timed steps, after warm-up steps. fp32 parameters and
gradients, default hyperparameters (as kernels_bench's Strata step).
"""
import json
import statistics
import sys
import time

import torch


def time_step(n, foreach, repeats):
    param = torch.nn.Parameter(torch.randn(n))
    param.grad = torch.randn(n)
    opt = torch.optim.Adam([param], lr=1e-3, foreach=foreach)
    for _ in range(2):  # warm-up: creates the state
        opt.step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    threads = int(sys.argv[1])
    torch.set_num_threads(threads)
    for n in (int(a) for a in sys.argv[2:]):
        repeats = 5 if n >= (64 << 20) else 10
        for foreach in (False, True):
            print(json.dumps({"n": n, "foreach": foreach,
                              "seconds": time_step(n, foreach, repeats)}), flush=True)


if __name__ == "__main__":
    main()
