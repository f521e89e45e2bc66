"""More of the papers' baselines (FedAMP, FedFomo, FedPHP, kNN-Per, pFedHN, FedProto-per), each checked by hand."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

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
    for i in cids:
        off = {}
        for j in cids:
            if j != i:
                squared = sum(float((models[i][k] - models[j][k]).pow(2).sum()) for k in base)
                off[j] = 0.5 * math.exp(-squared / 2.0) / 2.0
        xi = {**off, i: 1.0 - sum(off.values())}
        assert 0 < off[min(off)] < 0.25  # the attention is neither zero nor saturated here
        payload = method.broadcast(server, 1, i)
        for k in base:
            expected = sum(xi[j] * models[j][k] for j in cids)
            torch.testing.assert_close(payload[k], expected, atol=1e-6, rtol=0)


def test_fedamp_regularizer_carries_gradient_and_the_step_equals_a_hand_computation():
    method = make("fedamp", params={"alpha_k": 0.5, "lamda": 2.0}, batch_size=8, lr=LR)
    data = tiny_data(n=8)
    own = method.init_client(0, data)
    cloud = perturbed(own, 0.5, 7)
    _, after = method.local_update(cloud, own, data, round=0)
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
