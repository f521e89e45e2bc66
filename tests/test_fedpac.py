"""FedPAC, its prototype-softmax variant, and the prototype machinery they share with FedProto and FedGH."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pfedkit.engine import local_update
from pfedkit.experiments import run_experiment
from pfedkit.methods.fedpac import HEAD_KEY, feature_statistics, psd_repair, simplex_qp
from pfedkit.methods.prototypes import NearestPrototype, aggregate_prototypes, class_means
from tests.conftest import make, tiny_data
from tests.test_engine import synthetic


# ---- the QP ----
def test_qp_finds_the_known_optimum_inside_the_simplex():
    # min sum_i q_i a_i^2 over the simplex: a_i proportional to 1 / q_i
    weights = simplex_qp(np.diag([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(weights, np.array([6, 3, 2]) / 11, atol=1e-6)


def test_qp_finds_an_optimum_on_the_boundary_and_zeroes_tiny_weights():
    # a^2 + 2ab + 4b^2 with b = 1 - a is 3a^2 - 6a + 4, minimal at a = 1
    weights = simplex_qp(np.array([[1.0, 1.0], [1.0, 4.0]]), min_weight=1e-3)
    np.testing.assert_allclose(weights, [1.0, 0.0], atol=1e-9)
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = rng.normal(size=(6, 6))
        weights = simplex_qp(a @ a.T + np.diag(rng.uniform(0, 1, 6)), min_weight=1e-3)
        assert weights.min() >= 0 and abs(weights.sum() - 1) < 1e-9
        assert not np.any((weights > 0) & (weights < 1e-3))


def test_psd_repair_keeps_a_psd_matrix_and_drops_small_eigenpairs_otherwise():
    psd = np.array([[2.0, 1.0], [1.0, 2.0]])
    assert psd_repair(psd, 0.01) is psd
    vectors = np.linalg.qr(np.random.default_rng(1).normal(size=(3, 3)))[0]
    broken = vectors @ np.diag([-0.5, 0.005, 3.0]) @ vectors.T
    repaired = psd_repair(broken, 0.01)
    np.testing.assert_allclose(repaired, 3.0 * np.outer(vectors[:, 2], vectors[:, 2]), atol=1e-12)


def test_feature_statistics_match_their_definition():
    g = torch.Generator().manual_seed(0)
    z, y = torch.randn(12, 3, generator=g, dtype=torch.float64), torch.tensor([0, 0, 1, 1, 1, 0, 1, 1, 1, 0, 0, 1])
    variance, h = feature_statistics(z, y, num_classes=3)
    n, expected_v = 12, 0.0
    for k in (0, 1):
        zk = z[y == k]
        p = len(zk) / n
        assert torch.allclose(h[k], p * zk.mean(0))
        expected_v += p * zk.pow(2).sum(1).mean() - p**2 * zk.mean(0).pow(2).sum()
    assert torch.allclose(h[2], torch.zeros(3, dtype=torch.float64))  # absent class
    assert torch.isclose(variance, expected_v / n)


# ---- server-side head combination ----
def fedpac_replies(method, seed=0):
    """Replies of three clients with distinct heads and statistics, as FedPAC's local update shapes them."""
    g = torch.Generator().manual_seed(seed)
    replies = {}
    for cid in (0, 3, 7):
        counts = torch.randint(1, 5, (2,), generator=g)
        replies[cid] = {
            "body.0.weight": torch.randn(3, 4, generator=g),
            "body.0.bias": torch.randn(3, generator=g),
            "head.weight": torch.randn(2, 3, generator=g),
            "head.bias": torch.randn(2, generator=g),
            "protos": torch.randn(2, 3, generator=g),
            "proto_counts": counts,
            "feature_var": torch.rand((), generator=g),
            "label_means": torch.randn(2, 3, generator=g),
            "num_samples": int(counts.sum()),
        }
    return replies


def combined_heads(server, cids):
    return {
        cid: (server[HEAD_KEY.format(cid=cid) + "weight"], server[HEAD_KEY.format(cid=cid) + "bias"]) for cid in cids
    }


def qp_by_hand(replies, i):
    cids = sorted(replies)
    h = np.stack([replies[c]["label_means"].double().flatten().numpy() for c in cids])
    v = np.array([float(replies[c]["feature_var"]) for c in cids])
    diff = h[cids.index(i)] - h
    return simplex_qp(psd_repair(np.diag(v) + diff @ diff.T, 0.01), 1e-3)


def test_each_client_gets_the_qp_combination_of_this_rounds_trained_heads_whatever_the_reply_order():
    method = make("fedpac")
    replies = fedpac_replies(method)
    server = method.init_server()
    # stale combined heads from an earlier round must not enter this round's combination
    for cid in replies:
        server[HEAD_KEY.format(cid=cid) + "weight"] = torch.full((2, 3), 99.0)
        server[HEAD_KEY.format(cid=cid) + "bias"] = torch.full((2,), 99.0)
    forward = method.aggregate(dict(server), dict(replies), round=3)
    backward = method.aggregate(dict(server), dict(reversed(list(replies.items()))), round=3)
    cids = sorted(replies)
    for cid in cids:
        weights = qp_by_hand(replies, cid)
        expected_w = sum(w * replies[c]["head.weight"] for w, c in zip(weights, cids))
        expected_b = sum(w * replies[c]["head.bias"] for w, c in zip(weights, cids))
        for server_after in (forward, backward):
            got_w, got_b = combined_heads(server_after, [cid])[cid]
            torch.testing.assert_close(got_w, expected_w.float(), atol=1e-6, rtol=0)
            torch.testing.assert_close(got_b, expected_b.float(), atol=1e-6, rtol=0)


def test_a_client_receives_its_own_combined_head_with_the_global_body_and_centroids():
    method = make("fedpac")
    replies = fedpac_replies(method)
    server = method.aggregate(method.init_server(), replies, round=0)
    payload = method.payload(server, 1, cid=3)
    assert torch.equal(payload["head.weight"], server[HEAD_KEY.format(cid=3) + "weight"])
    assert not any(k.startswith("combined_head") for k in payload)  # no other client's head travels
    assert torch.equal(payload["protos"], aggregate_prototypes(replies[c] for c in (0, 3, 7))["protos"])
    assert "head.weight" not in method.payload(server, 1, cid=5)  # never selected: no combined head yet


@pytest.mark.parametrize("direction", ["others-through-own", "own-through-others"])
def test_proto_softmax_weights_equal_a_hand_computed_softmax(direction):
    """Eq. 12-13 in both index readings: f_ij = client j's prototypes through i's head (the report's text), or
    client i's prototypes through j's head (the transposed reading); alpha_i = softmax over j of -f_ij."""
    method = make("fedpac-proto", params={"proto_direction": direction})
    replies = fedpac_replies(method, seed=2)
    replies[3]["proto_counts"] = torch.tensor([4, 0])  # client 3 lacks class 1: its term covers class 0 only
    cids = sorted(replies)
    losses = torch.zeros(3, 3)
    for i, ci in enumerate(cids):
        for j, cj in enumerate(cids):
            head_of, protos_of = (ci, cj) if direction == "others-through-own" else (cj, ci)
            w, b = replies[head_of]["head.weight"], replies[head_of]["head.bias"]
            terms = []
            for k in range(2):
                if replies[protos_of]["proto_counts"][k] > 0:
                    logits = replies[protos_of]["protos"][k] @ w.T + b
                    terms.append(torch.logsumexp(logits, 0) - logits[k])  # cross-entropy of class k
            losses[i, j] = sum(terms) / len(terms)
    expected = torch.exp(-losses) / torch.exp(-losses).sum(1, keepdim=True)
    got = method.proto_softmax_weights([replies[c] for c in cids])
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    server = method.aggregate(method.init_server(), replies, round=0)
    combined = sum(expected[1, j] * replies[c]["head.weight"] for j, c in enumerate(cids))
    torch.testing.assert_close(combined_heads(server, [3])[3][0], combined, atol=1e-6, rtol=0)


# ---- the client side ----
def test_fedpac_first_round_has_no_alignment_and_later_rounds_do():
    data = tiny_data(n=12)
    method, plain = make("fedpac"), make("fedpac", params={"align_weight": 0.0})
    server = method.init_server()
    first, _ = local_update(method, method.payload(server, 0, 0), method.init_client(0, data), data, 0)
    reference, _ = local_update(plain, plain.payload(server, 0, 0), plain.init_client(0, data), data, 0)
    for key in ("body.0.weight", "head.weight"):
        assert torch.equal(first[key], reference[key])  # no centroids yet: CE only
    server = method.aggregate(server, {0: first}, round=0)
    aligned, _ = local_update(method, method.payload(server, 1, 0), method.init_client(0, data), data, 1)
    unaligned, _ = local_update(plain, plain.payload(server, 1, 0), plain.init_client(0, data), data, 1)
    assert not torch.allclose(aligned["body.0.weight"], unaligned["body.0.weight"])
    assert torch.equal(aligned["head.weight"], unaligned["head.weight"])  # the head epoch comes before alignment


def test_fedpac_reply_statistics_use_the_received_body_and_centroids_the_trained_one():
    data = tiny_data(n=12)
    method = make("fedpac")
    server = method.init_server()
    reply, client = local_update(method, method.payload(server, 0, 0), method.init_client(0, data), data, 0)
    received = method.load(server, method.init_client(0, data))
    with torch.no_grad():
        variance, h = feature_statistics(received.body(data.train_x), data.train_y, 2)
        trained = method.load(reply)
        protos, counts = class_means(trained.body(data.train_x), data.train_y, 2)
    torch.testing.assert_close(reply["feature_var"], variance)
    torch.testing.assert_close(reply["label_means"], h)
    torch.testing.assert_close(reply["protos"], protos)
    assert torch.equal(reply["proto_counts"], counts) and set(client) == {"head.weight", "head.bias"}


def test_fedpac_runs_through_the_engine_with_partial_participation(tmp_path):
    for name in ("fedpac", "fedpac-proto"):
        summary = run_experiment(
            synthetic(method={"name": name}, train={"join_ratio": 0.5, "rounds": 8}), tmp_path / name, progress=False
        )
        assert summary["last_acc"] > 0.5


# ---- the shared prototype machinery, FedProto and FedGH ----
def test_prototypes_are_count_weighted_and_a_missing_class_keeps_its_previous_prototype():
    a = {"protos": torch.tensor([[1.0, 0.0], [0.0, 0.0]]), "proto_counts": torch.tensor([1, 0])}
    b = {"protos": torch.tensor([[4.0, 3.0], [0.0, 0.0]]), "proto_counts": torch.tensor([2, 0])}
    previous = {"protos": torch.tensor([[9.0, 9.0], [5.0, 6.0]]), "proto_counts": torch.tensor([1, 7])}
    out = aggregate_prototypes([a, b], previous=previous)
    torch.testing.assert_close(out["protos"], torch.tensor([[3.0, 2.0], [5.0, 6.0]]))
    assert out["proto_counts"].tolist() == [3, 7]


def test_nearest_prototype_predicts_the_closest_available_class():
    protos = torch.tensor([[0.0, 0.0], [10.0, 0.0], [1.0, 0.0]])
    model = NearestPrototype(torch.nn.Identity(), protos, torch.tensor([True, True, False]))
    x = torch.tensor([[0.9, 0.0], [8.0, 0.0], [0.2, 0.1]])
    assert model(x).argmax(1).tolist() == [0, 1, 0]  # class 2 is closest to the first point but has no prototype
    assert torch.isfinite(F.cross_entropy(model(x), torch.tensor([2, 1, 0])))


def test_fedproto_sends_only_prototypes_and_its_step_is_ce_plus_prototype_mse():
    data = tiny_data(n=12)
    method = make("fedproto", params={"proto_weight": 0.7}, batch_size=12)  # one step: all 12 samples
    server = method.init_server()
    reply, client = local_update(method, method.payload(server, 0, 0), method.init_client(0, data), data, 0)
    assert set(reply) == {"protos", "proto_counts", "num_samples"}
    server = {"protos": torch.tensor([[0.5, -1.0, 2.0], [0.0, 0.0, 0.0]]), "proto_counts": torch.tensor([3, 0])}
    stepped, _ = local_update(method, method.payload(server, 1, 0), client, data, 1)
    # by hand: CE + 0.7 * mean over batch x dims of (z - P[y])^2, where only class 0 has a prototype
    params = {k: v.clone().requires_grad_() for k, v in client.items()}
    z = torch.relu(data.train_x @ params["body.0.weight"].T + params["body.0.bias"])
    target = torch.where((data.train_y == 0).unsqueeze(1), server["protos"][data.train_y], z.detach())
    loss = (
        F.cross_entropy(z @ params["head.weight"].T + params["head.bias"], data.train_y)
        + 0.7 * ((z - target) ** 2).mean()
    )
    grads = torch.autograd.grad(loss, list(params.values()))
    after = {k: v - 0.1 * g for (k, v), g in zip(params.items(), grads)}
    with torch.no_grad():
        z_after = torch.relu(data.train_x @ after["body.0.weight"].T + after["body.0.bias"])
    torch.testing.assert_close(stepped["protos"], class_means(z_after, data.train_y, 2)[0], atol=1e-6, rtol=0)
    model = method.personalized_model(client, method.payload(server, 1, 0), data, 1)
    assert isinstance(model, NearestPrototype)


def test_fedgh_server_trains_the_global_head_on_class_means():
    method = make("fedgh", params={"server_lr": 0.5, "server_epochs": 20})
    replies = fedpac_replies(method)
    server = method.init_server()

    def loss(head):
        feats = torch.cat([r["protos"] for r in replies.values()])
        labels = torch.tensor([0, 1] * len(replies))
        return F.cross_entropy(feats @ head["head.weight"].T + head["head.bias"], labels)

    after = method.aggregate(server, replies, round=0)
    assert set(after) == {"head.weight", "head.bias"}
    assert loss(after) < loss(server) - 0.05
    data = tiny_data()
    reply, client = local_update(method, method.payload(after, 1, 0), method.init_client(0, data), data, 1)
    assert set(reply) == {"protos", "proto_counts", "num_samples"} and set(client) == {"body.0.weight", "body.0.bias"}
    model = method.personalized_model(client, method.payload(after, 1, 0), data, 1)
    assert torch.equal(model.head.weight, after["head.weight"]) and torch.equal(
        model.body[0].weight, client["body.0.weight"]
    )


@pytest.mark.parametrize("name", ["fedproto", "fedgh"])
def test_prototype_methods_run_through_the_engine(tmp_path, name):
    summary = run_experiment(synthetic(method={"name": name}), tmp_path, progress=False)
    assert summary["last_acc"] > 0.5


def test_fedgh_server_step_equals_sgd_over_the_present_class_means_by_hand():
    """The global head's SGD runs over (class mean, class) of every replying client, in client order, skipping a class
    a client does not hold (its mean is not a feature); batches drawn with the server's seeded order."""
    from pfedkit.seeding import torch_generator

    lr, bs = 0.5, 4
    method = make("fedgh", params={"server_lr": lr, "server_epochs": 2}, batch_size=bs)
    replies = fedpac_replies(method)
    replies[3]["proto_counts"] = torch.tensor([2, 0])  # client 3 holds no sample of class 1
    replies[3]["protos"][1] = 7.0  # what an absent class's row holds must not matter
    server = method.init_server()
    features = torch.stack(
        [replies[0]["protos"][0], replies[0]["protos"][1], replies[3]["protos"][0]]
        + [replies[7]["protos"][0], replies[7]["protos"][1]]
    )
    labels = torch.tensor([0, 1, 0, 0, 1])
    w, b = server["head.weight"].clone(), server["head.bias"].clone()
    gen = torch_generator(method.ctx.seed, 0, -1, "fedgh-server")
    for _ in range(2):
        order = torch.randperm(len(labels), generator=gen)
        for start in range(0, len(labels), bs):
            idx = order[start : start + bs]
            params = [w.requires_grad_(), b.requires_grad_()]
            loss = F.cross_entropy(features[idx] @ params[0].T + params[1], labels[idx])
            gw, gb = torch.autograd.grad(loss, params)
            w, b = (w - lr * gw).detach(), (b - lr * gb).detach()
    after = method.aggregate(server, replies, round=0)
    assert torch.allclose(after["head.weight"], w, atol=1e-6) and torch.allclose(after["head.bias"], b, atol=1e-6)
