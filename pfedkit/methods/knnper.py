"""kNN-Per (Marfoq et al., ICML 2022): a global model trained as FedAvg, personalized at inference by a local
k-nearest-neighbour memory.

A client stores the global body's features of its own training samples with their labels. For a test sample x
with feature z, p_kNN(y | x) = sum over the k nearest stored features (squared Euclidean distance d^2) of
1[y_j = y] * exp(-d_j^2 / (D * scale)), normalized over those k (D the feature dimension), and the prediction is
p = lambda * p_kNN + (1 - lambda) * softmax(global logits). Training is FedAvg's; nothing else travels.
"""

from __future__ import annotations

import torch
from pydantic import Field
from torch import nn

from pfedkit.methods.base import HyperParams, register
from pfedkit.methods.prototypes import eval_features
from pfedkit.methods.sharing import PartSharing
from pfedkit.models.base import SplitModel
from pfedkit.records import ClientData, State


class KNNPerParams(HyperParams):
    neighbors: int = Field(
        10,
        ge=1,
        description="k, neighbours consulted; "
        "our choice (the paper studies k's effect; 10 as in its figures' middle range)",
    )
    knn_weight: float = Field(
        0.5,
        ge=0,
        le=1,
        description="lambda, weight of the kNN distribution (the global model gets 1 - lambda); "
        "the paper tunes it per client on a grid, our fixed choice 0.5",
    )
    scale: float = Field(
        1.0, gt=0, description="kernel scale: similarity exp(-d^2 / (feature_dim * scale)); authors' code default (1)"
    )


class KNNInterpolated(nn.Module):
    """log of lambda * p_kNN + (1 - lambda) * softmax(global logits): its argmax and cross-entropy are those of p."""

    def __init__(
        self,
        model: SplitModel,
        memory: torch.Tensor,
        labels: torch.Tensor,
        num_classes: int,
        neighbors: int,
        knn_weight: float,
        scale: float,
    ):
        super().__init__()
        self.model = model
        self.register_buffer("memory", memory)
        self.register_buffer("labels", labels)
        self.num_classes, self.neighbors, self.knn_weight, self.scale = num_classes, neighbors, knn_weight, scale

    def knn_probabilities(self, z: torch.Tensor) -> torch.Tensor:
        k = min(self.neighbors, self.memory.shape[0])
        squared = torch.cdist(z, self.memory).pow(2)
        nearest, index = squared.topk(k, dim=1, largest=False)
        # exp(-d^2 / (D scale)) normalized over the k neighbours as a softmax, so far neighbours do not underflow to 0/0
        weights = torch.softmax(-nearest / (z.shape[1] * self.scale), dim=1)
        return torch.zeros(z.shape[0], self.num_classes, dtype=z.dtype).scatter_add_(1, self.labels[index], weights)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.model.body(x)
        probabilities = torch.softmax(self.model.head(z), dim=1)
        if self.knn_weight > 0 and self.memory.shape[0] > 0:
            probabilities = self.knn_weight * self.knn_probabilities(z) + (1 - self.knn_weight) * probabilities
        return probabilities.clamp_min(torch.finfo(probabilities.dtype).tiny).log()


@register
class KNNPer(PartSharing):
    name = "knn-per"
    evaluation = "model"  # a kNN memory interpolated with the model
    summary = "global model by FedAvg; prediction interpolated with a kNN over the client's own training features"
    Params = KNNPerParams
    shared = ("body", "head")

    def personalized_model(self, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        model = self.load(payload)
        model.eval()
        memory = eval_features(model, data.train_x)  # the datastore: all training samples (capacity 1)
        p = self.params
        return KNNInterpolated(model, memory, data.train_y, self.ctx.num_classes, p.neighbors, p.knn_weight, p.scale)
