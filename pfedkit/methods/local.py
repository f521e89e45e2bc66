"""Local: every client trains its own model alone; nothing is exchanged."""

from pfedkit.methods.base import register
from pfedkit.methods.sharing import PartSharing


@register
class Local(PartSharing):
    name = "local"
    summary = "each client trains alone (no communication)"
    shared = ()
