"""More of the papers' baselines (FedAMP, FedFomo, FedPHP, kNN-Per, pFedHN, FedProto-per), each checked by hand."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from pfedkit.engine import local_update
from tests.conftest import make, tiny_data
from tests.test_baselines import LR, forward, leaf, sgd


def perturbed(state, scale, seed):
    g = torch.Generator().manual_seed(seed)
    return {k: v + scale * torch.randn(v.shape, generator=g) for k, v in state.items()}


def test_fedamp_attention_weights_and_cloud_models_by_hand():
    method = make("fedamp", params={"alpha_k": 0.5, "sigma": 2.0})
    base = method.init_client(0, tiny_data())
    models = {cid: perturbed(base, 0.1 * (cid + 1), cid) for cid in (3, 1, 2)}  # replies arrive in any order
    replies = {cid: {**m, "num_samples": 8} for cid, m in models.items()}
    server = method.aggregate({}, replies, round=0)
    cids = [1, 2, 3]
    self_weights = []
    for i in cids:
        off = {}
        for j in cids:
            if j != i:
                squared = sum(float((models[i][k] - models[j][k]).pow(2).sum()) for k in base)
                off[j] = 0.5 * math.exp(-squared / 2.0) / 2.0
        xi = {**off, i: 1.0 - sum(off.values())}
        self_weights.append(xi[i])
        assert 0 < off[min(off)] < 0.25  # the attention is neither zero nor saturated here
        payload = method.payload(server, 1, i)
        for k in base:
            expected = sum(xi[j] * models[j][k] for j in cids)
            torch.testing.assert_close(payload[k], expected, atol=1e-6, rtol=0)
    assert server["self_weight"] == pytest.approx(sum(self_weights) / 3, abs=1e-6)  # logged to metrics.csv


def test_fedamp_regularizer_carries_gradient_and_the_step_equals_a_hand_computation():
    method = make("fedamp", params={"alpha_k": 0.5, "lamda": 2.0}, batch_size=8, lr=LR)
    data = tiny_data(n=8)
    own = method.init_client(0, data)
    cloud = perturbed(own, 0.5, 7)
    _, after = local_update(method, cloud, own, data, round=0)
    w = leaf(own)
    ce = F.cross_entropy(forward(w, data.train_x)[1], data.train_y)
    expected = sgd(w, ce + 2.0 / (2 * 0.5) * sum((w[k] - cloud[k]).pow(2).sum() for k in w))
    w = leaf(own)
    plain = sgd(w, F.cross_entropy(forward(w, data.train_x)[1], data.train_y))
    for k in own:
        torch.testing.assert_close(after[k], expected[k], atol=1e-6, rtol=0)
    assert any(not torch.allclose(after[k], plain[k], atol=1e-4) for k in own)  # the regularizer moved the update
    evaluated = method.personalized_model(after, cloud, data, 1)
    assert torch.equal(evaluated.state_dict()["head.weight"], after["head.weight"])  # w_i is evaluated, not u_i


def val_loss_by_hand(state, x, y):
    with torch.no_grad():
        return float(F.cross_entropy(forward(state, x)[1], y))


def test_fedfomo_weights_by_hand_and_a_model_that_worsens_validation_loss_gets_weight_zero():
    method = make("fedfomo", batch_size=4, lr=LR)
    data = tiny_data(n=20)
    own = method.init_client(0, data)
    train, vx, vy = method.split(data)
    assert len(vy) == 4 and train.num_train == 16
    better = dict(own)
    for _ in range(20):  # descend on the validation data: a model that helps this client
        w = leaf(better)
        better = sgd(w, F.cross_entropy(forward(w, vx)[1], vy))
    halfway = {k: (own[k] + better[k]) / 2 for k in own}
    worse = dict(own)
    for _ in range(20):  # ascend on it: a model that hurts this client
        w = leaf(worse)
        worse = sgd(w, -F.cross_entropy(forward(w, vx)[1], vy))
    downloaded = [better, worse, halfway]
    weights = method.fomo_weights(own, downloaded, vx, vy)
    base = val_loss_by_hand(own, vx, vy)
    for got, other in zip(weights.tolist(), downloaded):
        gap = math.sqrt(sum(float((other[k] - own[k]).pow(2).sum()) for k in own))
        assert got == pytest.approx((base - val_loss_by_hand(other, vx, vy)) / gap, rel=1e-5)
    assert weights[0] > 0 and weights[2] > 0 and weights[1] < 0
    moved = method.federate(own, downloaded, weights)
    share = [
        float(weights[0]) / float(weights[0] + weights[2]),
        0.0,
        float(weights[2]) / float(weights[0] + weights[2]),
    ]
    for k in own:
        expected = own[k] + sum(s * (m[k] - own[k]) for s, m in zip(share, downloaded))
        torch.testing.assert_close(moved[k], expected, atol=1e-6, rtol=0)
    unchanged = method.federate(own, [worse], method.fomo_weights(own, [worse], vx, vy))
    assert all(torch.equal(unchanged[k], own[k]) for k in own)  # no positive weight: the client keeps its model


def test_fedfomo_server_keeps_models_and_affinities_and_downloads_greedily():
    method = make("fedfomo", params={"epsilon": 0.0, "num_models": 2})
    server = method.init_server()
    replies = {}
    for cid in range(4):
        reply, _ = local_update(
            method,
            method.payload(server, 0, cid),
            method.init_client(cid, tiny_data(cid, n=10)),
            tiny_data(cid, n=10),
            round=0,
        )
        assert reply["fomo_ids"].numel() == 0  # nothing stored yet in round 0
        replies[cid] = reply
    replies[0] = {
        **replies[0],
        "fomo_ids": torch.tensor([3, 1]),
        "fomo_weights": torch.tensor([0.7, -0.2], dtype=torch.float64),
    }
    server = method.aggregate(server, replies, 0)
    assert server["affinity"][0, 3] == pytest.approx(0.7) and server["affinity"][0, 1] == pytest.approx(-0.2)
    payload = method.payload(server, 1, 0)
    assert payload["fomo_ids"].tolist()[0] == 3 and 0 not in payload["fomo_ids"].tolist()
    assert torch.equal(payload["fomo.0.head.weight"], replies[3]["head.weight"])
    reply, after = local_update(method, payload, method.init_client(0, tiny_data(0, n=10)), tiny_data(0, n=10), 1)
    assert reply["fomo_weights"].shape == (2,)
    assert torch.equal(
        method.personalized_model(after, payload, tiny_data(0), 2).state_dict()["head.weight"], after["head.weight"]
    )


def mmd_by_hand(a, b, kernels=5, mul=2.0):
    pooled = list(a) + list(b)
    n = len(pooled)
    sq = [[float((u - v).pow(2).sum()) for v in pooled] for u in pooled]
    base = sum(sq[i][j] for i in range(n) for j in range(n) if i != j) / (n * n - n) / mul ** (kernels // 2)

    def k(i, j):
        return sum(math.exp(-sq[i][j] / (base * mul**t)) for t in range(kernels))

    m = len(a)
    xx = sum(k(i, j) for i in range(m) for j in range(m)) / m**2
    yy = sum(k(i, j) for i in range(m, n) for j in range(m, n)) / m**2
    xy = sum(k(i, j) for i in range(m) for j in range(m, n)) / m**2
    return xx + yy - 2 * xy


def test_fedphp_mmd_by_hand():
    from pfedkit.methods.fedphp import mmd

    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g) + 1.0
    assert float(mmd(a, b)) == pytest.approx(mmd_by_hand(a, b), rel=1e-5)
    assert float(mmd(a, b)) > 0 and float(mmd(a, a)) == pytest.approx(0.0, abs=1e-6)
    dead = torch.zeros(4, 3, requires_grad=True)  # all-zero (dead ReLU) features: zero, with a finite gradient
    loss = mmd(dead, torch.zeros(4, 3))
    loss.backward()
    assert float(loss.detach()) == 0 and bool(torch.isfinite(dead.grad).all())


def test_fedphp_local_step_with_mmd_transfer_and_moving_average_by_hand():
    from pfedkit.methods.fedphp import mmd

    method = make("fedphp", params={"expected_participations": 6, "transfer_weight": 0.3}, batch_size=8, lr=LR)
    data, server = tiny_data(n=8), method.init_server()
    hpm = perturbed(server, 0.5, 9)
    reply, after = local_update(method, server, {**hpm, "participations": 3}, data, round=4)
    with torch.no_grad():
        teacher = forward(hpm, data.train_x)[0]
    w = leaf(server)
    z, logits = forward(w, data.train_x)
    expected = sgd(w, 0.7 * F.cross_entropy(logits, data.train_y) + 0.3 * mmd(z, teacher))
    w = leaf(server)
    plain = sgd(w, 0.7 * F.cross_entropy(forward(w, data.train_x)[1], data.train_y))
    mu = 0.9 * 3 / 6
    for k in server:
        torch.testing.assert_close(reply[k], expected[k], atol=1e-6, rtol=0)
        torch.testing.assert_close(after[k], mu * hpm[k] + (1 - mu) * expected[k], atol=1e-6, rtol=0)
    assert any(not torch.allclose(reply[k], plain[k], atol=1e-5) for k in server)  # the MMD term moved the update
    assert after["participations"] == 4
    local, first = local_update(method, server, method.init_client(0, data), data, round=0)
    assert all(torch.equal(first[k], local[k]) for k in server)  # mu = 0 at the first participation: a copy
    local, late = local_update(method, server, {**hpm, "participations": 50}, data, round=60)
    for k in server:  # mu capped at 0.9
        torch.testing.assert_close(late[k], 0.9 * hpm[k] + 0.1 * local[k], atol=1e-6, rtol=0)
    assert torch.equal(
        method.personalized_model(after, server, data, 5).state_dict()["head.weight"], after["head.weight"]
    )  # the HPM is evaluated
    with pytest.raises(Exception, match="expected_participations"):
        make("fedphp")


def test_knn_per_interpolated_prediction_by_hand_and_zero_weight_is_the_global_model():
    method = make("knn-per", params={"neighbors": 3, "knn_weight": 0.4, "scale": 0.5})
    data, server = tiny_data(n=8), perturbed(make("knn-per").init_server(), 0.5, 2)
    data.test_x = torch.randn(5, 4, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        memory = forward(server, data.train_x)[0]
        z, logits = forward(server, data.test_x)
        out = method.personalized_model({}, server, data, round=3)(data.test_x)
    for row in range(5):
        squared = [float((z[row] - m).pow(2).sum()) for m in memory]
        nearest = sorted(range(8), key=lambda j: squared[j])[:3]
        sims = {j: math.exp(-squared[j] / (3 * 0.5)) for j in nearest}
        knn = [sum(s for j, s in sims.items() if int(data.train_y[j]) == c) / sum(sims.values()) for c in range(2)]
        glob = torch.softmax(logits[row], 0).tolist()
        expected = [0.4 * knn[c] + 0.6 * glob[c] for c in range(2)]
        torch.testing.assert_close(out[row].exp(), torch.tensor(expected), atol=1e-6, rtol=0)
    plain = make("knn-per", params={"knn_weight": 0.0}).personalized_model({}, server, data, round=3)
    with torch.no_grad():
        torch.testing.assert_close(plain(data.test_x).exp(), torch.softmax(logits, 1), atol=1e-7, rtol=0)
        assert torch.equal(plain(data.test_x).argmax(1), logits.argmax(1))
    reply, _ = local_update(method, server, {}, data, 0)  # training is FedAvg's
    fedavg_reply, _ = local_update(make("fedavg"), server, {}, data, 0)
    assert all(torch.equal(reply[k], fedavg_reply[k]) for k in server)


def test_pfedhn_gradients_reach_the_embedding_of_the_client_that_trained_and_no_other():
    from pfedkit.methods.pfedhn import HyperNetwork

    method = make("pfedhn", params={"embed_dim": 3, "hidden": 8, "hidden_layers": 1}, batch_size=8, lr=LR)
    server = method.init_server()
    replies = {}
    for cid in range(3):
        data = tiny_data(cid, n=8)
        payload = method.payload(server, 0, cid)
        reply, kept = local_update(method, payload, {}, data, 0)
        assert kept == {} and set(reply) == {"delta." + k for k in payload} | {"num_samples"}
        replies[cid] = reply
    server = method.aggregate(server, replies, 0)  # every client has a stored embedding now
    data = tiny_data(1, n=8)
    payload = method.payload(server, 1, 1)
    reply, _ = local_update(method, payload, {}, data, 1)
    w = leaf(payload)
    expected_step = sgd(w, F.cross_entropy(forward(w, data.train_x)[1], data.train_y))
    for k in payload:  # the client trained the generated model and replied the change
        torch.testing.assert_close(reply["delta." + k], expected_step[k] - payload[k], atol=1e-6, rtol=0)
    after = method.aggregate(server, {1: reply}, 1)
    for cid in (0, 2):
        assert torch.equal(after[f"embedding.{cid}"], server[f"embedding.{cid}"])
        assert torch.equal(after[f"embedding_momentum.{cid}"], server[f"embedding_momentum.{cid}"])
    # client 1's embedding: the gradient of theta(v) . (-delta), then SGD with momentum 0.9 and weight decay 1e-3
    net = HyperNetwork(3, 8, 1, {k: v.shape for k, v in payload.items()})
    net.load_state_dict({k[3:]: v for k, v in server.items() if k.startswith("hn.")})
    v = server["embedding.1"].clone().requires_grad_()
    generated = net(v)
    surrogate = sum((generated[k] * -reply["delta." + k]).sum() for k in generated)
    (grad,) = torch.autograd.grad(surrogate, [v])
    assert float(grad.norm()) > 0
    buffer = 0.9 * server["embedding_momentum.1"] + grad + 1e-3 * server["embedding.1"]
    torch.testing.assert_close(after["embedding.1"], server["embedding.1"] - 1e-2 * buffer, atol=1e-7, rtol=0)
    assert not torch.equal(after["hn.mlp.0.weight"], server["hn.mlp.0.weight"])
    evaluated = method.personalized_model({}, payload, data, 2)
    assert torch.equal(evaluated.state_dict()["head.weight"], payload["head.weight"])  # the generated model


def test_fedproto_per_trains_as_fedproto_and_evaluates_its_own_model_fine_tuned_with_its_head():
    from pfedkit.methods.prototypes import NearestPrototype

    method, proto = make("fedproto-per", batch_size=8, lr=LR), make("fedproto", batch_size=8, lr=LR)
    data = tiny_data(n=8)
    server = proto.init_server()
    client = perturbed(proto.init_client(0, data), 0.3, 4)
    reply, after = local_update(method, server, client, data, 0)
    expected_reply, expected_after = local_update(proto, server, client, data, 0)
    assert reply["num_samples"] == expected_reply["num_samples"]
    assert all(torch.equal(reply[k], expected_reply[k]) for k in reply if k != "num_samples")
    assert all(torch.equal(after[k], expected_after[k]) for k in after)
    server = proto.aggregate(server, {0: reply}, 0)
    assert isinstance(proto.personalized_model(after, server, data, 1), NearestPrototype)
    tuned = method.personalized_model(after, server, data, 1)
    w = leaf(after)
    expected = sgd(w, F.cross_entropy(forward(w, data.train_x)[1], data.train_y))  # one epoch, one batch of 8
    for k in after:
        torch.testing.assert_close(tuned.state_dict()[k], expected[k], atol=1e-6, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(tuned(data.test_x), forward(expected, data.test_x)[1])  # predicts with its head


ENGINE_RUNS = {
    "fedamp": {},
    "fedfomo": {},
    "fedphp": {"expected_participations": 4},
    "knn-per": {},
    "pfedhn": {"rounds": 12},
    "fedproto-per": {},
}  # the hypernetwork needs a few more rounds


@pytest.mark.parametrize("name", sorted(ENGINE_RUNS))
def test_runs_through_the_engine_on_worker_processes_and_learns(tmp_path, name):
    from pfedkit.experiments import run_experiment
    from tests.test_engine import synthetic

    params = dict(ENGINE_RUNS[name])
    rounds = params.pop("rounds", 4)
    cfg = synthetic(method={"name": name, **params}, train={"rounds": rounds}, run={"workers": 2})
    summary = run_experiment(cfg, tmp_path, progress=False)
    assert summary["best_acc"] > 0.4, summary  # well above the untrained model (about 0.12)


def test_pfedhn_after_local_model_is_the_generated_model_after_its_local_step():
    """eval.point after-local measures the generated weights plus the client's own update (the reply's delta): one
    full-batch SGD step from the broadcast model, written out."""
    method = make("pfedhn", params={"embed_dim": 3, "hidden": 8, "hidden_layers": 1}, batch_size=8, lr=LR)
    server, data = method.init_server(), tiny_data(n=8)
    payload = method.payload(server, 0, 0)
    reply, client = local_update(method, payload, method.init_client(0, data), data, 0)
    model = method.load(payload)  # the method's one working model: the step is taken out before it is reloaded
    grads = torch.autograd.grad(F.cross_entropy(model(data.train_x), data.train_y), list(model.parameters()))
    expected = {name: (p - LR * g).detach().clone() for (name, p), g in zip(model.named_parameters(), grads)}
    trained = method.trained_model(reply, client, payload, data, 0).state_dict()
    for name, value in expected.items():
        assert torch.allclose(trained[name], value, atol=1e-6), name
        assert not torch.equal(trained[name], payload[name]), name  # the update is in it, not the broadcast alone
