"""PGFedSplit: the period rule, synthetic embeddings, the alpha solver, the adaptation gap, missed broadcasts."""

from __future__ import annotations

import csv
import math

import pytest
import torch
import torch.nn.functional as F

from pfedkit.engine import local_update
from pfedkit.experiments import run_experiment
from pfedkit.methods.pgfedsplit import (
    AGG,
    head_of,
    minimize_on_unit_interval,
    next_period,
    synthetic_embeddings,
    variance_scales,
)
from tests.conftest import make, tiny_data
from tests.test_engine import synthetic


def test_period_moves_against_the_mean_alpha_and_stays_clipped():
    period, prev, seen = 5, 0.0, []
    for alpha in (0.4, 0.6, 0.7, 0.7, 0.5, 0.3, 0.2, 0.1, 0.05, 0.9):
        period, prev = next_period(period, alpha, prev, low=2, high=8), alpha
        seen.append(period)
    # rose three times (4, 3, 2), unchanged (2), fell five times (3 .. 7), rose (6)
    assert seen == [4, 3, 2, 2, 3, 4, 5, 6, 7, 6]
    assert next_period(2, 0.9, 0.1, low=2, high=8) == 2 and next_period(8, 0.1, 0.9, low=2, high=8) == 8


def test_synthetic_embeddings_follow_counts_label_shares_and_the_class_gaussians():
    shares = torch.tensor([0.7, 0.3, 0.0])
    means = torch.tensor([[1.0, -2.0], [5.0, 0.5], [9.0, 9.0]], dtype=torch.float64)
    variances = torch.tensor([[0.25, 1.0], [4.0, 0.01], [1.0, 1.0]], dtype=torch.float64)
    scales = variance_scales(shares, "label")
    torch.testing.assert_close(scales[:2], torch.tensor([0.3, 0.7]) / 0.5)  # (1 - q) over its mean on present classes
    z, y = synthetic_embeddings(
        shares, 30000, 0.5, means, variances, torch.tensor([True, True, True]), scales, torch.Generator().manual_seed(0)
    )
    assert len(y) == math.ceil(0.5 / 0.5 * 30000) and not bool((y == 2).any())  # labels only from held classes
    assert abs(float((y == 0).double().mean()) - 0.7) < 0.01
    for k in (0, 1):
        zk = z[y == k]
        torch.testing.assert_close(zk.mean(0), means[k], atol=0.05, rtol=0)
        torch.testing.assert_close(
            zk.var(0), scales[k].double() * variances[k], atol=0.03 * float(variances[k].max() * 2), rtol=0.05
        )
    z, y = synthetic_embeddings(
        shares, 10, 0.75, means, variances, torch.tensor([True, False, False]), scales, torch.Generator().manual_seed(1)
    )
    assert bool((y == 0).all()) and len(y) <= 30  # ceil(3 * 10) drawn, those without statistics dropped


@pytest.mark.parametrize("target", [0.3, 0.0, 1.0, 0.123456, -1.0, 2.0])
def test_alpha_solver_finds_the_minimizer_of_a_convex_function_on_the_unit_interval(target):
    calls = []

    def objective(a):
        calls.append(a)
        return (a - target) ** 2 + 0.1 * abs(a - target) ** 3

    best = minimize_on_unit_interval(objective)
    assert abs(best - min(max(target, 0.0), 1.0)) < 1e-6
    assert len(calls) <= 8  # a whole grid a call: on a GPU, one host sync a pass, not one an evaluation (~126)


def test_alpha_is_the_minimizer_of_eq_13_as_one_alpha_at_a_time_finds_it():
    """The grid of alphas evaluated at once gives the alpha that Eq. 13, evaluated alpha by alpha in float64, is least
    at (float32 logits blur it by about 3e-4 here: the objective is evaluated in float64)."""
    method = make("pgfedsplit", params={"gap_weight": 0.5})
    data = tiny_data(n=40)
    payload = head_payload(method, method.init_server())
    model = method.load(payload, method.init_client(0, data))
    z, y = method.embedding_set(model, payload, data, round=10)
    with torch.no_grad():
        own, aggregated = model.head(z).double(), head_of(method.working_model("aggregated-head"), payload, AGG)(z)
        aggregated, T = aggregated.double(), method.params.kd_temperature
        log_own, log_aggregated = F.log_softmax(own / T, 1), F.log_softmax(aggregated / T, 1)
        kl = float(F.kl_div(log_aggregated, log_own, log_target=True, reduction="batchmean"))

        def one(alpha: float) -> float:
            return float(F.cross_entropy(alpha * own + (1 - alpha) * aggregated, y)) + 0.5 * 4 * kl * alpha**2

        want = min((i / 20000 for i in range(20001)), key=one)
    got = method.mixing_weight(model, payload, z, y, gap=4)
    assert 0.05 < want < 0.95 and abs(got - want) <= 1e-4  # the grid above: 5e-5 apart


def head_payload(method, server):
    payload = method.payload(server, 0, 0)
    g = torch.Generator().manual_seed(5)
    payload[AGG + "weight"] = torch.randn(2, 3, generator=g)
    payload[AGG + "bias"] = torch.randn(2, generator=g)
    return payload


def test_a_longer_gap_leans_further_toward_the_aggregated_head():
    method = make("pgfedsplit", params={"gap_weight": 0.5})
    data = tiny_data(n=40)
    payload = head_payload(method, method.init_server())
    client = method.init_client(0, data)
    model = method.load(payload, client)
    z, y = method.embedding_set(model, payload, data, round=10)
    alphas = [method.mixing_weight(model, payload, z, y, gap) for gap in (1, 5, 20)]
    assert alphas[0] > alphas[1] > alphas[2]
    reply, after = local_update(method, payload, {**client, "last_adapted": 3}, data, round=10)
    assert reply["alpha"] == pytest.approx(method.mixing_weight(method.load(payload, client), payload, z, y, 7))
    assert after["last_adapted"] == 10


def test_after_local_model_is_the_trained_body_and_head_of_a_round_that_delivered_a_head():
    """eval.point after-local in a round that delivers a head: {theta, phi_i} as trained, the delivered head mixed
    in before training; not the broadcast body with the client's head (what the evaluation-time reading loads)."""
    method = make("pgfedsplit", params={"gap_weight": 0.5})
    data = tiny_data(n=40)
    payload = head_payload(method, method.init_server())
    reply, after = local_update(method, payload, method.init_client(0, data), data, round=10)
    assert "alpha" in reply  # the head was delivered and mixed in this round
    model = method.trained_model(reply, after, payload, data, 10)
    trained = {k: v.clone() for k, v in model.state_dict().items()}  # the method's working model is reused below
    for k in ("body.0.weight", "body.0.bias", "head.weight", "head.bias"):
        assert torch.equal(trained[k], reply[k]), k
    broadcast_body = method.personalized_model(after, payload, data, 10).state_dict()
    assert not torch.equal(trained["body.0.weight"], broadcast_body["body.0.weight"])  # the local step is in it


def test_the_server_aggregates_heads_every_period_and_a_client_that_missed_one_gets_the_next_with_its_gap():
    method = make("pgfedsplit", params={"period_init": 2, "adaptive_period": False})
    data = {cid: tiny_data(cid, n=16) for cid in (0, 1)}
    server = method.init_server()
    clients = {cid: method.init_client(cid, data[cid]) for cid in (0, 1)}
    alphas = {}
    schedule = {0: (0, 1), 1: (0, 1), 2: (0,), 3: (0, 1), 4: (0, 1)}  # client 1 misses round 2
    for round, sampled in schedule.items():
        replies = {}
        for cid in sampled:
            payload = method.payload(server, round, cid)
            if any(k.startswith(AGG) for k in payload):
                alphas[(round, cid)] = round - clients[cid]["last_adapted"]
            replies[cid], clients[cid] = local_update(method, payload, clients[cid], data[cid], round)
            assert ("alpha" in replies[cid]) == ((round, cid) in alphas)
        server = method.aggregate(server, replies, round)
    # heads aggregated after rounds 1 and 3, so broadcast in rounds 2 and 4; client 1 missed round 2
    assert alphas == {(2, 0): 2, (4, 0): 2, (4, 1): 4}
    assert clients[1]["last_adapted"] == 4


def test_apa_moves_the_period_only_in_rounds_where_a_head_was_delivered():
    method = make("pgfedsplit", params={"period_init": 3})
    server = {**method.init_server(), "alpha_prev": 0.5, "counter": 1}
    reply = {
        "body.0.weight": torch.zeros(3, 4),
        "body.0.bias": torch.zeros(3),
        "head.weight": torch.zeros(2, 3),
        "head.bias": torch.zeros(2),
        "protos": torch.zeros(2, 3),
        "proto_counts": torch.tensor([1, 1]),
        "num_samples": 4,
    }
    assert method.aggregate(server, {0: reply}, 7)["period"] == 3  # no alpha came back: unchanged
    after = method.aggregate(server, {0: {**reply, "alpha": 0.8}, 1: {**reply, "alpha": 0.6}}, 7)
    assert after["period"] == 2 and after["alpha_prev"] == pytest.approx(0.7)
    assert after["counter"] == 0 and AGG + "weight" in after  # counter 2 reached the new period 2


@pytest.mark.parametrize("name", ["pgfedsplit", "pgfedsplit-no-both"])
def test_pgfedsplit_runs_through_the_engine(tmp_path, name):
    summary = run_experiment(
        synthetic(method={"name": name, "period_init": 2}, train={"rounds": 6}), tmp_path, progress=False
    )
    assert summary["last_acc"] > 0.5
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))[:-1]  # the last round only evaluates
    periods = [float(r["period"]) for r in rows]
    alphas = [float(r["alpha_prev"]) for r in rows]
    assert alphas[:2] == [0.0, 0.0] and alphas[2] > 0  # heads aggregated after round 1 reach clients in round 2
    if name == "pgfedsplit-no-both":
        assert periods == [2.0] * 6
    else:  # APA moves tau only in rounds where a head was delivered, i.e. where the mean alpha was renewed
        assert periods[2] == 1.0
        assert all(periods[t] == periods[t - 1] for t in range(1, 6) if alphas[t] == alphas[t - 1])


@pytest.mark.parametrize("distance", ["mse", "squared-norm"])
def test_the_prototype_term_in_both_readings_of_eq_14(distance):
    from pfedkit.methods.pgfedsplit import prototype_distance

    z = torch.tensor([[1.0, 2.0, 3.0], [0.0, 1.0, 0.0], [2.0, 2.0, 2.0]])
    labels = torch.tensor([0, 1, 1])
    protos = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    # by hand: ||z - p_y||^2 per sample = 14, 2, 3; Eq. 14 as written averages them over the batch
    squared_norm = (14 + 2 + 3) / 3
    got = prototype_distance(z, labels, protos, torch.tensor([True, True]), distance)
    assert float(got) == pytest.approx(squared_norm if distance == "squared-norm" else squared_norm / 3)
    # a class without a global prototype adds nothing
    assert float(prototype_distance(z, labels, protos, torch.tensor([False, True]), distance)) == pytest.approx(
        (2 + 3) / 3 / (1 if distance == "squared-norm" else 3)
    )
