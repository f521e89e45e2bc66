"""Class prototypes: per-class feature means on a client, their count-weighted average on the server.

Shared by FedPAC (its class centroids), FedProto, FedGH and PGFedSplit. A client's prototypes travel as two
tensors: `protos` (classes x feature_dim, zero rows for absent classes) and `proto_counts` (samples per class).
"""

from __future__ import annotations

from typing import Iterable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from pfedkit.methods.local_sgd import compute_features
from pfedkit.models.base import SplitModel, eval_mode
from pfedkit.records import State


def class_means(features: torch.Tensor, labels: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(means, counts): the mean feature of each class (zero where a class is absent) and its sample count."""
    counts = torch.bincount(labels, minlength=num_classes)
    sums = torch.zeros(num_classes, features.shape[1], dtype=features.dtype).index_add_(0, labels, features)
    return sums / counts.clamp(min=1).unsqueeze(1).to(features.dtype), counts


@torch.no_grad()
def eval_features(model: SplitModel, x: torch.Tensor) -> torch.Tensor:
    """Body features in eval mode (no dropout, BatchNorm running statistics), the mode is restored afterwards."""
    with eval_mode(model):
        return compute_features(model, x)


def local_prototypes(model: SplitModel, x: torch.Tensor, y: torch.Tensor, num_classes: int) -> State:
    means, counts = class_means(eval_features(model, x), y, num_classes)
    return {"protos": means, "proto_counts": counts}


def aggregate_prototypes(
    replies: Iterable[Mapping[str, torch.Tensor]],
    previous: Mapping[str, torch.Tensor] | None = None,
    *,
    per_client: bool = False,
) -> State:
    """Mean per class over the replies holding it: weighted by class counts (FedPAC Eq. 11, FedProto Eq. 6), or
    one vote per client if `per_client` (PGFedSplit Eq. 4). `proto_counts` of the result sums the weights.

    A class no reply holds keeps its previous prototype, if any (our choice: under partial participation a class
    may be missing for a round).
    """
    replies = list(replies)
    weights = [(r["proto_counts"] > 0).long() if per_client else r["proto_counts"] for r in replies]
    counts = torch.stack(weights).sum(0)
    weighted = sum(r["protos"] * w.unsqueeze(1).to(r["protos"].dtype) for r, w in zip(replies, weights))
    protos = weighted / counts.clamp(min=1).unsqueeze(1).to(weighted.dtype)
    if previous is not None:
        missing = counts == 0
        protos[missing] = previous["protos"][missing]
        counts = torch.where(missing, previous["proto_counts"], counts)
    return {"protos": protos, "proto_counts": counts}


def empty_prototypes(num_classes: int, feature_dim: int) -> State:
    return {"protos": torch.zeros(num_classes, feature_dim), "proto_counts": torch.zeros(num_classes, dtype=torch.long)}


def prototype_mse(
    features: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor, available: torch.Tensor
) -> torch.Tensor:
    """MSE between features and their class's target prototype, mean over batch x dims (nn.MSELoss, as in FedPAC
    and PFLlib's FedProto); samples whose class has no target contribute zero."""
    has = available[labels].unsqueeze(1)
    target = torch.where(has, targets[labels], features.detach())
    return F.mse_loss(features, target)


class NearestPrototype(nn.Module):
    """Classifies by the nearest prototype (squared L2); classes without a prototype are never predicted."""

    def __init__(self, body: nn.Module, protos: torch.Tensor, available: torch.Tensor):
        super().__init__()
        self.body = body
        self.register_buffer("protos", protos)
        self.register_buffer("available", available)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = -torch.cdist(self.body(x), self.protos).pow(2)
        # below every real score but finite, so the reported cross-entropy stays a number
        floor = logits[:, self.available].min() - 1 if bool(self.available.any()) else logits.new_tensor(0.0)
        return logits.masked_fill(~self.available, float(floor))
