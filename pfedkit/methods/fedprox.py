"""FedProx (Li et al., 2020): local loss + mu/2 * ||w - w_global||^2."""

from pydantic import Field

from pfedkit.methods.base import HyperParams, register, searched
from pfedkit.methods.fedavg import FedAvg, FedAvgFT
from pfedkit.methods.plan import Phase, proximal, proximal_given
from pfedkit.records import ClientData, State


class FedProxParams(HyperParams):
    mu: float = Field(
        0.01,
        gt=0,
        description="proximal weight; FedProx paper grid {0.001, 0.01, 0.1, 1}, "
        "our choice 0.01 (PFLlib's default 0 switches it off)",
        json_schema_extra=searched(0.001, 1.0, log=True, source="the FedProx paper's grid {0.001, 0.01, 0.1, 1}"),
    )


@register
class FedProx(FedAvg):
    name = "fedprox"
    summary = "FedAvg with a proximal term pulling local weights toward the global model"
    Params = FedProxParams
    packable = ("mu",)

    def local_phases(self, payload: State, client: State, data: ClientData, round: int) -> list[Phase]:
        anchors = {name: payload[name] for name, _ in self.model.named_parameters()}
        return [Phase(loss=proximal, given=proximal_given(self.params.mu, anchors))]


class FedProxFTParams(FedProxParams):
    ft_epochs: int = Field(
        1,
        ge=1,
        description="local fine-tuning epochs before evaluation; our choice (PGFedSplit uses 25 after the last round)",
    )


@register
class FedProxFT(FedProx):
    name = "fedprox-ft"
    evaluation = "model"  # fine-tuned before evaluation
    summary = "FedProx, with the global model fine-tuned on each client's training data before evaluation"
    Params = FedProxFTParams
    personalized_model = FedAvgFT.personalized_model
