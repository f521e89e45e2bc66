"""The functional pieces a step over stacked clients is written with (a `Joint` step) and the engine's interpreter
runs phases with: a model called with given weights, every client's own gradients at once, and SGD's update on
stacked tensors. With one client (the per-client path runs a plan as a cohort of one) they call the model directly,
without vmap: the same numbers, at the speed of plain code.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import torch
from torch.func import functional_call, vmap
from torch.utils._pytree import tree_leaves, tree_map

from pfedkit.models.base import SplitModel


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


def per_client(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` mapped over the leading client dimension of every tensor argument (vmap); with one client, `fn` called
    on that client's slices and its outputs given the dimension back, since vmap over one client only adds cost."""
    mapped = vmap(fn)

    def call(*args: Any) -> Any:
        tensors = [t for t in tree_leaves(args) if isinstance(t, torch.Tensor)]
        if tensors and all(t.shape[0] == 1 for t in tensors):
            out = fn(*tree_map(lambda t: t[0] if isinstance(t, torch.Tensor) else t, args))
            return tree_map(lambda t: t.unsqueeze(0) if isinstance(t, torch.Tensor) else t, out)
        return mapped(*args)

    return call


def batched_grads(
    loss: Callable[..., torch.Tensor], trained: Mapping[str, torch.Tensor], *inputs: Any
) -> dict[str, Optional[torch.Tensor]]:
    """Every client's gradient of its own loss, `loss(trained_c, *inputs_c)`, over a leading client dimension: the
    clients' losses are independent, so the gradient of their sum is each client's own. None where unused."""
    leaves = {k: v.detach().requires_grad_(True) for k, v in trained.items()}
    losses = per_client(loss)(leaves, *inputs)
    grads = torch.autograd.grad(losses.sum(), list(leaves.values()), allow_unused=True)
    return dict(zip(leaves, grads))


def sgd_step(
    params: list[torch.Tensor],
    grads: list[Optional[torch.Tensor]],
    momenta: Optional[list[torch.Tensor]],
    lr: float | torch.Tensor,
    momentum: float,
    weight_decay: float,
) -> None:
    """torch.optim.SGD's update (no dampening, no Nesterov) in place; a tensor without a gradient is skipped, as
    SGD skips a parameter whose grad is None. A momentum buffer starting at zero equals SGD's first-step copy. `lr` a
    tensor [clients]: each client's own rate (runs packed together that differ in train.lr)."""
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
    if isinstance(lr, torch.Tensor):
        torch._foreach_sub_(p, [g * lr.view(-1, *[1] * (g.dim() - 1)) for g in d])
    else:
        torch._foreach_add_(p, d, alpha=-lr)
