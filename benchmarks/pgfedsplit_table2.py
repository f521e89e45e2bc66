"""PGFedSplit's Table 2 Fashion-MNIST columns (Dirichlet 0.1 and 1) and its Table 3 setting (100 clients, 30% per
round, tau 20) on Fashion-MNIST Dirichlet 0.1, at a scale this machine can run.

The setting is benchmarks/configs/pgfedsplit_fmnist.toml (the paper's, 200 rounds on all of F-MNIST). A small scale
keeps a seeded share of every class (`--fraction`, default 0.2) and runs fewer rounds (`--rounds`, default 20); say
which when quoting. FT baselines fine-tune the global model for 25 local epochs (methods.md 3.4-i) before each
evaluation, so they are evaluated every 5 rounds and at the last. Runs resume, and rows, columns and seeds may be
run in separate calls: the table reads every finished run.

Usage: python benchmarks/pgfedsplit_table2.py [--columns dir0.1,dir1] [--rows pgfedsplit,fedpac] [--seeds 0]
       [--rounds 20] [--fraction 0.2] [--workers 0] [--data-root ../shared/data]
       [--out benchmarks/results/pgfedsplit_table2] [--table-only]
"""
from __future__ import annotations

import argparse
import copy
from pathlib import Path

from pfedkit.config import tomllib
from pfedkit.engine.store import atomic_write_text
from pfedkit.reports.compare import compare_configs, method_config
from pfedkit.reports.suite import cost_table, paper_table

HERE = Path(__file__).resolve().parent
ROWS = ("pgfedsplit", "fedpac", "fedavg-ft", "fedrep", "fedbabu", "fedper", "local", "fedavg", "fedprox",
        "fedprox-ft", "fedala", "fedamp", "fedfomo", "fedgh", "pgfedsplit-no-apa", "pgfedsplit-no-gau",
        "pgfedsplit-no-both")
# column: (label, overrides of the base config)
COLUMNS = {
    "dir0.1": ("F-MNIST Dir(0.1)", {"partition": {"beta": 0.1}}),
    "dir1": ("F-MNIST Dir(1)", {"partition": {"beta": 1.0}}),
    "k100": ("F-MNIST Dir(0.1), 100 clients, 30%", {"partition": {"beta": 0.1, "clients": 100},
                                                    "train": {"join_ratio": 0.3}}),
}
FT_EPOCHS = 25  # methods.md 3.4-i: FT baselines fine-tune for 25 local epochs
ROW_PARAMS = {"fedavg-ft": {"ft_epochs": FT_EPOCHS}, "fedprox-ft": {"ft_epochs": FT_EPOCHS},
              "pgfedsplit": {"proto_weight": 5.0}}
PERIOD_100_CLIENTS = 20  # the paper's tau for K = 100 (methods.md 3.3)
# Table 2, F-MNIST (Dir 0.1, Dir 1); Table 3 has no F-MNIST column.
PAPER = {
    "local": (97.18, 88.90), "fedavg-ft": (97.49, 92.15), "fedbabu": (97.21, 89.53), "fedrep": (97.49, 91.02),
    "fedala": (97.51, 92.75), "fedpac": (97.41, 92.93), "pgfedsplit": (97.62, 92.84), "fedavg": (83.24, 90.26),
    "fedprox": (83.24, 90.27), "fedprox-ft": (97.50, 92.16), "fedamp": (97.17, 88.94), "fedfomo": (97.01, 90.11),
    "fedper": (97.44, 90.80), "fedgh": (96.04, 88.95),
}


def row_config(base: dict, column: str, row: str) -> dict:
    raw = copy.deepcopy(base)
    for section, values in COLUMNS[column][1].items():
        raw.setdefault(section, {}).update(values)
    raw["method"] = {"name": row, **ROW_PARAMS.get(row, {})}
    if column == "k100" and row.startswith("pgfedsplit"):
        raw["method"]["period_init"] = PERIOD_100_CLIENTS
    if row.endswith("-ft"):
        raw["eval"]["every"] = 5  # fine-tuning 25 epochs at every round would cost five rounds' training
    return raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--fraction", type=float, default=0.2, help="share of every class kept (1 = all of F-MNIST)")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--columns", default="dir0.1,dir1")
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--workers", type=int, default=0, help="worker processes; 0 = one per core, at most 8")
    parser.add_argument("--data-root", default=str(HERE.parents[1] / "shared" / "data"))
    parser.add_argument("--out", default=str(HERE / "results" / "pgfedsplit_table2"))
    parser.add_argument("--table-only", action="store_true", help="write the table from finished runs, train nothing")
    args = parser.parse_args()
    rows = [r.strip() for r in args.rows.split(",")]
    columns = [c.strip() for c in args.columns.split(",")]
    if set(rows) - set(ROWS):
        parser.error(f"unknown rows {sorted(set(rows) - set(ROWS))}; rows: {', '.join(ROWS)}")
    if set(columns) - set(COLUMNS):
        parser.error(f"unknown columns {sorted(set(columns) - set(COLUMNS))}; columns: {', '.join(COLUMNS)}")
    out = Path(args.out)
    base = tomllib.loads((HERE / "configs" / "pgfedsplit_fmnist.toml").read_text())
    base["data"].update(root=args.data_root, fraction=args.fraction)
    base["train"]["rounds"] = args.rounds
    base["run"].update(checkpoint_every=5, workers=args.workers)
    seeds = [int(s) for s in args.seeds.split(",")]
    if not args.table_only:
        # Every row's config is checked before the first one trains.
        configs = {(c, r): row_config(base, c, r) for c in columns for r in rows}
        for (column, row), raw in configs.items():
            method_config(raw, row, seeds[0])
        for (column, row), raw in configs.items():
            compare_configs(raw, [row], seeds, out / column, resume=True,
                            title=f"PGFedSplit Table 2, {COLUMNS[column][0]}, {args.rounds} rounds, data x{args.fraction}")
    shown = {c: COLUMNS[c][0] for c in COLUMNS if (out / c).is_dir()}
    paper = {m: {"dir0.1": v[0], "dir1": v[1]} for m, v in PAPER.items()}
    lines, rounds = paper_table(out, shown, ROWS, paper)
    lines += ["", f"rounds {sorted(rounds)} (the paper: 200), a {args.fraction:g} share of every class of "
              "F-MNIST (the paper: all); protocol pfllib (each client's data 75/25); accuracy in %, sample-weighted, "
              "mean ± sample std over the seeds that finished (n). FT rows evaluated every 5 rounds, after 25 "
              "fine-tuning epochs.", "", "Cost per round (Dir(0.1), seed 0, this machine):", ""]
    lines += cost_table(out, "dir0.1", 0, ROWS, 20)
    table = "\n".join(lines)
    print(table)
    atomic_write_text(out / "table.md", table + "\n")


if __name__ == "__main__":
    main()
