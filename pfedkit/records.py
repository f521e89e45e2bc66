"""The records every layer shares: messages and state, a client's and the server's data, training settings, and the
context a method is built with. Plain data, no behaviour: `data/` builds them, `methods/` consume them."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import nn

State = dict[str, Any]  # a payload, reply or state: a flat dict of tensors and plain numbers

AFTER = "_after"  # suffix of the after-local metrics (eval.point) in metrics.csv and summary.json
DIVERGED = "diverged.json"  # in a run folder whose run went non-finite, beside its last finite checkpoint


def accuracy_column(point: str) -> str:
    """The metrics.csv column holding a run's headline accuracy: after-local's for that point, else the start one's
    (eval.point "both" headlines the start point, the default)."""
    return "acc" + AFTER if point == "after-local" else "acc"


@dataclass(frozen=True)
class TrainSettings:
    local_epochs: int
    batch_size: int
    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    augment: str = "none"  # train.augment: "crop-flip" augments every training batch of an image data set
    drop_last: bool = False  # train.drop_last: each epoch's last partial batch left out (torch's DataLoader reading)
    precision: str = "float32"  # run.precision: "bf16" runs local training's forward passes under autocast

    def autocast(self, device: "torch.device | str") -> Any:
        """Where local training computes its loss: bfloat16 autocast with run.precision "bf16", else nothing."""
        if self.precision == "float32":
            return contextlib.nullcontext()  # as written, at no cost per batch
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


@dataclass
class ClientData:
    cid: int
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int

    @property
    def num_train(self) -> int:
        return int(self.train_y.shape[0])


@dataclass
class ServerData:
    """Data only the server holds: a validation split (held out from the clients' training data) and the proxy
    set for server-side distillation (that same split when in-domain, another data set when out-of-domain)."""

    val_x: torch.Tensor
    val_y: torch.Tensor
    proxy_x: torch.Tensor
    proxy_y: torch.Tensor
    proxy_name: str


@dataclass(frozen=True)
class MethodContext:
    model_factory: Callable[[], nn.Module]  # a fresh, seeded SplitModel
    train: TrainSettings
    num_classes: int
    seed: int
    server: Optional[ServerData] = None  # None unless the config has a [proxy] section
    setting: Optional["RunSetting"] = None  # the run a method is part of (None where a test builds a method alone)


@dataclass(frozen=True)
class RunSetting:
    """What a method may know of the run it is part of: how many clients there are (partition.clients), how many
    rounds it lasts (train.rounds) and the share of clients sampled each round (train.join_ratio)."""

    clients: int
    rounds: int
    join_ratio: float

    @property
    def sampled(self) -> int:
        """Clients trained per round, as the engine samples them (at least one)."""
        return max(int(round(self.clients * self.join_ratio)), 1)
