"""Per-FedAvg (Fallah, Mokhtari & Ozdaglar, NeurIPS 2020): FedAvg on the MAML objective.

Per local step, on fresh batches: an inner step w' = w - alpha * grad f(w; B1), then the meta step
w <- w - beta * grad f(w'; B2) (first-order, FO), or with the Hessian-vector correction
w <- w - beta * (I - alpha * H(w; B3)) grad f(w'; B2), H v by finite differences (Hessian-free, HF).
A client is evaluated after one adaptation step of the global model on a batch of its training data.
"""

from __future__ import annotations

from typing import Literal, Optional

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from pfedkit.methods.base import HyperParams, register
from pfedkit.methods.sharing import PartSharing
from pfedkit.models.base import SplitModel
from pfedkit.records import ClientData, State


class PerFedAvgParams(HyperParams):
    variant: Literal["fo", "hf"] = Field(
        "fo", description="first-order or Hessian-free meta gradient; the paper's two versions"
    )
    alpha: Optional[float] = Field(
        None, gt=0, description="inner (adaptation) step size; default train.lr (our choice)"
    )
    beta: float = Field(0.001, gt=0, description="meta step size; our choice (the paper's experiments use small steps)")
    delta: float = Field(1e-3, gt=0, description="finite-difference step of the HF Hessian-vector product; our choice")


def gradients(model: SplitModel, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    return list(torch.autograd.grad(F.cross_entropy(model(x), y), list(model.parameters())))


@register
class PerFedAvg(PartSharing):
    name = "per-fedavg"
    training = "code"
    evaluation = "model"
    summary = "FedAvg on the MAML objective (FO or HF); evaluated after one local adaptation step"
    Params = PerFedAvgParams
    shared = ("body", "head")

    @property
    def alpha(self) -> float:
        return self.params.alpha or self.ctx.train.lr

    def local_update(self, payload: State, client: State, data: ClientData, round: int) -> tuple[State, State]:
        model = self.load(payload)
        params = list(model.parameters())
        per_step = 2 if self.params.variant == "fo" else 3
        batches = list(self.batches(data, round, "train"))
        model.train()
        for start in range(0, len(batches) - per_step + 1, per_step):
            b1, b2 = batches[start], batches[start + 1]
            before = [p.detach().clone() for p in params]
            inner = gradients(model, data.train_x[b1], data.train_y[b1])
            with torch.no_grad():
                for p, g in zip(params, inner):
                    p -= self.alpha * g
            meta = gradients(model, data.train_x[b2], data.train_y[b2])
            if self.params.variant == "hf":
                b3 = batches[start + 2]
                meta = [
                    g - self.alpha * h
                    for g, h in zip(meta, self.hessian_vector(model, before, meta, data.train_x[b3], data.train_y[b3]))
                ]
            with torch.no_grad():
                for p, w, g in zip(params, before, meta):
                    p.copy_(w - self.params.beta * g)
        return {**self.state_of(model), "num_samples": data.num_train}, {}

    def hessian_vector(
        self, model: SplitModel, at: list[torch.Tensor], vector: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor
    ) -> list[torch.Tensor]:
        """H(at) v ~ (grad f(at + d v) - grad f(at - d v)) / (2 d)."""
        d, params, sides = self.params.delta, list(model.parameters()), []
        for sign in (1.0, -1.0):
            with torch.no_grad():
                for p, w, v in zip(params, at, vector):
                    p.copy_(w + sign * d * v)
            sides.append(gradients(model, x, y))
        return [(plus - minus) / (2 * d) for plus, minus in zip(*sides)]

    def personalized_model(self, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        model = self.load(payload)
        batch = next(self.batches(data, round, "adapt", epochs=1))
        model.train()
        step = gradients(model, data.train_x[batch], data.train_y[batch])
        with torch.no_grad():
            for p, g in zip(list(model.parameters()), step):
                p -= self.alpha * g
        return model
