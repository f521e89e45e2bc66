"""FedFomo (Zhang et al., ICLR 2021): personalized first-order model optimization.

The server keeps every client's latest model and an affinity score a_ij per pair. Each round it sends client i
M other clients' models, chosen epsilon-greedily by a_i. Client i scores each downloaded model n on its own
validation split: w_n = (L_i(theta_i) - L_i(theta_n)) / ||theta_n - theta_i||, with theta_i its current model;
keeps the positive ones, normalized, and moves to theta_i + sum_n w_n (theta_n - theta_i) (its own model if none
is positive); then trains on the rest of its training data. It replies its model and the w_n; the server adds the
w_n to a_i. The client's model is evaluated.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal, Mapping

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from pfedkit.methods.base import HyperParams, Method, add_prefix, register, strip_prefix
from pfedkit.records import ClientData, State
from pfedkit.seeding import numpy_generator, torch_generator

MODEL = "model.{cid}."  # server-side store of each client's latest model
SENT = "fomo.{slot}."  # the downloaded models in a payload


class FedFomoParams(HyperParams):
    num_models: int = Field(
        5,
        ge=1,
        description="M, models each client downloads; our choice, PFLlib's default (the official config uses 8)",
    )
    epsilon: float = Field(
        0.3,
        ge=0,
        le=1,
        description="initial exploration probability of the epsilon-greedy download; official code (0.3)",
    )
    epsilon_decay: float = Field(
        0.05, ge=0, description="epsilon decreases by this much per round; official code (0.05)"
    )
    val_share: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="share of local training data held out to score models; our choice, PFLlib's val_ratio (0.2)",
    )
    distance: Literal["l2", "l1"] = Field(
        "l2",
        description="norm of theta_n - theta_i in the weight; "
        "the paper's ||.|| read as L2 (the official code defaults to L1)",
    )


def grown(matrix: torch.Tensor, size: int) -> torch.Tensor:
    """The affinity matrix padded with zeros to size x size."""
    if matrix.shape[0] >= size:
        return matrix
    out = torch.zeros(size, size, dtype=matrix.dtype)
    out[: matrix.shape[0], : matrix.shape[1]] = matrix
    return out


@register
class FedFomo(Method):
    name = "fedfomo"
    summary = (
        "each client downloads M models and moves toward those that lower its validation loss, per parameter distance"
    )
    Params = FedFomoParams

    def init_server(self) -> State:
        return {"affinity": torch.zeros(0, 0)}

    def init_client(self, cid: int, data: ClientData) -> State:
        return dict(self.initial_state())

    def stored(self, server: State) -> list[int]:
        return sorted({int(k.split(".", 2)[1]) for k in server if k.startswith("model.")})

    def choose(self, server: State, round: int, cid: int) -> list[int]:
        """Epsilon-greedy: each slot takes a random remaining client with probability epsilon, else the remaining one
        with the highest affinity (ties broken at random)."""
        candidates = [c for c in self.stored(server) if c != cid]
        p, rng = self.params, numpy_generator(self.ctx.seed, round, cid, "fomo-choose")
        epsilon = max(p.epsilon - round * p.epsilon_decay, 0.0)
        affinity = grown(server["affinity"], max([cid, *candidates]) + 1)[cid]
        tie_break = rng.random(len(candidates))
        ranked = sorted(range(len(candidates)), key=lambda i: (-float(affinity[candidates[i]]), tie_break[i]))
        greedy, chosen = [candidates[i] for i in ranked], []
        for _ in range(min(p.num_models, len(candidates))):
            remaining = [c for c in greedy if c not in chosen]
            chosen.append(int(rng.choice(remaining)) if rng.random() < epsilon else remaining[0])
        return chosen

    def broadcast(self, server: State, round: int, cid: int) -> State:
        chosen = self.choose(server, round, cid)
        payload: State = {"fomo_ids": torch.tensor(chosen, dtype=torch.long)}
        for slot, other in enumerate(chosen):
            prefix = MODEL.format(cid=other)
            payload.update(add_prefix(strip_prefix(server, prefix), SENT.format(slot=slot)))
        return payload

    def split(self, data: ClientData) -> tuple[ClientData, torch.Tensor, torch.Tensor]:
        """(training part, validation x, validation y): a fixed held-out share of the client's training data."""
        order = torch.randperm(data.num_train, generator=torch_generator(self.ctx.seed, -1, data.cid, "fomo-val"))
        n_val = max(1, int(round(data.num_train * self.params.val_share))) if data.num_train > 1 else 0
        val, train = order[:n_val], order[n_val:]
        return (
            replace(data, train_x=data.train_x[train], train_y=data.train_y[train]),
            data.train_x[val],
            data.train_y[val],
        )

    @torch.no_grad()
    def val_loss(self, state: State, x: torch.Tensor, y: torch.Tensor) -> float:
        model = self.load(state, slot="score")
        model.eval()
        return float(F.cross_entropy(model(x), y))

    def distance(self, a: State, b: State) -> float:
        names = [n for n, _ in self.model.named_parameters()]
        diff = torch.cat([(a[n] - b[n]).reshape(-1) for n in names])
        return float(diff.abs().sum() if self.params.distance == "l1" else diff.norm())

    def fomo_weights(self, own: State, downloaded: list[State], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """w_n = (L(own) - L(theta_n)) / ||theta_n - own|| on the validation data (0 for a model equal to own)."""
        base = self.val_loss(own, x, y)
        weights = []
        for other in downloaded:
            gap = self.distance(other, own)
            weights.append((base - self.val_loss(other, x, y)) / gap if gap > 0 else 0.0)
        return torch.tensor(weights, dtype=torch.float64)

    @staticmethod
    def federate(own: State, downloaded: list[State], weights: torch.Tensor) -> State:
        """own + sum_n w_n^+ / sum w^+ * (theta_n - own) over float entries; own unchanged if no weight is positive."""
        positive = weights.clamp(min=0)
        if float(positive.sum()) <= 0:
            return dict(own)
        share = positive / positive.sum()
        return {
            k: v + sum(float(s) * (m[k] - v) for s, m in zip(share, downloaded)) if torch.is_floating_point(v) else v
            for k, v in own.items()
        }

    def local_update(self, payload: State, client: State, data: ClientData, round: int) -> tuple[State, State]:
        train, val_x, val_y = self.split(data)
        ids = payload["fomo_ids"].tolist()
        own = {k: client[k] for k in self.initial_state()}
        downloaded = [{k: payload[SENT.format(slot=s) + k] for k in own} for s in range(len(ids))]
        weights = (
            self.fomo_weights(own, downloaded, val_x, val_y)
            if ids and len(val_y)
            else torch.zeros(len(ids), dtype=torch.float64)
        )
        model = self.load(self.federate(own, downloaded, weights))
        self.fit(model, train, round)
        state = self.state_of(model)
        reply = {**state, "fomo_ids": payload["fomo_ids"], "fomo_weights": weights, "num_samples": train.num_train}
        return reply, state

    def aggregate(self, server: State, replies: Mapping[int, State], round: int) -> State:
        new = dict(server)
        known = self.stored(server) + list(replies)
        affinity = grown(server["affinity"], max(known) + 1 if known else 0).clone()
        for cid in sorted(replies):
            reply = replies[cid]
            new.update({MODEL.format(cid=cid) + k: reply[k] for k in self.initial_state()})
            for other, w in zip(reply["fomo_ids"].tolist(), reply["fomo_weights"].tolist()):
                affinity[cid, other] += w  # the paper's update: scores accumulate the reported weights
        new["affinity"] = affinity
        return new

    def personalized_model(self, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        return self.load(client)
