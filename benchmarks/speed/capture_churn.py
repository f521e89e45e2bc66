"""CPU proxy of capture churn on the cohort path: how many step shapes a run captures, round after round.

On a GPU the cohort path captures each repeated step shape as a CUDA graph after WARMUP eager runs and replays it from
then on; a capture costs far more than a replay, so a run should capture in its first rounds and then only replay. On
2026-11-28 an H200 run of PGFedSplit captured 7,330 graphs in 100 rounds (FedPAC 241): the head trained alone was run
through a head-only model made anew each round, and a captured step is keyed by its model. This script runs rows of
pgfedsplit-cifar's CIFAR-10 Dir(1) column (on a fraction of the data, few rounds) on the cohort path with the capture
bookkeeping of `StepRunner`'s "replay" mode (no CUDA: a replay calls the captured step on the captured buffers), and
counts captures per round: as the code is now, and with the head-only model made anew each round (the code before).

Usage: python3 benchmarks/speed/capture_churn.py [--rounds 6] [--fraction 0.05] [--rows pgfedsplit,fedrep,fedpac]
       [--data-root ../shared/data] [--out results/capture_churn.txt]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parent))  # benchmarks/: report.py, pfllib_peer.py
sys.path.insert(0, str(HERE))

from report import emit  # noqa: E402

import pfedkit.engine.simulation as simulation  # noqa: E402
from pfedkit.engine import cohort as cohort_module  # noqa: E402
from pfedkit.experiments.cells import cell_config  # noqa: E402
from pfedkit.experiments.pipeline import method_config  # noqa: E402
from pfedkit.experiments.runs import run_experiment  # noqa: E402
from pfedkit.models.base import SplitModel  # noqa: E402
from pfedkit.papers.suites import SUITES  # noqa: E402

SUITE, COLUMN = "pgfedsplit-cifar", "c10-dir1"


def fresh_head_only(self, template: SplitModel) -> SplitModel:
    """The code before 2026-11-28: a new head-only model each time a head trains alone."""
    return SplitModel(nn.Identity(), template.head, template.feature_dim)


def measure(row: str, variant: str, args: argparse.Namespace) -> dict:
    """One run of `row` with the capture bookkeeping, its captures counted per round."""
    suite = SUITES[SUITE]
    base = cell_config(suite, "small", COLUMN, row, [], args.data_root, None, Path(tempfile.mkdtemp()))
    base["data"]["fraction"] = args.fraction
    base["train"]["rounds"] = args.rounds
    base["run"].update(cohort="on", checkpoint_every=max(args.rounds, 1))
    config = method_config(base, suite.method_of(row), 0)
    per_round: Counter = Counter()
    current = {"round": -1}
    capture, train, head_only = (
        cohort_module.StepRunner.capture,
        cohort_module.Cohort.train,
        cohort_module.Cohort.head_only,
    )

    def counting_capture(self, key, step, view, x, y):
        per_round[current["round"]] += 1
        return capture(self, key, step, view, x, y)

    def round_noting_train(self, tasks, *rest, **kw):
        current["round"] = tasks[0].round if tasks else -1
        return train(self, tasks, *rest, **kw)

    simulation.step_mode = lambda run, device: "replay"
    cohort_module.StepRunner.capture = counting_capture
    cohort_module.Cohort.train = round_noting_train
    if variant != "now":
        cohort_module.Cohort.head_only = fresh_head_only
    try:
        start = time.perf_counter()
        summary = run_experiment(config, Path(tempfile.mkdtemp()) / row, progress=False)
        seconds = time.perf_counter() - start
    finally:
        cohort_module.StepRunner.capture, cohort_module.Cohort.train = capture, train
        cohort_module.Cohort.head_only = head_only
    training = summary.get("training", {})
    return {
        "row": row,
        "variant": variant,
        "per_round": [per_round.get(r, 0) for r in range(args.rounds)],
        "captured": training.get("steps_captured", 0),
        "replayed": training.get("steps_replayed", 0),
        "eager": training.get("steps_eager", 0),
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--fraction", type=float, default=0.05, help="data.fraction (the suite's small scale: 0.2)")
    parser.add_argument("--rows", default="pgfedsplit,fedrep,fedpac")
    parser.add_argument("--data-root", default=str(HERE.parents[2] / "shared" / "data"))
    parser.add_argument("--out", type=Path, default=None, help="append the table to this file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = [
        measure(row, variant, args) for row in args.rows.split(",") for variant in ("before (a new head model)", "now")
    ]
    half = args.rounds // 2
    lines = [
        f"capture churn, CPU proxy ({platform.machine()}, torch {torch.__version__}, 1 thread): {SUITE} {COLUMN} on "
        f"{args.fraction:g} of the data, {args.rounds} rounds, seed 0, cohort path with replay bookkeeping",
        "",
        f"| row | variant | captures per round | captures after round {half - 1} | replayed | eager | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['row']} | {r['variant']} | {' '.join(map(str, r['per_round']))} | {sum(r['per_round'][half:])} | "
        f"{r['replayed']} | {r['eager']} | {r['seconds']:.0f} |"
        for r in results
    ]
    text = "\n".join(lines)
    emit(text, args.out, append=True)


if __name__ == "__main__":
    main()
