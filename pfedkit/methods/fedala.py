"""FedALA (Zhang et al., AAAI 2023): adaptive local aggregation before local training.

A client starts each round from its lower layers replaced by the global ones and its higher layers (the last
`ala_layers` parameter tensors) mixed element-wise: theta_hat = theta_i + (theta_G - theta_i) * W, with W in
[0, 1] learned by SGD on a random share of its training data (to convergence in the first round with a global
model, one pass afterwards). W stays with its client. Then ordinary local training; the server averages models.
"""

from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from pfedkit.methods.base import HyperParams, register
from pfedkit.methods.sharing import PartSharing
from pfedkit.models.base import SplitModel
from pfedkit.records import ClientData, State
from pfedkit.seeding import torch_generator

WEIGHT = "ala_weight."


class FedALAParams(HyperParams):
    eta: float = Field(
        1.0, gt=0, description="learning rate of the aggregation weights W; FedALA code (run_me.sh -et 1)"
    )
    ala_layers: int = Field(
        2,
        ge=1,
        description="parameter tensors, from the top, mixed element-wise (layer_idx); FedALA code (-li 2: the head)",
    )
    sample_percent: float = Field(
        80.0, gt=0, le=100, description="share of local training data W learns on (rand_percent); FedALA code (-rp 80)"
    )
    threshold: float = Field(
        0.1, gt=0, description="first-phase stop: std of the last `window` losses below this; FedALA code"
    )
    window: int = Field(10, ge=2, description="losses the first-phase stop looks at; FedALA code (num_pre_loss)")
    max_first_epochs: int = Field(100, ge=1, description="cap on first-phase passes, so it always ends; our choice")


@register
class FedALA(PartSharing):
    name = "fedala"
    training = "code"
    evaluation = "model"
    summary = (
        "global lower layers; higher layers mixed element-wise with learned per-client weights; then local training"
    )
    Params = FedALAParams
    shared = ("body", "head")

    def init_client(self, cid: int, data: ClientData) -> State:
        higher = self.higher_names()
        weights = {WEIGHT + n: torch.ones_like(v) for n, v in self.initial_state().items() if n in higher}
        return {**self.initial_state(), **weights, "first_phase": 1}

    def higher_names(self) -> list[str]:
        return [n for n, _ in self.model.named_parameters()][-self.params.ala_layers :]

    def adapt(self, payload: State, client: State, data: ClientData, round: int) -> tuple[SplitModel, State]:
        """The adaptively aggregated start model, and the client's new W and phase."""
        higher = self.higher_names()
        model = self.load(client, {k: v for k, v in payload.items() if k not in higher})  # lower layers: global
        weights = {n: client[WEIGHT + n].clone() for n in higher}
        gaps = {n: payload[n] - client[n] for n in higher}
        if all(bool((g == 0).all()) for g in gaps.values()):  # nothing to aggregate yet (FedALA skips this case)
            return model, {**{WEIGHT + n: w for n, w in weights.items()}, "first_phase": client["first_phase"]}
        params = dict(model.named_parameters())

        def mix() -> None:
            with torch.no_grad():
                for n in higher:
                    params[n].copy_(client[n] + gaps[n] * weights[n])

        mix()
        gen = torch_generator(self.ctx.seed, round, data.cid, "ala-sample")
        count = max(1, int(data.num_train * self.params.sample_percent / 100))
        sample = torch.randperm(data.num_train, generator=gen)[:count]
        first = bool(client["first_phase"])
        losses: list[float] = []
        model.train()
        for epoch in range(self.params.max_first_epochs if first else 1):
            for idx in torch.split(sample[torch.randperm(count, generator=gen)], self.ctx.train.batch_size):
                loss = F.cross_entropy(model(data.train_x[idx]), data.train_y[idx])
                grads = torch.autograd.grad(loss, [params[n] for n in higher])
                for n, g in zip(higher, grads):
                    weights[n] = (weights[n] - self.params.eta * g * gaps[n]).clamp_(0, 1)
                mix()
            losses.append(loss.item())
            if (
                first
                and len(losses) > self.params.window
                and statistics.pstdev(losses[-self.params.window :]) < self.params.threshold
            ):
                break
        return model, {**{WEIGHT + n: w for n, w in weights.items()}, "first_phase": 0}

    def local_update(self, payload: State, client: State, data: ClientData, round: int) -> tuple[State, State]:
        model, extra = self.adapt(payload, client, data, round)
        self.fit(model, data, round)
        return {**self.state_of(model), "num_samples": data.num_train}, {**self.state_of(model), **extra}

    def personalized_model(self, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        return self.adapt(payload, client, data, round)[0]  # evaluated after ALA, as PFLlib's evaluate() sees it

    def trained_model(self, reply: State, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        return self.load(client)  # ALA, then local training: the model the client keeps
