"""The Ray backend and large federations: seconds per round, Ray's overhead, and the driver's peak memory.

Part A, seconds per round on MNIST (FedAvg, 20 clients, Dirichlet 0.1, FedAvgCNN, batch 10, 1 epoch, every client
trained and evaluated each round): the local pool with 2 workers, Ray with 1 and with 2 actors, side by side in one
run; Ray's overhead per round is Ray (2 actors) minus local (2 workers).

Part B, driver peak memory (resident set, each run in its own process) and seconds per round for 100, 1,000 and
10,000 clients at join ratio 0.1, FedAvg and Ditto (a personal model per client), local and Ray, client state on disk
(run.client_state = "disk", 16 MiB of states kept in memory). Synthetic data (20 training and 5 test samples of
1x8x8 per client, 10 classes), an MLP with 64 hidden units; each round evaluates a seeded sample of at most 1,000
clients (eval.clients), trains 10% of them.

Usage: python benchmarks/speed/ray_scale.py [--data-root ../shared/data] [--rounds 3] [--sizes 100,1000,10000]
                                      [--out results/ray_scale.txt]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from pfedkit.engine.simulation import simulate
from pfedkit.io import read_csv
from pfedkit.registry import build_config

HERE = Path(__file__).resolve().parent


def mnist_config(data_root: str, rounds: int, backend: str, workers: int):
    return build_config(
        {
            "data": {"dataset": "mnist", "root": data_root},
            "partition": {"scheme": "dirichlet", "clients": 20, "beta": 0.1},
            "model": {"name": "fedavgcnn"},
            "method": {"name": "fedavg"},
            "train": {"rounds": rounds, "local_epochs": 1, "batch_size": 10, "lr": 0.005},
            "run": {"seed": 0, "checkpoint_every": 1000, "backend": backend, "workers": workers},
        }
    )


def seconds_per_round(folder: Path) -> float:
    """Mean of train + evaluation seconds over the training rounds after the first (which warms up)."""
    rows = [r for r in read_csv(folder / "metrics.csv") if float(r["train_s"]) > 0][1:]
    return sum(float(r["train_s"]) + float(r["eval_s"]) for r in rows) / max(len(rows), 1)


def part_a(data_root: str, rounds: int) -> list[str]:
    lines = [
        f"## A. MNIST, FedAvg, 20 clients: seconds per round (train + evaluation), mean of rounds 1..{rounds - 1}",
        "",
        "| backend | workers | s / round | accuracy after the last round |",
        "|---|---|---|---|",
    ]
    results = {}
    for backend, workers in (("local", 2), ("ray", 1), ("ray", 2)):
        with tempfile.TemporaryDirectory() as tmp:
            summary = simulate(mnist_config(data_root, rounds, backend, workers), Path(tmp) / "run", progress=False)
            results[backend, workers] = seconds_per_round(Path(tmp) / "run")
            lines.append(f"| {backend} | {workers} | {results[backend, workers]:.2f} | {summary['last_acc']:.4f} |")
    overhead = results["ray", 2] - results["local", 2]
    lines += [
        "",
        f"Ray's overhead per round (2 actors against 2 local workers): {overhead:+.2f} s "
        f"({overhead / results['local', 2]:+.1%})",
        "",
    ]
    return lines


PROBE = """
import json, sys, time
from pathlib import Path
from pfedkit.engine.simulation import simulate
def peak_mb():  # VmHWM is this process's own peak; ru_maxrss carries the parent's over fork and exec
    line = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024
from pfedkit.io import read_csv
from pfedkit.registry import build_config
clients, method, backend, rounds, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5])
config = build_config({
    "data": {"dataset": "synthetic", "options": {"samples": 20 * clients, "test_samples": 5 * clients}},
    "partition": {"scheme": "iid", "clients": clients}, "model": {"name": "mlp", "options": {"hidden": 64}},
    "method": {"name": method}, "train": {"rounds": rounds, "join_ratio": 0.1, "batch_size": 10, "lr": 0.05},
    "eval": {"clients": min(clients, 1000)},
    "run": {"seed": 0, "workers": 2, "backend": backend, "client_state": "disk", "state_memory_mb": 16,
            "checkpoint_every": 1000}})
start = time.perf_counter()
simulate(config, out, progress=False)
rows = [r for r in read_csv(out / "metrics.csv") if float(r["train_s"]) > 0][1:]
print(json.dumps({"peak_mb": peak_mb(),
                  "s_per_round": sum(float(r["train_s"]) + float(r["eval_s"]) for r in rows) / max(len(rows), 1),
                  "wall_s": time.perf_counter() - start}))
"""


def part_b(sizes: list[int], rounds: int) -> list[str]:
    lines = [
        "## B. Large federations, client state on disk: driver peak memory and seconds per round",
        "",
        "| clients | method | backend | driver peak MiB | s / round | wall s (incl. start) |",
        "|---|---|---|---|---|---|",
    ]
    for clients in sizes:
        for method in ("fedavg", "ditto"):
            for backend in ("local", "ray"):
                with tempfile.TemporaryDirectory() as tmp:
                    done = subprocess.run(
                        [
                            sys.executable,
                            "-c",
                            PROBE,
                            str(clients),
                            method,
                            backend,
                            str(rounds),
                            str(Path(tmp) / "run"),
                        ],
                        capture_output=True,
                        text=True,
                        timeout=3600,
                    )
                if done.returncode != 0:
                    lines.append(
                        f"| {clients} | {method} | {backend} | failed: {done.stderr.strip().splitlines()[-1]} | | |"
                    )
                    continue
                got = json.loads(done.stdout.strip().splitlines()[-1])
                lines.append(
                    f"| {clients:,} | {method} | {backend} | {got['peak_mb']:.0f} | {got['s_per_round']:.2f} | "
                    f"{got['wall_s']:.0f} |"
                )
                print(lines[-1], flush=True)
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=str(HERE.parents[2] / "shared" / "data"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--parts", default="a,b")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} cores; torch {torch.__version__}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
    ]
    if "a" in args.parts:
        lines += part_a(args.data_root, args.rounds)
        print("\n".join(lines), flush=True)
    if "b" in args.parts:
        lines += part_b([int(s) for s in args.sizes.split(",")], args.rounds)
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
