"""FedAvg (McMahan et al., 2017) and FedAvg-FT: the global model, fine-tuned locally before evaluation."""

from pydantic import Field
from torch import nn

from pfedkit.methods.base import HyperParams, register
from pfedkit.methods.sharing import PartSharing
from pfedkit.records import ClientData, State


@register
class FedAvg(PartSharing):
    name = "fedavg"
    summary = "one global model, sample-weighted average of full local models"


class FineTuneParams(HyperParams):
    ft_epochs: int = Field(
        1,
        ge=1,
        description="local fine-tuning epochs before evaluation; our choice (PGFedSplit uses 25 after the last round)",
    )


@register
class FedAvgFT(FedAvg):
    name = "fedavg-ft"
    evaluation = "model"  # fine-tuned before evaluation
    summary = "FedAvg, with the global model fine-tuned on each client's training data before evaluation"
    Params = FineTuneParams

    def personalized_model(self, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        model = self.load(payload, client)
        self.fit(model, data, round, epochs=self.params.ft_epochs, purpose="finetune")
        return model
