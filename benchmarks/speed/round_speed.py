"""Seconds per round on real MNIST (FedAvg, 20 clients, Dirichlet 0.1, FedAvgCNN, batch 10, 1 epoch, lr 0.005).

A round does PFLlib's work: every training sample of every client once at batch 10, then every client's
test split evaluated. Also reports the batch-10 training throughput as a fraction of the same model's
batch-256 throughput on this machine (the better of: the engine at batch 256, a plain 2-thread loop).
Targets: <= 25 s per round in total; >= 0.75 of the batch-256 throughput.

Usage: python benchmarks/speed/round_speed.py [--data-root ../shared/data] [--rounds 3]
           [--out results/round_speed.txt]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from pfedkit.data.federated import build_federated
from pfedkit.engine.simulation import Simulation
from pfedkit.engine.workers import default_workers
from pfedkit.models import build_model
from pfedkit.registry import build_config

HERE = Path(__file__).resolve().parent


def mnist_config(data_root: str, rounds: int, batch_size: int = 10):
    return build_config(
        {
            "data": {"dataset": "mnist", "root": data_root},
            "partition": {"scheme": "dirichlet", "clients": 20, "beta": 0.1},
            "model": {"name": "fedavgcnn"},
            "method": {"name": "fedavg"},
            "train": {"rounds": rounds, "local_epochs": 1, "batch_size": batch_size, "lr": 0.005},
            "eval": {"protocol": "pfllib", "every": 1},
            "run": {"seed": 0, "checkpoint_every": 1000},
        }
    )


def engine_rounds(cfg, fed):
    with tempfile.TemporaryDirectory() as out:
        sim = Simulation(cfg, out, progress=False, fed=fed)
        sim.run()
        return sim.rows


def plain_loop_throughput(fed, batch_size: int, steps: int = 40) -> float:
    """Samples/s of a plain single-process loop using every core's threads (the usual PyTorch set-up)."""
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)
    model = build_model("fedavgcnn", fed.input_shape, fed.num_classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.005)
    x, y = fed.train_x, fed.train_y
    g = torch.Generator().manual_seed(0)
    for warm in (True, False):
        start = time.perf_counter()
        for _ in range(5 if warm else steps):
            idx = torch.randint(0, len(y), (batch_size,), generator=g)
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return batch_size * steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=str(HERE.parents[2] / "shared" / "data"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(HERE.parents[1] / "results" / "round_speed.txt"))
    args = parser.parse_args()

    cfg = mnist_config(args.data_root, args.rounds)
    fed = build_federated(cfg)
    train_samples, test_samples = int(fed.train_sizes().sum()), int(fed.test_sizes().sum())
    rows = engine_rounds(cfg, fed)
    trained = [r for r in rows if r["train_s"] > 0]
    train_s = statistics.median(r["train_s"] for r in trained)
    eval_s = statistics.median(r["eval_s"] for r in rows)
    rate_10 = train_samples / train_s

    big = engine_rounds(mnist_config(args.data_root, 1, batch_size=256), fed)
    rate_256_engine = train_samples / big[0]["train_s"]
    rate_256_plain = plain_loop_throughput(fed, 256)
    rate_256 = max(rate_256_engine, rate_256_plain)
    total = train_s + eval_s
    ratio = rate_10 / rate_256

    lines = [
        "round_speed: MNIST (real), FedAvg, 20 clients, Dirichlet 0.1, FedAvgCNN, batch 10, 1 epoch, lr 0.005",
        f"machine: {os.cpu_count()} cores, torch {torch.__version__}, workers {default_workers(0)}",
        f"samples per round: {train_samples} trained, {test_samples} evaluated; {args.rounds} rounds measured (median)",
        f"train  s/round: {train_s:7.2f}   ({rate_10:,.0f} samples/s at batch 10)",
        f"eval   s/round: {eval_s:7.2f}",
        f"total  s/round: {total:7.2f}   target <= 25 s: {'PASS' if total <= 25 else 'FAIL'}",
        f"batch-256 samples/s: engine {rate_256_engine:,.0f}, "
        f"plain {torch.get_num_threads()}-thread loop {rate_256_plain:,.0f}",
        f"batch-10 / batch-256 throughput: {ratio:.3f}   target >= 0.75: {'PASS' if ratio >= 0.75 else 'FAIL'}",
        "per round (round, train_s, eval_s): "
        + ", ".join(f"({r['round']}, {r['train_s']:.2f}, {r['eval_s']:.2f})" for r in rows),
    ]
    text = "\n".join(lines)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
