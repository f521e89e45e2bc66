"""Methods that share some model parts through the server and keep the rest on the client."""

from __future__ import annotations

from typing import ClassVar, Mapping, Optional

from torch import nn

from pfedkit.methods.base import Method, WeightedMeanFold, named_by, select, weighted_mean
from pfedkit.methods.plan import LocalPlan, Phase
from pfedkit.models.base import PARTS, SplitModel
from pfedkit.records import ClientData, State


class PartSharing(Method):
    """The server holds the `shared` parts (sample-weighted average); each client keeps the others."""

    shared: ClassVar[tuple[str, ...]] = PARTS
    sent: ClassVar[tuple[str, ...]] = ()  # server-state keys broadcast beside the shared parts (a prefix ends in ".")

    @property
    def personal(self) -> tuple[str, ...]:
        return tuple(p for p in PARTS if p not in self.shared)

    def init_server(self) -> State:
        return select(self.initial_state(), self.shared)

    def init_client(self, cid: int, data: ClientData) -> State:
        return select(self.initial_state(), self.personal)

    def broadcast(self, server: State, round: int, cid: int) -> State:
        """The shared parts and the keys the method declares as `sent`; anything else stays on the server."""
        return {**select(server, self.shared), **{k: v for k, v in server.items() if named_by(k, self.sent)}}

    def local_update(self, payload: State, client: State, data: ClientData, round: int) -> tuple[State, State]:
        if self.batched()[0]:  # stated as a plan: Method.local_update runs it
            return super().local_update(payload, client, data, round)
        model = self.load(payload, client)
        self.train_locally(model, payload, data, round)
        return self.plan_result({"main": self.state_of(model)}, LocalPlan({}, []), data, round)

    def train_locally(self, model: SplitModel, payload: State, data: ClientData, round: int) -> None:
        """Training a subclass writes as code (not batchable); a batchable one states `local_phases` instead."""
        self.fit(model, data, round)

    def local_phases(self, payload: State, client: State, data: ClientData, round: int) -> list[Phase]:
        """The phases that train the model loaded from the payload and the client state: one, of every part."""
        return [Phase()]

    @classmethod
    def trains_in_code(cls) -> bool:
        """A subclass that writes its training as code (its own local_update or train_locally) states no plan."""
        return cls.local_update is not PartSharing.local_update or cls.train_locally is not PartSharing.train_locally

    @classmethod
    def batched(cls) -> tuple[bool, bool]:
        training = cls.local_plan is not PartSharing.local_plan or not cls.trains_in_code()
        evaluation = (
            cls.evaluation_weights is not PartSharing.evaluation_weights
            or cls.personalized_model is PartSharing.personalized_model
        )
        return training, evaluation

    def local_plan(self, payload: State, client: State, data: ClientData, round: int) -> Optional[LocalPlan]:
        if self.trains_in_code():
            return None
        return LocalPlan({"main": self.model_weights(payload, client)}, self.local_phases(payload, client, data, round))

    def plan_result(
        self, trained: dict[str, State], plan: LocalPlan, data: ClientData, round: int
    ) -> tuple[State, State]:
        weights = trained["main"]
        return {**select(weights, self.shared), "num_samples": data.num_train}, select(weights, self.personal)

    def evaluation_weights(self, client: State, payload: State, data: ClientData, round: int) -> Optional[State]:
        if type(self).personalized_model is not PartSharing.personalized_model:  # evaluation written as code
            return None
        return self.model_weights(payload, client)

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
