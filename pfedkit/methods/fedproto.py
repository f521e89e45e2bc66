"""FedProto (Tan et al., AAAI 2022): no parameters travel, only class prototypes.

Each client trains its own whole model on CE + lambda * MSE between its features and the global prototype of
their class, then uploads its class means; the server averages them weighted by class counts. A client predicts
by the nearest global prototype to its features.
"""

from __future__ import annotations

from typing import Literal, Mapping

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from pfedkit.methods.base import HyperParams, Method, register
from pfedkit.methods.prototypes import (
    NearestPrototype,
    aggregate_prototypes,
    empty_prototypes,
    local_prototypes,
    prototype_mse,
)
from pfedkit.models.base import SplitModel
from pfedkit.records import ClientData, State


class FedProtoParams(HyperParams):
    proto_weight: float = Field(
        1.0, ge=0, description="lambda, weight of the prototype MSE; FedProto code default ld = 1"
    )
    inference: Literal["nearest-prototype", "head"] = Field(
        "nearest-prototype", description="nearest global prototype (the paper) or the client's own head"
    )


@register
class FedProto(Method):
    name = "fedproto"
    summary = "only class prototypes travel; local CE + distance to global prototypes; nearest-prototype inference"
    Params = FedProtoParams

    def init_server(self) -> State:
        return empty_prototypes(self.ctx.num_classes, self.model.feature_dim)

    def init_client(self, cid: int, data: ClientData) -> State:
        return dict(self.initial_state())

    def broadcast(self, server: State, round: int, cid: int) -> State:
        return dict(server)

    def local_update(self, payload: State, client: State, data: ClientData, round: int) -> tuple[State, State]:
        model = self.load(client)
        available = payload["proto_counts"] > 0
        lam = self.params.proto_weight

        def loss_fn(m: SplitModel, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            z = m.body(xb)
            return F.cross_entropy(m.head(z), yb) + lam * prototype_mse(z, yb, payload["protos"], available)

        self.fit(model, data, round, loss_fn=loss_fn if bool(available.any()) and lam > 0 else None)
        reply = {
            **local_prototypes(model, data.train_x, data.train_y, self.ctx.num_classes),
            "num_samples": data.num_train,
        }
        return reply, self.state_of(model)

    def aggregate(self, server: State, replies: Mapping[int, State], round: int) -> State:
        if not replies:
            return server
        return aggregate_prototypes((replies[c] for c in sorted(replies)), previous=server)

    def personalized_model(self, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        model = self.load(client)
        available = payload["proto_counts"] > 0
        if self.params.inference == "head" or not bool(available.any()):  # before any prototype exists: the head
            return model
        return NearestPrototype(model.body, payload["protos"], available)
