"""PerAda (Xie et al., CVPR 2024): personalized adapters on a frozen pretrained backbone, with knowledge
distillation from the clients' ensemble into the global adapter on server proxy data.

Messages: the server sends the global adapter state theta (adapters, bn1/bn2, head and BatchNorm statistics);
a client replies with its local adapter phi_k. State: each client's personalized adapter omega_k (never sent).
Per round, a client first trains omega_k on CE + prox_weight * ||omega_k - theta||^2, then trains a fresh copy
phi_k of theta on CE and uploads it. The server averages the phi_k (1/|S|) and, in the first `kd_rounds`
rounds, distils the ensemble of the phi_k into the average on proxy batches (Adam, cosine schedule), keeping
the distilled model only if it beats the average on the server's validation split (kd_keep = "validated", the code's
gate; "last" keeps it always, as both papers' algorithms have it). Settings follow PerAda's
released code (`NVlabs/PerAda`, which HEART-PFL's code extends; docs/methods.md 2).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Literal, Mapping, Optional

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from pfedkit.errors import ConfigError
from pfedkit.methods.base import HyperParams, Method, register, weighted_mean
from pfedkit.methods.distillation import accuracy, ensemble_log_probs, kl_to_teacher
from pfedkit.methods.local_sgd import frozen
from pfedkit.models.adapters import Adapter, StagedResNet, adapter_state_names, is_trainable
from pfedkit.records import ClientData, State
from pfedkit.seeding import seeded_torch, torch_generator

AdapterLoss = Callable[[StagedResNet, torch.Tensor, torch.Tensor], torch.Tensor]


class PerAdaParams(HyperParams):
    prox_weight: float = Field(
        1.0, ge=0, description="weight of ||omega - theta||^2 (no 1/2): PerAda code `lmbda` = 1.0"
    )
    kd_rounds: int = Field(
        30,
        ge=0,
        description="server distillation in rounds < kd_rounds, plain averaging after; "
        "code `kd_max_round` = 30 (0 = never)",
    )
    kd_steps: int = Field(
        500, ge=1, description="proxy batches per distillation; code `total_n_server_pseudo_batches` = 500"
    )
    kd_batch: int = Field(2048, ge=1, description="proxy batch size; code `kd_batch_size` = 2048 (HEART paper 4.1)")
    kd_lr: float = Field(
        1e-3, gt=0, description="server Adam lr, cosine-annealed over kd_steps; code `kd_lr` (HEART paper 4.1)"
    )
    kd_eval_every: int = Field(
        1, ge=1, description="validate the student every this many steps; code `kd_eval_batches_freq` = 1"
    )
    kd_keep: Literal["validated", "last"] = Field(
        "validated",
        description="validated: the best validated student, kept only if it beats the average (the code's gate); "
        "last: the student after kd_steps, always (HEART Alg. 1 and PerAda's paper: no gate)",
    )
    ensemble: Literal["logits", "probs"] = Field(
        "logits", description="teacher: softmax of the mean logits (PerAda code) or mean of probabilities"
    )


@contextmanager
def seeded_dropout(seed: int, round: int, cid: int) -> Iterator[None]:
    """The adapters' dropout draws from torch's global generator: seed it from (seed, round, client), restore after."""
    with seeded_torch(seed, round, cid, "dropout"):
        yield


def check_adapter_model(method: str, model: nn.Module) -> None:
    if not isinstance(model, StagedResNet) or not any(isinstance(m, Adapter) for m in model.modules()):
        raise ConfigError(
            f'method {method} trains adapters: set model.name = "resnet18-adapter" or '
            '"small-resnet-adapter" (with adapters = true), usually with model.options.pretrained'
        )


def distillation_outcome(accepted: int, gain: float) -> State:
    return {"kd_accepted": torch.tensor(float(accepted)), "kd_val_gain": torch.tensor(float(gain))}


@register
class PerAda(Method):
    name = "perada"
    summary = (
        "personalized adapters (proximal to the global adapter); "
        "global adapter = average, then distilled from the client ensemble on proxy data"
    )
    # each round's distillation outcome, in metrics.csv: 1 the distilled adapter was kept, 0 the average was, -1 no
    # distillation that round; and the validation accuracy (points) the kept student gained over the average
    logged = ("kd_accepted", "kd_val_gain")
    Params = PerAdaParams

    # ---- state and messages ----
    def adapter_keys(self) -> list[str]:
        if not hasattr(self, "_adapter_keys"):  # the same for every model this method builds
            self._adapter_keys = adapter_state_names(self.working_model("main"))
        return self._adapter_keys

    def adapter_state(self, model: nn.Module) -> State:
        own = model.state_dict()
        return {k: own[k].detach().clone() for k in self.adapter_keys()}

    def init_server(self) -> State:
        check_adapter_model(self.name, self.working_model("main"))
        if self.params.kd_rounds > 0 and self.ctx.server is None:
            raise ConfigError(
                f"method {self.name} distils on server proxy data: set proxy.holdout (e.g. 0.1, the "
                "in-domain split; add proxy.dataset for an out-of-domain proxy), or "
                "method.kd_rounds = 0 for plain averaging"
            )
        return {**self.init_client(-1, None), **distillation_outcome(-1, 0.0)}

    def init_client(self, cid: int, data: Optional[ClientData]) -> State:
        initial = self.initial_state()  # omega_k^0 = theta^0: the pretrained backbone's own adapters and head
        return {k: initial[k].clone() for k in self.adapter_keys()}

    def broadcast(self, server: State, round: int, cid: int) -> State:
        return {k: server[k] for k in self.adapter_keys()}

    def adapter_model(self, state: Mapping[str, torch.Tensor], slot: str) -> StagedResNet:
        """The frozen backbone (the initial, pretrained model) with this adapter state."""
        return self.load(self.initial_state(), state, slot=slot)

    def personalized_model(self, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        return self.adapter_model(client, "personal")

    # ---- client ----
    def fit_adapters(
        self, model: StagedResNet, data: ClientData, round: int, loss_fn: AdapterLoss, purpose: str
    ) -> float:
        """SGD over the trainable set only (the rest frozen), the run's epochs, batch size and lr."""
        return self.fit(model, data, round, loss_fn=loss_fn, purpose=purpose, trains=is_trainable)

    def proximal(self, model: nn.Module, centre: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return sum((p - centre[n]).pow(2).sum() for n, p in model.named_parameters() if is_trainable(n))

    def personal_loss(self, payload: State, client_context: dict) -> AdapterLoss:
        weight = self.params.prox_weight

        def loss(model: StagedResNet, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(model(x), y) + weight * self.proximal(model, payload)

        return loss

    def local_loss(self, payload: State, client_context: dict) -> AdapterLoss:
        return lambda model, x, y: F.cross_entropy(model(x), y)

    def client_context(self, personal: StagedResNet, payload: State, data: ClientData, round: int) -> dict:
        """Per-round extras computed before training (HEART-PFL: the personalized prototypes)."""
        return {}

    def local_update(self, payload: State, client: State, data: ClientData, round: int) -> tuple[State, State]:
        with seeded_dropout(self.ctx.seed, round, data.cid):
            return self.train_client(payload, client, data, round)

    def train_client(self, payload: State, client: State, data: ClientData, round: int) -> tuple[State, State]:
        personal = self.adapter_model(client, "personal")
        context = self.client_context(personal, payload, data, round)
        self.fit_adapters(personal, data, round, self.personal_loss(payload, context), "personal")  # omega_k first
        local = self.adapter_model(payload, "local")  # phi_k starts from theta^r
        self.fit_adapters(local, data, round, self.local_loss(payload, context), "local")
        reply = {**self.adapter_state(local), "num_samples": data.num_train}
        if context.get("logged"):  # HEART-PFL's alignment loss, mean over its batches, for inspection
            reply["align_loss"] = sum(context["logged"]) / len(context["logged"])
        return reply, self.adapter_state(personal)

    # ---- server ----
    def aggregate(self, server: State, replies: Mapping[int, State], round: int) -> State:
        if not replies:
            return server
        uniform = {cid: {**reply, "weight": 1} for cid, reply in replies.items()}  # 1/|S_r| (Alg. 1 line 14)
        averaged = weighted_mean(uniform, self.adapter_keys(), weight="weight")
        if round >= self.params.kd_rounds:
            return {**averaged, **distillation_outcome(-1, 0.0)}
        teachers = [self.adapter_model(replies[cid], f"teacher{i}") for i, cid in enumerate(sorted(replies))]
        return self.distill(averaged, teachers, round)

    def views(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        teachers: list[StagedResNet],
        anchor: Optional[StagedResNet],
        round: int,
        step: int,
    ) -> list[tuple[torch.Tensor, list[torch.Tensor]]]:
        """(student input, one input per teacher) pairs the student learns on: the clean batch for PerAda."""
        return [(x, [x] * len(teachers))]

    def kd_loss(self, student_logits: torch.Tensor, teacher_log_probs: torch.Tensor) -> torch.Tensor:
        return kl_to_teacher(student_logits, teacher_log_probs)

    def needs_anchor(self) -> bool:
        return False

    def distill(self, averaged: State, teachers: list[StagedResNet], round: int) -> State:
        """Distil the teachers' ensemble into the averaged adapter; the best validated student if it beats the
        average on the validation split, else the average (the code's `use_init_server_model`)."""
        with seeded_dropout(self.ctx.seed, round, -1):
            best, best_acc, start = self.run_distillation(averaged, teachers, round)
        if self.params.kd_keep == "last":
            return {**best, **distillation_outcome(1, 100 * (best_acc - start))}
        if best is not None and best_acc > start:
            return {**best, **distillation_outcome(1, 100 * (best_acc - start))}
        return {**averaged, **distillation_outcome(0, 0.0)}

    def run_distillation(
        self, averaged: State, teachers: list[StagedResNet], round: int
    ) -> tuple[Optional[State], float, float]:
        """(the best validated student or None, its validation accuracy, the average's); with kd_keep = "last", the
        final student and its validation accuracy, validated once at the end."""
        p, data = self.params, self.ctx.server
        student = self.adapter_model(averaged, "student")
        anchor = self.adapter_model(averaged, "anchor") if self.needs_anchor() else None  # frozen pre-distillation copy
        trainable = [q for n, q in student.named_parameters() if is_trainable(n)]
        opt = torch.optim.Adam(trainable, lr=p.kd_lr)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, p.kd_steps)
        start = accuracy(student, data.val_x, data.val_y)
        best_acc, best = -1.0, None
        for model in teachers:
            model.train()  # the code's teachers stay in the train mode their local training left them in
        gen = torch_generator(self.ctx.seed, round, -1, "proxy-batches")
        order, pos = torch.randperm(len(data.proxy_y), generator=gen), 0
        with frozen(q for n, q in student.named_parameters() if not is_trainable(n)):
            for step in range(p.kd_steps):
                if pos >= len(order):  # cycle the proxy set, reshuffled
                    order, pos = torch.randperm(len(data.proxy_y), generator=gen), 0
                idx = order[pos : pos + p.kd_batch]
                pos += p.kd_batch
                x, y = data.proxy_x[idx], data.proxy_y[idx]
                pairs = self.views(x, y, teachers, anchor, round, step)
                student.train()
                loss = 0.0
                for student_input, teacher_inputs in pairs:
                    with torch.no_grad():
                        target = ensemble_log_probs([t(xt) for t, xt in zip(teachers, teacher_inputs)], p.ensemble)
                    loss = loss + self.kd_loss(student(student_input), target)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                schedule.step()
                if p.kd_keep == "validated" and (step + 1) % p.kd_eval_every == 0:
                    acc = accuracy(student, data.val_x, data.val_y)
                    if acc > best_acc:
                        best_acc, best = acc, self.adapter_state(student)
        if p.kd_keep == "last":
            return self.adapter_state(student), accuracy(student, data.val_x, data.val_y), start
        return best, best_acc, start
