"""Server-side pieces of PerAda and HEART-PFL: the client ensemble as a teacher, KL and symmetric KL to it, and
PGD adversarial views of the proxy batch (Madry et al.)."""

from __future__ import annotations

from typing import Literal, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from pfedkit.models.base import eval_mode

# pfedkit stores images as (pixel - 0.5) / 0.5 on every channel (pfedkit.data.sources.normalize).
PIXEL_MEAN, PIXEL_STD = 0.5, 0.5


def ensemble_log_probs(teacher_logits: Sequence[torch.Tensor], mode: Literal["probs", "logits"]) -> torch.Tensor:
    """log p-bar: the mean of the teachers' probabilities (paper Eq. 9), or the softmax of their mean logits (the
    PerAda/HEART code); in log space so that the KL terms stay finite."""
    stacked = torch.stack(list(teacher_logits))
    if mode == "logits":
        return F.log_softmax(stacked.mean(0), dim=1)
    return torch.logsumexp(F.log_softmax(stacked, dim=2), dim=0) - torch.log(torch.tensor(float(len(stacked))))


def kl_to_teacher(student_logits: torch.Tensor, teacher_log_probs: torch.Tensor) -> torch.Tensor:
    """KL(p-bar || p_s), batch mean (Eq. 9; F.kl_div with batchmean in the code)."""
    log_ps = F.log_softmax(student_logits, dim=1)
    return (teacher_log_probs.exp() * (teacher_log_probs - log_ps)).sum(1).mean()


def symmetric_kl(student_logits: torch.Tensor, teacher_log_probs: torch.Tensor, symmetric: bool = True) -> torch.Tensor:
    """KL(p-bar || p_s) + KL(p_s || p-bar) (Eq. 10), batch means. `symmetric=False` keeps the first term only:
    what the released code computes on its pinned PyTorch 1.12, where its reverse term is 0 (NaN on current PyTorch)."""
    forward = kl_to_teacher(student_logits, teacher_log_probs)
    if not symmetric:
        return forward
    log_ps = F.log_softmax(student_logits, dim=1)
    return forward + (log_ps.exp() * (log_ps - teacher_log_probs)).sum(1).mean()


def pgd_attack(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    eps: float,
    alpha: float,
    steps: int,
    generator: torch.Generator,
    space: Literal["pixel", "normalized"] = "pixel",
    mean: float = PIXEL_MEAN,
    std: float = PIXEL_STD,
) -> torch.Tensor:
    """L-infinity PGD ascending CE(model(x'), y) from a uniform random start in the eps-ball (Eq. 11); returns
    normalized inputs. `pixel`: the ball and the [0, 1] box live in pixel space (paper, Madry); `normalized`: the
    released code's torchattacks call, which treats normalized tensors as pixels and clamps them to [0, 1].
    The model runs in eval mode during the attack (torchattacks' default) and gets back its mode afterwards."""
    to_model = (lambda p: (p - mean) / std) if space == "pixel" else (lambda p: p)
    base = (x * std + mean) if space == "pixel" else x
    start = (torch.rand(x.shape, generator=generator, dtype=x.dtype) * 2 - 1) * eps
    adv = (base + start).clamp(0, 1)
    with eval_mode(model):
        for _ in range(steps):
            adv.requires_grad_(True)
            loss = F.cross_entropy(model(to_model(adv)), y)
            (grad,) = torch.autograd.grad(loss, adv)
            adv = adv.detach() + alpha * grad.sign()
            adv = torch.minimum(torch.maximum(adv, base - eps), base + eps).clamp(0, 1)
    return to_model(adv).detach()


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1000) -> float:
    """Eval-mode accuracy (the server's validation check); the model's mode is restored."""
    with eval_mode(model):
        correct = sum(
            int((model(x[i : i + batch]).argmax(1) == y[i : i + batch]).sum()) for i in range(0, len(y), batch)
        )
    return correct / max(len(y), 1)
