"""Replies taken as they arrive (run.reply_memory_mb): folded into a running mean, or kept on disk, never changing
a number."""

from __future__ import annotations

import random

import pytest
import torch

from pfedkit.engine import replies as replies_module
from pfedkit.engine.simulation import simulate
from pfedkit.errors import PfedkitError
from pfedkit.io import read_csv
from pfedkit.methods.base import WeightedMeanFold, weighted_mean
from tests.test_engine import COMPARED, synthetic


def some_replies(count: int = 7) -> dict[int, dict]:
    gen = torch.Generator().manual_seed(0)
    return {
        cid: {
            "w": torch.randn(5, 3, generator=gen),
            "steps": torch.tensor(cid + 10),
            "num_samples": int(torch.randint(1, 50, (1,), generator=gen)),
        }
        for cid in range(3, 3 + count)
    }


def held_mean(replies: dict[int, dict]) -> dict:
    """The mean as aggregation computed it before folds existed: every reply at hand, added in client order."""
    ordered = [replies[c] for c in sorted(replies)]
    total = float(sum(r["num_samples"] for r in ordered))
    acc = torch.zeros_like(ordered[0]["w"])
    for r in ordered:
        acc.add_(r["w"], alpha=float(r["num_samples"]) / total)
    return {"w": acc, "steps": ordered[0]["steps"]}


@pytest.mark.parametrize("shuffle_seed", range(5))
def test_a_fold_equals_the_held_mean_bit_for_bit_whatever_the_arrival_order(shuffle_seed):
    replies = some_replies()
    arrival = list(replies)
    random.Random(shuffle_seed).shuffle(arrival)
    fold = WeightedMeanFold(["w", "steps"], {cid: r["num_samples"] for cid, r in replies.items()})
    waiting = []
    for cid in arrival:
        fold.add(cid, replies[cid])
        waiting.append(len(fold.waiting))
    got, want = fold.result(), held_mean(replies)
    assert torch.equal(got["w"], want["w"]) and torch.equal(got["steps"], want["steps"])
    assert torch.equal(weighted_mean(replies, ["w", "steps"])["w"], want["w"])
    assert waiting[-1] == 0  # nothing is left waiting once the last reply is in


def test_a_fold_in_client_order_holds_no_reply():
    replies = some_replies()
    fold = WeightedMeanFold(["w"], {cid: r["num_samples"] for cid, r in replies.items()})
    for cid in sorted(replies):
        fold.add(cid, replies[cid])
        assert not fold.waiting


def test_a_fold_refuses_what_it_did_not_expect():
    replies = some_replies(3)
    weights = {cid: r["num_samples"] for cid, r in replies.items()}
    fold = WeightedMeanFold(["w"], weights)
    first = min(replies)
    fold.add(first, replies[first])
    with pytest.raises(PfedkitError, match="not expected"):
        fold.add(first, replies[first])  # twice
    with pytest.raises(PfedkitError, match="not expected"):
        fold.add(99, replies[first])
    with pytest.raises(PfedkitError, match="weighs"):
        fold.add(first + 1, {**replies[first + 1], "num_samples": 10_000})
    with pytest.raises(PfedkitError, match="before every reply"):
        fold.result()


class Spy:
    """Counts what the round's replies went through."""

    def __init__(self, monkeypatch):
        self.folded, self.spilled = 0, 0
        fold_add, spill_put = WeightedMeanFold.add, replies_module.SpilledReplies.put

        def add(fold, cid, reply):
            self.folded += 1
            fold_add(fold, cid, reply)

        def put(kept, cid, reply):
            spill_put(kept, cid, reply)
            self.spilled += cid in kept.on_disk

        monkeypatch.setattr(WeightedMeanFold, "add", add)
        monkeypatch.setattr(replies_module.SpilledReplies, "put", put)


@pytest.mark.parametrize("method,path", [("fedavg", "folded"), ("fedper", "folded"), ("fedamp", "spilled")])
def test_replies_past_the_budget_give_the_same_run(tmp_path, monkeypatch, method, path):
    base = dict(method={"name": method}, train={"rounds": 3, "join_ratio": 1.0})
    simulate(synthetic(**base, run={"workers": 2}), tmp_path / "held", progress=False)
    spy = Spy(monkeypatch)
    simulate(synthetic(**base, run={"workers": 2, "reply_memory_mb": 0.0001}), tmp_path / "streamed", progress=False)
    assert getattr(spy, path) > 0  # the budget was passed, and the replies went the way the method allows
    got, want = read_csv(tmp_path / "streamed" / "metrics.csv"), read_csv(tmp_path / "held" / "metrics.csv")
    assert [[r[k] for k in COMPARED] for r in got] == [[r[k] for k in COMPARED] for r in want]
    held = torch.load(tmp_path / "held" / "checkpoint.pt", weights_only=True)["server"]
    streamed = torch.load(tmp_path / "streamed" / "checkpoint.pt", weights_only=True)["server"]
    assert held.keys() == streamed.keys()
    assert all(torch.equal(held[k], streamed[k]) for k in held if isinstance(held[k], torch.Tensor))
    assert not (tmp_path / "streamed" / "replies").exists()  # spilled replies are gone once aggregated


@pytest.mark.parametrize("memory_mb", [256.0, 0.0001])  # replies held, or folded in as they arrive
def test_a_reply_weighing_other_than_its_training_split_is_refused_wherever_replies_are_kept(
    tmp_path, monkeypatch, memory_mb
):
    from pfedkit.methods.sharing import PartSharing

    plan_result = PartSharing.plan_result

    def misweighed(self, trained, plan, data, round):
        reply, state = plan_result(self, trained, plan, data, round)
        return {**reply, "num_samples": reply["num_samples"] + 1}, state

    monkeypatch.setattr(PartSharing, "plan_result", misweighed)
    config = synthetic(method={"name": "fedavg"}, train={"rounds": 1}, run={"workers": 0, "reply_memory_mb": memory_mb})
    with pytest.raises(PfedkitError, match="weighs .* not the .* its training split promised"):
        simulate(config, tmp_path / "run", progress=False)
