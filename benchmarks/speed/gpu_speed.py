"""Seconds per round on one GPU, side by side: PFLlib (its own code, unchanged), pfedkit one client at a time, and
pfedkit's cohort path (run.cohort: the round's clients trained as one batched computation); same partition, same
settings, one process after another on the same GPU.

Settings (PFLlib's protocol: merged splits, 75/25 per client, evaluation at the round start; batch 10, lr 0.005,
1 local epoch, plain SGD, every client every round), in the order they run (the budget cuts the end first):
  cifar10-20     CIFAR-10 (the copy under --data-root), all data, 20 clients, Dir(0.1), FedAvgCNN: FedAvg on the
                 cohort path (steps captured as CUDA graphs), the same with eager steps, one client at a time, PFLlib,
                 and 4 worker processes sharing the GPU
  cifar10-100    the same with 100 clients, FedAvg
  3 and 8 seeds  cifar10-20 FedAvg (and PGFedSplit, last), seeds 0-2 and 0-7 trained as one cohort (run.together),
                 against one seed's cohort
  cifar10-r18    20% of CIFAR-10, 20 clients, Dir(0.1), ResNet-18 with the CIFAR stem (BatchNorm), FedAvg (pfedkit
                 only: PFLlib's ResNet-18 has the ImageNet stem)
  methods        cifar10-20: FedPer, FedRep, Ditto, FedAFK, PGFedSplit, FedPAC, cohort vs one client at a time (and
                 PFLlib where it has the method)
Columns: training and evaluation seconds per round (medians over the timed rounds, the first round left out as
warm-up: baselines run 2 rounds, one timed), accuracy after the row's rounds, and (FedAvg) training samples per
second as a share of the same model's one-big-batch training throughput on that GPU (the ceiling). A torch.profiler
table of one cohort round of FedAvg (cifar10-20) says where the rest of the time goes.

PFLlib runs from a checkout (its system/ folder is enough) at --pfllib; this script writes the same partition into
its dataset folder in its format (one .npz per client and split) and parses the per-round times it prints.
PFLlib's evaluation also computes every client's training loss and AUC: its evaluation seconds are not like ours.

Usage:
  python3 benchmarks/speed/gpu_speed.py --data-root DIR --pfllib DIR [--device cuda] [--budget 450]
  python3 benchmarks/speed/gpu_speed.py --check     every code path on the CPU in a minute or two (tiny data, 2 rounds)
On a lent GPU machine: bash benchmarks/speed/gpu_speed_device.sh (see there).
Writes table.md, results.json, profile.txt and logs/ under --out.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parent))  # benchmarks/: report.py, pfllib_peer.py

from pfllib_peer import command, ensure_exported, partition_digest, round_accuracies, torchvision_stand_in  # noqa: E402

from pfedkit.data.federated import FederatedDataset, build_federated  # noqa: E402
from pfedkit.engine.simulation import Simulation  # noqa: E402
from pfedkit.models import build_model  # noqa: E402
from pfedkit.registry import build_config  # noqa: E402


@dataclass
class Setting:
    name: str
    dataset: str
    clients: int
    model: str
    fraction: float = 1.0
    model_options: dict = field(default_factory=dict)
    pfllib_model: Optional[str] = "CNN"  # PFLlib's -m; None: no like-with-like model there

    def config(
        self,
        data_root: str,
        method: str,
        rounds: int,
        device: str,
        cohort: str,
        params: Optional[dict] = None,
        **run: Any,
    ) -> Any:
        return build_config(
            {
                "data": {"dataset": self.dataset, "root": data_root, "fraction": self.fraction},
                "partition": {"scheme": "dirichlet", "clients": self.clients, "beta": 0.1},
                "model": {"name": self.model, "options": self.model_options},
                "method": {"name": method, **(params or {})},
                "train": {"rounds": rounds, "local_epochs": 1, "batch_size": 10, "lr": 0.005},
                "eval": {"protocol": "pfllib", "every": 1},
                "run": {"seed": 0, "checkpoint_every": 10_000, "device": device, "cohort": cohort, **run},
            }
        )


SETTINGS = {
    "cifar10-20": Setting("cifar10-20", "cifar10", 20, "fedavgcnn"),
    "cifar10-100": Setting("cifar10-100", "cifar10", 100, "fedavgcnn"),
    # CIFAR-10, not CIFAR-100: the CIFAR-100 copy (161 MB) cannot travel to a lent GPU machine
    "cifar10-r18": Setting(
        "cifar10-r18", "cifar10", 20, "resnet18", fraction=0.2, model_options={"stem": "cifar"}, pfllib_model=None
    ),
}
# method -> (PFLlib's -algo and its extra flags set to pfedkit's defaults, or None; pfedkit's hyper-parameters)
METHODS = {
    "fedavg": (("FedAvg", []), {}),
    "fedper": (("FedPer", []), {}),
    "fedrep": (("FedRep", ["-pls", "10"]), {"head_epochs": 10}),
    "ditto": (("Ditto", ["-mu", "0.1", "-pls", "1"]), {"prox_weight": 0.1, "personal_epochs": 1}),
    "fedafk": (None, {}),
    "pgfedsplit": (None, {}),
    "fedpac": (("FedPAC", []), {}),
}
# (setting, method, rounds of the cohort row, paths), most important first: what the budget cuts is the end of this
# list. Baselines (per-client, PFLlib) time one round after a warm-up round (2 rounds), except FedAvg's per-client row
# on cifar10-20, which runs the cohort's 5 rounds so that their accuracies compare.
PLAN = [
    (
        "cifar10-20",
        "fedavg",
        5,
        ("cohort", "cohort-grouped", "cohort-eager", "cohort-bf16", "per-client", "pfllib", "4-processes"),
    ),
    ("cifar10-100", "fedavg", 2, ("cohort", "cohort-chunks-50", "cohort-chunks-20", "per-client", "pfllib")),
    ("cifar10-20", "fedavg", 2, ("3-seeds-together", "8-seeds-together", "3-rates-together", "cohort")),
    ("cifar10-r18", "fedavg", 2, ("cohort", "cohort-grouped", "per-client")),
    *[("cifar10-20", m, 2, ("cohort", "per-client", "pfllib")) for m in METHODS if m != "fedavg"],
    ("cifar10-20", "pgfedsplit", 2, ("3-seeds-together", "8-seeds-together")),  # beside its cohort row above
    ("cifar10-20", "ditto", 2, ("4-weights-together",)),
    ("cifar10-20", "fedafk", 2, ("3-seeds-together",)),
]
TOGETHER = {  # runs packed into one cohort: (seed, train.lr or the setting's, method hyper-parameters changed)
    "3-seeds-together": [(seed, None, {}) for seed in range(3)],
    "8-seeds-together": [(seed, None, {}) for seed in range(8)],
    "3-rates-together": [(0, lr, {}) for lr in (0.0025, 0.005, 0.01)],  # a sweep of train.lr as one computation
    # a packable hyper-parameter's sweep as one computation (pfedkit tune --batch 4's trials)
    "4-weights-together": [(0, None, {"prox_weight": w}) for w in (0.05, 0.1, 0.5, 1.0)],
}
COHORT_PATHS = {  # the cohort's variants: their run settings
    "cohort": {},
    "cohort-grouped": {"conv_form": "grouped"},
    "cohort-eager": {"cohort_step": "eager"},
    "cohort-bf16": {"precision": "bf16"},
    "cohort-chunks-50": {"cohort_size": 50},
    "cohort-chunks-20": {"cohort_size": 20},
}
PATHS = (*COHORT_PATHS, *TOGETHER, "per-client", "pfllib", "4-processes")
# cohort: the round's clients as one computation, steps captured as CUDA graphs (run.cohort_step auto), each
# convolution shape in its faster form (run.conv_form auto: the note lists them); cohort-grouped: the same with every
# convolution vmap's grouped one (the form before run.conv_form, the baseline of the forms' speed-up); cohort-chunks-N:
# the round's clients in steps of N (run.cohort_size; "auto" tries 1, 2 and 4 chunks over its first 6 rounds, more
# than a 2-round row runs, so these rows show the choice it makes); cohort-eager:
# the same with eager steps (what capture saves); cohort-bf16: the cohort with run.precision "bf16" (bfloat16 autocast
# forward passes; its accuracy after the row's rounds beside float32's); 3-seeds-together: seeds 0, 1, 2 as one cohort
# (run.together), seconds per round of the three together, against one seed's cohort row (issue 92's target: at most
# 1.4x); 8-seeds-together: seeds 0-7 likewise (target: at most 3x); 3-rates-together: seed 0 at train.lr 0.0025,
# 0.005 and 0.01 as one cohort (a sweep of rates packed); 4-weights-together: Ditto at prox_weight 0.05, 0.1, 0.5 and 1
# as one cohort (a packable hyper-parameter's sweep: tune --batch's trials), against Ditto's cohort row; 4-processes:
# one client at a time in each of 4 worker processes sharing the GPU (run.gpus_per_worker = 0.25), the older way to
# fill a GPU


class OutOfBudget(Exception):
    pass


class Clock:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    @property
    def left(self) -> float:
        return self.end - time.monotonic()


def pfedkit_run(
    setting: Setting,
    fed: FederatedDataset,
    args: argparse.Namespace,
    method: str,
    rounds: int,
    cohort: str,
    clock: Clock,
    **run: Any,
) -> dict[str, Any]:
    params = METHODS[method][1]
    cfg = setting.config(args.data_root, method, rounds, args.device, cohort, params, **run)

    def within_budget(row: dict) -> None:
        if clock.left < 0:
            raise OutOfBudget(f"budget spent after round {row['round']}")

    with tempfile.TemporaryDirectory() as out:
        sim = Simulation(cfg, out, progress=False, fed=fed, observers=[within_budget])
        trains_in_cohort = sim.cohort is not None and sim.cohort.trains()
        try:
            sim.run()
        except OutOfBudget as err:
            return {"cut": str(err), **timings(sim.rows, rounds)}
    steps = sim.training_paths()
    note = f"steps: {steps['step_mode']}" if "step_mode" in steps else ""
    if steps.get("conv_forms"):  # each convolution shape's form, as run.conv_form "auto" chose it
        note += "; convolutions: " + "; ".join(f"{shape}: {form}" for shape, form in steps["conv_forms"].items())
    if steps.get("capture_failed"):
        note += f" (capture failed: {steps['capture_failed'][:80]})"
    return {**timings(sim.rows, rounds), "batched": trains_in_cohort, "note": note}


def pfedkit_together(
    setting: Setting,
    args: argparse.Namespace,
    method: str,
    rounds: int,
    clock: Clock,
    runs: list[tuple[int, Any, dict]],
) -> dict[str, Any]:
    """Runs trained as one cohort (run.together), each a (seed, train.lr or None for the setting's, hyper-parameters
    changed): seconds per round of the group (the slowest run's, as all wait for the shared computation), the runs'
    mean accuracy."""
    from pfedkit.experiments.pipeline import run_configs

    with tempfile.TemporaryDirectory() as out:
        configs = {}
        for index, (seed, lr, changed) in enumerate(runs):
            params = {**METHODS[method][1], **changed}
            cfg = setting.config(args.data_root, method, rounds, args.device, "on", params)
            cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update={"seed": seed})})
            if lr is not None:
                cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"lr": lr})})
            configs[Path(out) / f"run{index}"] = cfg
        if clock.left < 30:
            return {"cut": "budget spent"}
        run_configs(configs, resume=False, progress=False, log=lambda line: None)
        per_run = [list(csv.DictReader(open(d / "metrics.csv"))) for d in configs]
    trained = [max(float(rows[r]["train_s"]) for rows in per_run) for r in range(rounds)]
    accs = [float(rows[rounds]["acc"]) for rows in per_run]
    return {
        "train_s": steady(trained),
        "acc": statistics.mean(accs),
        "rounds_done": rounds,
        "note": f"{len(runs)} runs",
    }


def timings(rows: list[dict], rounds: int) -> dict[str, Any]:
    trained = [r["train_s"] for r in rows if r["round"] < rounds]
    evaluated = [r["eval_s"] for r in rows if r.get("acc") is not None]
    final = [r["acc"] for r in rows if r["round"] == rounds and r.get("acc") is not None]
    return {
        "train_s": steady(trained),
        "eval_s": steady(evaluated),
        "acc": final[0] if final else None,
        "rounds_done": len(trained),
    }


def steady(values: list[float]) -> Optional[float]:
    """Median of the rounds after the first (the warm-up), or the only one."""
    if not values:
        return None
    return statistics.median(values[1:] if len(values) > 1 else values)


# ---- PFLlib ----
TIME_COST = re.compile(r"^-{25,}(?: time cost -+)? ([0-9][0-9.eE+-]*)\s*$", re.M)  # some servers print no label


def pfllib_run(
    pfllib: Path,
    setting: Setting,
    fed: FederatedDataset,
    method: str,
    rounds: int,
    device: str,
    log: Path,
    clock: Clock,
    stand_in: Optional[Path] = None,
) -> dict[str, Any]:
    algo, extra = METHODS[method][0]
    # "Cifar10" in the name: PFLlib picks FedAvgCNN's CIFAR shape from it; the digest: another partition, another folder
    name = f"Cifar10_pfedkit_{setting.name}_{partition_digest(fed)}"
    ensure_exported(fed, pfllib, name)
    cmd = command(
        sys.executable,
        name,
        setting.pfllib_model,
        algo,
        rounds,
        setting.clients,
        fed.num_classes,
        device,
        extra,
        eval_gap=rounds,
    )
    timeout = max(clock.left, 1)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if stand_in:  # --check on a machine without torchvision: PFLlib's main.py imports it, CNN runs never use it
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(stand_in), env.get("PYTHONPATH", "")]))
    try:
        done = subprocess.run(cmd, cwd=pfllib / "system", capture_output=True, text=True, timeout=timeout, env=env)
        output, cut = done.stdout + done.stderr, None if done.returncode == 0 else f"exit {done.returncode}"
    except subprocess.TimeoutExpired as err:
        output = (err.stdout or b"").decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        cut = "budget spent"
    log.write_text(" ".join(cmd) + "\n\n" + output)
    costs = [float(c) for c in TIME_COST.findall(output)]
    accs = list(round_accuracies(output).values())
    # rounds 1..R-1 train only (evaluation every R rounds: at 0 and R); round R evaluates, then trains
    train = steady(costs[1:rounds]) if len(costs) > 1 else None
    evaluation = costs[rounds] - train if len(costs) > rounds and train else None
    result = {
        "train_s": train,
        "eval_s": evaluation if evaluation is not None and evaluation > 0 else None,
        "acc": accs[-1] / 100 if len(accs) > 1 else None,
        "rounds_done": max(len(costs) - 1, 0),
    }
    if cut:
        result["cut"] = cut
    return result


# ---- the ceiling and the profile ----
def ceiling(fed: FederatedDataset, setting: Setting, device: torch.device, batch: int, steps: int = 30) -> float:
    """Training samples per second of one model at one big batch (plain SGD), on the run's data."""
    torch.manual_seed(0)
    model = build_model(setting.model, fed.input_shape, fed.num_classes, **setting.model_options).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.005)
    x, y = fed.train_x.to(device), fed.train_y.to(device)
    g = torch.Generator(device=device).manual_seed(0)
    for warm in (True, False):
        sync(device)
        start = time.perf_counter()
        for _ in range(5 if warm else steps):
            idx = torch.randint(0, len(y), (batch,), generator=g, device=device)
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sync(device)
    return batch * steps / (time.perf_counter() - start)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def profile_cohort_round(setting: Setting, fed: FederatedDataset, args: argparse.Namespace, path: Path) -> str:
    """torch.profiler over one cohort round of FedAvg (training and evaluation), after a warm-up round."""
    from torch.profiler import ProfilerActivity, profile

    cfg = setting.config(args.data_root, "fedavg", 2, args.device, "on")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
    with tempfile.TemporaryDirectory() as out:
        sim = Simulation(cfg, out, progress=False, fed=fed)
        with sim.session():
            sim.play_round(0, True, True)  # warm-up
            sync(torch.device(args.device))
            with profile(activities=activities) as prof:
                start = time.perf_counter()
                sim.play_round(1, True, True)
                sync(torch.device(args.device))
                wall = time.perf_counter() - start
        sim.lock.release()
    events = prof.key_averages()
    on_gpu = args.device.startswith("cuda")
    busy = sum(getattr(e, "self_device_time_total", 0) for e in events) / 1e6 if on_gpu else None
    sort = "self_device_time_total" if on_gpu else "self_cpu_time_total"
    summary = f"one cohort round of FedAvg ({setting.name}): {wall:.3f} s wall" + (
        f", GPU kernel time summed {busy:.3f} s ({busy / wall:.0%} of the wall time; above 100%, kernels overlapped)"
        if busy is not None
        else ""
    )
    path.write_text(summary + "\n\n" + events.table(sort_by=sort, row_limit=30) + "\n")
    return summary


# ---- the forms of a cohort step's convolutions ----
def conv_forms(device: torch.device, path: Path, clients: int = 20, batch: int = 10, steps: int = 30) -> str:
    """Milliseconds per forward+backward of FedAvgCNN over `clients` stacked clients' batches of `batch` CIFAR images,
    in the forms a cohort step could take: vmap (each convolution a grouped one) as it is, with cudnn.benchmark, with
    TF32 matmuls, with channels-last inputs, and the convolutions written as unfold + batched matmul."""
    from torch.func import functional_call, grad, vmap

    from pfedkit.models.cnn import fedavgcnn

    torch.manual_seed(0)
    model = fedavgcnn((3, 32, 32), 10).to(device)
    weights = {k: torch.stack([v.detach()] * clients) for k, v in model.state_dict().items()}
    x = torch.randn(clients, batch, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (clients, batch), device=device)

    def loss(w, xb, yb):
        return F.cross_entropy(functional_call(model, w, (xb,)), yb)

    per_client_grads = vmap(grad(loss))

    def conv_bmm(xs, weight, bias):  # xs [K, B, C, H, W], weight [K, O, C, k, k]
        k, (n_out, c) = weight.shape[-1], weight.shape[1:3]
        cols = F.unfold(xs.flatten(0, 1), k)  # [K*B, C*k*k, L]
        side = xs.shape[-1] - k + 1
        cols = cols.view(clients, batch, c * k * k, -1).transpose(1, 2).reshape(clients, c * k * k, -1)
        out = torch.bmm(weight.reshape(clients, n_out, -1), cols).view(clients, n_out, batch, -1).transpose(1, 2)
        return (out + bias[:, None, :, None]).reshape(clients, batch, n_out, side, side)

    def bmm_loss(w, xs, ys):
        h = F.relu(conv_bmm(xs, w["body.conv1.weight"], w["body.conv1.bias"]))
        h = F.max_pool2d(h.flatten(0, 1), 2).view(clients, batch, *h.shape[2:3], 14, 14)
        h = F.relu(conv_bmm(h, w["body.conv2.weight"], w["body.conv2.bias"]))
        h = F.max_pool2d(h.flatten(0, 1), 2).view(clients, batch, -1)
        h = F.relu(torch.baddbmm(w["body.fc1.bias"][:, None], h, w["body.fc1.weight"].transpose(1, 2)))
        logits = torch.baddbmm(w["head.bias"][:, None], h, w["head.weight"].transpose(1, 2))
        return F.cross_entropy(logits.flatten(0, 1), ys.flatten(), reduction="sum") / batch

    def bmm_grads(w, xs, ys):
        leaves = {k: v.detach().requires_grad_(True) for k, v in w.items()}
        return torch.autograd.grad(bmm_loss(leaves, xs, ys), list(leaves.values()))

    def timed(fn, *inputs) -> float:
        for _ in range(3):
            fn(*inputs)
        sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            fn(*inputs)
        sync(device)
        return (time.perf_counter() - start) / steps * 1e3

    rows = []
    saved = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        # both at float32 precision: torch's default lets cuDNN convolutions use TF32 (the first H200 run compared so)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        reference = per_client_grads(weights, x, y)
        mismatch = max(
            (a - reference[k]).abs().max().item() / (reference[k].abs().max().item() + 1e-12)
            for k, a in zip(weights, bmm_grads(weights, x, y))
        )
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[1:]
        rows.append(
            (
                "vmap, grouped convolutions (as the cohort runs: torch's defaults)",
                timed(per_client_grads, weights, x, y),
            )
        )
        torch.backends.cudnn.benchmark = True
        rows.append(("+ cudnn.benchmark", timed(per_client_grads, weights, x, y)))
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        rows.append(("+ TF32 matmuls and convolutions", timed(per_client_grads, weights, x, y)))
        channels_last = x.flatten(0, 1).contiguous(memory_format=torch.channels_last).view_as(x)
        rows.append(("+ channels-last inputs", timed(per_client_grads, weights, channels_last, y)))
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        rows.append(("unfold + batched matmul convolutions", timed(bmm_grads, weights, x, y)))
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    text = "\n".join(
        [f"FedAvgCNN, {clients} clients x batch {batch}, forward + backward, ms per step ({device}):", ""]
        + [f"- {name}: {ms:.3f}" for name, ms in rows]
        + [
            "",
            f"unfold + batched matmul gradients against vmap's (TF32 off): largest relative difference {mismatch:.1e}",
        ]
    )
    path.write_text(text + "\n")
    return text


# ---- the table ----
def fmt(value: Optional[float], digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def write_table(results: list[dict], ceilings: dict[str, float], header: str, out: Path, profile: str) -> str:
    lines = [
        header,
        "",
        "| setting | method | path | rounds | train s/round | eval s/round | acc after rounds | "
        "train samples/s | share of ceiling | train speed-up vs PFLlib | vs per-client | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_key = {(r["setting"], r["method"], r["path"]): r for r in results}
    for r in results:
        key = (r["setting"], r["method"])
        base = {p: by_key.get(key + (p,), {}).get("train_s") for p in PATHS}
        base["cohort"] = base["cohort"] if r["path"] in TOGETHER else None
        speed = r.get("train_s")
        throughput = r.get("samples") / speed if speed and r.get("samples") and r["method"] == "fedavg" else None
        share = throughput / ceilings[r["setting"]] if throughput and r["setting"] in ceilings else None
        compared = {
            **{path: ("pfllib", "per-client") for path in COHORT_PATHS},
            "per-client": ("pfllib",),
            "4-processes": ("pfllib", "per-client"),
        }.get(r["path"], ())
        vs = [
            fmt(base[p] / speed, 1) + "x" if speed and base[p] and p in compared else "-"
            for p in ("pfllib", "per-client")
        ]
        if r["path"] in TOGETHER and speed and base["cohort"]:
            vs[1] = f"{speed / base['cohort']:.2f}x one seed's time"
        note = r.get("cut", "") or r.get("note", "")
        if r["path"] == "cohort" and speed and base["cohort-grouped"]:  # what the convolution forms gave
            note = f"{base['cohort-grouped'] / speed:.2f}x cohort-grouped; {note}"
        lines.append(
            f"| {r['setting']} | {r['method']} | {r['path']} | {r.get('rounds', '-')} | {fmt(speed, 3)} | "
            f"{fmt(r.get('eval_s'), 3)} | {fmt(r.get('acc'), 4)} | {fmt(throughput, 0)} | "
            f"{fmt(share and 100 * share, 1)}{'%' if share else ''} | {vs[0]} | {vs[1]} | {note} |"
        )
    lines += [
        "",
        "Ceilings (one model, one big batch, training samples/s): "
        + ", ".join(f"{k} {v:.0f}" for k, v in ceilings.items()),
        "",
        "Profile: " + profile,
        "",
    ]
    text = "\n".join(lines)
    (out / "table.md").write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=str(HERE.parents[2] / "shared" / "data"))
    parser.add_argument(
        "--pfllib",
        default=str(HERE.parents[1] / ".peers" / "PFLlib"),
        help="a PFLlib checkout (its system/ folder); the PFLlib column is left out when it is not there",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--budget", type=float, default=450, help="seconds for everything; later rows are cut first")
    parser.add_argument("--out", default=str(HERE.parents[1] / "results" / "gpu_speed"))
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated settings or methods to keep, run in the order given (e.g. fedafk,fedpac)",
    )
    parser.add_argument("--check", action="store_true", help="tiny and on the CPU: every code path, quickly")
    args = parser.parse_args()
    clock = Clock(args.budget)
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    plan = PLAN
    if args.check:  # a sliver of the data, few clients, 2 rounds
        for s in SETTINGS.values():
            s.fraction, s.clients = 0.02, min(s.clients, 5)
        plan = [(s, m, 2, paths) for s, m, _, paths in PLAN]
    if args.only:
        keep = args.only.split(",")
        plan = [p for p in plan if p[0] in keep or p[1] in keep]
        plan.sort(key=lambda p: min(keep.index(x) for x in p[:2] if x in keep))  # the order asked for
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({os.cpu_count()} cores)"
    pfllib = Path(args.pfllib)
    has_pfllib = (pfllib / "system" / "main.py").exists()
    header = (
        f"# GPU speed: {name}, torch {torch.__version__}{' (--check: tiny data, on the CPU)' if args.check else ''}\n\n"
        f"PFLlib protocol, Dir(0.1), batch 10, lr 0.005, 1 local epoch, seed 0. PFLlib: "
        f"{'checkout at ' + str(pfllib) if has_pfllib else 'not found at ' + str(pfllib) + ', left out'}."
    )
    stand_in = None
    if args.check and has_pfllib and importlib.util.find_spec("torchvision") is None:
        stand_in = torchvision_stand_in(out / "logs" / "stand-in")
    results: list[dict] = []
    ceilings: dict[str, float] = {}
    feds: dict[str, FederatedDataset] = {}
    profile = "not run"
    for setting_name, method, cohort_rounds, paths in plan:
        setting = SETTINGS[setting_name]
        if setting_name not in feds:
            try:
                feds[setting_name] = build_federated(setting.config(args.data_root, "fedavg", 1, "cpu", "off"))
            except Exception as err:  # e.g. the data set not under --data-root
                results.append({"setting": setting_name, "method": method, "path": "-", "note": f"no data: {err}"})
                continue
            fed = feds[setting_name]
            ceilings[setting_name] = ceiling(fed, setting, device, batch=200 if args.check else 2000)
        if setting_name not in feds:
            continue
        fed = feds[setting_name]
        samples = int(fed.train_sizes().sum())
        for path in paths:
            rounds = cohort_rounds if path in (*COHORT_PATHS, *TOGETHER) else 2
            if (setting_name, method, path) == ("cifar10-20", "fedavg", "per-client") and cohort_rounds == 5:
                rounds = 5  # the accuracy after 5 rounds, beside the cohort's
            row = {"setting": setting_name, "method": method, "path": path, "rounds": rounds, "samples": samples}
            not_applicable = (path == "4-processes" and device.type != "cuda") or (
                path == "pfllib" and (METHODS[method][0] is None or setting.pfllib_model is None or not has_pfllib)
            )
            if not_applicable:  # no row at all, rather than one "cut" for want of time
                continue
            if clock.left < 5:
                results.append({**row, "note": "cut: budget spent"})
                continue
            if path == "4-processes":
                row.update(pfedkit_run(setting, fed, args, method, rounds, "off", clock, gpus_per_worker=0.25))
                row.pop("batched", None)
            elif path in TOGETHER:
                row.update(pfedkit_together(setting, args, method, rounds, clock, runs=TOGETHER[path]))
            elif path == "pfllib":
                row.update(
                    pfllib_run(
                        pfllib,
                        setting,
                        fed,
                        method,
                        rounds,
                        args.device,
                        out / "logs" / f"pfllib_{setting_name}_{method}.log",
                        clock,
                        stand_in,
                    )
                )
            else:
                cohort = "off" if path == "per-client" else "on"
                row.update(pfedkit_run(setting, fed, args, method, rounds, cohort, clock, **COHORT_PATHS.get(path, {})))
                if not row.pop("batched", True) and path != "per-client":
                    row["note"] = "not batched: one client at a time (the per-client path)"
            results.append(row)
            print(json.dumps(row), flush=True)
            write_table(results, ceilings, header, out, profile)
        if (setting_name, method) == ("cifar10-20", "fedavg") and profile == "not run" and clock.left > 30:
            profile = profile_cohort_round(setting, fed, args, out / "profile.txt")  # after the first, leading rows
            print(conv_forms(device, out / "conv_forms.txt", steps=3 if args.check else 30), flush=True)
    (out / "results.json").write_text(
        json.dumps(
            {"device": name, "torch": torch.__version__, "check": args.check, "ceilings": ceilings, "rows": results},
            indent=1,
        )
    )
    print(write_table(results, ceilings, header, out, profile))


if __name__ == "__main__":
    main()
