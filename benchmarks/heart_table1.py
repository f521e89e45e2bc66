"""HEART-PFL Table 1 and its ablations at a CPU scale: the same adapter design on a small ResNet pretrained on MNIST
(the stand-in for ImageNet), federated on Fashion-MNIST, Dirichlet 0.1, 20 clients, 8 per round.

Columns: `in-domain` (10% of F-MNIST's training set held out: the server's proxy and validation set) and
`ood-mnist` (the same validation split, MNIST's training set as the proxy). Rows: HEART-PFL, PerAda, the
fine-tuned and split baselines (on the same backbone without adapters, fully trained, as the paper's 11.18M-
parameter baselines) and the ablations without HDA, without AKT and without both. The out-of-domain column runs
the rows that use a proxy (--ood-rows). Scaled down from the paper (methods.md 2.4) to fit a CPU, see SMALL below:
a quarter of F-MNIST (--fraction), fewer rounds, 1 local epoch, 10 proxy batches of 128 per distillation,
3 PGD steps, distillation in the first 15% of rounds (the code's 30 of 200). Runs resume; rows and columns may run in separate calls or on other machines.

Usage: python benchmarks/heart_table1.py [--rows heart-pfl,perada] [--columns in-domain] [--rounds 30] [--seeds 0]
       [--local-epochs 1] [--fraction 0.25]
       [--workers 0] [--data-root ../shared/data] [--out benchmarks/results/heart_table1] [--table-only]
"""
from __future__ import annotations

import argparse
import copy
import math
from pathlib import Path

import torch

from pfedkit.engine.store import atomic_write_text, read_csv
from pfedkit.reports.compare import compare_configs, method_config
from pfedkit.reports.plots import save_curves
from pfedkit.reports.suite import cost_table, finished_runs, mean_of_last, paper_table

HERE = Path(__file__).resolve().parent
ADAPTER_ROWS = ("heart-pfl", "perada", "heart-pfl-no-hda", "heart-pfl-no-akt", "heart-pfl-no-both")
BASELINE_ROWS = ("fedavg-ft", "fedper", "fedbabu")
ROWS = ADAPTER_ROWS[:2] + BASELINE_ROWS + ADAPTER_ROWS[2:]
COLUMNS = {"in-domain": "F-MNIST, in-domain proxy", "ood-mnist": "F-MNIST, MNIST proxy"}
# Paper Table 1, CIFAR-100 Dirichlet 0.1: another data set and scale, so only the ordering is compared (claims()).
PAPER = {"heart-pfl": 63.42, "perada": 62.44, "fedavg-ft": 45.64, "fedper": 56.65, "fedbabu": 49.66}
BACKBONE = dict(widths=[8, 16, 32, 64], blocks=1, stem_stride=2)
SMALL = {  # our choice: the paper's procedure with fewer and smaller steps, so that a row takes minutes on a CPU
    "train": {"batch_size": 16, "lr": 0.01, "join_ratio": 0.4},
    "server": {"kd_steps": 10, "kd_batch": 128, "pgd_steps": 3},
}


def base_config(args: argparse.Namespace, backbone: Path, column: str) -> dict:
    proxy = {"holdout": 0.1} | ({"dataset": "mnist"} if column == "ood-mnist" else {})
    return {
        "data": {"dataset": "fashion-mnist", "root": args.data_root, "fraction": args.fraction},
        "partition": {"scheme": "dirichlet", "clients": 20, "beta": 0.1},
        "model": {"name": "small-resnet-adapter", "options": {**BACKBONE, "pretrained": str(backbone)}},
        "train": {"rounds": args.rounds, "local_epochs": args.local_epochs, **SMALL["train"]},
        "eval": {"protocol": "official-test", "every": 2},
        "proxy": proxy,
        "run": {"seed": 0, "checkpoint_every": 5, "workers": args.workers},
    }


def row_config(base: dict, row: str, rounds: int) -> dict:
    raw = copy.deepcopy(base)
    if row in BASELINE_ROWS:
        raw["model"]["options"]["adapters"] = False
        raw["method"] = {"name": row}
    else:
        kd_rounds = 0 if row.endswith(("no-akt", "no-both")) else max(1, math.ceil(0.15 * rounds))
        server = {k: v for k, v in SMALL["server"].items() if row != "perada" or not k.startswith("pgd")}
        raw["method"] = {"name": row, **server, "kd_rounds": kd_rounds}
    return raw


def final_accuracy(out: Path, column: str, row: str) -> float | None:
    runs = finished_runs(out / column, row)
    return sum(100 * mean_of_last(d, 5) for d in runs) / len(runs) if runs else None


def claims(out: Path) -> list[str]:
    """The paper's claims, each checked where its runs have finished."""
    acc = {row: final_accuracy(out, "in-domain", row) for row in ROWS}
    ood = final_accuracy(out, "ood-mnist", "heart-pfl")
    checks = [
        ("HEART-PFL above PerAda", ["heart-pfl", "perada"], lambda: acc["heart-pfl"] > acc["perada"]),
        ("PerAda above the fine-tuned and split baselines", ["perada", *BASELINE_ROWS],
         lambda: acc["perada"] > max(acc[b] for b in BASELINE_ROWS)),
        ("alignment helps (HEART-PFL above no-hda)", ["heart-pfl", "heart-pfl-no-hda"],
         lambda: acc["heart-pfl"] > acc["heart-pfl-no-hda"]),
        ("adversarial transfer helps (HEART-PFL above no-akt)", ["heart-pfl", "heart-pfl-no-akt"],
         lambda: acc["heart-pfl"] > acc["heart-pfl-no-akt"]),
        ("both help (HEART-PFL above no-both)", ["heart-pfl", "heart-pfl-no-both"],
         lambda: acc["heart-pfl"] > acc["heart-pfl-no-both"]),
    ]
    lines = []
    for text, needed, holds in checks:
        if any(acc[r] is None for r in needed):
            lines.append(f"- {text}: not run")
        else:
            numbers = ", ".join(f"{r} {acc[r]:.2f}" for r in needed)
            lines.append(f"- {text}: {'holds' if holds() else 'does not hold'} ({numbers})")
    if ood is None or acc["heart-pfl"] is None:
        lines.append("- out-of-domain proxy within a point of in-domain: not run")
    else:
        gap = ood - acc["heart-pfl"]
        lines.append(f"- out-of-domain proxy within a point of in-domain: {'holds' if abs(gap) <= 1 else 'does not hold'} "
                     f"(MNIST proxy {ood:.2f}, in-domain {acc['heart-pfl']:.2f}, {gap:+.2f})")
    return lines


def ensure_backbone(path: Path, data_root: str) -> None:
    if path.exists():
        return
    from pfedkit.pretrain import pretrain_backbone

    print(f"pretraining the small backbone on MNIST -> {path}")
    result = pretrain_backbone("mnist", "small-resnet-adapter", path, options=BACKBONE, epochs=2, root=data_root)
    print(f"MNIST test accuracy {result['test_acc']:.4f} in {result['seconds']:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--local-epochs", type=int, default=1, help="both client stages (the paper: 10)")
    parser.add_argument("--fraction", type=float, default=0.25, help="share of F-MNIST kept (data.fraction)")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--ood-rows", default="heart-pfl,perada", help="rows run in the out-of-domain column")
    parser.add_argument("--columns", default=",".join(COLUMNS))
    parser.add_argument("--workers", type=int, default=0, help="worker processes; 0 = one per core, at most 8")
    parser.add_argument("--data-root", default=str(HERE.parents[1] / "shared" / "data"))
    parser.add_argument("--out", default=str(HERE / "results" / "heart_table1"))
    parser.add_argument("--table-only", action="store_true", help="write the table from finished runs, train nothing")
    args = parser.parse_args()
    torch.set_num_threads(1)  # this process pretrains and distils on small batches: one thread is fastest on a shared CPU
    rows, columns = [r.strip() for r in args.rows.split(",")], [c.strip() for c in args.columns.split(",")]
    ood_rows = {r.strip() for r in args.ood_rows.split(",")}
    if set(rows) - set(ROWS) or set(columns) - set(COLUMNS):
        parser.error(f"rows: {', '.join(ROWS)}; columns: {', '.join(COLUMNS)}")
    out = Path(args.out)
    backbone = out / "backbone_mnist.pt"
    seeds = [int(s) for s in args.seeds.split(",")]
    if not args.table_only:
        cells = [(column, row, row_config(base_config(args, backbone, column), row, args.rounds))
                 for column in columns for row in rows if column != "ood-mnist" or row in ood_rows]
        for _, row, raw in cells:  # every config is checked before anything trains
            for seed in seeds:
                method_config(raw, row, seed)
        ensure_backbone(backbone, args.data_root)
        for column, row, raw in cells:
            compare_configs(raw, [row], seeds, out / column, resume=True,
                            title=f"HEART-PFL small-scale Table 1, {COLUMNS[column]}")
    lines, rounds = paper_table(out, COLUMNS, ROWS, {}, last_k=5)  # the paper's numbers are another data set
    lines += ["", f"rounds {sorted(rounds)}; accuracy in % (sample-weighted over clients' personalized models, "
              "official-test protocol, evaluated every 2 rounds).", "",
              "The paper (Table 1, CIFAR-100 Dir 0.1, ResNet-18 on ImageNet weights, 200 rounds): "
              + ", ".join(f"{m} {v:.2f}" for m, v in PAPER.items()) + ". Its claims, on our runs (mean of the "
              "last 5 evaluated rounds, seeds averaged):", ""]
    lines += claims(out) + ["", "Cost per round (seed 0, this machine):", ""]
    lines += cost_table(out, "in-domain", 0, ROWS, 20)
    table = "\n".join(lines)
    print(table)
    atomic_write_text(out / "table.md", table + "\n")
    for column in COLUMNS:
        curves = {row: read_csv(runs[0] / "metrics.csv") for row in ROWS if (runs := finished_runs(out / column, row))}
        if curves:
            save_curves(curves, out / f"curves_{column}.png", title=f"HEART-PFL small scale, {COLUMNS[column]}")


if __name__ == "__main__":
    main()
