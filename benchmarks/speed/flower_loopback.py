"""Seconds per round of a Flower deployment on 127.0.0.1 (one SuperLink, one SuperNode per client) against the
in-process simulation of the same config and seed; checks that both give the same accuracies.

    python3 benchmarks/speed/flower_loopback.py [--rounds 3] [--clients 4] [--out results/flower_loopback]

Writes the deployment's metrics, replies, summary and logs, the simulation's metrics, and timing.txt under --out.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pfedkit.experiments import run_experiment
from pfedkit.flower.local import run_loopback
from pfedkit.flower.settings import RunSettings
from pfedkit.io import read_csv
from pfedkit.registry import build_config

COMPARED = ("round", "acc", "acc_client_mean", "loss", "bytes_down", "bytes_up", "clients_trained")


def config(rounds: int, clients: int):
    return build_config(
        {
            "data": {"dataset": "digits"},
            "partition": {"scheme": "dirichlet", "clients": clients, "beta": 0.1, "min_samples": 20},
            "model": {"name": "smallcnn"},
            "method": {"name": "fedper"},
            "train": {"rounds": rounds, "local_epochs": 1, "batch_size": 10, "lr": 0.05},
            "run": {"seed": 0, "checkpoint_every": 1, "workers": 0},
        }
    )


def seconds_per_round(rows: list[dict]) -> float:
    trained = [r for r in rows if int(r["clients_trained"]) > 0]  # the last round is evaluation only
    return sum(float(r["train_s"]) + float(r["eval_s"]) for r in trained) / len(trained)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("results/flower_loopback"))
    args = parser.parse_args()
    cfg = config(args.rounds, args.clients)
    out = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    load_before = os.getloadavg()[0]  # the machine may be shared: both timings are only comparable under one load
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        start = time.perf_counter()
        sim_summary = run_experiment(cfg, tmp / "sim", progress=False)
        sim_wall = time.perf_counter() - start
        settings = RunSettings(cfg, tmp / "flower", run_name="bench", round_timeout=120, connect_timeout=120)
        start = time.perf_counter()
        run_loopback(
            settings,
            tmp / "work",
            args.clients,
            timeout=1800,
            node_config={"threads": 1, "state-dir": str(tmp / "state")},
        )
        flower_wall = time.perf_counter() - start
        sim_rows, flower_rows = read_csv(tmp / "sim/metrics.csv"), read_csv(tmp / "flower/metrics.csv")
        same = [[r[k] for k in COMPARED] for r in sim_rows] == [[r[k] for k in COMPARED] for r in flower_rows]
        out.mkdir(parents=True)
        for name in ("metrics.csv", "replies.csv", "summary.json", "clients.csv", "config.toml"):
            shutil.copy(tmp / "flower" / name, out / name)
        shutil.copy(tmp / "sim/metrics.csv", out / "simulation_metrics.csv")
        (out / "logs").mkdir()
        for log in sorted((tmp / "work").glob("*.log")):
            shutil.copy(log, out / "logs" / log.name)
    lines = [
        f"config: digits, {args.clients} clients (Dirichlet 0.1), smallcnn, fedper, {args.rounds} rounds, seed 0",
        f"simulation: {seconds_per_round(sim_rows):.2f} s/round (train+eval), {sim_wall:.1f} s wall in all",
        f"flower loopback: {seconds_per_round(flower_rows):.2f} s/round (one exchange: train+eval), "
        f"{flower_wall:.1f} s wall in all (SuperLink and SuperNodes start-up included)",
        f"same metrics (acc, client-mean acc, loss, bytes, clients trained) in every round: {same}",
        f"best acc: simulation {sim_summary['best_acc']:.4f}",
        f"1-minute load average: {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores",
    ]
    text = "\n".join(lines)
    print(text)
    (out / "timing.txt").write_text(text + "\n")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
