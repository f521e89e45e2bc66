"""PFLlib as a peer: our partition written in its data format, its command line, and the accuracies it prints.

PFLlib (TsingZ0/PFLlib) runs unchanged from a checkout in an ignored folder (default `.peers/PFLlib`, its system/
folder is enough); nothing of its code is in this repository. Used by gpu_speed.py and conformance.py.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from pfedkit.data.federated import FederatedDataset

# its server prints this once per evaluation (some servers say "Average", with no d); a round's last one is the
# model that counts (Ditto prints the global model's first, then the personal models')
ACCURACY = re.compile(r"Averaged? Test Accuracy: ([0-9.]+)")
ROUND_HEADER = re.compile(r"^-+Round number: (\d+)-+\s*$", re.M)
FINE_TUNED_HEADER = "Evaluate fine-tuned personalized models"  # FedBABU's one evaluation after fine-tuning


def partition_digest(fed: FederatedDataset) -> str:
    """Ten hex digits naming a partition (its per-client indices): another partition, another PFLlib data folder."""
    return hashlib.sha1(b"".join(np.asarray(i).tobytes() for i in fed.train_idx + fed.test_idx)).hexdigest()[:10]


def export_partition(fed: FederatedDataset, folder: Path) -> None:
    """The partition in PFLlib's format: <folder>/train/<i>.npz and test/<i>.npz, each {'data': {'x', 'y'}}, the
    inputs as pfedkit normalizes them (PFLlib's generators normalize the same way, (x - 0.5) / 0.5)."""
    for split, indices, x, y in (
        ("train", fed.train_idx, fed.train_x, fed.train_y),
        ("test", fed.test_idx, fed.test_x, fed.test_y),
    ):
        (folder / split).mkdir(parents=True, exist_ok=True)
        for cid, idx in enumerate(indices):
            take = torch.from_numpy(np.asarray(idx))
            data = {"x": x[take].cpu().numpy().astype(np.float32), "y": y[take].cpu().numpy().astype(np.int64)}
            with open(folder / split / f"{cid}.npz", "wb") as f:
                np.savez(f, data=data)


def read_exported(folder: Path, split: str, cid: int) -> tuple[np.ndarray, np.ndarray]:
    """One client's split read back as PFLlib's read_data does (np.load with pickles, the 'data' dict)."""
    with open(folder / split / f"{cid}.npz", "rb") as f:
        data = np.load(f, allow_pickle=True)["data"].tolist()
    return data["x"], data["y"]


def ensure_exported(fed: FederatedDataset, pfllib: Path, name: str) -> Path:
    """The partition under PFLlib's dataset/ folder, written once (its last client's test file marks it whole)."""
    folder = pfllib / "dataset" / name
    if not (folder / "test" / f"{len(fed.test_idx) - 1}.npz").exists():
        export_partition(fed, folder)
    return folder


def command(
    python: str,
    name: str,
    model: str,
    algo: str,
    rounds: int,
    clients: int,
    classes: int,
    device: str,
    extra: Sequence[str] = (),
    batch_size: int = 10,
    lr: float = 0.005,
    local_epochs: int = 1,
    join_ratio: float = 1.0,
    eval_gap: int = 1,
) -> list[str]:
    """PFLlib's main.py command line (run from its system/ folder). `name` must hold "MNIST" or "Cifar10": PFLlib
    picks FedAvgCNN's shape from the data set's name."""
    return [
        python,
        "-u",
        "main.py",
        "-data",
        name,
        "-m",
        model,
        "-algo",
        algo,
        "-gr",
        str(rounds),
        "-eg",
        str(eval_gap),
        "-nc",
        str(clients),
        "-ncl",
        str(classes),
        "-lbs",
        str(batch_size),
        "-lr",
        f"{lr:g}",
        "-ls",
        str(local_epochs),
        "-jr",
        f"{join_ratio:g}",
        "-dev",
        "cuda" if device.startswith("cuda") else "cpu",
        "-did",
        "0",
        *extra,
    ]


def round_accuracies(output: str) -> dict[int, float]:
    """Round -> test accuracy in % from PFLlib's printout: each "Round number: i" block's last printed accuracy
    (evaluated at the start of round i, after i rounds of training). A FedBABU run's evaluation after its final
    fine-tuning is not a round's: see fine_tuned_accuracy."""
    output = output.split(FINE_TUNED_HEADER)[0]
    heads = list(ROUND_HEADER.finditer(output))
    found = {}
    for head, after in zip(heads, [*heads[1:], None]):
        block = output[head.end() : after.start() if after else len(output)]
        accs = ACCURACY.findall(block)
        if accs:
            found[int(head.group(1))] = 100 * float(accs[-1])
    return found


def fine_tuned_accuracy(output: str) -> float | None:
    """FedBABU's accuracy (%) after the fine-tuning PFLlib runs once, after the last round; None if not printed."""
    if FINE_TUNED_HEADER not in output:
        return None
    accs = ACCURACY.findall(output.split(FINE_TUNED_HEADER, 1)[1])
    return 100 * float(accs[0]) if accs else None


def torchvision_stand_in(folder: Path) -> Path:
    """An empty torchvision package for PFLlib's main.py import on a machine without torchvision (its CNN runs never
    use it); put the returned folder on PYTHONPATH."""
    (folder / "torchvision").mkdir(parents=True, exist_ok=True)
    (folder / "torchvision" / "__init__.py").write_text("# an empty torchvision for PFLlib's import (CNN runs only)\n")
    return folder
