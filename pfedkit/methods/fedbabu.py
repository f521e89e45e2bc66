"""FedBABU (Oh et al., 2022): train only the body under a frozen random head shared by all; fine-tune to personalize."""

from typing import Literal

from pydantic import Field
from torch import nn

from pfedkit.methods.base import HyperParams, register, select
from pfedkit.methods.plan import LocalPlan, Phase
from pfedkit.methods.sharing import PartSharing
from pfedkit.records import ClientData, State


class FedBABUParams(HyperParams):
    ft_epochs: int = Field(
        5, ge=1, description="fine-tuning epochs before evaluation; our choice (the paper studies 1 to 20)"
    )
    ft_parts: Literal["all", "head"] = Field(
        "all", description="what fine-tuning updates; FedBABU fine-tunes the whole model"
    )


@register
class FedBABU(PartSharing):
    name = "fedbabu"
    evaluation = "model"  # the head fine-tuned before evaluation
    summary = "body trained under a frozen random head (same on all clients), fine-tuned for evaluation"
    Params = FedBABUParams
    shared = ("body",)

    def init_client(self, cid: int, data: ClientData) -> State:
        return {}  # the head is the seeded initial head, rebuilt identically everywhere

    def local_plan(self, payload: State, client: State, data: ClientData, round: int) -> LocalPlan:
        return LocalPlan({"main": self.model_weights(payload, self.random_head())}, [Phase(parts=("body",))])

    def plan_result(
        self, trained: dict[str, State], plan: LocalPlan, data: ClientData, round: int
    ) -> tuple[State, State]:
        return {**select(trained["main"], ("body",)), "num_samples": data.num_train}, {}

    def personalized_model(self, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        model = self.load(payload, self.random_head())
        if self.params.ft_parts == "head":
            self.fit_head(model, data, round, epochs=self.params.ft_epochs, purpose="finetune")
        else:
            self.fit(model, data, round, epochs=self.params.ft_epochs, purpose="finetune")
        return model
