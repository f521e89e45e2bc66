"""Evaluation: a personalized model on a client's test split, and the round's metrics over clients."""

from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from pfedkit.seeding import numpy_generator

EVAL_BATCH = 1000  # large batches: evaluation is forward-only


@torch.no_grad()
def evaluate_model(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[int, float, int]:
    """(correct, summed cross-entropy, samples)."""
    model.eval()
    correct, loss = 0, 0.0
    for start in range(0, len(y), EVAL_BATCH):
        logits = model(x[start : start + EVAL_BATCH])
        target = y[start : start + EVAL_BATCH]
        correct += int((logits.argmax(1) == target).sum())
        loss += float(F.cross_entropy(logits, target, reduction="sum"))
    return correct, loss, int(len(y))


def summarize_round(per_client: Mapping[int, tuple[int, float, int]]) -> dict[str, Any]:
    """Sample-weighted accuracy (PFLlib's sum of correct / sum of samples) and the mean of client accuracies."""
    per_client = {cid: per_client[cid] for cid in sorted(per_client)}  # sums in client order, whatever finished first
    correct = sum(c for c, _, _ in per_client.values())
    total = sum(n for _, _, n in per_client.values())
    loss = sum(s for _, s, _ in per_client.values())
    client_accs = [c / n for c, _, n in per_client.values() if n > 0]
    if total == 0:  # nothing measured (no evaluated client holds a test sample): no number, not an accuracy of 0
        return {"acc": None, "acc_client_mean": None, "loss": None}
    return {
        "acc": correct / total,
        "acc_client_mean": sum(client_accs) / len(client_accs),
        "loss": loss / total,
    }


def summarize_run(rows: list[dict[str, Any]], suffix: str = "") -> dict[str, Any]:
    """Best and last of both accuracies over the evaluated rounds (of the columns ending in `suffix`: "" for the
    start point, "_after" for after-local), keyed with the same suffix."""
    acc, mean = "acc" + suffix, "acc_client_mean" + suffix
    evaluated = [r for r in rows if r.get(acc) is not None]
    if not evaluated:
        return {}
    best = max(evaluated, key=lambda r: r[acc])
    return {
        "best_acc" + suffix: best[acc],
        "best_round" + suffix: best["round"],
        "last_acc" + suffix: evaluated[-1][acc],
        "best_acc_client_mean" + suffix: max(r[mean] for r in evaluated),
        "last_acc_client_mean" + suffix: evaluated[-1][mean],
        "last_round" + suffix: evaluated[-1]["round"],
    }


# ---- the evaluation point (eval.point): at the start of a round, and/or right after local training ----


def measures_start(point: str) -> bool:
    """Every evaluated client's personalized model after the broadcast, before training (PFLlib's point)."""
    return point in ("start", "both")


def measures_after(point: str) -> bool:
    """Each trained client's model right after its local update (FedPAC's released code)."""
    return point in ("after-local", "both")


def evaluates_after(point: str, every: int, rounds: int, round: int) -> bool:
    """After-local evaluation on the training rounds the start point would evaluate, and the last one."""
    return measures_after(point) and round < rounds and (round % every == 0 or round == rounds - 1)


def evaluated_clients(count: int, num_clients: int, seed: int, round: int) -> list[int]:
    """Every client, or with eval.clients = count a seeded sample of them (large federations)."""
    if not count or count >= num_clients:
        return list(range(num_clients))
    chosen = numpy_generator(seed, round, -1, "eval-clients").choice(num_clients, count, replace=False)
    return sorted(int(c) for c in chosen)
