"""FedAFK (Yin & Mao, IJCNN 2025): adaptive feature aggregation and knowledge transfer.

Each client keeps a personal extractor theta_i, a personal head phi_i and a scalar mu_i; only the global
extractor travels. Per batch: (a) the received global extractor learns under the fixed random head phi_rd;
(b) theta_i learns (1 - lambda) * CE + lambda * KL(global features || personal features) with phi_i frozen;
(c) mu_i follows the gradient of that loss through mu * theta_i + (1 - mu) * theta_G. After each epoch
theta_i <- mu * theta_i + (1 - mu) * theta_G, then phi_i trains one epoch on the frozen new theta_i.
Choices the paper leaves open are flags below, each description naming its reading.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Literal, Optional

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn
from torch.func import functional_call, vmap

from pfedkit.methods.base import HyperParams, frozen, register, searched, select, variant
from pfedkit.methods.plan import Apply, FunctionalNet, Joint, LocalPlan, Phase, batched_grads, sgd_step
from pfedkit.methods.sharing import PartSharing
from pfedkit.models.base import SplitModel, eval_mode
from pfedkit.records import ClientData, State


class FedAFKParams(HyperParams):
    kt_weight: float = Field(
        0.3,
        ge=0,
        le=1,
        description="lambda, weight of the feature KL; paper Table 1 and Sec. 5.2 (0 = ablation w/o KT)",
        json_schema_extra=searched(0.1, 0.7, source="FedAFK Table 1's range"),
    )
    mu_init: float = Field(
        0.5,
        ge=0,
        le=1,
        description="initial mixing weight mu_i; paper Table 2",
        json_schema_extra=searched(0.1, 1.0, source="FedAFK Table 2's range"),
    )
    adaptive_aggregation: bool = Field(
        True, description="false = ablation w/o AFA: mu fixed at 1, no mixing (paper Table 5)"
    )
    teacher: Literal["received", "current"] = Field(
        "received",
        description="KL teacher: the received global extractor (Eq. 5; docs/methods.md 1.5-c) "
        "or its concurrently updated copy",
    )
    mu_gradient: Literal["exact", "apfl"] = Field(
        "exact",
        description="exact: autograd through the mixed extractor; "
        "apfl: PFLlib's APFL approximation (docs/methods.md 1.3-c)",
    )
    mix_buffers: bool = Field(
        True, description="also mix BatchNorm running statistics with mu; docs/methods.md 1.3 step 3 (recommended)"
    )
    kt_form: Literal["feature-mean", "feature-sum", "logits-personal-head", "logits-random-head"] = Field(
        "logits-personal-head",
        description="Eq. 8's KL, a reading the paper leaves open: softmax over the features, "
        "batch mean (feature-mean, the literal reading) or batch sum (feature-sum); or over the logits of both "
        "extractors' features through the personal head phi_i (logits-personal-head) or the fixed random head phi_rd "
        "(logits-random-head); default logits-personal-head, the one ahead of no KT on each of suite fedafk-kt's 3 "
        "seeds on CIFAR-10 (docs/REPRODUCTION.md)",
    )
    mu_steps: Literal["batch", "epoch"] = Field(
        "batch",
        description="when mu moves (Eq. 6, Alg. 1 lines 9-12, a reading the paper leaves open): a step on every "
        "batch's gradient, or one step per epoch on the mean of the epoch's batch gradients, before the mixing",
    )
    mu_clip: bool = Field(
        True, description="keep mu in [0, 1] after each step (APFL's projection; not in the FedAFK paper)"
    )
    mu_decay: float = Field(
        0.0, ge=0, description="added to mu's gradient times mu: PFLlib's APFL uses 0.02 (not in the FedAFK paper)"
    )
    personal_step: Literal["theta", "mixture"] = Field(
        "theta",
        description="the theta_i step of Eq. 5 on theta_i alone, or through the mixture mu*theta_i + "
        "(1 - mu)*theta_G as the mu step of Eq. 6 and APFL (theta_G held fixed)",
    )

    def inert(self) -> frozenset[str]:
        no_kt = {"kt_form", "teacher"} if self.kt_weight == 0 else set()
        no_mixing = (
            {"mu_init", "mu_gradient", "mix_buffers", "personal_step", "mu_steps", "mu_clip", "mu_decay"}
            if not self.adaptive_aggregation
            else set()
        )
        return frozenset(no_kt | no_mixing)


Head = Callable[[torch.Tensor], torch.Tensor]


@torch.no_grad()
def teacher_features(model: SplitModel, x: torch.Tensor) -> torch.Tensor:
    """The teacher's features in eval mode (our choice): a teacher's forward must not move BatchNorm statistics."""
    with eval_mode(model):
        return model.body(x)


def clip_unit(value: float, fallback: float) -> float:
    """Project onto [0, 1] (APFL's convention); a non-finite step keeps the old value."""
    return fallback if math.isnan(value) else min(max(value, 0.0), 1.0)


def feature_kl(student: torch.Tensor, teacher: torch.Tensor, vmapped: bool = False) -> torch.Tensor:
    """KL(softmax(teacher) || softmax(student)) over the feature dimensions, batch mean (docs/methods.md 1.5-a).
    Under vmap (a cohort) written out, since torch's kl_div has no batching rule there and would run client by
    client."""
    if vmapped:
        target = F.softmax(teacher, -1)
        return (torch.xlogy(target, target) - target * F.log_softmax(student, -1)).sum() / student.shape[0]
    return F.kl_div(F.log_softmax(student, 1), F.softmax(teacher, 1), reduction="batchmean")


@register
class FedAFK(PartSharing):
    name = "fedafk"
    summary = "adaptive mix of personal and global extractors (mu_i), feature-KL transfer, personal head"
    Params = FedAFKParams
    shared = ("body",)
    client_logged = ("mu",)  # metrics.csv: mu_mean, mu_min, mu_max over the round's trained clients

    def init_client(self, cid: int, data: ClientData) -> State:
        # theta_i = theta_G^0 and phi_i = a trainable copy of phi_rd (docs/methods.md 1.2).
        mu = self.params.mu_init if self.params.adaptive_aggregation else 1.0
        return {**self.initial_state(), "mu": mu}

    def personal_loss(
        self,
        heads: tuple[Head, Head],
        features: torch.Tensor,
        y: torch.Tensor,
        teacher: torch.Tensor | None,
        vmapped: bool = False,
    ) -> torch.Tensor:
        """(1 - lambda) * CE + lambda * KT (Eq. 8), the KT term in the reading kt_form names; `heads`: the personal
        head phi_i and the fixed random head phi_rd."""
        lam, form = self.params.kt_weight, self.params.kt_form
        own, random = heads
        loss = F.cross_entropy(own(features), y)
        if teacher is None:
            return loss
        if form.startswith("logits"):  # both extractors' features through one head: a KL between class posteriors
            head = own if form == "logits-personal-head" else random
            kt = feature_kl(head(features), head(teacher), vmapped)
        else:
            kt = feature_kl(features, teacher, vmapped) * (len(y) if form == "feature-sum" else 1)
        return (1 - lam) * loss + lam * kt

    def personal_features(self, personal: SplitModel, glob: SplitModel, mu: float, x: torch.Tensor) -> torch.Tensor:
        """theta_i's features for its own step: theta_i alone, or the mixture with theta_G held fixed."""
        if self.params.personal_step == "theta" or not self.params.adaptive_aggregation:
            return personal.body(x)
        mixed = {
            n: mu * pi + (1 - mu) * pg.detach()
            for (n, pi), pg in zip(personal.body.named_parameters(), glob.body.parameters())
        }
        return functional_call(personal.body, {**mixed, **dict(personal.body.named_buffers())}, (x,))

    def local_update(self, payload: State, client: State, data: ClientData, round: int) -> tuple[State, State]:
        p, cfg = self.params, self.ctx.train
        personal = self.load(client)
        glob = self.load(payload, self.random_head(), slot="global")
        snapshot = self.load(payload, self.random_head(), slot="teacher") if p.teacher == "received" else glob
        mu = float(client["mu"])
        sgd = dict(lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
        opt_global = torch.optim.SGD(glob.body.parameters(), **sgd)
        opt_personal = torch.optim.SGD(personal.body.parameters(), **sgd)
        for epoch in range(cfg.local_epochs):
            grad_sum, batches = 0.0, 0  # mu's gradients over the epoch, with mu_steps = "epoch"
            glob.train()
            personal.train()
            # phi_rd never trains; phi_i is frozen in steps (a)-(c)
            with frozen([*glob.head.parameters(), *personal.head.parameters()]):
                for xb, yb in self.minibatches(data, round, f"train-{epoch}", epochs=1):
                    # (a) the global extractor under the fixed random head (Eq. 4)
                    sup = F.cross_entropy(glob(xb), yb)
                    opt_global.zero_grad(set_to_none=True)
                    sup.backward()
                    opt_global.step()
                    # (b) the personal extractor: CE with frozen phi_i plus feature KL to the teacher (Eq. 5)
                    teacher = teacher_features(snapshot, xb) if p.kt_weight > 0 else None
                    total = self.personal_loss(
                        (personal.head, glob.head), self.personal_features(personal, glob, mu, xb), yb, teacher
                    )
                    opt_personal.zero_grad(set_to_none=True)
                    total.backward()
                    opt_personal.step()
                    # (c) mu by the gradient of the same loss through the mixed extractor (Eq. 6), kept in [0, 1]
                    if p.adaptive_aggregation:
                        grad = self.mu_grad(personal, glob, mu, xb, yb, teacher)
                        if p.mu_steps == "batch":
                            mu = self.next_mu(mu, grad)
                        else:
                            grad_sum, batches = grad_sum + grad, batches + 1
            if p.adaptive_aggregation:
                if batches:
                    mu = self.next_mu(mu, grad_sum / batches)
                self.mix_into(personal, glob, mu)
            self.fit_head(personal, data, round, epochs=1, purpose=f"head-{epoch}")  # Eq. 7 on the new theta_i
        reply = {**self.state_of(glob, ("body",)), "num_samples": data.num_train}
        return reply, {**self.state_of(personal), "mu": mu}

    def next_mu(self, mu: float, grad: float) -> float:
        """mu after one gradient step (Eq. 6), with mu_decay's term; kept in [0, 1] with mu_clip; a non-finite step
        keeps the old value with mu_clip (APFL's convention), else it stops the run as any non-finite state does."""
        p = self.params
        value = mu - self.ctx.train.lr * (grad + p.mu_decay * mu if p.mu_decay else grad)
        return clip_unit(value, mu) if p.mu_clip else value

    def mu_grad(
        self,
        personal: SplitModel,
        glob: SplitModel,
        mu: float,
        x: torch.Tensor,
        y: torch.Tensor,
        teacher: torch.Tensor | None,
    ) -> float:
        if self.params.mu_gradient == "apfl":
            # PFLlib's APFL approximation: <theta_i - theta_G, mu * grad_i + (1 - mu) * grad_G>, this batch's grads.
            with torch.no_grad():
                return sum(
                    float(((pi - pg) * (mu * pi.grad + (1 - mu) * pg.grad)).sum())
                    for pi, pg in zip(personal.body.parameters(), glob.body.parameters())
                )
        mu_t = torch.tensor(mu, requires_grad=True)
        mixed = {
            n: mu_t * pi.detach() + (1 - mu_t) * pg.detach()
            for (n, pi), pg in zip(personal.body.named_parameters(), glob.body.parameters())
        }
        buffers = {n: b.clone() for n, b in personal.body.named_buffers()}  # BatchNorm may update them in place
        features = functional_call(personal.body, {**mixed, **buffers}, (x,))
        (grad,) = torch.autograd.grad(self.personal_loss((personal.head, glob.head), features, y, teacher), mu_t)
        return float(grad)

    def mix_into(self, personal: SplitModel, glob: SplitModel, mu: float) -> None:
        """theta_i <- mu * theta_i + (1 - mu) * theta_G (Alg. 1 line 12); float buffers too if mix_buffers."""
        with torch.no_grad():
            for pi, pg in zip(personal.body.parameters(), glob.body.parameters()):
                pi.mul_(mu).add_(pg, alpha=1 - mu)
            if self.params.mix_buffers:
                for bi, bg in zip(personal.body.buffers(), glob.body.buffers()):
                    if torch.is_floating_point(bi):
                        bi.mul_(mu).add_(bg, alpha=1 - mu)

    def personalized_model(self, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        return self.load(client)  # {theta_i, phi_i}; the global extractor is never used for inference

    def evaluation_weights(self, client: State, payload: State, data: ClientData, round: int) -> State:
        return self.model_weights(client)

    # ---- the same local update over a cohort of clients (pfedkit/methods/plan.py): local_update is the reference ----
    def local_plan(self, payload: State, client: State, data: ClientData, round: int) -> Optional[LocalPlan]:
        p, cfg = self.params, self.ctx.train
        if p.mu_gradient == "apfl":  # reads the gradients the optimizers hold: written as code only
            return None
        glob = self.model_weights(payload, self.random_head())
        values = {"mu": torch.tensor(float(client["mu"]), dtype=torch.float64)}  # a Python float there
        if p.mu_steps == "epoch":  # the epoch's gradient sum and batch count, for one step at its end
            values.update(
                mu_grad_sum=torch.tensor(0.0, dtype=torch.float64), mu_batches=torch.tensor(0.0, dtype=torch.float64)
            )
        models = {"main": self.model_weights(client), "global": glob, "values": values}
        if p.teacher == "received":
            models["teacher"] = dict(glob)
        if cfg.momentum:  # one optimizer per extractor for all epochs, as local_update's
            models["momenta"] = {
                f"{model}/{k}": torch.zeros_like(models[model][k])
                for model in ("global", "main")
                for k in self.body_parameters()
            }
        stages: list = []
        for epoch in range(cfg.local_epochs):
            stages.append(Joint(self.cohort_step, purpose=f"train-{epoch}"))
            if p.adaptive_aggregation:
                stages.append(Apply(self.cohort_mix))
            stages.append(Phase(parts=("head",), epochs=1, purpose=f"head-{epoch}", head_features=True))
        return LocalPlan(models, stages, results=("main", "global", "values"))

    def plan_result(
        self, trained: dict[str, State], plan: LocalPlan, data: ClientData, round: int
    ) -> tuple[State, State]:
        reply = {**select(trained["global"], ("body",)), "num_samples": data.num_train}
        return reply, {**trained["main"], "mu": float(trained["values"]["mu"])}

    def body_parameters(self) -> list[str]:
        return [name for name, _ in self.model.named_parameters() if name.startswith("body.")]

    def cohort_step(self, view: dict, x: torch.Tensor, y: torch.Tensor) -> None:
        """Steps (a), (b) and (c) of local_update for every client of the view at once."""
        p, cfg = self.params, self.ctx.train
        glob_t, own_t, teacher_t = self.working_model("global"), self.model, self.working_model("teacher")
        glob_t.train(), own_t.train(), teacher_t.eval()  # the teacher's forward moves no BatchNorm statistics
        g, w, mu = view["global"], view["main"], view["values"]["mu"]
        body = self.body_parameters()
        sgd = (cfg.lr, cfg.momentum, cfg.weight_decay)
        momenta = view.get("momenta", {})

        def step(model: dict, grads: dict, name: str) -> None:
            with torch.no_grad():
                sgd_step(
                    [model[k] for k in body],
                    [grads[k] for k in body],
                    [momenta[f"{name}/{k}"] for k in body] if momenta else None,
                    *sgd,
                )

        def rest(model: dict) -> dict:
            return {k: v for k, v in model.items() if k not in body}

        # (a) the global extractor under the fixed random head
        def global_loss(trained: dict, fixed: dict, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(FunctionalNet(glob_t, {**trained, **fixed})(xb), yb)

        step(g, batched_grads(global_loss, {k: g[k] for k in body}, rest(g), x, y), "global")
        # (b) the personal extractor, with the teacher's features
        teacher = None
        if p.kt_weight > 0:
            source = view["teacher"] if p.teacher == "received" else g
            with torch.no_grad():
                teacher = vmap(lambda wc, xb: FunctionalNet(teacher_t, wc).body(xb))(source, x)
        taught = teacher is not None
        teacher = teacher if taught else x.new_zeros(x.shape[0])  # vmap takes tensors only; unread when not taught
        mixes = p.personal_step == "mixture" and p.adaptive_aggregation
        glob_body = {k: g[k].detach() for k in body}

        def personal_loss(
            trained: dict,
            fixed: dict,
            xb: torch.Tensor,
            yb: torch.Tensor,
            teacher_c: Any,
            mu_c: torch.Tensor,
            glob_c: dict,
            glob_head: dict,
        ) -> torch.Tensor:
            net = FunctionalNet(own_t, {**trained, **fixed})
            if mixes:
                m = mu_c.to(xb.dtype)
                mixed = {k: m * trained[k] + (1 - m) * glob_c[k] for k in body}
                features = FunctionalNet(own_t, {**mixed, **fixed}).body(xb)
            else:
                features = net.body(xb)
            random_head = FunctionalNet(glob_t, glob_head).head
            return self.personal_loss(
                (net.head, random_head), features, yb, teacher_c if taught else None, vmapped=True
            )

        glob_head = {k: v for k, v in g.items() if k.startswith("head.")}
        step(
            w,
            batched_grads(personal_loss, {k: w[k] for k in body}, rest(w), x, y, teacher, mu, glob_body, glob_head),
            "main",
        )
        # (c) mu by the gradient through the mixed extractor, kept in [0, 1]
        if not p.adaptive_aggregation:
            return

        def mu_loss(
            trained: dict,
            theta: dict,
            fixed: dict,
            xb: torch.Tensor,
            yb: torch.Tensor,
            teacher_c: Any,
            glob_c: dict,
            glob_head_c: dict,
        ) -> torch.Tensor:
            m = trained["mu"].to(xb.dtype)
            mixed = {k: m * theta[k] + (1 - m) * glob_c[k] for k in body}
            net = FunctionalNet(own_t, {**mixed, **fixed})
            return self.personal_loss(
                (net.head, FunctionalNet(glob_t, glob_head_c).head),
                net.body(xb),
                yb,
                teacher_c if taught else None,
                vmapped=True,
            )

        theta = {k: w[k].detach() for k in body}
        fixed = {k: v.clone() if k.startswith("body.") else v for k, v in rest(w).items()}  # BatchNorm: a copy
        grad = batched_grads(mu_loss, {"mu": mu}, theta, fixed, x, y, teacher, glob_body, glob_head)["mu"]
        with torch.no_grad():
            if p.mu_steps == "batch":
                self.cohort_next_mu(mu, grad)
            else:
                view["values"]["mu_grad_sum"].add_(grad)
                view["values"]["mu_batches"].add_(1.0)

    def cohort_next_mu(self, mu: torch.Tensor, grad: torch.Tensor) -> None:
        """next_mu for every client at once, in place."""
        p = self.params
        moved = mu - self.ctx.train.lr * (grad + p.mu_decay * mu if p.mu_decay else grad)
        mu.copy_(torch.where(torch.isnan(moved), mu, moved.clamp(0.0, 1.0)) if p.mu_clip else moved)

    def cohort_mix(self, stacks: dict) -> None:
        """theta_i <- mu * theta_i + (1 - mu) * theta_G for every client (Alg. 1 line 12); float buffers too if
        mix_buffers."""
        values = stacks["values"]
        mu = values["mu"]
        if self.params.mu_steps == "epoch":  # the epoch's one step, on the mean of its batch gradients
            stepped = mu.clone()
            self.cohort_next_mu(stepped, values["mu_grad_sum"] / values["mu_batches"].clamp(min=1))
            mu.copy_(torch.where(values["mu_batches"] > 0, stepped, mu))
            values["mu_grad_sum"].zero_(), values["mu_batches"].zero_()
        buffers = [
            k
            for k, v in self.model.state_dict().items()
            if k.startswith("body.") and torch.is_floating_point(v) and k not in dict(self.model.named_parameters())
        ]
        for k in self.body_parameters() + (buffers if self.params.mix_buffers else []):
            own, glob = stacks["main"][k], stacks["global"][k]
            m = mu.view(-1, *([1] * (own.dim() - 1))).to(own.dtype)
            own.mul_(m).add_(glob * (1 - m))


# The paper's ablations (Table 5) as named presets of the same flags, so a comparison can list them as rows.
variant(FedAFK, "fedafk-no-afa", "FedAFK without adaptive feature aggregation (Table 5)", adaptive_aggregation=False)
variant(FedAFK, "fedafk-no-kt", "FedAFK without knowledge transfer (Table 5)", kt_weight=0.0)
variant(
    FedAFK,
    "fedafk-no-both",
    "FedAFK without both: a standalone personal model (Table 5)",
    kt_weight=0.0,
    adaptive_aggregation=False,
)
