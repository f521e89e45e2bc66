"""Helpers for testing a method of your own (docs/writing-a-method.md), importable from an installed pfedkit: a tiny
split model, client data small enough to check an update by hand, and a method built on them.

    from pfedkit.testing import make, tiny_data
    from pfedkit.engine import local_update

    method = make("my-method", params={"server_lr": 0.5}, lr=0.1)   # after importing your module (@register)
    data = tiny_data(cid=0, n=8)
    payload = method.payload(method.init_server(), 0, 0)
    reply, state = local_update(method, payload, method.init_client(0, data), data, 0)
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import nn

from pfedkit.models.base import SplitModel
from pfedkit.records import ClientData, MethodContext, RunSetting, TrainSettings


def tiny_model() -> SplitModel:
    """4 inputs, a 3-unit body (Linear + ReLU), a 2-class head: small enough to write a step out by hand."""
    return SplitModel(nn.Sequential(nn.Linear(4, 3), nn.ReLU()), nn.Linear(3, 2), feature_dim=3)


def tiny_context(seed: int = 0, setting: Optional[RunSetting] = None, **train: Any) -> MethodContext:
    """A method's context on tiny_model: one epoch, batch 4, lr 0.1 unless `train` says otherwise (TrainSettings'
    fields); `setting` the run's clients, rounds and join ratio, when the method reads them."""
    settings = dict(local_epochs=1, batch_size=4, lr=0.1)
    settings.update(train)
    return MethodContext(tiny_model, TrainSettings(**settings), num_classes=2, seed=seed, setting=setting)


def tiny_data(cid: int = 0, n: int = 8, seed: int = 0) -> ClientData:
    """n samples of 4 features, labelled by the sign of the first; the test split a copy of the training split."""
    g = torch.Generator(device="cpu").manual_seed(seed + cid)
    x = torch.randn(n, 4, generator=g, device="cpu")
    y = (x[:, 0] > 0).long()
    return ClientData(cid, x, y, x.clone(), y.clone(), num_classes=2)


def make(method_name: str, seed: int = 0, params: Optional[dict] = None, setting: Optional[RunSetting] = None, **train):
    """The registered method `method_name` on tiny_model, with these hyper-parameters (`params`) and train settings."""
    from pfedkit.methods import METHODS

    cls = METHODS[method_name]
    return cls(cls.validate_params(params or {}), tiny_context(seed, setting, **train))
