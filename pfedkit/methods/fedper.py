"""FedPer (Arivazhagan et al., 2019): shared body, personal head, both trained jointly each round."""

from pfedkit.methods.base import register
from pfedkit.methods.sharing import PartSharing


@register
class FedPer(PartSharing):
    name = "fedper"
    summary = "shared body (averaged), personal head never uploaded"
    shared = ("body",)
