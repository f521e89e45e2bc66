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

# The public surface for a method of your own (docs/writing-a-method.md): one import.
from pfedkit.methods.base import (  # noqa: E402
    METHODS,
    HyperParams,
    Method,
    WeightedMeanFold,
    add_prefix,
    register,
    searched,
    select,
    strip_prefix,
    variant,
    weighted_mean,
)
from pfedkit.methods.functional import FunctionalNet, batched_grads, per_client, sgd_step  # noqa: E402
from pfedkit.methods.plan import Apply, Joint, LocalPlan, Phase, cross_entropy, proximal  # noqa: E402
from pfedkit.methods.sharing import PartSharing  # noqa: E402
from pfedkit.models.base import SplitModel  # noqa: E402
from pfedkit.records import ClientData, State  # noqa: E402

__all__ = [
    "METHODS",
    "Apply",
    "ClientData",
    "FunctionalNet",
    "HyperParams",
    "Joint",
    "LocalPlan",
    "Method",
    "PartSharing",
    "Phase",
    "SplitModel",
    "State",
    "WeightedMeanFold",
    "add_prefix",
    "batched_grads",
    "cross_entropy",
    "per_client",
    "proximal",
    "register",
    "searched",
    "select",
    "sgd_step",
    "strip_prefix",
    "variant",
    "weighted_mean",
]
