"""Every model is a body (feature extractor) and a head (classifier); methods address parameters by part."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn

PARTS = ("body", "head")


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """The model in eval mode inside the block (no dropout, BatchNorm's running statistics); its mode restored after."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


class SplitModel(nn.Module):
    """`forward(x) = head(body(x))`; parameter names start with `body.` or `head.`."""

    def __init__(self, body: nn.Module, head: nn.Module, feature_dim: int):
        super().__init__()
        self.body = body
        self.head = head
        self.feature_dim = feature_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def uses_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def deterministic_body(model: SplitModel) -> bool:
    """No BatchNorm or dropout: the body's output does not depend on the batch or on the train/eval mode."""
    stochastic = (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd)
    return not any(isinstance(m, stochastic) for m in model.body.modules())
