"""Conformance with PFLlib: each method PFLlib also implements, run by PFLlib's own code (unchanged) and by pfedkit on
the same partition, model, batch size, learning rate, local epochs, join ratio and evaluation protocol, for the same
rounds, on several seeds; the table says per method whether the two agree.

Settings (PFLlib's protocol: merged splits, 75/25 per client, every client every round, evaluation at each round's
start, sample-weighted accuracy; FedAvgCNN, batch 10, lr 0.005, 1 local epoch, plain SGD):
  mnist      MNIST, 10% of it (7,000 images), 20 clients, Dir(0.1), 20 rounds
  cifar10    CIFAR-10 (the JPEG copy: a stand-in), 10% of it (6,000 images), 20 clients, Dir(0.1), 20 rounds
Seeds 0, 1, 2 draw the data fraction, the partition and pfedkit's training randomness; PFLlib seeds torch with 0
whatever the run, so its seeds differ by partition alone. The noise floors are pfedkit FedAvg's and FedPer's spreads
over three repeats of seed 0 (run.repeat 0, 1, 2: other training draws on the same data): a global model's level and
a personalized one's; each row takes the one nearest its accuracy, within 15 points (rule 3's reach).

Each system's result is the mean of its last LAST evaluations (for FedBABU, whose PFLlib code fine-tunes only once,
after the last round, the last evaluation alone). The verdict is the project's rule 3 on a "within" claim: the two
agree within BAND points, beyond the paired t-test's bar (t at n - 1 df times the standard error of the per-seed
gaps, never below the floor's), or differ beyond it, or cannot tell.

Usage:
  python3 benchmarks/conformance.py [--setting mnist] [--methods fedavg,ditto] [--seeds 0,1,2]
                                    # runs the cells not yet done (resumes), then writes the table
  python3 benchmarks/conformance.py --table      # docs/CONFORMANCE.md from the committed results alone
  python3 benchmarks/conformance.py --check      # every code path in a minute (tiny data, 2 rounds, scratch folder)
PFLlib: a checkout at --pfllib (default .peers/PFLlib, ignored by git) and a Python that runs it (--pfllib-python:
PFLlib imports h5py, scikit-learn, calmsize and, for FedPAC, cvxpy; a venv with --system-site-packages and those
four is enough; torchvision is replaced by an empty stand-in when missing, as its CNN runs never use it).
Results: one JSON per cell under --out (results/conformance/<setting>/<method>/<system>-seed<k>.json),
one curve PNG per method; scratch run folders under runs/conformance/.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from pfllib_peer import (  # noqa: E402
    command,
    ensure_exported,
    fine_tuned_accuracy,
    partition_digest,
    round_accuracies,
    torchvision_stand_in,
)

LAST = 5  # evaluations averaged at the end of a curve
BAND = 2.0  # points: two implementations "agree" when their gap is within this, beyond rule 3's bar
FLOOR_REPEATS = (0, 1, 2)  # run.repeat values on seed 0 that give a noise floor
FLOOR_METHODS = ("fedavg", "fedper")  # pfedkit's repeats of these give the floors: a global model's level and a
# personalized one's (rule 3: a row takes the floor measured nearest its accuracy, within FLOOR_REACH points)


@dataclass(frozen=True)
class Setting:
    dataset: str
    fraction: float
    clients: int
    beta: float
    rounds: int
    pfllib_prefix: str  # PFLlib picks FedAvgCNN's input shape from "MNIST" or "Cifar10" in the data set's name
    stand_in: str = ""  # what makes this data a stand-in, said in the table

    def describe(self) -> str:
        name = {"mnist": "MNIST", "cifar10": "CIFAR-10"}.get(self.dataset, self.dataset)
        return (
            f"{name}{' (' + self.stand_in + ')' if self.stand_in else ''}, {self.fraction:.0%} of it, "
            f"{self.clients} clients, Dir({self.beta:g}), {self.rounds} rounds"
        )


SETTINGS = {
    "mnist": Setting("mnist", 0.1, 20, 0.1, 20, "MNIST"),
    "cifar10": Setting("cifar10", 0.1, 20, 0.1, 20, "Cifar10", stand_in="JPEG copy"),
}


@dataclass(frozen=True)
class Peer:
    """One method in both systems: PFLlib's -algo and the flags that set it to pfedkit's values, pfedkit's params."""

    algo: str
    flags: tuple[str, ...] = ()
    ours: dict[str, Any] = field(default_factory=dict)
    final_only: bool = False  # compare the last evaluation alone (PFLlib fine-tunes only after the last round)
    note: str = ""
    method: str = ""  # pfedkit's method, where the row is a variant of one (the row's name otherwise)
    pfllib_as: str = ""  # a row whose PFLlib runs are this one's too (the same -algo and flags): read, not run again
    train: dict[str, Any] = field(default_factory=dict)  # pfedkit's [train] changes, where a row tests a reading


# in the order runs start (a budget cuts the end first): the baselines the papers' verdicts lean on most come first
METHODS: dict[str, Peer] = {
    "fedavg": Peer("FedAvg"),
    "fedper": Peer("FedPer"),
    "fedrep": Peer("FedRep", ("-pls", "10"), note="PFLlib's -pls (head epochs) set to our head_epochs 10"),
    "ditto": Peer(
        "Ditto", ("-mu", "0.1", "-pls", "1"), note="PFLlib's -mu is Ditto's lambda (0.1 ours), -pls personal epochs"
    ),
    "local": Peer("Local"),
    "fedavg-drop-last": Peer(
        "FedAvg",
        method="fedavg",
        pfllib_as="fedavg",
        train={"drop_last": True},
        note="ours leaving out each epoch's last partial batch, as PFLlib's loaders do (train.drop_last)",
    ),
    "fedprox": Peer("FedProx", ("-mu", "0.01"), note="PFLlib's default mu 0 would be FedAvg: set to our 0.01"),
    "fedbabu": Peer(
        "FedBABU",
        ("-fte", "5"),
        final_only=True,
        note="PFLlib fine-tunes once after the last round (-fte 5, our ft_epochs); ours before every evaluation",
    ),
    "fedrod": Peer("FedROD"),
    "lg-fedavg": Peer("LG-FedAvg"),
    "apfl": Peer("APFL", ("-al", "0.5"), note="PFLlib -al 0.5 (our alpha_init)"),
    "fedala": Peer("FedALA", ("-et", "1", "-s", "80", "-p", "2"), note="defaults agree (-et 1, -s 80, -p 2 stated)"),
    "fedamp": Peer("FedAMP", ("-alk", "1", "-lam", "1", "-sg", "1"), note="defaults agree (stated)"),
    "fedamp-no-prox": Peer(
        "FedAMP",
        ("-alk", "1", "-lam", "1", "-sg", "1"),
        {"lamda": 1e-9},
        method="fedamp",
        pfllib_as="fedamp",
        note="ours with the proximal term off: PFLlib's FedAMP in effect (its term carries no gradient)",
    ),
    "fedfomo": Peer(
        "FedFomo",
        ("-M", "5"),
        {"epsilon": 0.0, "epsilon_decay": 0.0},
        note="ours set greedy (epsilon 0): PFLlib has no exploration",
    ),
    "pfedme": Peer(
        "pFedMe",
        ("-lam", "15", "-K", "5", "-lrp", "0.01", "-bt", "1"),
        {"personal_lr": 0.01},
        note="personal lr 0.01 in both (0.09, ours and PFLlib's default, diverges on this CNN at batch 10)",
    ),
    "per-fedavg": Peer("PerAvg", (), {"beta": 0.005}, note="ours beta 0.005: PFLlib's meta step is -lr"),
    "per-fedavg-2-epochs": Peer(
        "PerAvg",
        (),
        {"beta": 0.005},
        method="per-fedavg",
        pfllib_as="per-fedavg",
        train={"local_epochs": 2},
        note="ours with 2 local epochs: PFLlib's server trains each client twice a round",
    ),
    "fedphp": Peer("FedPHP", ("-mu", "0.9", "-lam", "0.05"), note="PFLlib -mu 0.9 (our mu_max), -lam 0.05"),
    "fedproto": Peer("FedProto", ("-lam", "1"), note="PFLlib -lam 1 (our proto_weight)"),
    "fedgh": Peer("FedGH", ("-slr", "0.005"), note="PFLlib -slr 0.005 (our server_lr = train.lr)"),
    "fedpac": Peer(
        "FedPAC", ("-lam", "1"), {"head_lr": 0.005}, note="ours head_lr 0.005: PFLlib trains the head at -lr"
    ),
}


# What a reading of PFLlib's code (system/flcore, checked out 2026-12-05) finds that can move its number away from the
# method's paper, named here, not copied into pfedkit; "all" applies to every method
PFLLIB_READ = {
    "all": "its training loaders drop each epoch's last partial batch (pfedkit keeps it); every client starts from one "
    "initial model (torch seeded with 0 in every run)",
    "fedbabu": "the rounds' evaluations are of the global body under the frozen head, not fine-tuned; one fine-tuning "
    "after the last round, from each client's own last body",
    "fedrod": "the balanced softmax's class counts come from a shuffled loader that drops a batch",
    "ditto": "it prints the global model's accuracy, then the personal models'; a round's last is read here",
    "apfl": "the personal model trains on its own loss, not the blend's, and is replaced by the blend after the "
    "round; alpha's update adds 0.02 alpha",
    "fedala": "the weights are learned on a contiguous slice of the client's data, unshuffled; every client adapts "
    "every round, sampled or not",
    "fedamp": "the proximal term is built from detached tensors and is not squared: it adds no gradient, so "
    "training is plain local SGD",
    "fedfomo": "no exploration (top M by affinity); scores against the previous round's starting model; the "
    "validation share is the last 20% of the data, and local training is unshuffled",
    "pfedme": "the 'personalized' evaluation measures the received global model; the inner steps add a fixed "
    "0.001 weight decay",
    "per-fedavg": "the server trains each client twice a round (two epochs of meta-steps for one)",
    "fedphp": "it evaluates after local training, the locally trained model, not the inherited private one; its "
    "MMD has fixed bandwidths",
    "fedproto": "prototypes are means of train-mode features over all local epochs, averaged unweighted; round 0 "
    "reports 0",
    "fedgh": "the server's head is client 0's head object, and -se is not read",
    "fedpac": "its head weights pair statistics and heads in two different client orders; heads are overwritten "
    "while later clients still read them; small weights cut without renormalizing; centroids averaged unweighted",
}


# Each system's own defaults for the method's hyper-parameters, side by side (read from PFLlib's main.py and clients,
# and from pfedkit's Params); the runs set them alike (METHODS' flags and ours)
DEFAULTS = {
    "fedprox": ("-mu 0 (FedAvg)", "mu 0.01"),
    "fedrep": ("-pls 1 head epoch", "head_epochs 10"),
    "fedbabu": ("-fte 10 fine-tuning epochs, once after the last round", "ft_epochs 5, before every evaluation"),
    "ditto": ("-mu 0 (lambda), -pls 1", "prox_weight 0.1, personal_epochs 1"),
    "apfl": ("-al 1.0 (alpha's start)", "alpha_init 0.5, adaptive"),
    "fedala": ("-et 1, -s 80, -p 2", "eta 1, sample_percent 80, ala_layers 2"),
    "fedamp": ("-alk 1, -lam 1, -sg 1", "alpha_k 1, lamda 1, sigma 1"),
    "fedfomo": ("-M 5, greedy", "num_models 5, epsilon 0.3 decaying 0.05"),
    "pfedme": (
        "-lam 1, -K 5, -lrp 0.01, -bt 0 (the global model never moves)",
        "reg 15, inner_steps 5, personal_lr 0.09, beta 1",
    ),
    "per-fedavg": ("meta step -lr (-bt not read)", "beta 0.001, alpha train.lr"),
    "fedphp": ("-mu 0, -lam 1 (cross-entropy off)", "mu_max 0.9, transfer_weight 0.05"),
    "fedproto": ("-lam 1", "proto_weight 1"),
    "fedgh": ("-slr 1.0", "server_lr train.lr"),
    "fedpac": ("-lam 1, the head at -lr", "align_weight 1, head_lr 0.1"),
}


@dataclass(frozen=True)
class Cell:
    setting: str
    method: str
    system: str  # "pfllib" or "pfedkit"
    seed: int
    repeat: int = 0

    @property
    def name(self) -> str:
        return f"{self.system}-seed{self.seed}" + (f"-repeat{self.repeat}" if self.repeat else "")

    def path(self, out: Path) -> Path:
        return out / self.setting / self.method / f"{self.name}.json"


def plan_cells(settings: list[str], methods: list[str], seeds: list[int]) -> list[Cell]:
    """Seed by seed, method by method, PFLlib beside pfedkit; the floor's repeats after seed 0's FedAvg."""
    cells = []
    for setting in settings:
        for seed in seeds:
            for method in methods:
                cells += [Cell(setting, method, "pfllib", seed), Cell(setting, method, "pfedkit", seed)]
                if method in FLOOR_METHODS and seed == 0:
                    cells += [Cell(setting, method, "pfedkit", 0, r) for r in FLOOR_REPEATS if r]
    return cells


def pfedkit_config(setting: Setting, data_root: str, method: str, seed: int, repeat: int, rounds: int) -> dict:
    return {
        "data": {"dataset": setting.dataset, "root": data_root, "fraction": setting.fraction},
        "partition": {"scheme": "dirichlet", "clients": setting.clients, "beta": setting.beta},
        "model": {"name": "fedavgcnn"},
        "method": {"name": METHODS[method].method or method, **METHODS[method].ours},
        "train": {
            "rounds": rounds,
            "local_epochs": 1,
            "batch_size": 10,
            "lr": 0.005,
            "join_ratio": 1.0,
            **METHODS[method].train,
        },
        "eval": {"protocol": "pfllib", "every": 1, "point": "start"},
        "run": {"seed": seed, "repeat": repeat, "workers": 1, "checkpoint_every": 5},
    }


def run_pfedkit(cell: Cell, setting: Setting, args: argparse.Namespace) -> dict[str, Any]:
    import pfedkit

    folder = Path(args.scratch) / cell.setting / cell.method / cell.name
    config = pfedkit_config(setting, args.data_root, cell.method, cell.seed, cell.repeat, args.rounds)
    start = time.perf_counter()
    resume = (folder / "config.toml").exists()
    pfedkit.run(config, out=folder, resume=resume, progress=False)
    rows = pfedkit.load_run(folder).column("acc")
    return {
        "accs": {str(r): 100 * v for r, v in rows},
        "seconds": time.perf_counter() - start,
        "settings": config["method"],
    }


def run_pfllib(cell: Cell, setting: Setting, args: argparse.Namespace) -> dict[str, Any]:
    from pfedkit.data.federated import build_federated

    same = METHODS[cell.method].pfllib_as
    if same:  # the same PFLlib run as another row's: its cell, read (run first if it has not)
        source = replace(cell, method=same)
        if not source.path(Path(args.out_dir)).exists():
            run_cells([source], args, Path(args.out_dir))
        return {**json.loads(source.path(Path(args.out_dir)).read_text()), "read_from": same}
    from pfedkit.registry import build_config

    peer = METHODS[cell.method]
    fed = build_federated(build_config(pfedkit_config(setting, args.data_root, "fedavg", cell.seed, 0, 1)))
    name = f"{setting.pfllib_prefix}_pfedkit_conformance_{partition_digest(fed)}"
    pfllib = Path(args.pfllib)
    ensure_exported(fed, pfllib, name)
    cmd = command(
        args.pfllib_python, name, "CNN", peer.algo, args.rounds, setting.clients, fed.num_classes, "cpu", peer.flags
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if importlib.util.find_spec("torchvision") is None:
        stand_in = torchvision_stand_in(Path(args.scratch) / "stand-in")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(stand_in), env.get("PYTHONPATH", "")]))
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=pfllib / "system", capture_output=True, text=True, env=env)
    output = done.stdout + done.stderr
    log = Path(args.scratch) / cell.setting / cell.method / f"{cell.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(" ".join(cmd) + "\n\n" + output)
    accs = round_accuracies(output)
    if done.returncode != 0 or len(accs) < args.rounds + 1:
        tail = "\n".join(output.strip().splitlines()[-5:])
        raise RuntimeError(f"PFLlib {peer.algo} exit {done.returncode}, {len(accs)} evaluations (log {log}):\n{tail}")
    result = {
        "accs": {str(r): a for r, a in sorted(accs.items())},
        "seconds": time.perf_counter() - start,
        "settings": {"algo": peer.algo, "flags": list(peer.flags)},
    }
    tuned = fine_tuned_accuracy(output)
    if tuned is not None:
        result["fine_tuned"] = tuned
    return result


def run_cells(cells: list[Cell], args: argparse.Namespace, out: Path) -> None:
    import torch

    torch.set_num_threads(1)  # one lane, like PFLlib's OMP_NUM_THREADS=1
    todo = [c for c in cells if not c.path(out).exists()]
    print(f"{len(cells) - len(todo)} of {len(cells)} cells done; {len(todo)} to run", flush=True)
    for i, cell in enumerate(todo, 1):
        if cell.path(out).exists():  # another lane (--seeds) ran it meanwhile
            continue
        setting = SETTINGS[cell.setting]
        print(f"[{i}/{len(todo)}] {cell.setting} {cell.method} {cell.name} ...", end=" ", flush=True)
        try:
            result = (run_pfllib if cell.system == "pfllib" else run_pfedkit)(cell, setting, args)
        except Exception as err:  # one failing cell is reported, the others still run
            print(f"failed: {err}", flush=True)
            continue
        result.update({"setting": cell.setting, "method": cell.method, "system": cell.system, "seed": cell.seed})
        result.update({"repeat": cell.repeat, "rounds": args.rounds})
        cell.path(out).parent.mkdir(parents=True, exist_ok=True)
        cell.path(out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        accs = list(result["accs"].values())
        print(f"{accs[-1]:.2f} after {len(accs) - 1} rounds, {result['seconds']:.0f} s", flush=True)


# ---- the table ----
def final_value(result: dict[str, Any], final_only: bool) -> float:
    accs = [result["accs"][k] for k in sorted(result["accs"], key=int)]
    if final_only:
        return result.get("fine_tuned", accs[-1])
    return statistics.fmean(accs[-LAST:])


def load_results(out: Path) -> dict[tuple[str, str], dict[str, dict]]:
    """(setting, method) -> cell name -> its result."""
    found: dict[tuple[str, str], dict[str, dict]] = {}
    for path in sorted(out.glob("*/*/*.json")):
        found.setdefault((path.parent.parent.name, path.parent.name), {})[path.stem] = json.loads(path.read_text())
    return found


def floor_of(results: dict[str, dict]) -> Optional[tuple[float, float]]:
    """(floor, level): the standard deviation of pfedkit's result over its repeats of seed 0 (with its degrees of
    freedom, as rule 3 reads them) and the accuracy it was measured at; None under two repeats."""
    from pfedkit.papers.claims import noise_floor

    values = [final_value(r, False) for r in results.values() if r["system"] == "pfedkit" and r["seed"] == 0]
    floor = noise_floor(values)
    return None if floor is None else (floor, statistics.fmean(values))


def nearest_floor(floors: list[tuple[float, float]], accuracy: float) -> tuple[Optional[float], str]:
    """Rule 3: the floor measured nearest a row's accuracy, if within FLOOR_REACH points of it."""
    from pfedkit.papers.claims import FLOOR_REACH

    if not floors:
        return None, "no repeats measured"
    floor, level = min(floors, key=lambda f: abs(f[1] - accuracy))
    if abs(level - accuracy) > FLOOR_REACH:
        return None, f"the nearest floor was measured at {level:.1f}%, far from {accuracy:.1f}%"
    return floor, ""


VERDICT_WORDS = {"holds": "agree", "does not hold": "differ", "cannot tell": "cannot tell"}


def method_row(
    setting: str, method: str, results: dict[str, dict], floors: list[tuple[float, float]]
) -> dict[str, Any]:
    from pfedkit.papers.claims import decide, gap_error, room_left

    peer = METHODS.get(method, Peer(method))
    by_seed: dict[int, dict[str, float]] = {}
    for name, r in results.items():
        if r.get("repeat", 0) == 0:
            by_seed.setdefault(r["seed"], {})[r["system"]] = final_value(r, peer.final_only)
    shared = sorted(s for s, v in by_seed.items() if {"pfllib", "pfedkit"} <= set(v))
    row = {"setting": setting, "method": method, "seeds": shared}
    if not shared:
        return {**row, "verdict": "not run", "why": "no seed finished in both systems"}
    theirs = [by_seed[s]["pfllib"] for s in shared]
    ours = [by_seed[s]["pfedkit"] for s in shared]
    gaps = [o - t for o, t in zip(ours, theirs)]
    floor, no_floor = nearest_floor(floors, statistics.fmean(ours + theirs))
    verdict, why = decide(room_left(BAND, gaps), floor, no_floor)
    error = gap_error(gaps, floor)
    seconds = {
        system: statistics.fmean(r["seconds"] for r in results.values() if r["system"] == system and not r["repeat"])
        for system in ("pfllib", "pfedkit")
    }
    return {
        **row,
        "pfllib": statistics.fmean(theirs),
        "pfedkit": statistics.fmean(ours),
        "gap": statistics.fmean(gaps),
        "error": error,
        "verdict": VERDICT_WORDS[verdict],
        "why": why,
        "seconds": seconds,
    }


def plot_method(out: Path, setting: str, method: str, results: dict[str, dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=80)
    for system, color in (("pfllib", "tab:orange"), ("pfedkit", "tab:blue")):
        curves = [r for r in results.values() if r["system"] == system and not r.get("repeat")]
        for i, r in enumerate(sorted(curves, key=lambda r: r["seed"])):
            rounds = sorted(r["accs"], key=int)
            label = f"{system} ({len(curves)} seeds)" if i == 0 else None
            ax.plot([int(k) for k in rounds], [r["accs"][k] for k in rounds], color=color, alpha=0.8, label=label)
    ax.set_title(f"{method}, {SETTINGS[setting].describe()}", fontsize=8)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / setting / f"{method}.png")
    plt.close(fig)


def table_text(out: Path) -> str:
    results = load_results(out)
    lines = [
        "# Conformance with PFLlib",
        "",
        "<!-- generated by `python3 benchmarks/conformance.py --table` from results/conformance/; do not edit -->",
        "",
        "Each method that PFLlib also implements, run by PFLlib's own code (unchanged) and by pfedkit on the same",
        "partition (ours, written into PFLlib's data files), the same model (FedAvgCNN), batch 10, lr 0.005, 1 local",
        "epoch, every client every round, PFLlib's protocol (merged splits, 75/25 per client, evaluation at each",
        f"round's start, sample-weighted accuracy). A system's number is the mean of its last {LAST} evaluations (%);",
        "the gap is pfedkit minus PFLlib, with its standard error over seeds, never below a noise floor's (pfedkit",
        "FedAvg's and FedPer's spreads over 3 repeats of seed 0; each row takes the one nearest its accuracy, within",
        f"15 points). **agree**: the gap is within {BAND:g} points beyond the project's rule 3 (a paired t-test, 95%:",
        "t at n - 1 degrees of freedom times the standard error); **differ**: beyond it; **cannot tell**: neither.",
        "PFLlib seeds torch with 0 in every run: its seeds differ by partition alone. How to rerun:",
        "`python3 benchmarks/conformance.py --setting SETTING` (it resumes; about the seconds shown per run).",
        "",
    ]
    for setting, spec in SETTINGS.items():
        methods = [m for s, m in results if s == setting]
        if not methods:
            continue
        measured = {m: floor_of(results.get((setting, m), {})) for m in FLOOR_METHODS}
        floors = [f for f in measured.values() if f is not None]
        said = "; ".join(
            f"{m} {f[0]:.2f} at {f[1]:.1f}%" if f is not None else f"{m} not measured" for m, f in measured.items()
        )
        lines += [f"## {spec.describe()}", "", f"Noise floors (pfedkit, 3 repeats of seed 0): {said}.", ""]
        lines += [
            "| method | seeds | PFLlib | pfedkit | gap ± se | verdict | s/run PFLlib, pfedkit | settings set alike |",
            "|---|---|---|---|---|---|---|---|",
        ]
        order = [m for m in METHODS if m in methods] + sorted(m for m in methods if m not in METHODS)
        counts: dict[str, int] = {}
        for method in order:
            row = method_row(setting, method, results[(setting, method)], floors)
            counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
            peer = METHODS.get(method, Peer(method))
            alike = peer.note or (f"PFLlib {' '.join(peer.flags)}" if peer.flags else "defaults agree")
            if "pfllib" not in row:
                lines.append(f"| {method} | - | - | - | - | {row['verdict']} | - | {alike} |")
                continue
            error = f"{row['error']:.2f}" if row["error"] is not None and math.isfinite(row["error"]) else "-"
            lines.append(
                f"| {method} | {len(row['seeds'])} | {row['pfllib']:.2f} | {row['pfedkit']:.2f} | "
                f"{row['gap']:+.2f} ± {error} | **{row['verdict']}** | {row['seconds']['pfllib']:.0f}, "
                f"{row['seconds']['pfedkit']:.0f} | {alike} |"
            )
        lines += ["", "Verdicts: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) + ".", ""]
        lines.append(f"Curves: `results/conformance/{setting}/<method>.png`.")
        lines.append("")
    lines += [
        "## Defaults side by side",
        "",
        "Each system's own defaults where the method has hyper-parameters (the runs above set them alike: the last",
        "column of each table); methods not listed have none beyond the shared training settings.",
        "",
        "| method | PFLlib's defaults | pfedkit's defaults |",
        "|---|---|---|",
        *[f"| {method} | {theirs} | {ours} |" for method, (theirs, ours) in DEFAULTS.items()],
        "",
        "## PFLlib's code, read",
        "",
        "What a reading of PFLlib's code finds that can move its number away from the method's paper (pfedkit follows",
        "the paper; docs/methods.md). A gap in the tables above is to be read with these.",
        "",
    ]
    lines += [f"- **{method}**: {text}." for method, text in PFLLIB_READ.items()]
    lines += ["", *authors_sections(out.parent / "authors")]
    return "\n".join(lines)


AUTHORS_NOTE = (
    "The papers' own released code, run unchanged from a checkout in the ignored `.peers/`, beside pfedkit's method "
    "step by step: one client's update and one aggregation on a tiny model, from the same weights, on the same "
    "batches, with the same hyper-parameters. FedAFK and PGFedSplit have no public code (searched: repository names, "
    "file names, the titles); FedPAC's, HEART-PFL's and PerAda's (the code HEART-PFL forks, a baseline of its "
    "paper) are checked here. Each section is written by its script (`benchmarks/authors_*.py`) into "
    "`results/authors/`."
)


def authors_sections(folder: Path) -> list[str]:
    """The authors'-code sections (results/authors/*.md), their headings one level down."""
    pages = sorted(folder.glob("*.md")) if folder.is_dir() else []
    if not pages:
        return []
    lines = ["## The authors' code", "", *textwrap.wrap(AUTHORS_NOTE, 116), ""]
    for page in pages:
        text = page.read_text().strip("\n")
        lines += [("###" + line.lstrip("#") if line.startswith("#") else line) for line in text.splitlines()]
        lines.append("")
    return lines


def write_table(out: Path, doc: Path, plots: bool = True) -> None:
    if plots:
        for (setting, method), results in load_results(out).items():
            plot_method(out, setting, method, results)
    doc.write_text(table_text(out))


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setting", default="mnist", choices=sorted(SETTINGS))
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated, in this order")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--data-root", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--pfllib", default=str(ROOT / ".peers" / "PFLlib"))
    parser.add_argument("--pfllib-python", default=str(ROOT / ".peers" / "venv" / "bin" / "python"))
    parser.add_argument("--out", default=str(HERE.parent / "results" / "conformance"))
    parser.add_argument("--scratch", default=str(ROOT / "runs" / "conformance"))
    parser.add_argument("--doc", default=str(ROOT / "docs" / "CONFORMANCE.md"))
    parser.add_argument("--table", action="store_true", help="only write the table from the results")
    parser.add_argument("--check", action="store_true", help="tiny data, 2 rounds, a scratch folder")
    args = parser.parse_args(argv)
    out, doc = Path(args.out), Path(args.doc)
    args.rounds = SETTINGS[args.setting].rounds
    if args.check:
        import tempfile

        scratch = Path(tempfile.mkdtemp(prefix="conformance-check-"))
        out, doc, args.scratch, args.rounds = scratch / "results", scratch / "CONFORMANCE.md", str(scratch), 2
        SETTINGS[args.setting] = Setting(**{**SETTINGS[args.setting].__dict__, "fraction": 0.01, "clients": 4})
        print(f"--check: tiny data, 2 rounds, under {scratch}")
    if not args.table:
        unknown = [m for m in args.methods.split(",") if m not in METHODS]
        if unknown:
            parser.error(f"no PFLlib counterpart listed for {', '.join(unknown)}; choose from {', '.join(METHODS)}")
        if not (Path(args.pfllib) / "system" / "main.py").exists():
            parser.error(f"no PFLlib checkout at {args.pfllib} (its system/main.py); give --pfllib DIR")
        seeds = [int(s) for s in args.seeds.split(",")]
        args.out_dir = str(out)  # where a row reading another row's PFLlib runs finds them
        run_cells(plan_cells([args.setting], args.methods.split(","), seeds), args, out)
    write_table(out, doc)
    print(f"table: {doc}")


if __name__ == "__main__":
    main()
