"""FedAFK: one local round equals a hand-written computation of steps (a)-(c), the mix and the head epoch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pfedkit.engine import local_update, simulation
from pfedkit.engine.simulation import Simulation
from pfedkit.io import read_csv
from pfedkit.registry import build_config
from pfedkit.seeding import torch_generator
from tests.conftest import make, tiny_data

LR, LAM = 0.1, 0.3


def body(x, w, b):
    return torch.relu(x @ w.T + b)


def head(z, w, b):
    return z @ w.T + b


def kl(student, teacher):
    return (F.softmax(teacher, 1) * (F.log_softmax(teacher, 1) - F.log_softmax(student, 1))).sum(1).mean()


def kt_term(form, z, teacher, phi, rd):
    """Eq. 8's KL in each reading (kt_form)."""
    if form == "logits-personal-head":
        return kl(head(z, *phi), head(teacher, *phi))
    if form == "logits-random-head":
        return kl(head(z, *rd), head(teacher, *rd))
    return kl(z, teacher) * (len(z) if form == "feature-sum" else 1)


def sgd(params, grads, buffers, momentum=0.0, weight_decay=0.0):
    """torch.optim.SGD's step written out (no dampening): the decay joins the gradient, the buffer starts at zero."""
    new = []
    for i, (p, g) in enumerate(zip(params, grads)):
        d = g + weight_decay * p
        if momentum:
            buffers[i] = momentum * buffers[i] + d
            d = buffers[i]
        new.append((p - LR * d).detach())
    return new


def by_hand(
    server,
    client,
    random_head,
    data,
    seed,
    mu,
    form="feature-mean",
    step="theta",
    momentum=0.0,
    weight_decay=0.0,
    mu_gradient="exact",
):
    tg = [server["body.0.weight"].clone(), server["body.0.bias"].clone()]  # global extractor copy
    ti = [client["body.0.weight"].clone(), client["body.0.bias"].clone()]  # personal extractor
    phi = [client["head.weight"].clone(), client["head.bias"].clone()]  # personal head
    rd = [random_head["head.weight"], random_head["head.bias"]]  # fixed random head
    snap = [t.clone() for t in tg]  # the received extractor: the KL teacher
    x, y = data.train_x, data.train_y
    buf_g, buf_i = [torch.zeros_like(t) for t in tg], [torch.zeros_like(t) for t in ti]  # one SGD per extractor
    order = torch.randperm(8, generator=torch_generator(seed, 0, 0, "train-0"))
    for idx in (order[:4], order[4:]):
        xb, yb = x[idx], y[idx]
        # (a)
        params = [t.requires_grad_() for t in tg]
        grads_g = torch.autograd.grad(F.cross_entropy(head(body(xb, *params), *rd), yb), params)
        tg = sgd(tg, grads_g, buf_g, momentum, weight_decay)
        # (b)
        teacher = body(xb, *snap)
        params = [t.requires_grad_() for t in ti]
        z = body(xb, *params) if step == "theta" else body(xb, *[mu * a + (1 - mu) * b for a, b in zip(params, tg)])
        loss = (1 - LAM) * F.cross_entropy(head(z, *phi), yb) + LAM * kt_term(form, z, teacher, phi, rd)
        grads_i = torch.autograd.grad(loss, params)
        ti = sgd(ti, grads_i, buf_i, momentum, weight_decay)
        # (c)
        if mu_gradient == "apfl":  # <theta_i - theta_G, mu grad_i + (1 - mu) grad_G>, after this batch's steps
            g = sum(((a - b) * (mu * gi + (1 - mu) * gg)).sum() for a, b, gi, gg in zip(ti, tg, grads_i, grads_g))
            mu = min(max(mu - LR * float(g), 0.0), 1.0)
            continue
        m = torch.tensor(mu, dtype=torch.float64, requires_grad=True)
        mixed = [m * a + (1 - m) * b for a, b in zip(ti, tg)]
        z = body(xb, *mixed)
        loss = (1 - LAM) * F.cross_entropy(head(z, *phi), yb) + LAM * kt_term(form, z, teacher, phi, rd)
        (g,) = torch.autograd.grad(loss, m)
        mu = min(max(mu - LR * float(g), 0.0), 1.0)
    ti = [mu * a + (1 - mu) * b for a, b in zip(ti, tg)]  # adaptive feature aggregation
    order = torch.randperm(8, generator=torch_generator(seed, 0, 0, "head-0"))
    buf_h = [torch.zeros_like(t) for t in phi]  # the head phase: an SGD of its own
    for idx in (order[:4], order[4:]):  # one head epoch on the frozen new extractor
        params = [t.requires_grad_() for t in phi]
        grads = torch.autograd.grad(F.cross_entropy(head(body(x[idx], *ti), *params), y[idx]), params)
        phi = sgd(phi, grads, buf_h, momentum, weight_decay)
    return tg, ti, phi, mu


@pytest.mark.parametrize(
    "form, step, momentum, weight_decay, mu_gradient",
    [
        ("feature-mean", "theta", 0.0, 0.0, "exact"),
        ("feature-sum", "theta", 0.0, 0.0, "exact"),
        ("logits-personal-head", "theta", 0.0, 0.0, "exact"),
        ("logits-random-head", "theta", 0.0, 0.0, "exact"),
        ("feature-mean", "mixture", 0.0, 0.0, "exact"),
        ("logits-personal-head", "theta", 0.9, 0.01, "exact"),  # each extractor's SGD with momentum and decay
        ("feature-mean", "theta", 0.0, 0.0, "apfl"),  # PFLlib's APFL reading of mu's gradient
        ("logits-personal-head", "mixture", 0.5, 0.05, "apfl"),
    ],
)
def test_one_local_round_equals_the_hand_computation(form, step, momentum, weight_decay, mu_gradient):
    method = make(
        "fedafk",
        seed=3,
        batch_size=4,
        lr=LR,
        momentum=momentum,
        weight_decay=weight_decay,
        params={"kt_form": form, "personal_step": step, "mu_gradient": mu_gradient},
    )
    data = tiny_data(n=8)
    server = method.init_server()
    gen = torch.Generator().manual_seed(1)
    client = method.init_client(0, data)
    client = {
        k: (v + 0.3 * torch.randn(v.shape, generator=gen) if isinstance(v, torch.Tensor) else v)
        for k, v in client.items()
    }  # a client whose extractor and head differ from the global ones
    reply, new = local_update(method, method.payload(server, 0, 0), client, data, 0)
    tg, ti, phi, mu = by_hand(
        server, client, method.random_head(), data, 3, 0.5, form, step, momentum, weight_decay, mu_gradient
    )
    assert torch.allclose(reply["body.0.weight"], tg[0], atol=1e-6) and torch.allclose(
        reply["body.0.bias"], tg[1], atol=1e-6
    )
    assert torch.allclose(new["body.0.weight"], ti[0].float(), atol=1e-6)
    assert torch.allclose(new["body.0.bias"], ti[1].float(), atol=1e-6)
    assert torch.allclose(new["head.weight"], phi[0].float(), atol=1e-6)
    assert torch.allclose(new["head.bias"], phi[1].float(), atol=1e-6)
    assert abs(new["mu"] - mu) < 1e-6 and mu != 0.5


def test_mu_stays_in_the_unit_interval_under_extreme_learning_rates():
    for lr in (50.0, 1e4):
        for mu_gradient in ("exact", "apfl"):
            method = make("fedafk", params={"mu_gradient": mu_gradient}, batch_size=2, lr=lr)
            data = tiny_data(n=8)
            client = method.init_client(0, data)
            for round in range(3):
                _, client = local_update(method, method.init_server(), client, data, round)
                assert 0.0 <= client["mu"] <= 1.0


@pytest.mark.filterwarnings("ignore::pfedkit.methods.local_sgd.RepeatedDrawWarning")  # one round recomputed on purpose
def test_without_both_parts_the_personal_model_ignores_the_global_one():
    method = make("fedafk", params={"kt_weight": 0.0, "adaptive_aggregation": False})
    data = tiny_data(n=8)
    client = method.init_client(0, data)
    assert client["mu"] == 1.0
    server = method.init_server()
    other = {k: torch.randn_like(v) for k, v in server.items()}
    _, a = local_update(method, server, client, data, 0)
    _, b = local_update(method, other, client, data, 0)
    for k in a:
        assert torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])), k  # trained as if alone
    assert a["mu"] == 1.0


def test_flags_change_the_update():
    data = tiny_data(n=8)
    base = make("fedafk", batch_size=4)
    server, client = base.init_server(), base.init_client(0, data)
    _, ref = local_update(base, server, client, data, 0)
    for params in ({"teacher": "current"}, {"mu_gradient": "apfl"}, {"kt_weight": 0.0}):
        _, other = local_update(make("fedafk", params=params, batch_size=4), server, client, data, 0)
        assert not torch.equal(ref["body.0.weight"], other["body.0.weight"]) or ref["mu"] != other["mu"], params


def test_only_the_extractor_travels(tmp_path):
    cfg = build_config(
        {
            "data": {"dataset": "synthetic", "options": {"samples": 600, "test_samples": 100}},
            "partition": {"clients": 4, "beta": 1.0},
            "model": {"name": "mlp", "options": {"hidden": 16}},
            "method": {"name": "fedafk"},
            "train": {"rounds": 2, "batch_size": 16, "lr": 0.05},
            "run": {"workers": 1},
        }
    )
    sim = Simulation(cfg, tmp_path, progress=False)
    extractor = sum(v.numel() for k, v in sim.method.initial_state().items() if k.startswith("body."))
    sim.run()
    for row in read_csv(tmp_path / "metrics.csv")[:-1]:
        assert int(row["bytes_down"]) == 4 * extractor * 4
        assert int(row["bytes_up"]) == 4 * (extractor * 4 + 8)  # + the sample count for weighting


def test_ablation_presets_are_the_flags():
    from pfedkit.methods import METHODS

    assert METHODS["fedafk-no-afa"].Params().adaptive_aggregation is False
    assert METHODS["fedafk-no-kt"].Params().kt_weight == 0.0
    both = METHODS["fedafk-no-both"].Params()
    assert both.kt_weight == 0.0 and both.adaptive_aggregation is False
    data = tiny_data(n=8)
    preset, flags = make("fedafk-no-both"), make("fedafk", params={"kt_weight": 0.0, "adaptive_aggregation": False})
    server = preset.init_server()
    a, b = (
        local_update(preset, server, preset.init_client(0, data), data, 0),
        local_update(flags, server, flags.init_client(0, data), data, 0),
    )
    assert all(torch.equal(a[0][k], b[0][k]) for k in server)


def test_settings_the_others_leave_unused_change_nothing_and_are_the_same_run():
    """kt_form and teacher at lambda 0, and the mixing settings without AFA, are declared inert: each really leaves
    the update bit-identical (on a client whose models differ from the server's), and resume and suite reuse treat
    configs that differ only there as one run, but not where they are used."""
    from pfedkit.registry import run_differences

    data = tiny_data(n=8)
    gen = torch.Generator().manual_seed(2)
    base = make("fedafk", batch_size=4)
    server = base.init_server()
    client = {
        k: (v + 0.3 * torch.randn(v.shape, generator=gen) if isinstance(v, torch.Tensor) else v)
        for k, v in base.init_client(0, data).items()
    }
    inert_sets = [
        ({"kt_weight": 0.0}, {"kt_form": "feature-sum", "teacher": "current"}),
        (
            {"adaptive_aggregation": False},
            {"mu_init": 0.9, "mu_gradient": "apfl", "mix_buffers": False, "personal_step": "mixture"},
        ),
    ]
    for fixed, unused in inert_sets:
        ref = local_update(make("fedafk", params=fixed, batch_size=4), server, client, data, 0)
        other = local_update(make("fedafk", params={**fixed, **unused}, batch_size=4), server, client, data, 0)
        for part in (0, 1):
            assert all(torch.equal(torch.as_tensor(ref[part][k]), torch.as_tensor(other[part][k])) for k in ref[part])
        config = lambda params: build_config({"data": {"dataset": "synthetic"}, "method": {"name": "fedafk", **params}})  # noqa: E731
        assert run_differences(config(fixed), config({**fixed, **unused})) == []
        assert run_differences(config({}), config(unused)) != []  # used at the defaults: another run


# ---- the readings of mu's step (issue 51): when it moves, whether it is clipped, APFL's decay ----
def stepped(method, mu: float, grad: float) -> float:
    value = torch.tensor([mu], dtype=torch.float64)
    method.next_mu(value, torch.tensor([grad], dtype=torch.float64))
    return float(value[0])


def test_mu_step_reading_is_clipped_or_not_and_decays_as_asked():
    clipped = make("fedafk", lr=0.1)
    free = make("fedafk", params={"mu_clip": False}, lr=0.1)
    assert stepped(clipped, 0.9, -10.0) == 1.0 and stepped(free, 0.9, -10.0) == pytest.approx(1.9)
    assert stepped(clipped, 0.1, 10.0) == 0.0 and stepped(free, 0.1, 10.0) == pytest.approx(-0.9)
    assert stepped(clipped, 0.4, float("nan")) == 0.4  # a non-finite step keeps the old value when clipped
    decaying = make("fedafk", params={"mu_decay": 0.02}, lr=0.1)
    assert stepped(decaying, 0.5, 0.0) == pytest.approx(0.5 - 0.1 * 0.02 * 0.5)


def mu_after_round(params, batch_size):
    method = make("fedafk", params=params, batch_size=batch_size, lr=0.1)
    server, data = method.init_server(), tiny_data(n=8)
    client = method.init_client(0, data)
    _, state = local_update(method, method.payload(server, 0, 0), client, data, 0)
    return state["mu"]


def test_one_mu_step_per_epoch_is_the_per_batch_step_when_an_epoch_is_one_batch_and_differs_otherwise():
    assert mu_after_round({"mu_steps": "epoch"}, batch_size=8) == mu_after_round({}, batch_size=8)
    per_batch, per_epoch = mu_after_round({}, batch_size=2), mu_after_round({"mu_steps": "epoch"}, batch_size=2)
    assert per_batch != pytest.approx(per_epoch, abs=1e-9)
    assert abs(per_epoch - 0.5) < abs(per_batch - 0.5)  # one step of the mean gradient moves less than four


def test_mu_is_on_record_each_round(tmp_path):
    cfg = build_config(
        {
            "data": {"dataset": "synthetic", "options": {"samples": 600, "test_samples": 120}},
            "partition": {"clients": 4},
            "model": {"name": "mlp", "options": {"hidden": 16}},
            "method": {"name": "fedafk"},
            "train": {"rounds": 3, "batch_size": 16, "lr": 0.05},
            "run": {"workers": 1, "checkpoint_every": 1},
        }
    )
    Simulation(cfg, tmp_path, progress=False).run()
    rows = read_csv(tmp_path / "metrics.csv")
    assert {"mu_mean", "mu_min", "mu_max"} <= set(rows[0])
    clients = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["clients"]
    mus = [float(state["mu"]) for state in clients.values()]
    last = rows[2]  # round 2, the last training round: every client trained
    assert float(last["mu_min"]) == pytest.approx(min(mus)) and float(last["mu_max"]) == pytest.approx(max(mus))
    assert float(last["mu_mean"]) == pytest.approx(sum(mus) / len(mus))
    assert rows[3]["mu_mean"] == ""  # the final, evaluation-only round trains nobody


def test_batchnorm_statistics_are_mixed_with_mu_or_kept_as_the_personal_extractor_left_them():
    """mix_buffers: the personal extractor's running statistics are mixed as mu * its own + (1 - mu) * the trained
    global extractor's (Alg. 1 line 12 applied to buffers too), or kept (off); training itself uses batch
    statistics, so the weights and mu come out the same either way."""
    from torch import nn

    from pfedkit.methods import METHODS
    from pfedkit.models.base import SplitModel
    from pfedkit.records import MethodContext, TrainSettings

    def with_batchnorm():
        return SplitModel(nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU()), nn.Linear(3, 2), 3)

    def one_round(mix):
        cls = METHODS["fedafk"]
        ctx = MethodContext(with_batchnorm, TrainSettings(local_epochs=1, batch_size=4, lr=LR), num_classes=2, seed=3)
        method = cls(cls.validate_params({"mix_buffers": mix}), ctx)
        data, server = tiny_data(n=8), method.init_server()
        gen = torch.Generator().manual_seed(1)
        client = {  # a client whose extractor, head and statistics differ from the global ones
            k: (v + 0.3 * torch.rand(v.shape, generator=gen) if torch.is_floating_point(v) else v)
            if isinstance(v, torch.Tensor)
            else v
            for k, v in method.init_client(0, data).items()
        }
        return local_update(method, method.payload(server, 0, 0), client, data, 0)

    reply, new = one_round(True)
    _, unmixed = one_round(False)
    mu = new["mu"]
    assert 0 < mu < 1
    for k in ("body.0.weight", "head.weight"):
        assert torch.equal(new[k], unmixed[k]), k
    # the head epoch after the mix runs the frozen extractor in training mode, so each of its two batches moves the
    # statistics: s <- 0.9 s + 0.1 batch statistic (BatchNorm's momentum 0.1; the unbiased batch variance)
    x = tiny_data(n=8).train_x
    linear = x @ new["body.0.weight"].T + new["body.0.bias"]
    order = torch.randperm(8, generator=torch_generator(3, 0, 0, "head-0"))
    batches = [linear[order[:4]], linear[order[4:]]]
    moved = {
        "body.1.running_mean": 0.09 * batches[0].mean(0) + 0.1 * batches[1].mean(0),
        "body.1.running_var": 0.09 * batches[0].var(0) + 0.1 * batches[1].var(0),
    }
    for k, added in moved.items():
        own = (unmixed[k] - added) / 0.81  # the personal extractor's statistics as steps (a)-(c) left them
        start = mu * own + (1 - mu) * reply[k]
        torch.testing.assert_close(new[k], 0.81 * start + added, atol=1e-5, rtol=0)
        assert not torch.allclose(own, reply[k], atol=1e-3)  # the two extractors' statistics differ: the mix shows


def test_logged_client_numbers_are_folded_in_client_order_whatever_order_replies_arrive(tmp_path, monkeypatch):
    """mu_mean sums the trained clients' mu in client order: a run whose replies arrive in another order (workers,
    Ray) logs the same numbers to the last digit, so a resumed run's metrics.csv equals an uninterrupted one's."""
    from pfedkit.engine.workers import Executor

    cfg = build_config(
        {
            "data": {"dataset": "synthetic", "options": {"samples": 800, "test_samples": 160}},
            "partition": {"clients": 8},
            "model": {"name": "mlp", "options": {"hidden": 8}},
            "method": {"name": "fedafk"},
            "train": {"rounds": 2, "batch_size": 16, "lr": 0.05},
            "run": {"workers": 1},
        }
    )
    Simulation(cfg, tmp_path / "in-order", progress=False).run()
    arrived = Executor.run
    monkeypatch.setattr(Executor, "run", lambda self, tasks, **kw: reversed(list(arrived(self, tasks, **kw))))
    seen = []
    original = simulation.summarize_clients
    monkeypatch.setattr(simulation, "summarize_clients", lambda m, states: seen.append(states) or original(m, states))
    Simulation(cfg, tmp_path / "reversed", progress=False).run()
    clients = torch.load(tmp_path / "reversed" / "checkpoint.pt", weights_only=False)["clients"]
    assert [float(s["mu"]) for s in seen[-1]] == [float(clients[cid]["mu"]) for cid in sorted(clients)]
    first, second = read_csv(tmp_path / "in-order" / "metrics.csv"), read_csv(tmp_path / "reversed" / "metrics.csv")
    assert [r["mu_mean"] for r in first] == [r["mu_mean"] for r in second]
