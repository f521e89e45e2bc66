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
from functools import lru_cache
from typing import Any, Callable, Mapping, Optional, Protocol

import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from pfedkit.models.base import PARTS, SplitModel
from pfedkit.records import State


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


@lru_cache(maxsize=None)  # one loss per weight: clients with the same loss share a cohort phase
def proximal(weight: float) -> PhaseLoss:
    """Cross-entropy plus weight/2 * ||w - anchor||^2 over the parameters `given` holds (FedProx, Ditto)."""
    half = weight / 2

    def loss(
        net: Net,
        params: Mapping[str, torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        given: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        return F.cross_entropy(net(x), y) + half * sum(
            (params[name] - anchor).pow(2).sum() for name, anchor in given.items()
        )

    return loss


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


@dataclass(frozen=True)
class Joint:
    """Several models stepped together on every batch by a step the method writes over stacked tensors (FedAFK's
    global, personal and mixing-weight steps on each batch). `step(view, x, y)`: `view[model][key]` holds the
    clients' tensors stacked along a leading dimension (changes made in place stay), x [G, B, ...] and y [G, B] their
    batches. The cohort path alone runs it; one client at a time, the method's own local_update is the reference."""

    step: Callable[[dict, torch.Tensor, torch.Tensor], None]
    epochs: int = 1
    purpose: str = "train"
    drop_single: bool = False

    def shape(self) -> tuple[Any, ...]:
        return ("joint", self.step, self.epochs, self.purpose, self.drop_single)


@dataclass(frozen=True)
class Apply:
    """A change of the stacked models between phases, `fn(stacks)` in place (FedAFK's mixing after an epoch)."""

    fn: Callable[[dict], None]

    def shape(self) -> tuple[Any, ...]:
        return ("apply", self.fn)


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


class FunctionalNet:
    """A SplitModel's forward with given weights (per client, under vmap): what a phase's loss calls as `net`."""

    def __init__(self, model: SplitModel, weights: Mapping[str, torch.Tensor]):
        self.model, self.weights = model, weights

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.model, dict(self.weights), (x,))

    def body(self, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.model.body, self.part("body"), (x,))

    def head(self, features: torch.Tensor) -> torch.Tensor:
        return functional_call(self.model.head, self.part("head"), (features,))

    def part(self, name: str) -> dict[str, torch.Tensor]:
        cut = len(name) + 1
        return {k[cut:]: v for k, v in self.weights.items() if k.startswith(name + ".")}

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def batched_grads(
    loss: Callable[..., torch.Tensor], trained: Mapping[str, torch.Tensor], *inputs: Any
) -> dict[str, Optional[torch.Tensor]]:
    """Every client's gradient of its own loss, `loss(trained_c, *inputs_c)`, over a leading client dimension: the
    clients' losses are independent, so the gradient of their sum is each client's own. None where unused."""
    leaves = {k: v.detach().requires_grad_(True) for k, v in trained.items()}
    losses = vmap(loss)(leaves, *inputs)
    grads = torch.autograd.grad(losses.sum(), list(leaves.values()), allow_unused=True)
    return dict(zip(leaves, grads))


def sgd_step(
    params: list[torch.Tensor],
    grads: list[Optional[torch.Tensor]],
    momenta: Optional[list[torch.Tensor]],
    lr: float,
    momentum: float,
    weight_decay: float,
) -> None:
    """torch.optim.SGD's update (no dampening, no Nesterov) in place; a tensor without a gradient is skipped, as
    SGD skips a parameter whose grad is None. A momentum buffer starting at zero equals SGD's first-step copy."""
    keep = [i for i, g in enumerate(grads) if g is not None]
    if not keep:
        return
    p = [params[i] for i in keep]
    d = [grads[i] for i in keep]
    if weight_decay:
        d = torch._foreach_add(d, p, alpha=weight_decay)
    if momentum:
        m = [momenta[i] for i in keep]
        torch._foreach_mul_(m, momentum)
        torch._foreach_add_(m, d)
        d = m
    torch._foreach_add_(p, d, alpha=-lr)
