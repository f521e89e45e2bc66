"""FedProto-per: HEART-PFL's personalized FedProto ("personalized versions ... derived by fine-tuning"; there is no
released code for it). FedProto trains as usual; before evaluation each client fine-tunes its own model with
cross-entropy for `ft_epochs` and predicts with its head, the same fine-tuning as `fedavg-ft` and `fedprox-ft`.
"""

from pydantic import Field

from pfedkit.methods.base import HyperParams, register
from pfedkit.methods.fedavg import FedAvgFT
from pfedkit.methods.fedproto import FedProto


class FedProtoPerParams(HyperParams):
    proto_weight: float = Field(
        1.0, ge=0, description="lambda, weight of the prototype MSE; FedProto code default ld = 1"
    )
    ft_epochs: int = Field(
        1,
        ge=1,
        description="local fine-tuning epochs (cross-entropy, whole model) before evaluation; our choice, as fedavg-ft",
    )


@register
class FedProtoPer(FedProto):
    name = "fedproto-per"
    summary = "FedProto, each client's model fine-tuned on its training data and evaluated with its head"
    Params = FedProtoPerParams
    personalized_model = FedAvgFT.personalized_model  # the client's own model (payload holds only prototypes), tuned
