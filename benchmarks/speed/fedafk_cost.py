"""Where FedAFK's round cost goes: one client's local update against FedAvg's, with each part switched off in turn.

A CIFAR-shaped client (450 training samples, FedAvgCNN, batch 10, 1 epoch, one thread, best of 3). Per batch FedAFK
runs (a) a forward/backward of the global extractor under the random head, (b) a forward of the received extractor
(the KL teacher) and a forward/backward of the personal one, (c) a forward/backward through the mixture for mu's exact
gradient; then one head epoch on cached features. Each pass is on other weights, so none can serve another; the cost
follows from the design, and mu_gradient = "apfl" (PFLlib's approximation, no pass (c)) is the one cheaper reading.

Usage: python benchmarks/speed/fedafk_cost.py [--out results/fedafk_cost.txt]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import torch

from pfedkit.engine import local_update
from pfedkit.methods import METHODS
from pfedkit.models import build_model
from pfedkit.records import ClientData, MethodContext, TrainSettings

VARIANTS = [
    ("fedavg", "fedavg", {}),
    ("fedafk (default: exact mu gradient, KT)", "fedafk", {}),
    ("fedafk, mu_gradient = apfl", "fedafk", {"mu_gradient": "apfl"}),
    ("fedafk, kt_weight = 0 (no teacher pass)", "fedafk", {"kt_weight": 0.0}),
    ("fedafk, no AFA (no mu, no pass (c))", "fedafk", {"adaptive_aggregation": False}),
    ("fedafk, neither", "fedafk", {"kt_weight": 0.0, "adaptive_aggregation": False}),
]


def local_update_seconds(name: str, params: dict, data: ClientData, ctx: MethodContext, repeats: int = 3) -> float:
    cls = METHODS[name]
    method = cls(cls.validate_params(params), ctx)
    client, payload = method.init_client(0, data), method.broadcast(method.init_server(), 0, 0)
    local_update(method, payload, client, data, 0)  # warm-up
    times = []
    for r in range(repeats):
        start = time.perf_counter()
        local_update(method, payload, client, data, r + 1)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(450, 3, 32, 32, generator=g), torch.randint(0, 10, (450,), generator=g)
    data = ClientData(0, x, y, x[:100], y[:100], 10)
    ctx = MethodContext(
        lambda: build_model("fedavgcnn", (3, 32, 32), 10), TrainSettings(1, 10, 0.005), num_classes=10, seed=0
    )
    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} cores, one thread; torch {torch.__version__}",
        "one local update of a 450-sample CIFAR-shaped client, FedAvgCNN, batch 10, 1 epoch; best of 3",
        "",
    ]
    base = None
    for label, name, params in VARIANTS:
        seconds = local_update_seconds(name, params, data, ctx)
        base = base or seconds
        lines.append(f"{label:45s} {seconds:5.2f} s  {seconds / base:4.2f}x FedAvg")
    report = "\n".join(lines)
    print(report)
    if args.out:
        args.out.write_text(report + "\n")


if __name__ == "__main__":
    main()
