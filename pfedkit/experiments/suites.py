"""The papers' tables as suites for `pfedkit reproduce` (see pfedkit/reports/reproduce.py).

Seconds per round are what this project measured on its 2-core machine (committed under benchmarks/results/).
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from pfedkit.config import merge
from pfedkit.experiments.reproduce import Column, Scale, Suite
from pfedkit.reports.tables import finished_runs, mean_of_last

MNIST_PFLLIB = {  # FedAFK Sec. 5.1 and PFLlib's MNIST setting
    "data": {"dataset": "mnist"},
    "partition": {"clients": 20},
    "model": {"name": "fedavgcnn"},
    "train": {"rounds": 1000, "local_epochs": 1, "batch_size": 10, "lr": 0.005, "join_ratio": 1.0},
    "eval": {"protocol": "pfllib", "every": 1},
    "run": {"checkpoint_every": 1},
}

FEDAFK_MAIN_ROWS = ("fedafk", "fedavg", "fedper", "fedrep", "apfl", "local")
FEDAFK_BASELINE_ROWS = ("ditto", "fedrod", "fedala", "fedprox", "per-fedavg", "pfedme", "fedamp", "fedfomo", "fedphp")
FEDAFK_PAPER_BASELINES = {  # Table 3's other rows: (Path. MNIST, Dir(0.1) MNIST)
    "ditto": (99.80, 99.54), "fedrod": (99.85, 99.56), "fedala": (99.86, 99.56), "fedprox": (97.95, 98.82),
    "per-fedavg": (99.63, 98.90), "pfedme": (99.75, 99.42), "fedamp": (99.78, 99.47), "fedfomo": (99.83, 99.33),
    "fedphp": (99.73, 99.51)}


def expected_participations(raw: dict, column: str, row: str, out: Path) -> None:
    if row == "fedphp":  # FedPHP's mu schedule needs the number of rounds a client takes part in
        raw["method"]["expected_participations"] = max(1, round(raw["train"]["rounds"] * raw["train"].get("join_ratio", 1)))


FEDAFK_TABLE3 = Suite(
    name="fedafk-table3",
    paper="FedAFK (Yin & Mao, IJCNN 2025) Table 3 on MNIST, Table 5 ablations, Table 4 cost",
    base=MNIST_PFLLIB,
    columns={
        "pat": Column("Path. MNIST", {"partition": {"scheme": "pathological", "classes_per_client": 2, "balanced": False}},
                      {"fedafk": 99.87, "fedavg": 97.82, "fedper": 99.79, "fedrep": 99.77, "apfl": 99.84,
                       **{r: v[0] for r, v in FEDAFK_PAPER_BASELINES.items()}},
                      rows=FEDAFK_MAIN_ROWS + FEDAFK_BASELINE_ROWS),
        "dir": Column("Dir(0.1) MNIST", {"partition": {"scheme": "dirichlet", "beta": 0.1}},
                      {"fedafk": 99.58, "fedavg": 98.81, "fedper": 99.47, "fedrep": 99.48, "apfl": 99.44,
                       "fedafk-no-afa": 99.21, "fedafk-no-kt": 99.37, "fedafk-no-both": 99.17,
                       **{r: v[1] for r, v in FEDAFK_PAPER_BASELINES.items()}}),
    },
    rows=FEDAFK_MAIN_ROWS + ("fedafk-no-afa", "fedafk-no-kt", "fedafk-no-both") + FEDAFK_BASELINE_ROWS,
    # pFedMe's MNIST personal lr (0.09, tuned for its MLP) gives NaN from round 1 on this CNN at batch 10; PFLlib's 0.01
    row_changes={"pfedme": {"method": {"personal_lr": 0.01}},
                 # PFLlib, which FedAFK's baselines run, ignores Per-FedAvg's beta: both steps at the client lr (0.005)
                 "per-fedavg": {"method": {"beta": 0.005}}},
    cell_rule=expected_participations,
    scales={"full": Scale({}, 0, "the paper's 1000 rounds"),
            "small": Scale({"train": {"rounds": 12}}, 27, "12 rounds instead of 1000 (every curve still rises)")},
    cost_column="dir",
)

FEDAFK_KT_SWEEP = {0.1: 56.53, 0.2: 57.50, 0.4: 57.63, 0.5: 57.69, 0.6: 57.68, 0.7: 57.20}  # Table 1, mu_init 0.5
FEDAFK_MU_SWEEP = {0.0: 57.82, 0.1: 57.26, 0.3: 57.51, 0.7: 57.56, 0.9: 46.24, 1.0: 45.84}  # Table 2, lambda 0.3
FEDAFK_SWEEP_ROWS = {  # variant rows; plain `fedafk` is the shared point of both tables (lambda 0.3, mu_init 0.5: 57.88)
    **{f"fedafk-kt{v}": {"method": {"name": "fedafk", "kt_weight": v}} for v in FEDAFK_KT_SWEEP},
    **{f"fedafk-mu{v}": {"method": {"name": "fedafk", "mu_init": v}} for v in FEDAFK_MU_SWEEP}}

FEDAFK_SWEEPS = Suite(
    name="fedafk-sweeps",
    paper="FedAFK (Yin & Mao, IJCNN 2025) Table 1 (lambda sweep) and Table 2 (initial-mu sweep), CIFAR-100 Dir(0.1)",
    base={**MNIST_PFLLIB, "partition": {"clients": 20, "scheme": "dirichlet", "beta": 0.1}},
    columns={
        "c100": Column("Dir(0.1) CIFAR-100", {"data": {"dataset": "cifar100"}, "model": {"name": "resnet18"}}, {
            "fedafk": 57.88, **{f"fedafk-kt{v}": a for v, a in FEDAFK_KT_SWEEP.items()},
            **{f"fedafk-mu{v}": a for v, a in FEDAFK_MU_SWEEP.items()}}),
        "mnist": Column("Dir(0.1) MNIST (stand-in: the paper sweeps CIFAR-100 only)", {}),
    },
    rows=("fedafk", *FEDAFK_SWEEP_ROWS),
    row_changes=FEDAFK_SWEEP_ROWS,
    scales={"full": Scale({}, 0, "the paper's 1000 rounds"),
            "small": Scale({"train": {"rounds": 12}, "data": {"fraction": 0.25}}, 16,
                           "12 rounds instead of 1000, on a seeded 25% of every class")},
    notes="Rows fedafk-ktX set lambda = X (mu_init 0.5); rows fedafk-muX set mu_init = X (lambda 0.3); "
          "fedafk is both tables' default point.",
)

FEDPAC_TABLE1 = Suite(
    name="fedpac-table1",
    paper="FedPAC reproduction report Table 1, Fashion-MNIST, 20 clients",
    base={  # 600 samples per client, 20% over all classes, the rest over the group's 3 dominant classes
        "data": {"dataset": "fashion-mnist"},
        "partition": {"scheme": "dominant-classes", "clients": 20, "samples_per_client": 600, "uniform_share": 0.2,
                      "test_per_client": 600},
        "model": {"name": "fedpac-fmnist"},
        "train": {"rounds": 200, "local_epochs": 5, "batch_size": 50, "lr": 0.01, "momentum": 0.5,
                  "weight_decay": 5e-4, "join_ratio": 1.0},
        "eval": {"protocol": "official-test", "every": 1},
        "run": {"checkpoint_every": 5},
    },
    columns={"fmnist20": Column("F-MNIST 20 clients", {}, {  # the fedpac row is the original paper's (report: 91.95)
        "fedpac": 91.83, "fedpac-proto": 92.03, "fedavg": 85.28, "fedavg-ft": 90.47, "local": 85.68, "fedper": 87.43,
        "fedrep": 88.25, "fedbabu": 89.68, "lg-fedavg": 85.66})},
    rows=("fedpac", "fedpac-proto", "fedavg", "fedavg-ft", "local", "fedper", "fedrep", "fedbabu", "lg-fedavg",
          "fedproto", "fedgh"),
    scales={"full": Scale({}, 12, "the report's 200 rounds"),
            "small": Scale({"train": {"rounds": 20}}, 12, "FedPAC at the report's 200 rounds, the other rows at 20",
                           row_changes={"fedpac": {"train": {"rounds": 200}}})},
    last_k=10,  # the report gives the final accuracy; methods.md 4.4 reads it as the mean of the last 10 rounds
    cost_column="fmnist20",
)

PGFEDSPLIT_FT_EPOCHS = 25  # methods.md 3.4-i: FT baselines fine-tune for 25 local epochs
PGFEDSPLIT_K100_ROWS = ("pgfedsplit", "fedpac", "fedavg-ft", "fedrep", "fedper", "local")


def pgfedsplit_cell(raw: dict, column: str, row: str, out: Path) -> None:
    expected_participations(raw, column, row, out)
    if raw["partition"]["clients"] >= 100 and row.startswith("pgfedsplit"):
        raw["method"]["period_init"] = 20  # the paper's tau for 100 clients (methods.md 3.3)
    if row.endswith("-ft"):
        raw["eval"]["every"] = 5  # 25 fine-tuning epochs at every round would cost five rounds' training


PGFEDSPLIT_TABLE2 = Suite(
    name="pgfedsplit-table2",
    paper="PGFedSplit (Kang & Song) Table 2 Fashion-MNIST columns and the Table 3 setting (100 clients, 30%)",
    base={
        "data": {"dataset": "fashion-mnist"},
        # PFLlib's data generators fix batch 10 for the minimum-size rule (10 / 0.25), whatever the training batch
        "partition": {"scheme": "dirichlet", "clients": 20, "beta": 0.1, "min_samples": 40},
        "model": {"name": "fedavgcnn"},
        "train": {"rounds": 200, "local_epochs": 5, "batch_size": 64, "lr": 0.005, "join_ratio": 1.0},
        "eval": {"protocol": "pfllib", "every": 1},
        "run": {"checkpoint_every": 5},
    },
    columns={
        "dir0.1": Column("F-MNIST Dir(0.1)", {"partition": {"beta": 0.1}}, {
            "local": 97.18, "fedavg-ft": 97.49, "fedbabu": 97.21, "fedrep": 97.49, "fedala": 97.51, "fedpac": 97.41,
            "pgfedsplit": 97.62, "fedavg": 83.24, "fedprox": 83.24, "fedprox-ft": 97.50, "fedamp": 97.17,
            "fedfomo": 97.01, "fedper": 97.44, "fedgh": 96.04}),
        "dir1": Column("F-MNIST Dir(1)", {"partition": {"beta": 1.0}}, {
            "local": 88.90, "fedavg-ft": 92.15, "fedbabu": 89.53, "fedrep": 91.02, "fedala": 92.75, "fedpac": 92.93,
            "pgfedsplit": 92.84, "fedavg": 90.26, "fedprox": 90.27, "fedprox-ft": 92.16, "fedamp": 88.94,
            "fedfomo": 90.11, "fedper": 90.80, "fedgh": 88.95}),
        "k100": Column("F-MNIST Dir(0.1), 100 clients, 30% (no paper number: Table 3 has no F-MNIST column)",
                       # all of F-MNIST at every scale: a fifth leaves Dir(0.1) clients far below PFLlib's 40 samples
                       {"partition": {"beta": 0.1, "clients": 100}, "train": {"join_ratio": 0.3}, "data": {"fraction": 1.0}},
                       rows=PGFEDSPLIT_K100_ROWS),
    },
    rows=("pgfedsplit", "fedpac", "fedavg-ft", "fedrep", "fedbabu", "fedper", "local", "fedavg", "fedprox",
          "fedprox-ft", "fedala", "fedamp", "fedfomo", "fedgh", "pgfedsplit-no-apa", "pgfedsplit-no-gau",
          "pgfedsplit-no-both"),
    row_changes={"pgfedsplit": {"method": {"proto_weight": 5.0}},
                 "fedavg-ft": {"method": {"ft_epochs": PGFEDSPLIT_FT_EPOCHS}},
                 "fedprox-ft": {"method": {"ft_epochs": PGFEDSPLIT_FT_EPOCHS}}},
    cell_rule=pgfedsplit_cell,
    scales={"full": Scale({}, 0, "the paper's 200 rounds on all of F-MNIST"),
            "small": Scale({"train": {"rounds": 20}, "data": {"fraction": 0.2}}, 15,
                           "20 rounds instead of 200, on a seeded 20% of every class of F-MNIST (all of it for k100)")},
    cost_column="dir0.1",
    notes="FT rows are evaluated every 5 rounds, after 25 fine-tuning epochs (methods.md 3.4-i).",
)

PGFEDSPLIT_TABLE3_PAPER = {  # Table 3: (CIFAR-10, CIFAR-100, Tiny-ImageNet), K = 100, 30% per round, Dir(0.1)
    "local": (84.15, 40.30, 28.14), "fedavg": (43.83, 17.88, 9.70), "fedprox": (44.36, 17.96, 9.69),
    "fedavg-ft": (79.57, 40.82, 32.49), "fedprox-ft": (79.68, 40.76, 32.54), "fedamp": (84.42, 40.48, 28.26),
    "fedfomo": (83.53, 37.82, 27.30), "fedbabu": (83.31, 40.46, 35.81), "fedper": (85.30, 40.18, 33.55),
    "fedrep": (85.09, 39.69, 34.57), "fedala": (85.30, 43.83, 24.84), "fedpac": (83.11, 41.23, 34.21),
    "fedgh": (77.84, 35.35, 27.20), "pgfedsplit": (86.75, 45.13, 36.64)}

PGFEDSPLIT_TABLE3 = Suite(
    name="pgfedsplit-table3",
    paper="PGFedSplit (Kang & Song) Table 3: 100 clients, 30% per round, Dir(0.1)",
    base=merge(PGFEDSPLIT_TABLE2.base, {"partition": {"clients": 100}, "train": {"join_ratio": 0.3}}),
    columns={
        "c10": Column("CIFAR-10", {"data": {"dataset": "cifar10"}},
                      {r: v[0] for r, v in PGFEDSPLIT_TABLE3_PAPER.items()}),
        "c100": Column("CIFAR-100", {"data": {"dataset": "cifar100"}},
                       {r: v[1] for r, v in PGFEDSPLIT_TABLE3_PAPER.items()}),
        "tin": Column("Tiny-ImageNet", {"data": {"dataset": "tiny-imagenet"}, "model": {"name": "resnet18"}},
                      {r: v[2] for r, v in PGFEDSPLIT_TABLE3_PAPER.items()}),
    },
    rows=tuple(PGFEDSPLIT_TABLE3_PAPER),
    row_changes=PGFEDSPLIT_TABLE2.row_changes,
    cell_rule=pgfedsplit_cell,
    scales={"full": Scale({}, 0, "the paper's 200 rounds"),
            "small": Scale({"train": {"rounds": 20}, "data": {"fraction": 0.2}}, 0,
                           "20 rounds instead of 200, on a seeded 20% of every class")},
    notes="tau starts at 20 for 100 clients (methods.md 3.3). This machine has none of these data sets; "
          "the F-MNIST column `k100` of pgfedsplit-table2 is the same setting on data it has.",
)

HEART_ADAPTER_ROWS = ("heart-pfl", "perada", "heart-pfl-no-hda", "heart-pfl-no-akt", "heart-pfl-no-both")
HEART_BASELINE_ROWS = ("fedavg-ft", "fedper", "fedbabu")
HEART_BACKBONE = {"widths": [8, 16, 32, 64], "blocks": 1, "stem_stride": 2}
HEART_BACKBONE_FILE = "backbone_mnist.pt"
HEART_SERVER = {"kd_steps": 10, "kd_batch": 128, "pgd_steps": 3}  # our choice: fewer, smaller server steps on a CPU


def heart_cell(raw: dict, column: str, row: str, out: Path) -> None:
    raw["model"]["options"]["pretrained"] = str(out / HEART_BACKBONE_FILE)
    if row in HEART_BASELINE_ROWS:  # the same backbone without adapters, fully trained (the paper's 11.18M baselines)
        raw["model"]["options"]["adapters"] = False
        return
    # distillation in the first 15% of rounds, as the code's 30 of 200; none in the ablations without it
    no_transfer = row.endswith(("no-akt", "no-both"))
    raw["method"]["kd_rounds"] = 0 if no_transfer else max(1, math.ceil(0.15 * raw["train"]["rounds"]))
    raw["method"].update({k: v for k, v in HEART_SERVER.items() if row != "perada" or not k.startswith("pgd")})


def heart_backbone(raw: dict) -> None:
    """Pretrain the small backbone on MNIST (the stand-in for ImageNet) once per output folder."""
    from pfedkit.experiments.pretrain import pretrain_backbone

    path = Path(raw["model"]["options"]["pretrained"])
    if not path.exists():
        print(f"pretraining the small backbone on MNIST -> {path}")
        result = pretrain_backbone("mnist", "small-resnet-adapter", path, options=HEART_BACKBONE, epochs=2,
                                   root=raw["data"].get("root"))
        print(f"MNIST test accuracy {result['test_acc']:.4f} in {result['seconds']:.0f} s")


def heart_claims(out: Path) -> list[str]:
    """HEART-PFL's claims, each checked on the mean of the last 5 evaluations where its runs finished; with several
    seeds, seed by seed (a seed fixes the partition and the sampled clients for every row), and a claim that
    holds on some seeds and not on others is reported as mixed."""
    def finals(column: str, row: str) -> dict[str, float]:
        return {d.name: 100 * mean_of_last(d, 5) for d in finished_runs(out / column, row)}

    def verdict(first: dict[str, float], other: dict[str, float]) -> str:
        wins = [first[s] > other[s] for s in first if s in other]
        if len(wins) < 2:  # one shared seed at most: compare the means
            return "holds" if statistics.fmean(first.values()) > statistics.fmean(other.values()) else "does not hold"
        if all(wins) or not any(wins):
            return f"{'holds' if wins[0] else 'does not hold'} on each of {len(wins)} seeds"
        return f"mixed: holds on {sum(wins)} of {len(wins)} seeds"

    runs = {row: finals("in-domain", row) for row in HEART_ADAPTER_ROWS + HEART_BASELINE_ROWS}
    acc = {row: statistics.fmean(v.values()) if v else None for row, v in runs.items()}
    checks = [("HEART-PFL above PerAda", ["heart-pfl", "perada"]),
              ("PerAda above the fine-tuned and split baselines", ["perada", *HEART_BASELINE_ROWS]),
              ("alignment helps (HEART-PFL above no-hda)", ["heart-pfl", "heart-pfl-no-hda"]),
              ("adversarial transfer helps (HEART-PFL above no-akt)", ["heart-pfl", "heart-pfl-no-akt"]),
              ("both help (HEART-PFL above no-both)", ["heart-pfl", "heart-pfl-no-both"])]
    lines = []
    for text, (first, *others) in checks:
        if any(acc[r] is None for r in (first, *others)):
            lines.append(f"- {text}: not run")
            continue
        strongest = max(others, key=lambda r: acc[r])
        numbers = ", ".join(f"{r} {acc[r]:.2f}" for r in (first, *others))
        lines.append(f"- {text}: {verdict(runs[first], runs[strongest])} ({numbers})")
    ood = finals("ood-mnist", "heart-pfl")
    if not ood or acc["heart-pfl"] is None:
        lines.append("- out-of-domain proxy within a point of in-domain: not run")
    else:
        ood_acc = statistics.fmean(ood.values())
        gap = ood_acc - acc["heart-pfl"]
        lines.append(f"- out-of-domain proxy within a point of in-domain: {'holds' if abs(gap) <= 1 else 'does not hold'}"
                     f" (MNIST proxy {ood_acc:.2f} over {len(ood)} seeds, in-domain "
                     f"{acc['heart-pfl']:.2f}, {gap:+.2f})")
    return lines


HEART_TABLE1 = Suite(
    name="heart-table1",
    paper="HEART-PFL Table 1 and Table 3 ablations, at a CPU scale (small adapter ResNet, F-MNIST)",
    base={
        "data": {"dataset": "fashion-mnist", "fraction": 0.25},
        "partition": {"scheme": "dirichlet", "clients": 20, "beta": 0.1},
        "model": {"name": "small-resnet-adapter", "options": dict(HEART_BACKBONE)},
        "train": {"rounds": 20, "local_epochs": 1, "batch_size": 16, "lr": 0.01, "join_ratio": 0.4},
        "eval": {"protocol": "official-test", "every": 2},
        "proxy": {"holdout": 0.1},
        "run": {"checkpoint_every": 5},
    },
    columns={  # the paper's column is CIFAR-100 Dir 0.1 on ImageNet weights: compare the ordering, not the numbers
        "in-domain": Column("F-MNIST, in-domain proxy", {}, {"heart-pfl": 63.42, "perada": 62.44, "fedavg-ft": 45.64,
                                                             "fedper": 56.65, "fedbabu": 49.66}),
        "ood-mnist": Column("F-MNIST, MNIST proxy", {"proxy": {"dataset": "mnist"}}, rows=("heart-pfl", "perada")),
    },
    rows=HEART_ADAPTER_ROWS[:2] + HEART_BASELINE_ROWS + HEART_ADAPTER_ROWS[2:],
    cell_rule=heart_cell,
    prepare=heart_backbone,
    scales={"small": Scale({}, 8, "a small adapter ResNet pretrained on MNIST for ResNet-18 on ImageNet, a quarter "
                                   "of F-MNIST for CIFAR-100, 20 rounds of 1 local epoch for 200 of 10, 8 of 20 "
                                   "clients per round; benchmarks/configs/heart_*.toml are the paper's settings")},
    last_k=5,
    cost_column="in-domain",
    claims=heart_claims,
    threads=1,  # the server distils on small batches: one thread is fastest on a shared CPU
    notes="The paper column is CIFAR-100 Dir(0.1) on a pretrained ResNet-18: another data set and scale.",
)

SUITES = {s.name: s for s in (FEDAFK_TABLE3, FEDAFK_SWEEPS, FEDPAC_TABLE1, PGFEDSPLIT_TABLE2, PGFEDSPLIT_TABLE3,
                               HEART_TABLE1)}
