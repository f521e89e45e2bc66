"""A local update stated as data, so the engine can run it one client at a time or a whole cohort at once.

A method that can be batched returns a `LocalPlan` from `local_plan`: the models it starts from (weights by name) and
the `Phase`s of mini-batch SGD that train them, in order. The engine runs the plan with `Method.fit` for one client
(the reference path) or with every sampled client's weights stacked and trained together on a GPU
(`pfedkit.engine.cohort`); `plan_result` then turns the trained weights into the reply and the new client state.
A phase's loss is written once, against `net` (the model, or its functional stand-in in a cohort): `net(x)`,
`net.body(x)`, `net.head(features)`, the model's parameters by name in `params`, and the per-client tensors the plan
gives it (`given`: stacked over the cohort, so they may differ from client to client).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from pfedkit.models.base import PARTS, SplitModel, deterministic_body, uses_batchnorm
from pfedkit.records import State


def part_of(key: str) -> str:
    """The part ("body" or "head") a state entry belongs to, by its name's first component."""
    return key.split(".", 1)[0]


def augments(train: Any, images: bool) -> bool:
    """The augmentation rule: train.augment "crop-flip" augments every training batch of an image data set."""
    return train.augment == "crop-flip" and images


def drops_single(model: nn.Module) -> bool:
    """The BatchNorm rule: a model with BatchNorm in what trains leaves out a batch of one (it cannot train on it)."""
    return uses_batchnorm(model)


class Net(Protocol):
    def __call__(self, x: torch.Tensor) -> torch.Tensor: ...
    def body(self, x: torch.Tensor) -> torch.Tensor: ...
    def head(self, features: torch.Tensor) -> torch.Tensor: ...


# loss(net, params, x, y, given) -> the batch's scalar loss
PhaseLoss = Callable[
    [Net, Mapping[str, torch.Tensor], torch.Tensor, torch.Tensor, Mapping[str, torch.Tensor]], torch.Tensor
]


def cross_entropy(
    net: Net, params: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, given: Mapping[str, torch.Tensor]
) -> torch.Tensor:
    return F.cross_entropy(net(x), y)


def given_weight(value: float, like: torch.Tensor) -> torch.Tensor:
    """A hyper-parameter handed to a phase's loss in `given` (0-d, `like`'s dtype and device) rather than closed over:
    clients of runs that differ in it then share one cohort phase (a method's `packable`)."""
    return torch.tensor(value, dtype=like.dtype, device=like.device)


ANCHOR = "anchor."  # proximal's anchors in `given`, by parameter name


def proximal_given(weight: float, anchors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What `proximal` reads: half the weight (halved in float64, as a constant would be) and the anchors."""
    first = next(iter(anchors.values()))
    return {"half_weight": given_weight(weight / 2, first), **{ANCHOR + name: a for name, a in anchors.items()}}


def proximal(
    net: Net, params: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, given: Mapping[str, torch.Tensor]
) -> torch.Tensor:
    """Cross-entropy plus weight/2 * ||w - anchor||^2 over the anchored parameters (FedProx, Ditto); `given` as
    `proximal_given` makes it, so runs differing in the weight train as one cohort."""
    return F.cross_entropy(net(x), y) + given["half_weight"] * sum(
        (params[key[len(ANCHOR) :]] - anchor).pow(2).sum() for key, anchor in given.items() if key.startswith(ANCHOR)
    )


def parameters_and_buffers(model: torch.nn.Module, weights: Mapping[str, Any]) -> tuple[State, State]:
    """`weights` (a state dict: a payload, a plan's starting weights, `plan_result`'s `trained[...]`) split into the
    model's parameters, keyed as a phase's loss sees them in `params` (`model.named_parameters()`: "body.0.weight",
    "head.bias"), and its buffers (BatchNorm statistics and counts); entries the model does not have are left out."""
    names = {name for name, _ in model.named_parameters()}
    buffers = {name for name, _ in model.named_buffers()}
    return (
        {k: v for k, v in weights.items() if k in names},
        {k: v for k, v in weights.items() if k in buffers},
    )


@dataclass(frozen=True)
class Phase:
    """Some epochs of mini-batch SGD on one of the plan's models; what is not in `parts` stays frozen."""

    model: str = "main"  # which of the plan's models trains (also its working-model slot)
    parts: tuple[str, ...] = PARTS
    epochs: Optional[int] = None  # train.local_epochs when None
    purpose: str = "train"  # seeds the batch order (and augmentation): a phase's own purpose, never reused
    lr: Optional[float] = None  # train.lr, train.momentum, train.weight_decay when None
    momentum: Optional[float] = None
    weight_decay: Optional[float] = None
    loss: PhaseLoss = cross_entropy
    given: Mapping[str, torch.Tensor] = field(default_factory=dict)
    head_features: bool = False  # a head-only phase may train on features computed once (`Method.fit_head`)
    # the head alone trains on these (features, labels) in place of the client's training set (an embedding set)
    head_inputs: Optional[tuple[torch.Tensor, torch.Tensor]] = None

    def __post_init__(self) -> None:
        head_only = self.head_features or self.head_inputs is not None
        if head_only and self.parts != ("head",):
            raise ValueError("head_features and head_inputs are for a phase that trains the head alone")
        if self.head_features and self.loss is not cross_entropy:
            raise ValueError("head_features is for a phase that trains the head on cross-entropy")

    def settings(self, train: Any, model: SplitModel, images: bool) -> "PhaseSettings":
        """This phase's settings with the run's defaults (`train`: train.*) filled in, for `model` (the model the
        phase trains) on image data or not: decided here once, for one client at a time and for a cohort alike."""
        augment = augments(train, images)
        if self.head_inputs is not None:
            alone = "inputs"
        elif self.head_features and deterministic_body(model) and not augment:
            alone = "features"  # a deterministic body on plain inputs: its features computed once, as fit_head does
        else:
            alone = ""
        trained = model.head if alone else model
        return PhaseSettings(
            lr=train.lr if self.lr is None else self.lr,
            momentum=train.momentum if self.momentum is None else self.momentum,
            weight_decay=train.weight_decay if self.weight_decay is None else self.weight_decay,
            epochs=train.local_epochs if self.epochs is None else self.epochs,
            augment=augment and not alone,
            head_alone=alone,
            drop_single=drops_single(trained),
        )

    def shape(self) -> tuple[Any, ...]:
        """What must match for clients to share a cohort phase (everything but the per-client tensors)."""
        return (
            self.model,
            self.parts,
            self.epochs,
            self.purpose,
            self.lr,
            self.momentum,
            self.weight_decay,
            self.loss,
            self.head_features,
            self.head_inputs is None,
            tuple((k, tuple(v.shape)) for k, v in self.given.items()),
        )


def code_of(fn: Callable) -> Any:
    """A step's code without the run it is bound to: runs of one signature (`Cohort.signature`: the same method and
    settings) run one run's bound step over all their clients, so their plans share a stack."""
    return (getattr(fn, "__func__", fn), type(getattr(fn, "__self__", None)))


@dataclass(frozen=True)
class PhaseSettings:
    """A phase as it runs: its SGD settings and epochs, whether its image batches are augmented (crop-flip), whether
    the head trains alone on features computed once ("features") or on given inputs ("inputs"), and whether a batch of
    one is left out (BatchNorm in what trains)."""

    lr: float
    momentum: float
    weight_decay: float
    epochs: int
    augment: bool
    head_alone: str
    drop_single: bool


@dataclass(frozen=True)
class Joint:
    """Several models stepped together on every batch by a step the method writes over stacked tensors (FedAFK's
    global, personal and mixing-weight steps on each batch). `step(view, x, y)`: `view[model][key]` holds the
    clients' tensors stacked along a leading dimension (changes made in place stay), x [G, B, ...] and y [G, B] their
    batches. One client at a time, the engine runs it as a cohort of one: the same step on both paths."""

    step: Callable[[dict, torch.Tensor, torch.Tensor], None]
    epochs: int = 1
    purpose: str = "train"
    drop_single: bool = False  # leave out a batch of one (BatchNorm cannot train on it), as fit does

    def shape(self) -> tuple[Any, ...]:
        return ("joint", code_of(self.step), self.epochs, self.purpose, self.drop_single)


@dataclass(frozen=True)
class Apply:
    """A change of the stacked models between phases, `fn(stacks)` in place (FedAFK's mixing after an epoch)."""

    fn: Callable[[dict], None]

    def shape(self) -> tuple[Any, ...]:
        return ("apply", code_of(self.fn))


@dataclass
class LocalPlan:
    models: dict[str, State]  # each model's starting weights (or other per-client tensors: a mixing weight)
    phases: list[Phase | Joint | Apply]
    notes: State = field(default_factory=dict)  # what the plan's maker computed that `plan_result` needs
    results: tuple[str, ...] = ()  # the models handed to plan_result; () = those the phases train

    def trained_models(self) -> tuple[str, ...]:
        if self.results:
            return self.results
        return tuple(dict.fromkeys(p.model for p in self.phases if isinstance(p, Phase)))
