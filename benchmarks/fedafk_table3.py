"""FedAFK Table 3 on MNIST (and its Table 5 ablations, Table 4 cost), at the rounds this machine allows.

Two columns: pathological (2 classes per client) and Dirichlet 0.1; 20 clients, batch 10, 1 local epoch,
lr 0.005, protocol pfllib (best round, sample-weighted). Rows: FedAFK, FedAvg, FedPer, FedRep, APFL, Local
and the three ablations. Runs resume: an interrupted suite continues where it stopped when run again.

Usage: python benchmarks/fedafk_table3.py --rounds 15 [--seeds 0] [--data-root ../shared/data]
       [--out benchmarks/results/fedafk_table3] [--columns pat,dir] [--rows fedafk,fedrep] [--workers 16]
       [--table-only]
The table reads every finished run under --out, so columns, rows and seeds may be run in separate calls
(on separate machines); a cell says over how many seeds it is, and "not run" where none finished.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from pfedkit.engine.store import atomic_write_text
from pfedkit.reports.compare import compare_configs
from pfedkit.reports.suite import cost_table, paper_table

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


def column_config(partition: dict, rounds: int, data_root: str, workers: int) -> dict:
    return {
        "data": {"dataset": "mnist", "root": data_root},
        "partition": {"clients": 20, **partition},
        "model": {"name": "fedavgcnn"},
        "train": {"rounds": rounds, "local_epochs": 1, "batch_size": 10, "lr": 0.005, "join_ratio": 1.0},
        "eval": {"protocol": "pfllib", "every": 1},
        "run": {"checkpoint_every": 1, "workers": workers},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--data-root", default=str(HERE.parents[1] / "shared" / "data"))
    parser.add_argument("--out", default=str(HERE / "results" / "fedafk_table3"))
    parser.add_argument("--columns", default="pat,dir")
    parser.add_argument("--rows", default=",".join(ROWS), help="methods to run (the table shows every row)")
    parser.add_argument("--workers", type=int, default=0, help="worker processes; 0 = one per core, at most 8")
    parser.add_argument("--cost", default="dir:0", help="column:seed whose runs give Table 4 (one machine's timings)")
    parser.add_argument("--table-only", action="store_true", help="write the table from finished runs, train nothing")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    out = Path(args.out)
    columns = [c.strip() for c in args.columns.split(",")]
    rows = [r.strip() for r in args.rows.split(",")]
    unknown = sorted(set(rows) - set(ROWS)) + sorted(set(columns) - set(COLUMNS))
    if unknown:
        parser.error(f"unknown rows or columns {unknown}; rows: {', '.join(ROWS)}; columns: {', '.join(COLUMNS)}")
    for col in columns if not args.table_only else []:
        compare_configs(column_config(COLUMNS[col][1], args.rounds, args.data_root, args.workers), rows, seeds,
                        out / col, resume=True, title=f"FedAFK Table 3, {COLUMNS[col][0]}, {args.rounds} rounds")
    columns = [c for c in COLUMNS if (out / c).is_dir()]

    lines, rounds_run = paper_table(out, {c: COLUMNS[c][0] for c in columns}, ROWS, PAPER)
    lines += ["", f"rounds {sorted(rounds_run)} (the paper: 1000); mean ± sample std over the seeds that finished "
              "(n); protocol pfllib; accuracy in %.", ""]
    cost_col, cost_seed = args.cost.split(":")
    lines += [f"Table 4 (cost per round, from the {cost_col} column, seed {cost_seed}, all 20 clients):", ""]
    lines += cost_table(out, cost_col, int(cost_seed), ("fedafk", "fedavg", "fedper", "fedrep", "apfl", "local"), 20)
    table = "\n".join(lines)
    print(table)
    atomic_write_text(out / "table.md", table + "\n")


if __name__ == "__main__":
    main()
