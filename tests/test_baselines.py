"""The papers' further baselines, each checked for what makes it itself on a tiny model, by hand."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pfedkit.engine import local_update
from pfedkit.methods.fedrod import TwoHeads
from tests.conftest import make, tiny_data

LR = 0.1


def forward(params, x):
    z = torch.relu(x @ params["body.0.weight"].T + params["body.0.bias"])
    return z, z @ params["head.weight"].T + params["head.bias"]


def sgd(params, loss):
    grads = torch.autograd.grad(loss, list(params.values()))
    return {k: (v - LR * g).detach() for (k, v), g in zip(params.items(), grads)}


def leaf(state):
    return {k: v.clone().requires_grad_() for k, v in state.items()}


def test_ditto_personal_step_is_proximal_to_the_received_global_model_and_the_global_step_is_fedavg():
    method = make("ditto", params={"prox_weight": 0.8}, batch_size=8, lr=LR)
    data, server = tiny_data(n=8), method.init_server()
    g = torch.Generator().manual_seed(3)
    personal = {k: v + 0.3 * torch.randn(v.shape, generator=g) for k, v in server.items()}
    reply, after = local_update(method, server, personal, data, round=0)
    v = leaf(personal)
    prox = sum((v[k] - server[k]).pow(2).sum() for k in v)
    expected_personal = sgd(v, F.cross_entropy(forward(v, data.train_x)[1], data.train_y) + 0.4 * prox)
    w = leaf(server)
    expected_global = sgd(w, F.cross_entropy(forward(w, data.train_x)[1], data.train_y))
    for k in server:
        torch.testing.assert_close(after[k], expected_personal[k], atol=1e-6, rtol=0)
        torch.testing.assert_close(reply[k], expected_global[k], atol=1e-6, rtol=0)
    evaluated = method.personalized_model(after, server, data, 1)
    assert torch.equal(evaluated.state_dict()["head.weight"], after["head.weight"])  # the personal model


def test_fedrod_generic_head_sees_the_balanced_softmax_and_the_personal_head_detached_features():
    method = make("fedrod", batch_size=8, lr=LR)
    data, server = tiny_data(n=8), method.init_server()
    data.train_y[:2] = 1 - data.train_y[:2]  # make both classes present in unequal numbers
    client = method.init_client(0, data)
    reply, after = local_update(method, server, client, data, round=0)
    counts = torch.bincount(data.train_y, minlength=2).float()
    assert counts[0] != counts[1]
    w = leaf(server)
    z, logits = forward(w, data.train_x)
    expected = sgd(w, F.cross_entropy(logits + counts.log(), data.train_y))
    for k in server:
        torch.testing.assert_close(reply[k], expected[k], atol=1e-6, rtol=0)
    p = {
        "w": client["personal_head.weight"].clone().requires_grad_(),
        "b": client["personal_head.bias"].clone().requires_grad_(),
    }
    loss = F.cross_entropy(logits.detach() + z.detach() @ p["w"].T + p["b"], data.train_y)
    gw, gb = torch.autograd.grad(loss, [p["w"], p["b"]])
    torch.testing.assert_close(after["personal_head.weight"], (p["w"] - LR * gw).detach(), atol=1e-6, rtol=0)
    torch.testing.assert_close(after["personal_head.bias"], (p["b"] - LR * gb).detach(), atol=1e-6, rtol=0)
    model = method.personalized_model(after, reply, data, 1)
    assert isinstance(model, TwoHeads)
    with torch.no_grad():
        zz, generic = forward(reply, data.test_x)
        torch.testing.assert_close(
            model(data.test_x), generic + zz @ after["personal_head.weight"].T + after["personal_head.bias"]
        )
    assert not any(k.startswith("personal") for k in reply)  # the personal head never travels


def test_fedprox_ft_trains_as_fedprox_and_fine_tunes_for_evaluation():
    method, prox, avg = make("fedprox-ft", params={"mu": 1.0}), make("fedprox", params={"mu": 1.0}), make("fedavg")
    data, server = tiny_data(), method.init_server()
    reply, _ = local_update(method, server, {}, data, 0)
    assert torch.equal(reply["head.weight"], local_update(prox, server, {}, data, 0)[0]["head.weight"])
    assert not torch.allclose(reply["head.weight"], local_update(avg, server, {}, data, 0)[0]["head.weight"])
    tuned = method.personalized_model({}, server, data, 0)
    assert any(not torch.equal(tuned.state_dict()[k], server[k]) for k in server)


def test_fedala_mixes_higher_layers_by_learned_weights_and_takes_lower_layers_from_the_global_model():
    method = make("fedala", params={"eta": 2.0, "sample_percent": 100}, batch_size=8, lr=LR)
    data, server = tiny_data(n=8), method.init_server()
    g = torch.Generator().manual_seed(4)
    local = {k: v + 0.5 * torch.randn(v.shape, generator=g) for k, v in server.items()}
    start = {k: torch.rand(v.shape, generator=g) for k, v in server.items() if k.startswith("head")}
    client = {**local, **{"ala_weight." + k: w for k, w in start.items()}, "first_phase": 0}
    model, extra = method.adapt(server, client, data, round=3)
    # by hand: theta_hat = theta_i + (theta_G - theta_i) * W on the head; one batch of all 8 samples
    p = {k: server[k].clone() for k in ("body.0.weight", "body.0.bias")}
    p.update({k: (local[k] + (server[k] - local[k]) * start[k]).requires_grad_() for k in start})
    loss = F.cross_entropy(forward(p, data.train_x)[1], data.train_y)
    grads = dict(zip(start, torch.autograd.grad(loss, [p[k] for k in start])))
    for k in start:
        expected_w = (start[k] - 2.0 * grads[k] * (server[k] - local[k])).clamp(0, 1)
        torch.testing.assert_close(extra["ala_weight." + k], expected_w, atol=1e-6, rtol=0)
        torch.testing.assert_close(
            model.state_dict()[k], local[k] + (server[k] - local[k]) * expected_w, atol=1e-6, rtol=0
        )
    for k in ("body.0.weight", "body.0.bias"):
        assert torch.equal(model.state_dict()[k], server[k])
    assert bool(((extra["ala_weight.head.weight"] > 0) & (extra["ala_weight.head.weight"] < 1)).any())


def test_fedala_after_local_model_is_the_adapted_model_after_one_sgd_step_by_hand():
    """eval.point after-local sees ALA's start model trained by the round's local step, not ALA's start model alone
    (its personalized_model) and not the broadcast weights with the reply in them."""
    method = make("fedala", params={"eta": 2.0, "sample_percent": 100}, batch_size=8, lr=LR)
    data, server = tiny_data(n=8), method.init_server()
    g = torch.Generator().manual_seed(6)
    local = {k: v + 0.5 * torch.randn(v.shape, generator=g) for k, v in server.items()}
    start = {"ala_weight." + k: torch.rand(v.shape, generator=g) for k, v in server.items() if k.startswith("head")}
    client = {**local, **start, "first_phase": 0}
    adapted = {k: v.clone() for k, v in method.adapt(server, client, data, round=3)[0].state_dict().items()}
    p = leaf(adapted)
    expected = sgd(p, F.cross_entropy(forward(p, data.train_x)[1], data.train_y))  # one batch of all 8 samples
    reply, after = local_update(method, server, client, data, round=3)
    trained = method.trained_model(reply, after, server, data, 3).state_dict()
    for k in server:
        torch.testing.assert_close(trained[k], expected[k], atol=1e-6, rtol=0)
    assert not torch.allclose(trained["head.weight"], adapted["head.weight"])  # the local step is in it


def test_fedala_weights_stay_with_their_client_and_never_travel():
    method = make("fedala")
    server = method.init_server()
    clients = {
        cid: {**method.init_client(cid, tiny_data(cid)), **{k: v + 0.3 * (cid + 1) for k, v in server.items()}}
        for cid in (0, 1)
    }
    replies, after = {}, {}
    for cid in (0, 1):
        replies[cid], after[cid] = local_update(method, server, clients[cid], tiny_data(cid), round=1)
        assert not any(k.startswith("ala_weight") for k in replies[cid])
        assert after[cid]["first_phase"] == 0  # the first phase ran, to its stop rule or cap, and is over
    assert not torch.equal(after[0]["ala_weight.head.weight"], after[1]["ala_weight.head.weight"])
    again, _ = local_update(
        method, server, clients[0], tiny_data(0), round=1
    )  # client 1's update left client 0 as it was
    assert torch.equal(again["head.weight"], replies[0]["head.weight"])


def test_pfedme_inner_problem_local_step_and_server_mixing_by_hand():
    method = make(
        "pfedme", params={"reg": 2.0, "inner_steps": 2, "personal_lr": 0.05, "beta": 0.5}, batch_size=8, lr=LR
    )
    data, server = tiny_data(n=8), method.init_server()
    reply, personal = local_update(method, server, method.init_client(0, data), data, round=0)
    theta = {k: v.clone() for k, v in server.items()}
    for _ in range(2):  # K inner steps on CE + lambda/2 ||theta - w||^2 from theta = w
        t = leaf(theta)
        loss = F.cross_entropy(forward(t, data.train_x)[1], data.train_y) + 1.0 * sum(
            (t[k] - server[k]).pow(2).sum() for k in t
        )
        grads = torch.autograd.grad(loss, list(t.values()))
        theta = {k: (v - 0.05 * g).detach() for (k, v), g in zip(t.items(), grads)}
    for k in server:
        torch.testing.assert_close(personal[k], theta[k], atol=1e-6, rtol=0)
        torch.testing.assert_close(reply[k], server[k] - LR * 2.0 * (server[k] - theta[k]), atol=1e-6, rtol=0)
    mixed = method.aggregate(server, {0: reply}, 0)
    for k in server:  # beta 0.5: halfway between the old global model and the clients' mean
        torch.testing.assert_close(mixed[k], 0.5 * server[k] + 0.5 * reply[k])
    assert not torch.equal(make("pfedme").aggregate(server, {0: reply}, 0)["head.weight"], server["head.weight"])


def per_fedavg_by_hand(server, data, order, variant, alpha, beta, delta=1e-3):
    def grad(params, idx):
        p = leaf(params)
        return dict(
            zip(
                p,
                torch.autograd.grad(
                    F.cross_entropy(forward(p, data.train_x[idx])[1], data.train_y[idx]), list(p.values())
                ),
            )
        )

    b1, b2, b3 = order[:4], order[4:8], order[8:12]
    inner = {k: v - alpha * g for (k, v), g in zip(server.items(), grad(server, b1).values())}
    meta = grad(inner, b2)
    if variant == "hf":
        plus = grad({k: server[k] + delta * meta[k] for k in server}, b3)
        minus = grad({k: server[k] - delta * meta[k] for k in server}, b3)
        meta = {k: meta[k] - alpha * (plus[k] - minus[k]) / (2 * delta) for k in server}
    return {k: server[k] - beta * meta[k] for k in server}


def test_per_fedavg_fo_and_hf_meta_steps_equal_hand_computation_and_evaluation_adapts_once():
    from pfedkit.seeding import torch_generator

    for variant, n in (("fo", 8), ("hf", 12)):
        method = make("per-fedavg", params={"variant": variant, "alpha": 0.05, "beta": 0.2}, batch_size=4, lr=LR)
        data, server = tiny_data(n=n), method.init_server()
        reply, _ = local_update(method, server, {}, data, round=0)
        order = torch.randperm(n, generator=torch_generator(0, 0, 0, "train"))
        expected = per_fedavg_by_hand(server, data, order, variant, 0.05, 0.2)
        for k in server:
            torch.testing.assert_close(reply[k], expected[k], atol=1e-5, rtol=0)
    method = make("per-fedavg", params={"alpha": 0.05}, batch_size=4)
    data, server = tiny_data(n=8), method.init_server()
    adapted = method.personalized_model({}, server, data, round=2)
    idx = torch.randperm(8, generator=torch_generator(0, 2, 0, "adapt"))[:4]
    p = leaf(server)
    grads = torch.autograd.grad(F.cross_entropy(forward(p, data.train_x[idx])[1], data.train_y[idx]), list(p.values()))
    for (k, v), g in zip(server.items(), grads):
        torch.testing.assert_close(adapted.state_dict()[k], v - 0.05 * g, atol=1e-6, rtol=0)
