"""Every method registers itself here by import; `METHODS` maps names to classes."""
from pfedkit.methods import apfl, fedafk, fedavg, fedbabu, fedper, fedprox, fedrep, lg_fedavg, local  # noqa: F401
from pfedkit.methods.base import METHODS, Method

__all__ = ["METHODS", "Method"]
