"""torch.compile of a cohort step, against the same step eager, on this machine (issue 57: capture or compile, measure
both where they work). The step: 20 clients' gradients of a tiny CNN (benchmarks/speed/cohort_overhead.py's) through
vmap(grad(functional_call)), then their SGD update on the stacked weights; the compile time of its one shape, and
microseconds per step after warm-up. On a GPU, CUDA graphs (run.cohort_step) replace the host's issuing of a step
by a replay; this says what compiling costs and gives where a compiler is at hand.

Usage: python benchmarks/speed/compiled_step.py [--out results/compiled_step.txt]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cohort_overhead import BATCH, CLIENTS, tiny_cnn  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = tiny_cnn(False)
    weights = {k: torch.stack([v.detach()] * CLIENTS) for k, v in model.state_dict().items()}
    names = [n for n, _ in model.named_parameters()]

    def loss(params, x, y):
        return F.cross_entropy(functional_call(model, params, (x,)), y)

    per_client = vmap(grad(loss))

    def step(w, x, y):
        grads = per_client({n: w[n] for n in names}, x, y)
        torch._foreach_add_([w[n] for n in names], [grads[n] for n in names], alpha=-0.05)

    x, y = torch.randn(CLIENTS, BATCH, 3, 8, 8), torch.randint(0, 10, (CLIENTS, BATCH))

    def timed(fn) -> float:
        for _ in range(5):
            fn(weights, x, y)
        start = time.perf_counter()
        for _ in range(args.steps):
            fn(weights, x, y)
        return (time.perf_counter() - start) / args.steps * 1e6

    eager = timed(step)
    compiled = torch.compile(step)
    start = time.perf_counter()
    compiled(weights, x, y)
    compile_s = time.perf_counter() - start
    after = timed(compiled)
    text = (
        f"cohort step, {CLIENTS} clients x batch {BATCH}, tiny CNN, CPU 1 thread, torch {torch.__version__}\n"
        f"eager: {eager:.0f} us/step\ncompiled (torch.compile, default mode): {after:.0f} us/step, after "
        f"{compile_s:.1f} s of compiling this one shape\n"
    )
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
