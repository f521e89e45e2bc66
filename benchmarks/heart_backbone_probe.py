"""How far the heart-table1 stand-in lets adapters go: the MNIST-pretrained small backbone trained centrally on the
suite's quarter of Fashion-MNIST, (a) adapters, block BatchNorms and head only (what PerAda and HEART-PFL train),
(b) every weight (what the FedAvg-FT, FedPer and FedBABU rows train). No federation: each number is what one
training set-up reaches on all the clients' data pooled, the ceiling the federated rows approach.

Usage: python benchmarks/heart_backbone_probe.py [--epochs 5]
           [--backbone results/heart_table1/backbone_mnist.pt]
Writes results/heart_diagnosis/backbone_probe.txt.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F

from pfedkit.data.federated import keep_fraction
from pfedkit.data.sources import load_dataset
from pfedkit.engine.evaluation import evaluate_model
from pfedkit.methods.local_sgd import frozen
from pfedkit.models import build_model
from pfedkit.models.adapters import is_trainable
from pfedkit.papers.suites import SUITES
from pfedkit.seeding import derive_seed, torch_generator

HEART = SUITES["heart-table1"]

HERE = Path(__file__).resolve().parent


def train_central(source, adapters: bool, backbone: Path, epochs: int, seed: int = 0) -> list[float]:
    """Test accuracy after each epoch of SGD with the suite's batch size and learning rate."""
    train = HEART.base["train"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, -1, -1, "probe-init"))
        net = build_model(
            "small-resnet-adapter",
            source.input_shape,
            source.num_classes,
            **HEART.pretrain["options"],
            adapters=adapters,
            pretrained=str(backbone),
        )
        trains = is_trainable if adapters else (lambda name: True)
        opt = torch.optim.SGD([p for n, p in net.named_parameters() if trains(n)], lr=train["lr"])
        accuracies = []
        with frozen(p for n, p in net.named_parameters() if not trains(n)):
            for epoch in range(epochs):
                net.train()
                order = torch.randperm(len(source.train_y), generator=torch_generator(seed, epoch, -1, "probe"))
                for i in range(0, len(order) - 1, train["batch_size"]):
                    idx = order[i : i + train["batch_size"]]
                    loss = F.cross_entropy(net(source.train_x[idx]), source.train_y[idx])
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                correct, _, n = evaluate_model(net, source.test_x, source.test_y)
                accuracies.append(correct / n)
    trained = sum(p.numel() for n, p in net.named_parameters() if trains(n))
    print(
        f"{'adapters' if adapters else 'full'}: {trained:,} trained parameters; test accuracy by epoch "
        + ", ".join(f"{100 * a:.2f}" for a in accuracies),
        flush=True,
    )
    return accuracies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--backbone", type=Path, default=HERE.parent / "results" / "heart_table1" / "backbone_mnist.pt")
    parser.add_argument("--data-root", default=str(HERE.parents[1] / "shared" / "data"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = HEART.base["data"]
    source = keep_fraction(load_dataset(data["dataset"], args.data_root), data["fraction"], 0)
    lines = [
        f"{data['dataset']}, a seeded {data['fraction']:.0%} of every class ({len(source.train_y)} training, "
        f"{len(source.test_y)} test images), backbone {args.backbone.name}, batch "
        f"{HEART.base['train']['batch_size']}, lr {HEART.base['train']['lr']}, centralized"
    ]
    for adapters in (True, False):
        accs = train_central(source, adapters, args.backbone, args.epochs)
        lines.append(
            f"{'adapters, BatchNorms and head (PerAda, HEART-PFL)' if adapters else 'every weight (FT baselines)'}: "
            + ", ".join(f"{100 * a:.2f}" for a in accs)
            + " % after epochs 1.."
            + str(args.epochs)
        )
    out = HERE.parent / "results" / "heart_diagnosis" / "backbone_probe.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
