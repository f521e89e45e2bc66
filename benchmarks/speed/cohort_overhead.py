"""CPU proxies of the cohort path's per-step overhead, for steering GPU work on a machine without a GPU.

On a GPU a cohort step of a small CNN is bound by what the host issues, not by arithmetic: each torch operation is a
kernel launch of a few microseconds. This script trains one round of FedAvg over a 20-client cohort of a model so
small that its arithmetic is negligible (the layer types of FedAvgCNN: two convolutions with max-pools, a hidden
linear layer, a linear head; 3x8x8 inputs, 4 channels), with unequal clients (some finish early, some end on a partial
batch), and reports:
  host us/step   wall microseconds per step of the round's longest chain (the steps a round cannot avoid)
  ops/step       torch operations issued per step: aten operations reaching the kernels (counted by a
                 TorchDispatchMode, below autograd and vmap; views and bare allocations left out: on a GPU each is
                 about one kernel launch), over the round, divided by the chain
  MFLOP/step     the arithmetic those operations do (torch's FlopCounterMode: convolutions and matrix products,
                 forward and backward), per step of the chain: what a GPU's kernels are weighted by
  grouped        the share of that arithmetic in grouped convolutions (groups > 1: what vmap makes of a convolution
                 over stacked clients, cuDNN's slow generic path on a GPU), and layout copies per step (a tensor
                 copied into another memory format); a CPU's timings hide both, these counts do not
Both should fall as the step is made static and captured. Variants: the same with BatchNorm, with crop-flip
augmentation, and (--runs R) R runs of FedAvg differing only in seed trained as one computation.

Usage: python3 benchmarks/speed/cohort_overhead.py [--rounds 3] [--out results/cohort_overhead.txt]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parent))  # benchmarks/: report.py, pfllib_peer.py
sys.path.insert(0, str(HERE))

from report import emit  # noqa: E402

from pfedkit.data.federated import FederatedDataset  # noqa: E402
from pfedkit.engine.cohort import Cohort  # noqa: E402
from pfedkit.engine.workers import Task  # noqa: E402
from pfedkit.methods import METHODS  # noqa: E402
from pfedkit.models.base import SplitModel  # noqa: E402
from pfedkit.records import MethodContext, TrainSettings  # noqa: E402

CLIENTS, BATCH = 20, 10


def tiny_cnn(batchnorm: bool) -> SplitModel:
    layers = [("conv1", nn.Conv2d(3, 4, 3, padding=1))]
    layers += [("bn1", nn.BatchNorm2d(4))] if batchnorm else []
    layers += [
        ("relu1", nn.ReLU()),
        ("pool1", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(4, 4, 3, padding=1)),
        ("relu2", nn.ReLU()),
        ("pool2", nn.MaxPool2d(2)),
        ("flatten", nn.Flatten()),
        ("fc1", nn.Linear(16, 8)),
        ("relu3", nn.ReLU()),
    ]
    return SplitModel(nn.Sequential(OrderedDict(layers)), nn.Linear(8, 10), feature_dim=8)


def federation(seed: int = 0) -> FederatedDataset:
    """20 clients of unequal size (a skewed draw, 3 to 597 samples, as Dir(0.1) gives): most steps have finished
    clients beside running ones, and most clients end on a partial batch."""
    rng = np.random.default_rng(seed)
    sizes = np.clip((rng.pareto(1.2, CLIENTS) * 120).astype(int) + 3, 3, 597)
    total = int(sizes.sum()) * 2
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(total, 3, 8, 8, generator=g, device="cpu")
    y = torch.randint(0, 10, (total,), generator=g, device="cpu")
    perm, at, train, test = rng.permutation(total), 0, [], []
    for n in sizes:
        train.append(perm[at : at + n])
        test.append(perm[at + n : at + 2 * n])
        at += 2 * n
    return FederatedDataset("toy", "official-test", 10, (3, 8, 8), x, y, x, y, train, test)


def fedavg(batchnorm: bool, augment: bool, seed: int = 0):
    settings = TrainSettings(
        1, BATCH, 0.05, momentum=0.9, weight_decay=1e-4, augment="crop-flip" if augment else "none"
    )
    ctx = MethodContext(lambda: tiny_cnn(batchnorm), settings, num_classes=10, seed=seed)
    return METHODS["fedavg"](METHODS["fedavg"].validate_params({}), ctx)


def tasks_of(method, fed, round: int) -> list[Task]:
    server = method.init_server()
    return [
        Task("train", cid, round, method.payload(server, round, cid), method.init_client(cid, fed.client(cid)), 0)
        for cid in range(fed.num_clients)
    ]


class CountOps(TorchDispatchMode):
    """Counts the aten operations that reach the kernels (below autograd and vmap), leaving out views and bare
    allocations, which launch nothing: about one kernel launch each on a GPU."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter = Counter()
        self.grouped_flops, self.layout_copies = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        if not func.is_view and name not in ("aten.empty", "aten.empty_strided", "aten.lift_fresh"):
            self.ops[name] += 1
        out = func(*args, **(kwargs or {}))
        if name == "aten.convolution" and args[-1] > 1:  # groups, the last argument
            self.grouped_flops += 3 * conv_flops(args[0], args[1], out)  # forward, and backward's two products
        if name in ("aten.clone", "aten.contiguous", "aten._to_copy") and (kwargs or {}).get("memory_format") not in (
            None,
            torch.preserve_format,
            torch.contiguous_format,
        ):
            self.layout_copies += 1
        return out


def conv_flops(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> int:
    """Multiply-adds of a convolution, times 2: each output element sums in_channels / groups x kernel products."""
    return 2 * out.numel() * weight.shape[1] * int(np.prod(weight.shape[2:]))


def measure(name: str, batchnorm: bool, augment: bool, rounds: int) -> dict:
    fed = federation()
    method = fedavg(batchnorm, augment)
    chain = int(max(-(-len(idx) // BATCH) for idx in fed.train_idx))  # steps of the longest client: 1 epoch
    cohort = Cohort(method, fed)
    times = []
    for round in range(rounds + 1):  # round 0 warms up
        tasks = tasks_of(method, fed, round)
        start = time.perf_counter()
        list(cohort.train(tasks))
        if round:
            times.append(time.perf_counter() - start)
    tasks = tasks_of(method, fed, rounds + 1)
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as flops, CountOps() as counted:
        list(cohort.train(tasks))
    total_flops = flops.get_total_flops()
    return {
        "mflop_per_step": total_flops / chain / 1e6,
        "grouped_share": counted.grouped_flops / total_flops if total_flops else 0.0,
        "layout_copies_per_step": counted.layout_copies / chain,
        "variant": name,
        "chain": chain,
        "host_us_per_step": statistics.median(times) / chain * 1e6,
        "ops_per_step": sum(counted.ops.values()) / chain,
        "top": counted.ops.most_common(6),
        "samples": int(sum(len(idx) for idx in fed.train_idx)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (median), after one warm-up round")
    parser.add_argument("--out", type=Path, default=None, help="append the table to this file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    variants = [
        ("fedavg", False, False),
        ("fedavg, crop-flip", False, True),
        ("fedavg, batchnorm", True, False),
    ]
    rows = [measure(name, bn, aug, args.rounds) for name, bn, aug in variants]
    lines = [
        f"cohort step overhead, CPU proxy ({platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"1 thread): {CLIENTS} clients, batch {BATCH}, tiny CNN, 1 local epoch",
        "",
        "| variant | samples | chain (steps) | host us/step | ops/step | MFLOP/step | grouped | layout copies/step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['variant']} | {r['samples']} | {r['chain']} | {r['host_us_per_step']:.0f} | {r['ops_per_step']:.1f} "
        f"| {r['mflop_per_step']:.2f} | {r['grouped_share']:.0%} | {r['layout_copies_per_step']:.1f} |"
        for r in rows
    ]
    lines += ["", "most issued operations per round:"]
    lines += [f"- {r['variant']}: " + ", ".join(f"{name} {n}" for name, n in r["top"]) for r in rows]
    text = "\n".join(lines)
    emit(text, args.out, append=True)


if __name__ == "__main__":
    main()
