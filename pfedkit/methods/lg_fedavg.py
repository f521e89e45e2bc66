"""LG-FedAvg (Liang et al., 2020): local representations (personal body), global top layers (shared head)."""

from pfedkit.methods.base import register
from pfedkit.methods.sharing import PartSharing


@register
class LGFedAvg(PartSharing):
    name = "lg-fedavg"
    summary = "personal body, shared head (the paper's global top layers)"
    shared = ("head",)
