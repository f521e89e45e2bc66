"""eval.point: where a client's personalized model is measured (round start, right after its local update, or both)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from pfedkit.engine.simulation import Simulation, simulate
from pfedkit.io import read_csv
from tests.test_engine import COMPARED, synthetic


def two_clients(point: str, **sections):
    """FedAvg on two clients, one local step of full-batch gradient descent per round: easy to write out by hand."""
    return synthetic(
        partition={"clients": 2}, train={"rounds": 2, "batch_size": 4096, "lr": 0.5}, eval={"point": point}, **sections
    )


def test_after_local_equals_the_model_after_its_local_step_by_hand(tmp_path):
    sim = Simulation(two_clients("after-local"), tmp_path, progress=False)
    initial = {k: v.clone() for k, v in sim.method.initial_state().items()}
    sim.run()
    model = sim.method.ctx.model_factory()
    for cid in range(2):
        data = sim.fed.client(cid)
        model.load_state_dict(initial)
        loss = F.cross_entropy(model(data.train_x), data.train_y)  # the whole split is one batch
        grads = torch.autograd.grad(loss, list(model.parameters()))
        with torch.no_grad():
            for p, g in zip(model.parameters(), grads):
                p -= 0.5 * g
            correct = int((model(data.test_x).argmax(1) == data.test_y).sum())
        row = next(
            r
            for r in read_csv(tmp_path / "clients.csv")
            if r["round"] == "0" and r["client"] == str(cid) and r["point"] == "after-local"
        )
        assert int(row["correct"]) == correct and int(row["n_test"]) == len(data.test_y)
    metrics = read_csv(tmp_path / "metrics.csv")
    assert metrics[0]["acc"] == "" and float(metrics[0]["acc_after"]) > 0  # the start point was not measured
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["eval_point"] == "after-local" and summary["best_acc"] == summary["best_acc_after"]


def test_both_writes_both_and_leaves_the_start_numbers_as_they_were(tmp_path):
    cfg = dict(
        train={"rounds": 4, "lr": 0.1}, partition={"clients": 6}, run={"seed": 1, "checkpoint_every": 2, "workers": 1}
    )
    start = synthetic(**cfg)
    both = synthetic(eval={"point": "both"}, **cfg)
    simulate(start, tmp_path / "start", progress=False)
    simulate(both, tmp_path / "both", progress=False)
    got, want = read_csv(tmp_path / "both" / "metrics.csv"), read_csv(tmp_path / "start" / "metrics.csv")
    assert [[r[k] for k in COMPARED] for r in got] == [[r[k] for k in COMPARED] for r in want]
    assert all(r["acc_after"] != "" for r in got[:-1]) and got[-1]["acc_after"] == ""  # no training in the last round
    assert "acc_after" not in want[0]  # a start run's files are as before eval.point existed
    summary = json.loads((tmp_path / "both" / "summary.json").read_text())
    assert {"best_acc", "last_acc", "best_acc_after", "last_acc_after"} <= set(summary)
    assert summary["best_acc"] == json.loads((tmp_path / "start" / "summary.json").read_text())["best_acc"]


def test_clients_not_sampled_keep_their_last_after_local_value(tmp_path):
    simulate(synthetic(eval={"point": "after-local"}, train={"rounds": 5, "join_ratio": 0.5}), tmp_path, progress=False)
    rows = [r for r in read_csv(tmp_path / "clients.csv") if r["point"] == "after-local"]
    last: dict[str, tuple[int, int]] = {}
    for round, metric in enumerate(read_csv(tmp_path / "metrics.csv")[:-1]):
        last.update({r["client"]: (int(r["correct"]), int(r["n_test"])) for r in rows if r["round"] == str(round)})
        assert len({r["client"] for r in rows if r["round"] == str(round)}) == 3  # half of the 6 clients trained
        assert float(metric["acc_after"]) == pytest.approx(
            sum(c for c, _ in last.values()) / sum(n for _, n in last.values())
        )


class StopsOnce(Simulation):
    """A run cut off in round 3, after the checkpoint of round 2."""

    def train_clients(self, round, payloads, evaluate_after=False):
        if round == 3 and not getattr(self, "resumed", False):
            raise KeyboardInterrupt
        return super().train_clients(round, payloads, evaluate_after)


def test_an_after_local_run_resumes_to_the_same_numbers(tmp_path):
    cfg = synthetic(eval={"point": "after-local"}, train={"rounds": 5, "join_ratio": 0.5})
    with pytest.raises(KeyboardInterrupt):
        StopsOnce(cfg, tmp_path / "cut", progress=False).run()
    resumed = StopsOnce(cfg, tmp_path / "cut", resume=True, progress=False)
    resumed.resumed = True
    resumed.run()
    simulate(cfg, tmp_path / "straight", progress=False)
    assert (tmp_path / "cut" / "metrics.csv").read_text().count("\n") == 7
    columns = ("round", "acc_after", "acc_client_mean_after", "loss_after")
    got, want = read_csv(tmp_path / "cut" / "metrics.csv"), read_csv(tmp_path / "straight" / "metrics.csv")
    assert [[r[k] for k in columns] for r in got] == [[r[k] for k in columns] for r in want]


@pytest.mark.parametrize("name", ["local", "ditto", "fedafk", "pfedme", "fedfomo"])
def test_a_method_that_keeps_its_model_measures_after_round_r_what_round_r_plus_1_starts_with(tmp_path, name):
    """These methods evaluate the client's own state alone, so the model right after round r's update is the one
    evaluated at the start of round r + 1: the two measurements agree client by client."""
    simulate(synthetic(method={"name": name}, eval={"point": "both"}, train={"rounds": 3}), tmp_path, progress=False)
    rows = {(r["point"], int(r["round"]), r["client"]): r["correct"] for r in read_csv(tmp_path / "clients.csv")}
    after = {(rnd, c): v for (point, rnd, c), v in rows.items() if point == "after-local"}
    assert len(after) == 3 * 6
    assert all(rows["start", rnd + 1, c] == v for (rnd, c), v in after.items())


@pytest.mark.parametrize(
    "name",
    [
        "fedper",
        "fedrep",
        "fedpac",
        "pgfedsplit",
        "pfedhn",
        "fedala",
        "apfl",
        "fedrod",
        "fedbabu",
        "lg-fedavg",
        "fedproto",
        "fedgh",
        "knn-per",
        "per-fedavg",
        "fedamp",
        "fedphp",
        "fedavg-ft",
    ],
)
def test_every_other_kind_of_method_is_measured_after_its_update(tmp_path, name):
    summary = simulate(
        synthetic(method={"name": name}, eval={"point": "both"}, train={"rounds": 2}), tmp_path, progress=False
    )
    assert 0 < summary["best_acc_after"] <= 1 and summary["last_round_after"] == 1


def test_full_last_round_trains_every_client_in_the_last_round_only(tmp_path):
    simulate(synthetic(train={"rounds": 4, "join_ratio": 0.5, "full_last_round": True}), tmp_path, progress=False)
    trained = [int(r["clients_trained"]) for r in read_csv(tmp_path / "metrics.csv")]
    assert trained == [3, 3, 3, 6, 0]  # 6 clients at 0.5, all of them in round 3, none in the evaluation-only round 4


def test_eval_clients_evaluates_a_seeded_sample_and_says_so(tmp_path):
    summary = simulate(synthetic(eval={"clients": 2}, train={"rounds": 3}), tmp_path, progress=False)
    rows = read_csv(tmp_path / "clients.csv")
    per_round = [{r["client"] for r in rows if r["round"] == str(t)} for t in range(4)]
    assert all(len(c) == 2 for c in per_round) and len(set(map(frozenset, per_round))) > 1  # a new sample each round
    again = tmp_path / "again"
    simulate(synthetic(eval={"clients": 2}, train={"rounds": 3}), again, progress=False)
    assert read_csv(again / "clients.csv") == rows  # seeded
    assert summary["evaluated_per_round"] == 2
