"""Methods that share some model parts through the server and keep the rest on the client."""
from __future__ import annotations

from typing import ClassVar, Mapping, Optional

from torch import nn

from pfedkit.methods.base import Method, WeightedMeanFold, select, weighted_mean
from pfedkit.models.base import PARTS, SplitModel
from pfedkit.records import ClientData, State


class PartSharing(Method):
    """The server holds the `shared` parts (sample-weighted average); each client keeps the others."""

    shared: ClassVar[tuple[str, ...]] = PARTS

    @property
    def personal(self) -> tuple[str, ...]:
        return tuple(p for p in PARTS if p not in self.shared)

    def init_server(self) -> State:
        return select(self.initial_state(), self.shared)

    def init_client(self, cid: int, data: ClientData) -> State:
        return select(self.initial_state(), self.personal)

    def broadcast(self, server: State, round: int, cid: int) -> State:
        return dict(server)

    def local_update(self, payload: State, client: State, data: ClientData, round: int) -> tuple[State, State]:
        model = self.load(payload, client)
        self.train_locally(model, payload, data, round)
        reply = self.state_of(model, self.shared)
        reply["num_samples"] = data.num_train
        return reply, self.state_of(model, self.personal)

    def train_locally(self, model: SplitModel, payload: State, data: ClientData, round: int) -> None:
        self.fit(model, data, round)

    def aggregate(self, server: State, replies: Mapping[int, State], round: int) -> State:
        if not replies:  # every sampled client failed: keep the last model
            return server
        return weighted_mean(replies, server.keys())

    def reply_fold(self, server: State, round: int, weights: Mapping[int, float]) -> Optional[WeightedMeanFold]:
        if type(self).aggregate is not PartSharing.aggregate:  # a method combining replies its own way needs them all
            return None
        return WeightedMeanFold(server.keys(), weights)

    def personalized_model(self, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        return self.load(payload, client)
