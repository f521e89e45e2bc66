"""Each first-set method's defining property, checked on a tiny model against hand-computed values."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pfedkit.engine import local_update
from pfedkit.engine.plans import run_phase
from pfedkit.methods.base import select, weighted_mean
from tests.conftest import make, tiny_data


def model_keys(state):
    return {k for k in state if k.split(".")[0] in ("body", "head")}


def test_fedavg_aggregate_is_sample_weighted_mean():
    method = make("fedavg")
    server = method.init_server()
    a = {k: torch.full_like(v, 1.0) for k, v in server.items()}
    b = {k: torch.full_like(v, 4.0) for k, v in server.items()}
    out = method.aggregate(server, {0: {**a, "num_samples": 3}, 1: {**b, "num_samples": 1}}, 0)
    for k in server:
        assert torch.allclose(out[k], torch.full_like(server[k], (3 * 1 + 1 * 4) / 4))


def test_fedavg_aggregate_without_replies_keeps_the_model():
    method = make("fedavg")
    server = method.init_server()
    assert method.aggregate(server, {}, 0) is server


def test_fedavg_one_step_equals_hand_computed_sgd():
    method = make("fedavg", batch_size=8, lr=0.1)
    server, data = method.init_server(), tiny_data(n=8)
    reply, _ = local_update(method, server, {}, data, round=0)
    model = method.load(server)  # a fresh copy of the start point
    loss = F.cross_entropy(model(data.train_x), data.train_y)  # batch = all 8 samples, order is irrelevant
    grads = torch.autograd.grad(loss, list(model.parameters()))
    for (name, p), g in zip(model.named_parameters(), grads):
        assert torch.allclose(reply[name], p.detach() - 0.1 * g, atol=1e-6), name
    assert reply["num_samples"] == 8


def test_fedprox_step_equals_hand_computed_proximal_step():
    mu, lr = 0.5, 0.1
    method = make("fedprox", params={"mu": mu}, batch_size=8, lr=lr)
    server, data = method.init_server(), tiny_data(n=8)
    start = {k: v + 0.3 * torch.randn_like(v) for k, v in server.items()}  # weights away from the anchor
    model = method.load(start)
    loss = F.cross_entropy(model(data.train_x), data.train_y)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    expected = {
        n: p.detach() - lr * (g + mu * (p.detach() - server[n])) for (n, p), g in zip(model.named_parameters(), grads)
    }
    (phase,) = method.local_phases(server, {}, data, 0)
    run_phase(method, model, phase, data, 0)  # one step: the batch is all 8 samples
    for name, value in expected.items():
        assert torch.allclose(model.state_dict()[name], value, atol=1e-6), name


def test_fedprox_rejects_zero_mu():
    import pytest

    from pfedkit.errors import ConfigError
    from pfedkit.methods import METHODS

    with pytest.raises(ConfigError, match="method.mu"):
        METHODS["fedprox"].validate_params({"mu": 0})


def test_fedper_never_uploads_the_head_and_keeps_it_local():
    method = make("fedper")
    server, data = method.init_server(), tiny_data()
    assert model_keys(server) and all(k.startswith("body.") for k in model_keys(server))
    client = method.init_client(0, data)
    reply, new_client = local_update(method, method.payload(server, 0, 0), client, data, 0)
    assert all(k.startswith("body.") for k in model_keys(reply))
    assert set(new_client) == {"head.weight", "head.bias"}
    assert not torch.equal(new_client["head.weight"], client["head.weight"])  # the head was trained


def test_lg_fedavg_shares_the_head_not_the_body():
    method = make("lg-fedavg")
    server, data = method.init_server(), tiny_data()
    reply, client = local_update(method, server, method.init_client(0, data), data, 0)
    assert model_keys(reply) == {"head.weight", "head.bias"}
    assert all(k.startswith("body.") for k in client)


def test_local_sends_no_model():
    method = make("local")
    data = tiny_data()
    reply, client = local_update(
        method, method.payload(method.init_server(), 0, 0), method.init_client(0, data), data, 0
    )
    assert model_keys(reply) == set() and model_keys(client) == model_keys(method.initial_state())


def test_fedrep_trains_head_then_body_each_with_the_other_frozen():
    method = make("fedrep", params={"head_epochs": 3}, local_epochs=2)
    calls = []
    real_fit = method.fit

    def spy(model, data, round, **kw):
        before = {k: v.clone() for k, v in model.state_dict().items()}
        out = real_fit(model, data, round, **kw)
        after = model.state_dict()
        frozen = [k for k in after if k.split(".")[0] not in kw["parts"]]
        assert all(torch.equal(before[k], after[k]) for k in frozen), kw["parts"]
        calls.append((kw["parts"], kw.get("epochs")))
        return out

    method.fit = spy
    data = tiny_data()
    local_update(method, method.init_server(), method.init_client(0, data), data, 0)
    assert calls == [(("head",), 3), (("body",), 2)]  # the body: train.local_epochs, resolved by Phase.settings


def test_frozen_parts_do_not_move_under_momentum_and_weight_decay():
    method = make("fedavg", momentum=0.9, weight_decay=0.1, lr=0.5)
    model = method.load(method.init_server())
    head = {k: v.clone() for k, v in select(model.state_dict(), ("head",)).items()}
    method.fit(model, tiny_data(n=16), 0, parts=("body",), epochs=3)
    for k, v in head.items():
        assert torch.equal(model.state_dict()[k], v)
    assert all(p.requires_grad for p in model.parameters())  # freezing is undone afterwards


def test_fedbabu_head_is_fixed_random_and_never_uploaded():
    method = make("fedbabu", params={"ft_epochs": 2})
    server, data = method.init_server(), tiny_data()
    reply, client = local_update(method, server, method.init_client(0, data), data, 0)
    assert client == {} and all(k.startswith("body.") for k in model_keys(reply))
    model = method.load(reply, method.random_head())
    assert torch.equal(model.head.weight, method.initial_state()["head.weight"])
    tuned = method.personalized_model({}, reply, data, 1)
    assert not torch.equal(tuned.head.weight, method.initial_state()["head.weight"])  # fine-tuning moves the head


def test_fedbabu_body_steps_equal_hand_computed_sgd_under_the_fixed_initial_head():
    method = make(
        "fedbabu", batch_size=8, lr=0.1, local_epochs=2
    )  # two full-batch steps: the head would move after one
    server, data = method.init_server(), tiny_data(n=8)
    head = method.initial_state()
    w, b = server["body.0.weight"].clone(), server["body.0.bias"].clone()
    for _ in range(2):
        params = [w.requires_grad_(), b.requires_grad_()]
        logits = torch.relu(data.train_x @ params[0].T + params[1]) @ head["head.weight"].T + head["head.bias"]
        grads = torch.autograd.grad(F.cross_entropy(logits, data.train_y), params)
        w, b = (w - 0.1 * grads[0]).detach(), (b - 0.1 * grads[1]).detach()
    reply, _ = local_update(method, server, method.init_client(0, data), data, 0)
    assert torch.allclose(reply["body.0.weight"], w, atol=1e-6) and torch.allclose(reply["body.0.bias"], b, atol=1e-6)


def test_fedavg_ft_fine_tunes_before_evaluation_only():
    method = make("fedavg-ft", params={"ft_epochs": 2})
    server, data = method.init_server(), tiny_data()
    before = {k: v.clone() for k, v in server.items()}  # init_server hands out the method's own tensors
    tuned = method.personalized_model({}, server, data, 0)
    assert any(not torch.equal(tuned.state_dict()[k], server[k]) for k in server)
    assert all(torch.equal(server[k], before[k]) for k in server)  # server state untouched


def test_updates_depend_on_seed_round_and_client_not_on_call_order():
    method = make("fedavg", batch_size=2)
    server = method.init_server()
    a = local_update(method, server, {}, tiny_data(0), 3)[0]
    local_update(method, server, {}, tiny_data(1), 3)
    again = local_update(method, server, {}, tiny_data(0), 3)[0]
    other_round = local_update(method, server, {}, tiny_data(0), 4)[0]
    assert all(torch.equal(a[k], again[k]) for k in server)
    assert any(not torch.equal(a[k], other_round[k]) for k in server)


def test_weighted_mean_keeps_integer_buffers():
    replies = {
        0: {"b": torch.tensor(3), "w": torch.ones(2), "num_samples": 1},
        1: {"b": torch.tensor(5), "w": torch.zeros(2), "num_samples": 3},
    }
    out = weighted_mean(replies, ["b", "w"])
    assert out["b"].item() == 3 and torch.allclose(out["w"], torch.full((2,), 0.25))


@pytest.mark.filterwarnings("ignore::pfedkit.methods.local_sgd.RepeatedDrawWarning")  # the same draws, two ways
def test_head_training_on_cached_features_equals_training_through_the_frozen_body():
    method = make("fedrep", batch_size=3, lr=0.2, momentum=0.5)
    data = tiny_data(n=11)
    start = method.init_server() | method.init_client(0, data)
    slow = method.load(start)
    method.fit(slow, data, 0, parts=("head",), epochs=4, purpose="head")
    slow_state = {k: v.clone() for k, v in slow.state_dict().items()}
    fast = method.load(start)
    method.fit_head(fast, data, 0, epochs=4)
    for k, v in fast.state_dict().items():
        assert torch.allclose(v, slow_state[k], atol=1e-6), k
    assert torch.equal(fast.state_dict()["body.0.weight"], start["body.0.weight"])


def test_head_training_with_batchnorm_body_goes_through_the_body():
    from torch import nn

    from pfedkit.models.base import SplitModel, deterministic_body

    bn_model = SplitModel(nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)), nn.Linear(3, 2), 3)
    assert not deterministic_body(bn_model)
    assert deterministic_body(make("fedrep").model)


def test_a_variant_is_its_base_under_another_name_with_only_the_named_defaults_changed():
    import pytest

    from pfedkit.methods import METHODS
    from pfedkit.methods.base import variant
    from pfedkit.methods.fedafk import FedAFK

    no_both = METHODS["fedafk-no-both"]
    assert issubclass(no_both, FedAFK) and no_both.name == "fedafk-no-both"
    base, preset = FedAFK.Params().model_dump(), no_both.Params().model_dump()
    assert {k for k in base if base[k] != preset[k]} == {"kt_weight", "adaptive_aggregation"}
    assert preset["kt_weight"] == 0.0 and preset["adaptive_aggregation"] is False
    with pytest.raises(Exception, match="kt_weight"):  # the base field's constraint (<= 1) holds in the variant
        no_both.validate_params({"kt_weight": 2.0})
    with pytest.raises(TypeError, match="no hyper-parameter kt_wieght"):
        variant(FedAFK, "test-typo", "never registered", kt_wieght=0.1)
    assert "test-typo" not in METHODS


def test_one_purpose_shuffled_twice_in_a_clients_round_warns_and_no_method_does_it():
    import warnings

    from pfedkit.methods import METHODS
    from pfedkit.methods.local_sgd import RepeatedDrawWarning

    method = make("fedavg")
    data = tiny_data(0, n=12)
    list(method.batches(data, 0, "local"))
    list(method.batches(data, 0, "head"))
    with pytest.warns(RepeatedDrawWarning, match="purpose 'local' shuffled twice for client 0 in round 0"):
        list(method.batches(data, 0, "local"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RepeatedDrawWarning)
        list(method.batches(data, 1, "local"))  # another round, another client: their own draws
        list(method.batches(tiny_data(1, n=12), 1, "local"))
        adapters = {"perada", "heart-pfl"}  # HEART's ablations draw a subset of heart-pfl's purposes (time)
        ablations = {"heart-pfl-no-hda", "heart-pfl-no-akt", "heart-pfl-no-both"}
        for name in sorted(set(METHODS) - ablations):  # every built-in method's round draws each order once
            if name in adapters:  # an adapter ResNet on images, with server data for the distillation
                from tests.test_heart import heart, image_data, server_data

                small_kd = {"kd_steps": 2, "kd_batch": 8} | ({} if name == "perada" else {"pgd_steps": 2})
                m, data_of = heart(name, params=small_kd, server=server_data()), image_data
            else:
                m, data_of = make(name, params={"expected_participations": 4} if name == "fedphp" else None), tiny_data
            server = m.init_server()
            replies = {}
            for cid in range(2):
                data = data_of(cid)
                replies[cid], _ = local_update(m, m.payload(server, 0, cid), m.init_client(cid, data), data, 0)
            m.aggregate(server, replies, 0)


def test_a_task_run_again_does_not_warn_of_repeated_draws():
    """A retried worker runs a client's round again with the same draws, as it should: no RepeatedDrawWarning."""
    import warnings

    from pfedkit.engine.workers import run_task
    from pfedkit.methods.local_sgd import RepeatedDrawWarning
    from tests.test_cohort import assert_states_close, federation, method_for, round_tasks

    fed = federation(images=False)
    method = method_for("fedavg", images=False)
    task = round_tasks(method, fed, 1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RepeatedDrawWarning)
        first, second = run_task(method, fed, task), run_task(method, fed, task)
    (reply, state, _), (again, state_again, _) = first[1], second[1]
    assert_states_close(again, reply, "reply")  # the same draws: the same update
    assert_states_close(state_again, state, "state")
