"""The guide's worked example of a phase with its own loss (docs/writing-a-method.md, "A phase with its own loss"):
FedAvg whose local loss adds weight / 2 * ||body - received body||^2 (the body alone, unlike FedProx), and which
logs how far each client's parameters moved in its round (`moved`, in metrics.csv as moved_mean/_min/_max).

    pfedkit run examples/digits.toml --set method.name=bodyprox --set method.module=examples/methods/bodyprox.py
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from pydantic import Field

from pfedkit.methods.base import HyperParams, register
from pfedkit.methods.fedavg import FedAvg
from pfedkit.methods.plan import Phase, parameters_and_buffers


@lru_cache(maxsize=None)  # one loss object per weight: clients with the same weight share a cohort phase
def body_pull(weight: float):
    def loss(net, params, x, y, given):
        # params: the trained model's parameters by name; given: the plan's per-client tensors (stacked in a cohort)
        pull = sum((params[name] - anchor).pow(2).sum() for name, anchor in given.items())
        return F.cross_entropy(net(x), y) + weight / 2 * pull

    return loss


class BodyProxParams(HyperParams):
    weight: float = Field(0.1, ge=0, description="pull of the body toward the received body; our example's choice")


@register
class BodyProx(FedAvg):
    name = "bodyprox"
    summary = "FedAvg with a proximal pull on the body alone (the guide's example of a phase with its own loss)"
    Params = BodyProxParams
    client_logged = ("moved",)

    def local_phases(self, payload, client, data, round):
        received, _ = parameters_and_buffers(self.model, payload)
        anchors = {name: tensor for name, tensor in received.items() if name.startswith("body.")}
        return [Phase(loss=body_pull(self.params.weight), given=anchors)]

    def plan_result(self, trained, plan, data, round):
        reply, state = super().plan_result(trained, plan, data, round)  # FedAvg's: the whole model goes back
        after, _ = parameters_and_buffers(self.model, trained["main"])
        before, _ = parameters_and_buffers(self.model, plan.models["main"])
        moved = torch.sqrt(sum((after[name] - before[name]).pow(2).sum() for name in after))
        return reply, {**state, "moved": moved}
