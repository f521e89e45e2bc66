"""Several clients training at once on one GPU (run.gpus_per_worker): seconds per round for 1, 4, 8 and 16 worker
processes sharing the GPU.

The setting: CIFAR-10, FedAvg, 16 clients (Dirichlet 0.1), every client trained and evaluated each round, 1 local
epoch at batch 10 (PFLlib's), FedAvgCNN by default (a small model leaves most of a GPU idle, which is what sharing
recovers; --model resnet18 for a large one). Each setting is its own run on the same seed; the mean of train +
evaluation seconds over the rounds after the first (which warms up CUDA) is reported, with the final accuracy (GPU
kernels need not be bit-identical across settings, so accuracies agree only to about a point).

On a machine without a GPU, --check runs the same loop on the CPU (worker processes instead of GPU shares, synthetic
data, 2 rounds) to show the script works; its seconds mean nothing for a GPU.

Usage: python benchmarks/speed/gpu_sharing.py [--data-root ../shared/data] [--rounds 4] [--shares 1,4,8,16]
                                        [--model fedavgcnn] [--out results/gpu_sharing.txt] [--check]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from pfedkit.engine.simulation import simulate
from pfedkit.registry import build_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ray_scale import seconds_per_round  # noqa: E402  (one definition of "seconds per round" for the benchmarks)

HERE = Path(__file__).resolve().parent


def sharing_config(at_once: int, rounds: int, data_root: str, model: str, check: bool):
    data = (
        {"dataset": "synthetic", "options": {"samples": 40 * 16, "test_samples": 10 * 16}}
        if check
        else {"dataset": "cifar10", "root": data_root}
    )
    run = {"workers": at_once} if check else {"device": "cuda", "gpus_per_worker": 1.0 / at_once, "workers": at_once}
    return build_config(
        {
            "data": data,
            "partition": {"scheme": "dirichlet", "clients": 16, "beta": 0.1},
            "model": {"name": "mlp" if check else model},
            "method": {"name": "fedavg"},
            "train": {"rounds": rounds, "local_epochs": 1, "batch_size": 10, "lr": 0.005, "join_ratio": 1.0},
            "run": {"seed": 0, "checkpoint_every": 1000, **run},
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", default=str(HERE.parents[2] / "shared" / "data"))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--shares", default="1,4,8,16", help="worker processes on the GPU at once, comma-separated")
    parser.add_argument("--model", default="fedavgcnn")
    parser.add_argument("--out", default=str(HERE.parents[1] / "results" / "gpu_sharing.txt"))
    parser.add_argument("--check", action="store_true", help="no GPU: the same loop on the CPU, to test the script")
    args = parser.parse_args()
    if not args.check and not torch.cuda.is_available():
        sys.exit(
            "gpu_sharing: no CUDA GPU here; run it on a GPU machine, or with --check to test the script on the CPU"
        )
    if args.rounds < 2:
        sys.exit("gpu_sharing: --rounds must be at least 2 (the first round warms up and is not counted)")
    shares = [int(s) for s in args.shares.split(",")]
    where = "CPU check (synthetic data, worker processes)" if args.check else torch.cuda.get_device_name(0)
    lines = [
        f"machine: {platform.machine()}, {where}; torch {torch.__version__}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"{'synthetic, FedAvg (mlp)' if args.check else f'CIFAR-10, FedAvg ({args.model})'}, "
        "16 clients all trained each round, batch 10, 1 epoch; "
        f"mean of rounds 1..{args.rounds - 1}",
        "",
        "| clients at once | s / round (train + eval) | accuracy after the last round |",
        "|---|---|---|",
    ]
    base = None
    for at_once in shares:
        with tempfile.TemporaryDirectory() as tmp:
            config = sharing_config(at_once, args.rounds, args.data_root, args.model, args.check)
            summary = simulate(config, Path(tmp) / "run", progress=False)
            seconds = seconds_per_round(Path(tmp) / "run")
        base = base or seconds
        lines.append(
            f"| {at_once} | {seconds:.2f} ({base / seconds:.2f}x of {shares[0]}) | {summary['last_acc']:.4f} |"
        )
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.check:
        print(text)
    else:
        Path(args.out).write_text(text)
        print(f"written {args.out}")


if __name__ == "__main__":
    main()
