"""Methods that share some model parts through the server and keep the rest on the client."""

from __future__ import annotations

from typing import ClassVar, Mapping, Optional

from pfedkit.methods.base import Method, WeightedMeanFold, named_by, select, weighted_mean
from pfedkit.methods.plan import LocalPlan, Phase
from pfedkit.models.base import PARTS, SplitModel
from pfedkit.records import ClientData, State


class PartSharing(Method):
    """The server holds the `shared` parts (sample-weighted average); each client keeps the others. Its training is a
    plan of `local_phases` (one phase of every part by default); a subclass that writes training as code declares
    `training = "code"` and overrides `train_locally` (or `local_update`). Its evaluation loads the payload and the
    client state; one that evaluates otherwise declares `evaluation = "model"` and overrides `personalized_model`."""

    training = "plan"
    evaluation = "weights"
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
        """With training = "code": train_locally on the model loaded from the payload and the client state."""
        if self.training == "plan":
            return super().local_update(payload, client, data, round)
        model = self.load(payload, client)
        self.train_locally(model, payload, data, round)
        return self.plan_result({"main": self.state_of(model)}, LocalPlan({}, []), data, round)

    def train_locally(self, model: SplitModel, payload: State, data: ClientData, round: int) -> None:
        """Training a subclass writes as code (training = "code"); by default every part, one fit."""
        self.fit(model, data, round)

    def local_phases(self, payload: State, client: State, data: ClientData, round: int) -> list[Phase]:
        """The phases that train the model loaded from the payload and the client state: one, of every part."""
        return [Phase()]

    @classmethod
    def declaration_problems(cls) -> list[str]:
        problems = super().declaration_problems()
        if cls.training == "plan" and cls.train_locally is not PartSharing.train_locally:
            problems.append(
                "training = 'plan' but train_locally written: declare training = 'code' or state local_phases"
            )
        if cls.training == "plan" and cls.local_update is not PartSharing.local_update:
            problems.append("training = 'plan' but local_update written: declare training = 'code' or drop it")
        if cls.evaluation == "weights" and cls.personalized_model is not PartSharing.personalized_model:
            if cls.evaluation_weights is PartSharing.evaluation_weights:
                problems.append(
                    "evaluation = 'weights' but personalized_model written: declare evaluation = 'model' or write "
                    "evaluation_weights to match"
                )
        return problems

    def local_plan(self, payload: State, client: State, data: ClientData, round: int) -> Optional[LocalPlan]:
        return LocalPlan({"main": self.model_weights(payload, client)}, self.local_phases(payload, client, data, round))

    def plan_result(
        self, trained: dict[str, State], plan: LocalPlan, data: ClientData, round: int
    ) -> tuple[State, State]:
        weights = trained["main"]
        return {**select(weights, self.shared), "num_samples": data.num_train}, select(weights, self.personal)

    def evaluation_weights(self, client: State, payload: State, data: ClientData, round: int) -> Optional[State]:
        return self.model_weights(payload, client)

    def aggregate(self, server: State, replies: Mapping[int, State], round: int) -> State:
        if not replies:  # every sampled client failed: keep the last model
            return server
        return weighted_mean(replies, server.keys())

    def reply_fold(self, server: State, round: int, weights: Mapping[int, float]) -> Optional[WeightedMeanFold]:
        if type(self).aggregate is not PartSharing.aggregate:  # a method combining replies its own way needs them all
            return None
        return WeightedMeanFold(server.keys(), weights)
