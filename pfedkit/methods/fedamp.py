"""FedAMP (Huang et al., AAAI 2021): attentive message passing between personalized models.

Server, for every client i that uploaded its model w_i this round: the personalized cloud model
u_i = sum_j xi_ij w_j over this round's uploads, with xi_ij = alpha_k * A'(||w_i - w_j||^2) for j != i,
A'(x) = exp(-x / sigma) / sigma (the derivative of A(x) = 1 - exp(-x / sigma)), and xi_ii = 1 - sum_{j != i} xi_ij.
Client: its own model w_i trained on CE + lamda / (2 alpha_k) * ||w_i - u_i||^2, the regularizer with its gradient
(PFLlib builds it from detached tensors, so there it does nothing). w_i is the model evaluated; only w_i travels up
and only u_i travels down.
"""

from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from pfedkit.methods.base import HyperParams, Method, register
from pfedkit.models.base import SplitModel
from pfedkit.records import ClientData, State

CLOUD = "cloud.{cid}."  # server-side store of each client's personalized cloud model u_i


class FedAMPParams(HyperParams):
    alpha_k: float = Field(
        1.0,
        gt=0,
        description="alpha_k, the server's step on the attention term: scales xi_ij and the proximal weight; "
        "PFLlib default (alphaK 1)",
    )
    lamda: float = Field(
        1.0,
        gt=0,
        description="lambda of the client's proximal term lambda / (2 alpha_k) ||w - u||^2; PFLlib default (1)",
    )
    sigma: float = Field(1.0, gt=0, description="sigma of A(x) = 1 - exp(-x / sigma); PFLlib default (1)")


def attention_weights(models: list[State], alpha_k: float, sigma: float) -> torch.Tensor:
    """xi (m x m): xi_ij = alpha_k * exp(-||w_i - w_j||^2 / sigma) / sigma off the diagonal, rows summing to 1.

    xi_ii is negative when many models lie within about sigma of each other (it cannot be for
    alpha_k <= sigma / (m - 1)), and u_i is then an extrapolation rather than a convex combination: the paper's
    formula, kept as is (measured on digits with smallcnn and the defaults: xi_ii between -13 and -8 after the first
    round).
    """
    flat = torch.stack([torch.cat([m[k].reshape(-1) for k in sorted(m)]).double() for m in models])
    squared = torch.cdist(flat, flat).pow(2)
    xi = alpha_k * torch.exp(-squared / sigma) / sigma
    xi.fill_diagonal_(0.0)
    xi += torch.diag(1.0 - xi.sum(1))
    return xi


@register
class FedAMP(Method):
    name = "fedamp"
    summary = (
        "personal models; the server sends each an attention-weighted cloud model, "
        "the client trains with a proximal term to it"
    )
    Params = FedAMPParams
    logged = ("self_weight",)  # mean xi_ii of the last aggregation: below 0, the cloud models extrapolate

    def init_server(self) -> State:
        return {"self_weight": 1.0}  # before any upload u_i is the initial model alone

    def param_names(self) -> list[str]:
        return [n for n, _ in self.model.named_parameters()]

    def init_client(self, cid: int, data: ClientData) -> State:
        return dict(self.initial_state())  # w_i, the personalized model

    def broadcast(self, server: State, round: int, cid: int) -> State:
        prefix = CLOUD.format(cid=cid)
        if any(k.startswith(prefix) for k in server):
            return {n: server[prefix + n] for n in self.param_names()}
        return {
            n: self.initial_state()[n] for n in self.param_names()
        }  # no upload yet: u_i = the initial model (PFLlib)

    def local_update(self, payload: State, client: State, data: ClientData, round: int) -> tuple[State, State]:
        model = self.load(client)  # starts from w_i, not from u_i (PFLlib; the proximal problem is the same)
        anchors = [(p, payload[n]) for n, p in model.named_parameters()]
        weight = self.params.lamda / (2 * self.params.alpha_k)

        def loss_fn(m: SplitModel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(m(x), y) + weight * sum((p - u).pow(2).sum() for p, u in anchors)

        self.fit(model, data, round, loss_fn=loss_fn)
        params = dict(model.named_parameters())
        reply = {n: params[n].detach().clone() for n in self.param_names()}
        return {**reply, "num_samples": data.num_train}, self.state_of(model)

    def aggregate(self, server: State, replies: Mapping[int, State], round: int) -> State:
        if not replies:
            return server
        cids = sorted(replies)  # attention over this round's uploads; a client that did not reply keeps its u_i
        names = self.param_names()
        models = [{n: replies[c][n] for n in names} for c in cids]
        xi = attention_weights(models, self.params.alpha_k, self.params.sigma)
        new = {**server, "self_weight": float(xi.diagonal().mean())}
        for row, cid in enumerate(cids):
            for n in names:
                new[CLOUD.format(cid=cid) + n] = sum(float(xi[row, j]) * models[j][n] for j in range(len(cids)))
        return new

    def personalized_model(self, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        return self.load(client)
