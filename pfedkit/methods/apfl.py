"""APFL (Deng, Kamani & Mahdavi, 2020): a personal model v_i mixed with the global model w by a learned alpha_i.

Per batch, from the same point (w, v, alpha): w takes an SGD step on its own loss; v steps along alpha times the
gradient of the loss at the mixture v_bar = alpha * v + (1 - alpha) * w; alpha steps along <v - w, that gradient>,
projected onto [0, 1]. The client evaluates v_bar. Only w travels.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from pfedkit.methods.base import HyperParams, register, searched
from pfedkit.methods.sharing import PartSharing
from pfedkit.models.base import SplitModel
from pfedkit.records import ClientData, State


def clip_unit(value: float, fallback: float) -> float:
    """Project onto [0, 1] (APFL's convention); a non-finite step keeps the old value."""
    return fallback if math.isnan(value) else min(max(value, 0.0), 1.0)


class APFLParams(HyperParams):
    alpha_init: float = Field(
        0.5,
        ge=0,
        le=1,
        description="initial mixing weight; our choice within the paper's grid {0.25, 0.5, 0.75} (Sec. 6)",
        json_schema_extra=searched(0.25, 0.75, source="the APFL paper's grid {0.25, 0.5, 0.75}"),
    )
    adaptive_alpha: bool = Field(
        True, description="learn alpha by gradient descent (the paper's adaptive APFL); false keeps alpha_init"
    )


def mixture(v: State, w: State, alpha: float) -> State:
    """alpha * v + (1 - alpha) * w on float entries; integer buffers come from v."""
    return {k: alpha * v[k] + (1 - alpha) * w[k] if torch.is_floating_point(v[k]) else v[k] for k in v}


@register
class APFL(PartSharing):
    name = "apfl"
    training = "code"
    evaluation = "model"
    summary = "personal model mixed with the global one by a learned alpha; the mixture is evaluated"
    Params = APFLParams
    shared = ("body", "head")

    def init_client(self, cid: int, data: ClientData) -> State:
        return {**self.initial_state(), "alpha": self.params.alpha_init}

    def local_update(self, payload: State, client: State, data: ClientData, round: int) -> tuple[State, State]:
        cfg = self.ctx.train
        alpha = float(client["alpha"])
        glob = self.load(payload, slot="global")
        personal = self.load(client)
        mixed = self.working_model("mixed")
        sgd = dict(lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
        opt_global, opt_personal = (
            torch.optim.SGD(glob.parameters(), **sgd),
            torch.optim.SGD(personal.parameters(), **sgd),
        )
        for model in (glob, personal, mixed):
            model.train()
        for xb, yb in self.minibatches(data, round, "train"):
            # The gradient at the mixture, from this batch's starting point (before w or v move).
            mixed.load_state_dict(mixture(personal.state_dict(), glob.state_dict(), alpha))
            mixed.zero_grad(set_to_none=True)
            F.cross_entropy(mixed(xb), yb).backward()
            at_mixture = [p.grad for p in mixed.parameters()]
            if self.params.adaptive_alpha:
                with torch.no_grad():
                    slope = sum(
                        float(((pv - pw) * g).sum())
                        for pv, pw, g in zip(personal.parameters(), glob.parameters(), at_mixture)
                    )
            opt_global.zero_grad(set_to_none=True)
            F.cross_entropy(glob(xb), yb).backward()
            opt_global.step()
            for p, g in zip(personal.parameters(), at_mixture):
                p.grad = alpha * g  # d loss(v_bar) / d v
            opt_personal.step()
            if self.params.adaptive_alpha:
                alpha = clip_unit(alpha - cfg.lr * slope, alpha)
        reply = {**self.state_of(glob), "num_samples": data.num_train}
        return reply, {**self.state_of(personal), "alpha": alpha}

    def personalized_model(self, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        model: SplitModel = self.working_model("mixed")
        model.load_state_dict(
            mixture({k: v for k, v in client.items() if k != "alpha"}, payload, float(client["alpha"]))
        )
        return model
