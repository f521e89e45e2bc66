"""Ditto (Li, Hu, Beirami & Smith, ICML 2021): a global model trained as FedAvg, and per client a personal model
trained on its own loss plus lambda/2 * ||v - w||^2 to the global model it received. The personal model is
evaluated; only the global model travels."""

from __future__ import annotations

from pydantic import Field

from pfedkit.methods.base import HyperParams, register, searched
from pfedkit.methods.plan import LocalPlan, Phase, proximal, proximal_given
from pfedkit.methods.sharing import PartSharing
from pfedkit.records import ClientData, State


class DittoParams(HyperParams):
    prox_weight: float = Field(
        0.1,
        gt=0,
        description="lambda of the personal objective; "
        "our choice in the Ditto paper's grid {0.05, 0.1, 0.2, 0.5, 1, 2}",
        json_schema_extra=searched(0.05, 2.0, log=True, source="the Ditto paper's grid {0.05, ..., 2}"),
    )
    personal_epochs: int = Field(
        1,
        ge=1,
        description="epochs on the personal model per round; "
        "our choice, as PFLlib (the paper runs as many as the global)",
    )


@register
class Ditto(PartSharing):
    name = "ditto"
    summary = "global model by FedAvg; personal model with a proximal term to the received global model"
    Params = DittoParams
    packable = ("prox_weight",)
    shared = ("body", "head")

    def init_client(self, cid: int, data: ClientData) -> State:
        return dict(self.initial_state())  # the personal model v_i

    def local_plan(self, payload: State, client: State, data: ClientData, round: int) -> LocalPlan:
        anchors = {name: payload[name] for name, _ in self.model.named_parameters()}  # the received global w^t
        personal = Phase(
            model="personal",
            epochs=self.params.personal_epochs,
            purpose="personal",
            loss=proximal,
            given=proximal_given(self.params.prox_weight, anchors),
        )
        return LocalPlan(
            {"personal": self.model_weights(client), "main": self.model_weights(payload)}, [personal, Phase()]
        )

    def plan_result(
        self, trained: dict[str, State], plan: LocalPlan, data: ClientData, round: int
    ) -> tuple[State, State]:
        return {**trained["main"], "num_samples": data.num_train}, trained["personal"]

    def evaluation_weights(self, client: State, payload: State, data: ClientData, round: int) -> State:
        return self.model_weights(client)
