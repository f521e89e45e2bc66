"""`pfedkit pretrain`: train a backbone centrally on one data set and save it as a torchvision-format state dict
that `resnet18-adapter` and `small-resnet-adapter` load through `model.options.pretrained` (our stand-in for
ImageNet weights when they are not at hand)."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from pfedkit.data.sources import load_dataset
from pfedkit.engine.evaluation import evaluate_model
from pfedkit.errors import ConfigError
from pfedkit.io import atomic_write_bytes
from pfedkit.models import build_model
from pfedkit.models.adapters import backbone_state
from pfedkit.seeding import seeded_torch, torch_generator

BACKBONES = ("resnet18-adapter", "small-resnet-adapter")


def pretrain_backbone(
    dataset: str,
    model: str,
    out: str | Path,
    *,
    options: Optional[dict[str, Any]] = None,
    epochs: int = 2,
    batch_size: int = 64,
    lr: float = 0.05,
    momentum: float = 0.9,
    seed: int = 0,
    root: Optional[str] = None,
    device: str = "cpu",
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Train `model` (without adapters) on `dataset`'s training split with SGD, save its backbone to `out`;
    returns the test accuracy (on the official test split, when the data set has one) and the time taken."""
    if model not in BACKBONES:
        raise ConfigError(
            f"pretrain builds adapter backbones; --model must be one of {', '.join(BACKBONES)}, got {model!r}"
        )
    options = {k: v for k, v in (options or {}).items() if k != "adapters"}
    if options.get("pretrained"):
        raise ConfigError("pretrain starts from random weights; leave out the `pretrained` option")
    if epochs < 1 or batch_size < 1 or lr <= 0:
        raise ConfigError(f"pretrain needs epochs >= 1, batch size >= 1 and lr > 0 (got {epochs}, {batch_size}, {lr})")
    if device != "cpu" and not device.startswith("cuda"):
        raise ConfigError(f"pretrain runs on device cpu or cuda (cuda:N for one GPU of several), got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"pretrain on device {device!r}: no CUDA GPU is visible here; use --device cpu")
    source = load_dataset(dataset, root)
    with seeded_torch(seed, -1, -1, "pretrain-init"):
        net = build_model(model, source.input_shape, source.num_classes, **options, adapters=False).to(device)
        opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
        start = time.perf_counter()
        for epoch in range(epochs):
            net.train()
            order = torch.randperm(len(source.train_y), generator=torch_generator(seed, epoch, -1, "pretrain"))
            total = 0.0
            for i in range(0, len(order), batch_size):
                idx = order[i : i + batch_size]
                if len(idx) < 2:  # BatchNorm needs two samples
                    continue
                loss = F.cross_entropy(net(source.train_x[idx].to(device)), source.train_y[idx].to(device))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += loss.item() * len(idx)
            schedule.step()
            log(f"epoch {epoch + 1}/{epochs}: train loss {total / len(order):.4f}")
    result: dict[str, Any] = {"dataset": dataset, "model": model, "seconds": time.perf_counter() - start}
    if source.test_x is not None:
        correct, _, n = evaluate_model(net, source.test_x.to(device), source.test_y.to(device))
        result["test_acc"] = correct / n
    buffer = io.BytesIO()
    torch.save({k: v.cpu() for k, v in backbone_state(net).items()}, buffer)
    atomic_write_bytes(Path(out), buffer.getvalue())
    return result
