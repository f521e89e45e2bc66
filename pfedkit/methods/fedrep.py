"""FedRep (Collins et al., 2021): train the personal head with the body frozen, then the body with the head frozen."""

from pydantic import Field

from pfedkit.methods.base import HyperParams, register, searched
from pfedkit.methods.plan import Phase
from pfedkit.methods.sharing import PartSharing
from pfedkit.records import ClientData, State


class FedRepParams(HyperParams):
    # Unverified against the paper text: FedRep-derived code runs local_ep=10 including local_rep_ep=1 (9 head epochs).
    head_epochs: int = Field(
        10,
        ge=1,
        description="head epochs per round; our reading of FedRep Sec. 5 (its code's defaults give 9 head + 1 body); "
        "body epochs = train.local_epochs",
        json_schema_extra=searched(1, 10, source="PFLlib's 1 to the FedRep paper's 10"),
    )


@register
class FedRep(PartSharing):
    name = "fedrep"
    summary = "shared body, personal head; head epochs first, then body epochs"
    Params = FedRepParams
    shared = ("body",)

    def local_phases(self, payload: State, client: State, data: ClientData, round: int) -> list[Phase]:
        return [
            Phase(parts=("head",), epochs=self.params.head_epochs, purpose="head", head_features=True),
            Phase(parts=("body",), purpose="body"),
        ]
