"""FedAFK (Yin & Mao, IJCNN 2025): adaptive feature aggregation and knowledge transfer.

Each client keeps a personal extractor theta_i, a personal head phi_i and a scalar mu_i; only the global
extractor travels. Per batch: (a) the received global extractor learns under the fixed random head phi_rd;
(b) theta_i learns (1 - lambda) * CE + lambda * KL(global features || personal features) with phi_i frozen;
(c) mu_i follows the gradient of that loss through mu * theta_i + (1 - mu) * theta_G. After each epoch
theta_i <- mu * theta_i + (1 - mu) * theta_G, then phi_i trains one epoch on the frozen new theta_i.
Choices the paper leaves open are flags below, each description naming its reading.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from pfedkit.methods.base import HyperParams, register, searched, select, variant
from pfedkit.methods.functional import FunctionalNet, batched_grads, per_client, sgd_step
from pfedkit.methods.plan import Apply, Joint, LocalPlan, Phase
from pfedkit.methods.sharing import PartSharing
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
    packable = ("mu_init", "kt_weight")  # where each client's mu starts (its state); lambda travels in the plan

    @classmethod
    def pack_key(cls, params: HyperParams) -> tuple[Any, ...]:
        return (params.kt_weight > 0,)  # lambda 0 leaves the teacher out of the step

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
        vmapped: bool,
        lam: torch.Tensor,
    ) -> torch.Tensor:
        """(1 - lambda) * CE + lambda * KT (Eq. 8), the KT term in the reading kt_form names; `heads`: the personal
        head phi_i and the fixed random head phi_rd; `lam`: each client's lambda as a float64 tensor (the plan's
        `values`, so runs differing in it pack)."""
        form = self.params.kt_form
        own, random = heads
        loss = F.cross_entropy(own(features), y)
        if teacher is None:
            return loss
        if form.startswith("logits"):  # both extractors' features through one head: a KL between class posteriors
            head = own if form == "logits-personal-head" else random
            kt = feature_kl(head(features), head(teacher), vmapped)
        else:
            kt = feature_kl(features, teacher, vmapped) * (len(y) if form == "feature-sum" else 1)
        # 1 - lambda in float64, then float32: the numbers a Python float's arithmetic gives
        return (1 - lam).to(loss.dtype) * loss + lam.to(kt.dtype) * kt

    def evaluation_weights(self, client: State, payload: State, data: ClientData, round: int) -> State:
        return self.model_weights(client)

    # ---- the local update, written once as a plan (pfedkit/methods/plan.py): one client at a time the engine runs it
    # as a cohort of one; tests/test_fedafk.py's by_hand is the independent reference ----
    def local_plan(self, payload: State, client: State, data: ClientData, round: int) -> LocalPlan:
        p, cfg = self.params, self.ctx.train
        glob = self.model_weights(payload, self.random_head())
        values = {  # Python floats there
            "mu": torch.tensor(float(client["mu"]), dtype=torch.float64),
            "kt_weight": torch.tensor(p.kt_weight, dtype=torch.float64),
        }
        if p.mu_steps == "epoch":  # the epoch's gradient sum and batch count, for one step at its end
            values.update(
                mu_grad_sum=torch.tensor(0.0, dtype=torch.float64), mu_batches=torch.tensor(0.0, dtype=torch.float64)
            )
        models = {"main": self.model_weights(client), "global": glob, "values": values}
        if p.teacher == "received":
            models["teacher"] = dict(glob)
        if cfg.momentum:  # one optimizer per extractor for all epochs (Alg. 1: each extractor's SGD)
            models["momenta"] = {
                f"{model}/{k}": torch.zeros_like(models[model][k])
                for model in ("global", "main")
                for k in self.body_parameters()
            }
        stages: list = []
        for epoch in range(cfg.local_epochs):
            stages.append(Joint(self.batch_step, purpose=f"train-{epoch}"))
            if p.adaptive_aggregation:
                stages.append(Apply(self.mix))
            stages.append(Phase(parts=("head",), epochs=1, purpose=f"head-{epoch}", head_features=True))
        return LocalPlan(models, stages, results=("main", "global", "values"))

    def plan_result(
        self, trained: dict[str, State], plan: LocalPlan, data: ClientData, round: int
    ) -> tuple[State, State]:
        reply = {**select(trained["global"], ("body",)), "num_samples": data.num_train}
        return reply, {**trained["main"], "mu": float(trained["values"]["mu"])}

    def body_parameters(self) -> list[str]:
        return [name for name, _ in self.model.named_parameters() if name.startswith("body.")]

    def batch_step(self, view: dict, x: torch.Tensor, y: torch.Tensor) -> None:
        """One batch of every client of the view at once, the paper's three updates in order: the global extractor
        (Eq. 4), the personal extractor (Eq. 5, 8), then mu (Eq. 6)."""
        step = self.batch_of(view, x, y)
        global_grads = self.global_extractor_step(step)
        personal_grads = self.personal_extractor_step(step)
        if self.params.adaptive_aggregation:
            self.mixing_weight_step(step, personal_grads, global_grads)

    def batch_of(self, view: dict, x: torch.Tensor, y: torch.Tensor) -> SimpleNamespace:
        """What the three updates of a batch share: the view's stacked models, mu, the body's parameter names, the
        working models (the teacher's forward moves no BatchNorm statistics) and SGD's settings."""
        cfg = self.ctx.train
        glob_t, own_t, teacher_t = self.working_model("global"), self.model, self.working_model("teacher")
        glob_t.train(), own_t.train(), teacher_t.eval()
        return SimpleNamespace(
            view=view,
            x=x,
            y=y,
            g=view["global"],
            w=view["main"],
            mu=view["values"]["mu"],
            lam=view["values"]["kt_weight"],
            body=self.body_parameters(),
            glob_t=glob_t,
            own_t=own_t,
            teacher_t=teacher_t,
            sgd=(cfg.lr, cfg.momentum, cfg.weight_decay),
            momenta=view.get("momenta", {}),
        )

    def sgd_on_body(self, step: SimpleNamespace, model: dict, grads: dict, name: str) -> None:
        with torch.no_grad():
            sgd_step(
                [model[k] for k in step.body],
                [grads[k] for k in step.body],
                [step.momenta[f"{name}/{k}"] for k in step.body] if step.momenta else None,
                *step.sgd,
            )

    @staticmethod
    def beside_body(step: SimpleNamespace, model: dict) -> dict:
        return {k: v for k, v in model.items() if k not in step.body}

    def global_extractor_step(self, step: SimpleNamespace) -> dict:
        """Eq. 4: the global extractor steps on cross-entropy under the fixed random head."""
        glob_t = step.glob_t

        def global_loss(trained: dict, fixed: dict, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(FunctionalNet(glob_t, {**trained, **fixed})(xb), yb)

        g = step.g
        global_grads = batched_grads(
            global_loss, {k: g[k] for k in step.body}, self.beside_body(step, g), step.x, step.y
        )
        self.sgd_on_body(step, g, global_grads, "global")
        return global_grads

    def personal_extractor_step(self, step: SimpleNamespace) -> dict:
        """Eq. 5 and 8: the personal extractor steps on cross-entropy with the personal head frozen, plus the
        transfer term from the teacher's features; through the mixture with mu where personal_step says so."""
        p, g, w, body, x = self.params, step.g, step.w, step.body, step.x
        own_t, glob_t = step.own_t, step.glob_t
        teacher = None
        if p.kt_weight > 0:
            source = step.view["teacher"] if p.teacher == "received" else g
            with torch.no_grad():
                teacher = per_client(lambda wc, xb: FunctionalNet(step.teacher_t, wc).body(xb))(source, x)
        taught = teacher is not None
        teacher = teacher if taught else x.new_zeros(x.shape[0])  # vmap takes tensors only; unread when not taught
        mixes = p.personal_step == "mixture" and p.adaptive_aggregation
        step.glob_body = {k: g[k].detach() for k in body}
        step.teacher, step.taught = teacher, taught

        def personal_loss(
            trained: dict,
            fixed: dict,
            xb: torch.Tensor,
            yb: torch.Tensor,
            teacher_c: Any,
            mu_c: torch.Tensor,
            lam_c: torch.Tensor,
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
                (net.head, random_head), features, yb, teacher_c if taught else None, vmapped=True, lam=lam_c
            )

        step.glob_head = {k: v for k, v in g.items() if k.startswith("head.")}
        personal_grads = batched_grads(
            personal_loss,
            {k: w[k] for k in body},
            self.beside_body(step, w),
            x,
            step.y,
            teacher,
            step.mu,
            step.lam,
            step.glob_body,
            step.glob_head,
        )
        self.sgd_on_body(step, w, personal_grads, "main")
        return personal_grads

    def mixing_weight_step(self, step: SimpleNamespace, personal_grads: dict, global_grads: dict) -> None:
        """Eq. 6: mu by the gradient of the personal loss through the mixed extractor (or APFL's approximation),
        kept in [0, 1] with mu_clip."""
        body, w, g = step.body, step.w, step.g
        if self.params.mu_gradient == "apfl":  # PFLlib's APFL: <theta_i - theta_G, mu grad_i + (1 - mu) grad_G>
            self.mu_step(step.view, apfl_mu_grad(w, g, personal_grads, global_grads, body, step.mu))
            return
        own_t, glob_t, taught = step.own_t, step.glob_t, step.taught

        def mu_loss(
            trained: dict,
            theta: dict,
            fixed: dict,
            xb: torch.Tensor,
            yb: torch.Tensor,
            teacher_c: Any,
            lam_c: torch.Tensor,
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
                lam=lam_c,
            )

        theta = {k: w[k].detach() for k in body}
        fixed = {k: v.clone() if k.startswith("body.") else v for k, v in self.beside_body(step, w).items()}  # BN copy
        grads = batched_grads(
            mu_loss,
            {"mu": step.mu},
            theta,
            fixed,
            step.x,
            step.y,
            step.teacher,
            step.lam,
            step.glob_body,
            step.glob_head,
        )
        self.mu_step(step.view, grads["mu"])

    def mu_step(self, view: dict, grad: torch.Tensor) -> None:
        """mu moves on this batch's gradient (mu_steps = "batch"), or the gradient is kept for the epoch's one step."""
        values = view["values"]
        with torch.no_grad():
            if self.params.mu_steps == "batch":
                self.next_mu(values["mu"], grad)
            else:
                values["mu_grad_sum"].add_(grad)
                values["mu_batches"].add_(1.0)

    def next_mu(self, mu: torch.Tensor, grad: torch.Tensor) -> None:
        """next_mu for every client at once, in place."""
        p = self.params
        moved = mu - self.ctx.train.lr * (grad + p.mu_decay * mu if p.mu_decay else grad)
        mu.copy_(torch.where(torch.isnan(moved), mu, moved.clamp(0.0, 1.0)) if p.mu_clip else moved)

    def mix(self, stacks: dict) -> None:
        """theta_i <- mu * theta_i + (1 - mu) * theta_G for every client (Alg. 1 line 12); float buffers too if
        mix_buffers."""
        values = stacks["values"]
        mu = values["mu"]
        if self.params.mu_steps == "epoch":  # the epoch's one step, on the mean of its batch gradients
            stepped = mu.clone()
            self.next_mu(stepped, values["mu_grad_sum"] / values["mu_batches"].clamp(min=1))
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


def apfl_mu_grad(
    own: dict, glob: dict, own_grads: dict, glob_grads: dict, body: list[str], mu: torch.Tensor
) -> torch.Tensor:
    """PFLlib's APFL approximation of mu's gradient for every client: the sum over the extractor's parameters of
    (theta_i - theta_G) * (mu * grad_i + (1 - mu) * grad_G), with the weights after this batch's steps and this
    batch's gradients (docs/methods.md 1.3-c)."""
    total = torch.zeros_like(mu)
    for k in body:
        m = mu.view(-1, *([1] * (own[k].dim() - 1))).to(own[k].dtype)
        term = (own[k] - glob[k]) * (m * own_grads[k] + (1 - m) * glob_grads[k])
        total = total + term.flatten(1).sum(1).to(total.dtype)
    return total


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
