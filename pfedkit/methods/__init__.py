"""Every method registers itself here by import; `METHODS` maps names to classes."""
from pfedkit.methods import (  # noqa: F401
    apfl, ditto, fedafk, fedala, fedamp, fedavg, fedfomo, fedphp, knnper, pfedhn, fedbabu, fedgh, fedpac, fedper, fedproto, fedproto_per, fedprox, fedrep, fedrod, lg_fedavg, local,
    perfedavg, pfedme, perada, heart,
    pgfedsplit,
)
from pfedkit.methods.base import METHODS, Method

__all__ = ["METHODS", "Method"]
