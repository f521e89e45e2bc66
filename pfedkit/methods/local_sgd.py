"""Local SGD, in one home: the mini-batch training every method's client runs on its own tensors (`fit`, `fit_head`),
the batches it draws (`batches`, `minibatches`: seeded by seed, round, client and purpose, each draw noted so that a
repeated purpose is warned of) and the phase rules they share with the cohort (`pfedkit/methods/plan.py`:
`Phase.settings`, `augments`, `drops_single`). `Method` inherits it; the cohort runs the same phases batched.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Callable, Iterable, Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn

from pfedkit.methods.augment import crop_flip
from pfedkit.methods.plan import Phase, augments, drops_single, part_of
from pfedkit.models.base import PARTS, SplitModel
from pfedkit.records import ClientData, MethodContext
from pfedkit.seeding import torch_generator

LossFn = Callable[[SplitModel, torch.Tensor, torch.Tensor], torch.Tensor]


class RepeatedDrawWarning(UserWarning):
    """A method drew one client's batch order twice under one purpose in a round (they repeat)."""


class LocalSGD:
    """What a method's client trains with; `Method` inherits it (its `ctx` the run's settings)."""

    ctx: MethodContext
    name: str
    _drawn: tuple[int, int, set[str]]

    def fit(
        self,
        model: SplitModel,
        data: ClientData,
        round: int,
        *,
        parts: Iterable[str] = PARTS,
        epochs: Optional[int] = None,
        lr: Optional[float] = None,
        momentum: Optional[float] = None,
        weight_decay: Optional[float] = None,
        loss_fn: Optional[LossFn] = None,
        purpose: str = "train",
        trains: Optional[Callable[[str], bool]] = None,
    ) -> float:
        """Mini-batch SGD on the client's in-memory training tensors; returns the mean training loss.

        What trains is `parts`, or the parameters whose names `trains` accepts; the rest is frozen: left out of
        the optimizer and without gradients.
        """
        cfg = self.ctx.train
        parts = tuple(parts)
        trains = trains or (lambda name: part_of(name) in parts)
        trainable = [p for n, p in model.named_parameters() if trains(n)]
        opt = torch.optim.SGD(
            trainable,
            lr=cfg.lr if lr is None else lr,
            momentum=cfg.momentum if momentum is None else momentum,
            weight_decay=cfg.weight_decay if weight_decay is None else weight_decay,
        )
        loss_fn = loss_fn or cross_entropy_loss
        total, steps = torch.zeros(()), 0  # summed where the model is and read once: no host sync per step on a GPU
        model.train()
        with frozen(p for n, p in model.named_parameters() if not trains(n)):
            for xb, yb in self.minibatches(data, round, purpose, epochs, drop_single=drops_single(model)):
                with self.ctx.train.autocast(xb.device):
                    loss = loss_fn(model, xb, yb)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total = total + loss.detach()
                steps += 1
        return float(total) / max(steps, 1)

    def fit_head(
        self,
        model: SplitModel,
        data: ClientData,
        round: int,
        *,
        epochs: Optional[int] = None,
        purpose: str = "head",
        **sgd: Any,
    ) -> float:
        """Train the head alone. With a deterministic body, on features computed once: the same updates
        (up to float rounding) without pushing every batch of every epoch through the frozen body."""
        head = Phase(parts=("head",), head_features=True)  # decided as for a plan's phase, in Phase.settings
        if head.settings(self.ctx.train, model, data.train_x.dim() == 4).head_alone != "features":
            return self.fit(model, data, round, parts=("head",), epochs=epochs, purpose=purpose, **sgd)
        features = compute_features(model, data.train_x)
        head_only = SplitModel(nn.Identity(), model.head, model.feature_dim)
        return self.fit(
            head_only, replace(data, train_x=features), round, parts=("head",), epochs=epochs, purpose=purpose, **sgd
        )

    def batches(
        self, data: ClientData, round: int, purpose: str, epochs: Optional[int] = None, drop_single: bool = False
    ) -> Iterator[torch.Tensor]:
        """Index batches over `epochs` shuffled passes of the client's training set, seeded by (seed, round, client,
        purpose); with train.drop_last each pass's last partial batch is left out (the order drawn all the same)."""
        self.note_draw(round, data.cid, purpose)
        gen = torch_generator(self.ctx.seed, round, data.cid, purpose)
        n, bs = data.num_train, self.ctx.train.batch_size
        for _ in range(self.ctx.train.local_epochs if epochs is None else epochs):
            order = torch.randperm(n, generator=gen)
            for start in range(0, n, bs):
                idx = order[start : start + bs]
                if self.ctx.train.drop_last and idx.numel() < bs:
                    continue
                if drop_single and n > 1 and idx.numel() == 1:  # BatchNorm cannot train on a batch of one
                    continue
                yield idx

    def minibatches(
        self, data: ClientData, round: int, purpose: str, epochs: Optional[int] = None, drop_single: bool = False
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The training batches of `batches` as (inputs, labels), images augmented as train.augment says (its draws
        seeded apart from the order's, so the order is the same with and without augmentation)."""
        x, y = data.train_x, data.train_y
        augment = augments(self.ctx.train, images=x.dim() == 4)
        gen = torch_generator(self.ctx.seed, round, data.cid, purpose + "/augment") if augment else None
        for idx in self.batches(data, round, purpose, epochs, drop_single):
            yield (crop_flip(x[idx], gen) if augment else x[idx]), y[idx]

    def forget_draws(self) -> None:
        """A new local update begins: the draws before it were another update's."""
        self._drawn = (-1, -1, set())

    def note_draw(self, round: int, cid: int, purpose: str) -> None:
        """Warn when one client's round shuffles twice under one purpose: the second draw repeats the first's order."""
        last_round, last_cid, purposes = self._drawn
        if (round, cid) != (last_round, last_cid):
            self._drawn = (round, cid, purposes := set())
        if purpose in purposes:
            warnings.warn(
                f"method {self.name}: purpose {purpose!r} shuffled twice for client {cid} in round {round}, so both "
                "draws get the same batch order; give each draw its own purpose (e.g. f'{purpose}/2') unless the "
                "repeat is meant",
                RepeatedDrawWarning,
                stacklevel=3,
            )
        purposes.add(purpose)


@contextmanager
def frozen(params: Iterable[nn.Parameter]) -> Iterator[None]:
    """Parameters without gradients for the block (so no optimizer moves them), restored afterwards."""
    params = [p for p in params if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


@torch.no_grad()
def compute_features(model: SplitModel, x: torch.Tensor, batch: int = 1000) -> torch.Tensor:
    return torch.cat([model.body(x[i : i + batch]) for i in range(0, len(x), batch)]) if len(x) else model.body(x)


def cross_entropy_loss(model: SplitModel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), y)
