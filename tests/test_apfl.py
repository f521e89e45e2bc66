"""APFL: two local steps equal the paper's update written out by hand (no stale or doubled gradients)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pfedkit.engine import local_update
from pfedkit.seeding import torch_generator
from tests.conftest import make, tiny_data

LR = 0.1
KEYS = ("body.0.weight", "body.0.bias", "head.weight", "head.bias")


def forward(x, p):
    return torch.relu(x @ p[0].T + p[1]) @ p[2].T + p[3]


def grad(params, x, y):
    params = [t.detach().requires_grad_() for t in params]
    return torch.autograd.grad(F.cross_entropy(forward(x, params), y), params)


def test_two_local_steps_equal_the_hand_computation():
    method = make("apfl", seed=2, batch_size=4, lr=LR)
    data = tiny_data(n=8)
    server = method.init_server()
    gen = torch.Generator().manual_seed(5)
    client = {**{k: server[k] + 0.3 * torch.randn(server[k].shape, generator=gen) for k in KEYS}, "alpha": 0.5}
    reply, new = local_update(method, server, client, data, 0)

    w, v, alpha = [server[k] for k in KEYS], [client[k] for k in KEYS], 0.5
    order = torch.randperm(8, generator=torch_generator(2, 0, 0, "train"))
    for idx in (order[:4], order[4:]):
        xb, yb = data.train_x[idx], data.train_y[idx]
        v_bar = [alpha * a + (1 - alpha) * b for a, b in zip(v, w)]
        g_bar, g_w = grad(v_bar, xb, yb), grad(w, xb, yb)
        slope = sum(float(((a - b) * g).sum()) for a, b, g in zip(v, w, g_bar))
        w = [p - LR * g for p, g in zip(w, g_w)]
        v = [p - LR * alpha * g for p, g in zip(v, g_bar)]
        alpha = min(max(alpha - LR * slope, 0.0), 1.0)
    for k, want_w, want_v in zip(KEYS, w, v):
        assert torch.allclose(reply[k], want_w, atol=1e-6), k
        assert torch.allclose(new[k], want_v, atol=1e-6), k
    assert abs(new["alpha"] - alpha) < 1e-9 and alpha != 0.5

    evaluated = method.personalized_model(new, server, data, 1)  # the mixture with the received global model
    for k in KEYS:
        assert torch.allclose(evaluated.state_dict()[k], alpha * new[k] + (1 - alpha) * server[k], atol=1e-6)


def test_fixed_alpha_stays_and_alpha_stays_in_unit_interval():
    data = tiny_data(n=8)
    fixed = make("apfl", params={"adaptive_alpha": False, "alpha_init": 0.25}, batch_size=2)
    _, state = local_update(fixed, fixed.init_server(), fixed.init_client(0, data), data, 0)
    assert state["alpha"] == 0.25
    wild = make("apfl", batch_size=2, lr=1e4)
    state = wild.init_client(0, data)
    for round in range(3):
        _, state = local_update(wild, wild.init_server(), state, data, round)
        assert 0.0 <= state["alpha"] <= 1.0
