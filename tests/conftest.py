"""Shared fixtures: a tiny split model and client data small enough to check updates by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from pfedkit.models.base import SplitModel
from pfedkit.records import ClientData, MethodContext, TrainSettings

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def tiny_model() -> SplitModel:
    return SplitModel(nn.Sequential(nn.Linear(4, 3), nn.ReLU()), nn.Linear(3, 2), feature_dim=3)


def tiny_context(seed: int = 0, **train) -> MethodContext:
    settings = dict(local_epochs=1, batch_size=4, lr=0.1)
    settings.update(train)
    return MethodContext(tiny_model, TrainSettings(**settings), num_classes=2, seed=seed)


def tiny_data(cid: int = 0, n: int = 8, seed: int = 0) -> ClientData:
    g = torch.Generator().manual_seed(seed + cid)
    x = torch.randn(n, 4, generator=g)
    y = (x[:, 0] > 0).long()
    return ClientData(cid, x, y, x.clone(), y.clone(), num_classes=2)


def make(method_name: str, seed: int = 0, params: dict | None = None, **train):
    from pfedkit.methods import METHODS

    cls = METHODS[method_name]
    return cls(cls.validate_params(params or {}), tiny_context(seed, **train))


@pytest.fixture
def shared_data() -> Path:
    if not (SHARED_DATA / "mnist").exists():
        pytest.skip("../shared/data is not beside the repository")
    return SHARED_DATA
