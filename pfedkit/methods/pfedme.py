"""pFedMe (T. Dinh, Tran & Nguyen, NeurIPS 2020): personalization by Moreau envelopes.

Per local step, the client approximately solves the inner problem theta = argmin f(theta; batch) +
lambda/2 * ||theta - w||^2 with `inner_steps` gradient steps at `personal_lr`, then moves its local copy of
the global model toward it: w <- w - lr * lambda * (w - theta). theta starts each round at the received global model.
The server mixes: w_G <- (1 - beta) * w_G + beta * mean(w_i). The personalized theta is evaluated.
"""

from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from pfedkit.methods.base import HyperParams, register, weighted_mean
from pfedkit.methods.sharing import PartSharing
from pfedkit.records import ClientData, State


class PFedMeParams(HyperParams):
    reg: float = Field(15.0, gt=0, description="lambda of the Moreau envelope; pFedMe paper, MNIST (15)")
    inner_steps: int = Field(5, ge=1, description="K, gradient steps on the inner problem per batch; pFedMe paper (5)")
    personal_lr: float = Field(0.09, gt=0, description="lr of the inner problem; pFedMe paper's MNIST setting (0.09)")
    beta: float = Field(
        1.0, gt=0, description="server mixing; pFedMe paper (1; PFLlib's default 0 would freeze the global model)"
    )


@register
class PFedMe(PartSharing):
    name = "pfedme"
    training = "code"
    evaluation = "model"
    summary = "personal model solves a Moreau-envelope inner problem around the local copy of the global model"
    Params = PFedMeParams
    shared = ("body", "head")

    def init_client(self, cid: int, data: ClientData) -> State:
        return dict(self.initial_state())  # theta_i after its last round, the personalized model evaluated

    def local_update(self, payload: State, client: State, data: ClientData, round: int) -> tuple[State, State]:
        p, cfg = self.params, self.ctx.train
        local = {k: v.clone() for k, v in payload.items()}  # w, this client's copy of the global model
        personal = self.load(payload, slot="personal")  # theta restarts from the received global model each round
        params = dict(personal.named_parameters())
        inner = torch.optim.SGD(params.values(), lr=p.personal_lr)
        personal.train()
        for x, y in self.minibatches(data, round, "train"):
            for _ in range(p.inner_steps):
                proximal = sum((params[k] - local[k]).pow(2).sum() for k in params)
                loss = F.cross_entropy(personal(x), y) + p.reg / 2 * proximal
                inner.zero_grad(set_to_none=True)
                loss.backward()
                inner.step()
            with torch.no_grad():
                for k, theta in params.items():
                    local[k] -= cfg.lr * p.reg * (local[k] - theta)
        return {**local, "num_samples": data.num_train}, self.state_of(personal)

    def aggregate(self, server: State, replies: Mapping[int, State], round: int) -> State:
        if not replies:
            return server
        mean = weighted_mean(replies, server.keys())
        b = self.params.beta
        return {k: (1 - b) * server[k] + b * mean[k] if torch.is_floating_point(server[k]) else mean[k] for k in server}

    def personalized_model(self, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        return self.load(client, slot="personal")
