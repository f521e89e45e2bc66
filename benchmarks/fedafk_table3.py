"""FedAFK Table 3 on MNIST (and its Table 5 ablations, Table 4 cost), at the rounds this machine allows.

Two columns: pathological (2 classes per client) and Dirichlet 0.1; 20 clients, batch 10, 1 local epoch,
lr 0.005, protocol pfllib (best round, sample-weighted). Rows: FedAFK, FedAvg, FedPer, FedRep, APFL, Local
and the three ablations. Runs resume: an interrupted suite continues where it stopped when run again.

Usage: python benchmarks/fedafk_table3.py --rounds 15 [--seeds 0] [--data-root ../shared/data]
       [--out benchmarks/results/fedafk_table3]
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from pfedkit.engine.store import atomic_write_text, read_csv
from pfedkit.reports.compare import compare_configs

HERE = Path(__file__).resolve().parent
ROWS = ("fedafk", "fedavg", "fedper", "fedrep", "apfl", "local", "fedafk-no-afa", "fedafk-no-kt", "fedafk-no-both")
COLUMNS = {
    "pat": ("Path. MNIST", {"scheme": "pathological", "classes_per_client": 2, "balanced": False}),
    "dir": ("Dir(0.1) MNIST", {"scheme": "dirichlet", "beta": 0.1}),
}
# The paper's Table 3 and Table 5 (test accuracy %, best round); "-" where it reports none.
PAPER = {
    "fedafk": {"pat": 99.87, "dir": 99.58}, "fedavg": {"pat": 97.82, "dir": 98.81},
    "fedper": {"pat": 99.79, "dir": 99.47}, "fedrep": {"pat": 99.77, "dir": 99.48},
    "apfl": {"pat": 99.84, "dir": 99.44}, "local": {},
    "fedafk-no-afa": {"dir": 99.21}, "fedafk-no-kt": {"dir": 99.37}, "fedafk-no-both": {"dir": 99.17},
}


def column_config(partition: dict, rounds: int, data_root: str) -> dict:
    return {
        "data": {"dataset": "mnist", "root": data_root},
        "partition": {"clients": 20, **partition},
        "model": {"name": "fedavgcnn"},
        "train": {"rounds": rounds, "local_epochs": 1, "batch_size": 10, "lr": 0.005, "join_ratio": 1.0},
        "eval": {"protocol": "pfllib", "every": 1},
        "run": {"checkpoint_every": 1},
    }


def cell(values: list[float]) -> str:
    mean = statistics.fmean(values)
    return f"{mean:.2f} ± {statistics.stdev(values):.2f}" if len(values) > 1 else f"{mean:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--data-root", default=str(HERE.parents[1] / "shared" / "data"))
    parser.add_argument("--out", default=str(HERE / "results" / "fedafk_table3"))
    parser.add_argument("--columns", default="pat,dir")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    out = Path(args.out)
    columns = [c.strip() for c in args.columns.split(",")]
    for col in columns:
        compare_configs(column_config(COLUMNS[col][1], args.rounds, args.data_root), list(ROWS), seeds, out / col,
                        resume=True, title=f"FedAFK Table 3, {COLUMNS[col][0]}, {args.rounds} rounds")

    header = "| method | " + " | ".join(f"{COLUMNS[c][0]} ours (best) | last | paper" for c in columns) + " |"
    lines = [header, "|---|" + "---|---|---|" * len(columns)]
    seconds: dict[str, list[float]] = {}
    traffic: dict[str, list[float]] = {}
    for method in ROWS:
        cells = []
        for col in columns:
            summaries = [json.loads((out / col / method / f"seed{s}" / "summary.json").read_text()) for s in seeds]
            paper = PAPER[method].get(col)
            cells += [cell([100 * s["best_acc"] for s in summaries]), cell([100 * s["last_acc"] for s in summaries]),
                      "-" if paper is None else f"{paper:.2f}"]
            rows = [r for s in seeds for r in read_csv(out / col / method / f"seed{s}" / "metrics.csv")
                    if float(r["train_s"]) > 0]
            seconds.setdefault(method, []).extend(float(r["train_s"]) for r in rows)
            traffic.setdefault(method, []).extend((int(r["bytes_down"]) + int(r["bytes_up"])) / 20 for r in rows)
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += ["", f"{args.rounds} rounds (the paper: 1000), seeds {args.seeds}; protocol pfllib; accuracy in %.", ""]

    lines += ["Table 4 (cost per round on this machine, 2 worker processes, all 20 clients):", "",
              "| method | train s/round | MB per client per round (down + up) |", "|---|---|---|"]
    for method in ("fedafk", "fedavg", "fedper", "fedrep", "apfl", "local"):
        lines.append(f"| {method} | {statistics.fmean(seconds[method]):.1f} | {statistics.fmean(traffic[method]) / 1e6:.3f} |")
    table = "\n".join(lines)
    print(table)
    atomic_write_text(out / "table.md", table + "\n")


if __name__ == "__main__":
    main()
