"""Helpers for testing a method of your own (docs/writing-a-method.md), importable from an installed pfedkit: a tiny
split model, client data small enough to check an update by hand, and a method built on them.

    from pfedkit.testing import make, tiny_data
    from pfedkit.engine import local_update

    method = make("my-method", params={"server_lr": 0.5}, lr=0.1)   # after importing your module (@register)
    data = tiny_data(cid=0, n=8)
    payload = method.payload(method.init_server(), 0, 0)
    reply, state = local_update(method, payload, method.init_client(0, data), data, 0)

A method with a plan (local_plan) runs batched on a GPU; check on the CPU that a cohort, its steps replayed as a
captured graph would replay them, gives what one client at a time gives:

    check_cohort(method, tiny_federation(clients=3))
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


def tiny_federation(clients: int = 3, n: int = 8, seed: int = 0):
    """`clients` clients of tiny_data's kind (n training and n test samples each, other samples per client), as the
    engine holds them: what `check_cohort` trains."""
    import numpy as np

    from pfedkit.data.federated import FederatedDataset

    parts = [tiny_data(cid, 2 * n, seed) for cid in range(clients)]
    x = torch.cat([p.train_x for p in parts])
    y = torch.cat([p.train_y for p in parts])
    train = [np.arange(2 * n * c, 2 * n * c + n) for c in range(clients)]
    test = [np.arange(2 * n * c + n, 2 * n * (c + 1)) for c in range(clients)]
    return FederatedDataset("tiny", "official-test", 2, (1, 1, 4), x, y, x, y, train, test)


def check_cohort(method: Any, federation: Any, rounds: int = 2, step_mode: str = "replay", atol: float = 2e-5) -> None:
    """Play `rounds` rounds one client at a time, then train the next round's clients both ways: as one cohort
    (each step replayed as a captured CUDA graph would be, on the CPU) and one client at a time. An AssertionError
    names the client and the entry where the replies or the new client states differ."""
    from pfedkit.engine import local_update
    from pfedkit.engine.cohort import Cohort
    from pfedkit.engine.workers import Task

    server = method.init_server()
    clients = {cid: method.init_client(cid, federation.client(cid)) for cid in range(federation.num_clients)}
    for round in range(rounds):
        replies = {}
        for cid in clients:
            payload = method.payload(server, round, cid)
            replies[cid], clients[cid] = local_update(method, payload, clients[cid], federation.client(cid), round)
        server = method.aggregate(server, replies, round)
    tasks = [
        Task("train", cid, rounds, method.payload(server, rounds, cid), clients[cid], len(federation.train_idx[cid]))
        for cid in clients
    ]
    alone = {t.cid: local_update(method, t.payload, t.client, federation.client(t.cid), t.round) for t in tasks}
    together = dict(Cohort(method, federation, step_mode=step_mode).train(tasks))
    for cid, (reply, state, _) in together.items():
        for what, got, want in (("reply", reply, alone[cid][0]), ("state", state, alone[cid][1])):
            assert set(got) == set(want), f"client {cid} {what}: entries {sorted(set(got) ^ set(want))} differ"
            for key, value in want.items():
                same = (
                    torch.allclose(got[key].float(), value.float(), atol=atol, rtol=1e-4)
                    if isinstance(value, torch.Tensor)
                    else abs(float(got[key]) - float(value)) <= atol
                )
                assert same, f"client {cid} {what}[{key!r}]: the cohort's differs from one client at a time's"
