"""FedAvgM (Hsu, Qi & Brown, 2019): FedAvg with momentum on the server.

The worked example of docs/writing-a-method.md: a method in its own file, outside the pfedkit package, used with
`method.module = "fedavgm"` (this folder on the Python path) or `method.module = "examples/methods/fedavgm.py"`.

The server treats the change the clients' average makes to the global model as a pseudo-gradient, keeps a momentum
of it, and steps with a server learning rate:  v <- beta * v + (w - average),  w <- w - server_lr * v.
With beta = 0 and server_lr = 1 this is FedAvg.
"""

from __future__ import annotations

from typing import Mapping

import torch
from pydantic import Field

from pfedkit.methods import HyperParams, PartSharing, State, register, searched, select, weighted_mean

MOMENTUM = "server_momentum."  # the server-only buffer


class FedAvgMParams(HyperParams):
    server_momentum: float = Field(
        0.9,
        ge=0,
        lt=1,
        description="beta, the server's momentum; Hsu et al. 2019 (0.9)",
        json_schema_extra=searched(
            0.0, 0.99, source="Hsu et al. 2019 try 0 to 0.99"
        ),  # the range `pfedkit tune` searches
    )
    server_lr: float = Field(1.0, gt=0, description="the server's learning rate; Hsu et al. 2019 (1.0)")


@register
class FedAvgM(PartSharing):
    name = "fedavgm"
    summary = "FedAvg with server momentum on the averaged update"
    Params = FedAvgMParams
    server_only = (MOMENTUM,)  # declared here, the momentum is never broadcast

    def init_server(self) -> State:
        model = super().init_server()
        return {**model, **{MOMENTUM + k: torch.zeros_like(v) for k, v in model.items() if v.is_floating_point()}}

    def aggregate(self, server: State, replies: Mapping[int, State], round: int) -> State:
        if not replies:
            return server
        model = select(server, self.shared)
        average = weighted_mean(replies, model.keys())
        new: State = {}
        for key, weights in model.items():
            if not weights.is_floating_point():  # integer buffers (BatchNorm's counter) are taken as averaged
                new[key] = average[key]
                continue
            velocity = self.params.server_momentum * server[MOMENTUM + key] + (weights - average[key])
            new[key] = weights - self.params.server_lr * velocity
            new[MOMENTUM + key] = velocity
        return new
