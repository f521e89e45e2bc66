"""Every method registers itself here by import; `METHODS` maps names to classes."""
from pfedkit.methods import (  # noqa: F401
    apfl,
    ditto,
    fedafk,
    fedala,
    fedamp,
    fedavg,
    fedbabu,
    fedfomo,
    fedgh,
    fedpac,
    fedper,
    fedphp,
    fedproto,
    fedproto_per,
    fedprox,
    fedrep,
    fedrod,
    heart,
    knnper,
    lg_fedavg,
    local,
    perada,
    perfedavg,
    pfedhn,
    pfedme,
    pgfedsplit,
)
from pfedkit.methods.base import METHODS, Method

__all__ = ["METHODS", "Method"]
