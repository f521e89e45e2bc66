"""HEART-PFL (Kim & Kim, WACV 2026): PerAda's adapters plus hierarchical directional alignment (HDA) on the
client and adversarial knowledge transfer (AKT) on the server.

HDA: at the start of a round a client takes class prototypes of every stage (class means of the pooled stage
outputs) from its personalized model; features are pulled towards their class's prototype by 1 - cosine on the
early stages and MSE on the deep ones (Eq. 6-7). AKT: after averaging, the student (the average) learns the
symmetric KL to the clients' ensemble on the clean proxy batch and on PGD views of it, each teacher attacked on
its own and the student's view made against the frozen average (Eq. 10-12, Alg. 1 lines 15-19).
Where the released code differs, a flag gives its behaviour (docs/methods.md 2.5):
- alignment "paper": HDA trains the local adapter phi_k (Eq. 8 minimises over theta; docs/methods.md 2.5-a, "paper",
  which departs from Alg. 1 line 11's CE only); "code": HDA of the global copy is computed without gradient, so
  it is only logged; "off": no HDA.
- symmetric = false: the code's effective loss on its pinned PyTorch (reverse KL term 0).
- pgd_space "normalized": the code clamps normalized inputs to [0, 1].
- ensemble "logits": the code averages logits (Eq. 9 averages probabilities).
- prox_weight 1.0: the code's `lmbda` without the paper's 1/2.
"""

from __future__ import annotations

from typing import Literal, Optional

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from pfedkit.methods.base import register, variant
from pfedkit.methods.distillation import pgd_attack, symmetric_kl
from pfedkit.methods.perada import AdapterLoss, PerAda, PerAdaParams
from pfedkit.methods.prototypes import class_means
from pfedkit.models.adapters import StagedResNet
from pfedkit.records import ClientData, State
from pfedkit.seeding import torch_generator


class HeartParams(PerAdaParams):
    prox_weight: float = Field(
        0.5, ge=0, description="weight of ||omega - theta||^2: paper Eq. 8's 1/2 (code `lmbda` = 1.0 without the 1/2)"
    )
    alignment: Literal["paper", "code", "off"] = Field(
        "paper",
        description="HDA: paper = trains phi_k with gradient (docs/methods.md 2.5-a); "
        "code = logged only; off = ablation",
    )
    align_weight: float = Field(
        0.1, ge=0, description="weight of L_HDA; code `align_lambda` = 0.1 (the paper does not state it)"
    )
    early_stages: int = Field(
        2, ge=0, description="stages aligned by 1 - cosine, the rest by MSE; paper Fig. 4 and code: layer1-2"
    )
    adversarial: bool = Field(
        True, description="AKT's PGD views of the proxy batch (false: clean view only, Fig. 5 ablation)"
    )
    clean_view: bool = Field(True, description="AKT's clean view (false: adversarial only, Fig. 5 ablation)")
    symmetric: bool = Field(
        True,
        description="symmetric KL (Eq. 10); false = forward KL only, the code's effective loss "
        "(its reverse term is 0 on PyTorch 1.12, NaN now)",
    )
    pgd_eps: float = Field(8 / 255, ge=0, description="PGD radius in pixel units; code (torchattacks PGD) 8/255")
    pgd_alpha: float = Field(2 / 255, gt=0, description="PGD step; code 2/255")
    pgd_steps: int = Field(20, ge=1, description="PGD iterations; code `PGD(model, steps=20)`")
    pgd_space: Literal["pixel", "normalized"] = Field(
        "pixel",
        description="pixel = attack in [0, 1] pixels then normalize (paper, Madry); "
        "normalized = the code's clamp of normalized inputs",
    )
    ensemble: Literal["logits", "probs"] = Field(
        "probs", description="teacher: mean of probabilities (paper Eq. 9) or softmax of mean logits (code)"
    )

    @model_validator(mode="after")
    def _some_view(self) -> "HeartParams":
        if not (self.adversarial or self.clean_view):
            raise ValueError("adversarial and clean_view are both false: AKT needs at least one view")
        return self


def alignment_loss(
    features: list[torch.Tensor],
    labels: torch.Tensor,
    prototypes: list[torch.Tensor],
    available: torch.Tensor,
    early_stages: int,
) -> torch.Tensor:
    """L_HDA (Eq. 6-7): mean over stages and samples of 1 - cos (early stages) or the dimension-mean squared error
    (deep stages) to the sample's class prototype; a class without a prototype contributes 0 but still counts."""
    has = available[labels].to(features[0].dtype)
    total = features[0].new_zeros(())
    for stage, (f, protos) in enumerate(zip(features, prototypes)):
        target = protos[labels]
        per_sample = 1 - F.cosine_similarity(f, target, dim=1) if stage < early_stages else (f - target).pow(2).mean(1)
        total = total + (per_sample * has).sum()
    return total / (len(features) * len(labels))


@register
class HeartPFL(PerAda):
    name = "heart-pfl"
    summary = (
        "PerAda adapters + hierarchical directional alignment (cosine early, MSE deep) "
        "+ adversarial symmetric-KL transfer on proxy data"
    )
    Params = HeartParams

    # ---- client ----
    @torch.no_grad()
    def stage_prototypes(
        self, model: StagedResNet, data: ClientData, round: int
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Class means of each stage's pooled output over the local training set, with the model in train mode
        as the code has it (batch-mode BatchNorm, whose running statistics move)."""
        model.train()
        per_stage, labels = None, []
        for idx in self.batches(data, round, "prototypes", epochs=1, drop_single=True):
            _, stages = model.stages(data.train_x[idx])
            per_stage = [[s] for s in stages] if per_stage is None else [acc + [s] for acc, s in zip(per_stage, stages)]
            labels.append(data.train_y[idx])
        y = torch.cat(labels)
        means = [class_means(torch.cat(chunks), y, self.ctx.num_classes) for chunks in per_stage]
        return [m for m, _ in means], means[0][1] > 0

    def client_context(self, personal: StagedResNet, payload: State, data: ClientData, round: int) -> dict:
        if self.params.alignment == "off":
            return {}
        protos, available = self.stage_prototypes(personal, data, round)
        return {"protos": protos, "available": available, "logged": []}

    def hda(self, features: list[torch.Tensor], y: torch.Tensor, context: dict) -> torch.Tensor:
        return alignment_loss(features, y, context["protos"], context["available"], self.params.early_stages)

    def personal_loss(self, payload: State, context: dict) -> AdapterLoss:
        prox_loss = super().personal_loss(payload, context)
        if self.params.alignment != "code":
            return prox_loss
        glob = self.adapter_model(payload, "global-view")  # the code's copy g of theta^r
        weight = self.params.align_weight

        def loss(model: StagedResNet, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():  # as released: a constant, so it only shows in the logged loss
                glob.train()
                value = self.hda(glob.stages(x)[1], y, context)
            context["logged"].append(float(value))
            return prox_loss(model, x, y) + weight * value

        return loss

    def local_loss(self, payload: State, context: dict) -> AdapterLoss:
        if self.params.alignment != "paper":
            return super().local_loss(payload, context)
        weight = self.params.align_weight

        def loss(model: StagedResNet, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            logits, features = model.stages(x)
            value = self.hda(features, y, context)
            context["logged"].append(float(value.detach()))
            return F.cross_entropy(logits, y) + weight * value

        return loss

    # ---- server ----
    def needs_anchor(self) -> bool:
        return self.params.adversarial

    def views(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        teachers: list[StagedResNet],
        anchor: Optional[StagedResNet],
        round: int,
        step: int,
    ) -> list[tuple[torch.Tensor, list[torch.Tensor]]]:
        p = self.params
        pairs = [(x, [x] * len(teachers))] if p.clean_view else []
        if p.adversarial:
            gen = torch_generator(self.ctx.seed, round, step, "pgd")

            def attack(model: StagedResNet) -> torch.Tensor:
                return pgd_attack(
                    model, x, y, eps=p.pgd_eps, alpha=p.pgd_alpha, steps=p.pgd_steps, generator=gen, space=p.pgd_space
                )

            pairs.append((attack(anchor), [attack(t) for t in teachers]))  # each teacher attacked on its own
        return pairs

    def kd_loss(self, student_logits: torch.Tensor, teacher_log_probs: torch.Tensor) -> torch.Tensor:
        return symmetric_kl(student_logits, teacher_log_probs, self.params.symmetric)


# The paper's component ablations (Table 3) as presets of the same flags, so a suite can list them as rows.
variant(
    HeartPFL, "heart-pfl-no-hda", "HEART-PFL without hierarchical directional alignment (ablation)", alignment="off"
)
variant(
    HeartPFL,
    "heart-pfl-no-akt",
    "HEART-PFL without adversarial knowledge transfer: plain averaging on the server (ablation)",
    kd_rounds=0,
)
variant(
    HeartPFL,
    "heart-pfl-no-both",
    "HEART-PFL without HDA and AKT: personalized adapters proximal to averaged adapters (ablation)",
    alignment="off",
    kd_rounds=0,
)
