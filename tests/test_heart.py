"""HEART-PFL and PerAda: adapter models, pretrained loading, PGD, symmetric KL, hierarchical alignment, proxy data,
what client training may change, and the server's distillation choice."""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

from pfedkit.errors import ConfigError
from pfedkit.models import build_model
from pfedkit.models.adapters import (
    Adapter,
    adapter_state_names,
    backbone_state,
    count_trainable,
    is_trainable,
)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models on a shared CPU: one thread avoids oversubscription stalls; restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


SMALL = dict(widths=[4, 8, 8, 16])  # a tiny backbone of the same design keeps these tests fast


def small(classes: int = 3, **options) -> nn.Module:
    return build_model("small-resnet-adapter", (1, 12, 12), classes, **{**SMALL, **options})


# ---------------------------------------------------------------- models


def test_resnet18_adapter_trains_exactly_the_papers_1_46m_parameters_with_100_classes():
    model = build_model("resnet18-adapter", (3, 32, 32), 100)
    assert count_trainable(model) == 1_459_428  # paper Table 2: 1.46M
    adapters = [n for n, m in model.named_modules() if isinstance(m, Adapter)]
    assert len(adapters) == 16  # two per basic block, eight blocks
    frozen = {n for n, _ in model.named_parameters() if not is_trainable(n)}
    assert "body.layer1.0.conv1.weight" in frozen and "body.layer2.0.downsample.1.weight" in frozen
    assert "body.bn1.weight" not in frozen and "body.layer4.1.bn2.bias" not in frozen


def test_a_fresh_adapter_is_almost_the_identity():
    adapter = Adapter(8).eval()
    x = torch.randn(2, 8, 5, 5)
    assert (adapter(x) - x).abs().max() < 1e-2


def test_pretrained_backbone_loads_every_weight_but_fc_and_bad_files_fail_clearly(tmp_path):
    source = small(classes=7, adapters=False)
    with torch.no_grad():
        for p in source.parameters():
            p.add_(torch.randn_like(p))
    path = tmp_path / "backbone.pt"
    torch.save(backbone_state(source), path)
    loaded = small(classes=3, pretrained=str(path))
    own = loaded.body.state_dict()
    for k, v in source.body.state_dict().items():
        if k.rsplit(".", 1)[-1] in ("running_mean", "running_var", "num_batches_tracked"):
            continue  # not copied by default (the HEART code does not copy them)
        assert torch.equal(own[k], v), k
    assert loaded.head.weight.shape == (3, 16)  # fc is never loaded

    state = backbone_state(source)
    del state["layer1.0.conv1.weight"]
    torch.save(state, tmp_path / "missing.pt")
    with pytest.raises(ConfigError, match="missing keys .*layer1.0.conv1.weight"):
        small(pretrained=str(tmp_path / "missing.pt"))
    torch.save(backbone_state(small(widths=[4, 8, 8, 32], adapters=False)), tmp_path / "wide.pt")
    with pytest.raises(ConfigError, match="shape mismatches"):
        small(pretrained=str(tmp_path / "wide.pt"))
    with pytest.raises(ConfigError, match="not found"):
        small(pretrained=str(tmp_path / "nothing.pt"))


def test_adapter_state_holds_trainable_parameters_and_batchnorm_statistics_only():
    model = small()
    names = set(adapter_state_names(model))
    assert "head.weight" in names and "body.layer1.0.adapter1.conv.weight" in names
    assert "body.layer2.0.downsample.1.running_mean" in names  # statistics of every BatchNorm
    assert "body.layer2.0.downsample.1.weight" not in names and "body.layer1.0.conv1.weight" not in names


# ---------------------------------------------------------------- server data


def test_held_out_server_split_is_per_class_disjoint_from_clients_and_serves_as_in_domain_proxy():
    from pfedkit.data.federated import build_federated
    from pfedkit.data.sources import load_dataset
    from pfedkit.registry import load_config

    base = ['data.dataset="synthetic"', "partition.clients=4", 'eval.protocol="official-test"', "proxy.holdout=0.1"]
    fed = build_federated(load_config(None, base))
    source = load_dataset("synthetic")
    server = fed.server
    assert torch.equal(torch.bincount(server.val_y), torch.full((10,), 20))  # 10% of 200 per class
    assert len(fed.train_y) == len(source.train_y) - len(server.val_y)
    pooled = {tuple(row.flatten().tolist()) for row in fed.train_x[:, 0, 0, :2]}
    assert not any(tuple(row.flatten().tolist()) in pooled for row in server.val_x[:, 0, 0, :2])
    assert server.proxy_x is server.val_x  # in-domain: the held-out split is the proxy
    assert build_federated(load_config(None, base[:3])).server is None

    with pytest.raises(ConfigError, match="validation split"):
        build_federated(load_config(None, base[:3] + ['proxy.dataset="synthetic"']))
    with pytest.raises(ConfigError, match="same shape"):
        build_federated(load_config(None, base + ['proxy.dataset="synthetic"', "proxy.options={shape=[1, 4, 4]}"]))
    ood = build_federated(
        load_config(None, base + ['proxy.dataset="synthetic"', "proxy.options={seed=5}", "proxy.max_samples=50"])
    )
    assert len(ood.server.proxy_y) == 50 and ood.server.proxy_name == "synthetic"


# ---------------------------------------------------------------- methods: helpers

import torch.nn.functional as F  # noqa: E402

from pfedkit.engine import local_update  # noqa: E402
from pfedkit.methods.distillation import ensemble_log_probs, pgd_attack, symmetric_kl  # noqa: E402
from pfedkit.methods.heart import alignment_loss  # noqa: E402
from pfedkit.models.adapters import trainable_names  # noqa: E402
from pfedkit.records import (  # noqa: E402
    ClientData,
    MethodContext,
    ServerData,
    TrainSettings,
)


def image_data(cid: int = 0, n: int = 24, classes: int = 3, side: int = 12) -> ClientData:
    g = torch.Generator().manual_seed(10 + cid)
    y = torch.arange(n) % classes
    pixels = (torch.rand(n, 1, side, side, generator=g) * 0.5 + 0.25 * y.view(-1, 1, 1, 1) / classes).clamp(0, 1)
    x = (pixels - 0.5) / 0.5
    return ClientData(cid, x, y, x.clone(), y.clone(), num_classes=classes)


def heart(name: str = "heart-pfl", params: dict | None = None, server: ServerData | None = None, **train):
    from pfedkit.methods import METHODS

    settings = dict(local_epochs=1, batch_size=8, lr=0.05)
    settings.update(train)
    cls = METHODS[name]
    ctx = MethodContext(lambda: small(), TrainSettings(**settings), num_classes=3, seed=0, server=server)
    return cls(cls.validate_params(params or {}), ctx)


def server_data(n: int = 24) -> ServerData:
    val, proxy = image_data(cid=7, n=n), image_data(cid=8, n=n)
    return ServerData(val.train_x, val.train_y, proxy.train_x, proxy.train_y, "test proxy")


# ---------------------------------------------------------------- PGD and symmetric KL


def test_pgd_stays_in_the_pixel_eps_ball_and_the_unit_box_and_raises_the_loss():
    torch.manual_seed(0)
    model = small().eval()
    data = image_data(n=16)
    x, y = data.train_x, data.train_y
    eps = 8 / 255
    adv = pgd_attack(model, x, y, eps=eps, alpha=2 / 255, steps=10, generator=torch.Generator().manual_seed(1))
    pixels, adv_pixels = x * 0.5 + 0.5, adv * 0.5 + 0.5
    assert (adv_pixels - pixels).abs().max() <= eps + 1e-6
    assert adv_pixels.min() >= 0 and adv_pixels.max() <= 1
    with torch.no_grad():
        assert F.cross_entropy(model(adv), y) > F.cross_entropy(model(x), y)
    model.train()  # the attack runs in eval mode and gives the model back its mode
    pgd_attack(model, x, y, eps=eps, alpha=2 / 255, steps=1, generator=torch.Generator().manual_seed(1))
    assert model.training
    # the released code's variant clamps the normalized tensor itself to [0, 1]
    code = pgd_attack(
        model, x, y, eps=eps, alpha=2 / 255, steps=3, generator=torch.Generator().manual_seed(1), space="normalized"
    )
    assert code.min() >= 0 and (code - x.clamp(0, 1)).abs().max() <= eps + 1e-6


def test_symmetric_kl_equals_a_hand_computation_and_has_a_finite_gradient():
    student = torch.tensor([[1.0, 0.0, -1.0], [0.5, 0.5, 2.0]], requires_grad=True)
    teachers = [torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 3.0]])]
    p_bar = (F.softmax(teachers[0], 1) + F.softmax(teachers[1], 1)) / 2  # Eq. 9
    log_t = ensemble_log_probs(teachers, "probs")
    torch.testing.assert_close(log_t.exp(), p_bar)
    p_s = F.softmax(student, 1).detach()
    forward = sum(float((p_bar[i] * (p_bar[i] / p_s[i]).log()).sum()) for i in range(2)) / 2
    reverse = sum(float((p_s[i] * (p_s[i] / p_bar[i]).log()).sum()) for i in range(2)) / 2
    loss = symmetric_kl(student, log_t)
    assert abs(float(loss.detach()) - (forward + reverse)) < 1e-6
    assert abs(float(symmetric_kl(student, log_t, symmetric=False).detach()) - forward) < 1e-6
    (grad,) = torch.autograd.grad(loss, student)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0
    # the code's ensemble: softmax of mean logits
    torch.testing.assert_close(
        ensemble_log_probs(teachers, "logits"), F.log_softmax((teachers[0] + teachers[1]) / 2, 1)
    )


# ---------------------------------------------------------------- hierarchical alignment


def test_alignment_is_one_minus_cosine_on_early_stages_and_mse_on_deep_stages():
    g = torch.Generator().manual_seed(0)
    feats = [torch.randn(4, d, generator=g) for d in (2, 3, 4, 5)]
    y = torch.tensor([0, 1, 1, 2])
    protos = [torch.randn(3, d, generator=g) for d in (2, 3, 4, 5)]
    available = torch.tensor([True, True, False])  # class 2 has no prototype: contributes 0, still counted
    expected = 0.0
    for stage, (f, p) in enumerate(zip(feats, protos)):
        for i in range(3):
            t = p[y[i]]
            if stage < 2:
                expected += 1 - float(f[i] @ t / (f[i].norm() * t.norm()))
            else:
                expected += float(((f[i] - t) ** 2).mean())
    expected /= 4 * 4
    assert abs(float(alignment_loss(feats, y, protos, available, 2)) - expected) < 1e-6
    scaled = [3 * feats[0], 3 * feats[1], feats[2], feats[3]]  # cosine ignores the scale of early features
    assert abs(float(alignment_loss(scaled, y, protos, available, 2)) - expected) < 1e-6
    assert float(alignment_loss(scaled, y, protos, available, 4)) != pytest.approx(expected)


def _grads(loss_fn, model, x, y):
    params = [p for n, p in model.named_parameters() if n in set(trainable_names(model))]
    return torch.autograd.grad(loss_fn(model, x, y), params, allow_unused=True)


def test_alignment_gradient_reaches_the_trainable_parameters_in_paper_mode_and_not_in_code_mode():
    data = image_data()
    for mode in ("paper", "code"):
        method = heart(params={"alignment": mode, "kd_rounds": 0})
        payload = method.init_server()
        personal = method.adapter_model(payload, "personal")
        context = method.client_context(personal, payload, data, 0)
        assert len(context["protos"]) == 4 and context["available"].all()
        plain = heart("perada", params={"kd_rounds": 0, "prox_weight": method.params.prox_weight})
        x, y = data.train_x[:8], data.train_y[:8]
        if mode == "paper":  # HDA is in the local adapter's loss, with gradient
            with_hda, without = method.local_loss(payload, context), plain.local_loss(payload, {})
        else:  # HDA is added to the personal loss as a constant
            with_hda, without = method.personal_loss(payload, context), plain.personal_loss(payload, {})
        model = method.adapter_model(payload, "check")
        model.eval()  # no dropout: the two evaluations see the same network
        a, b = _grads(with_hda, model, x, y), _grads(without, model, x, y)
        differs = any(not torch.allclose(ga, gb) for ga, gb in zip(a, b) if ga is not None)
        assert differs == (mode == "paper"), mode
        assert context["logged"] and context["logged"][0] > 0


# ---------------------------------------------------------------- client round and server choice


@pytest.mark.parametrize("name", ["heart-pfl", "perada"])
def test_client_round_changes_only_adapters_batchnorms_and_head_and_leaves_the_backbone_bit_identical(name):
    method = heart(name, params={"kd_rounds": 0})
    payload = method.init_server()
    client = method.init_client(0, None)
    initial = method.initial_state()
    reply, after = local_update(method, payload, client, image_data(), 0)
    trainable = set(trainable_names(method.working_model("main")))
    for model in (method.working_model("personal"), method.working_model("local")):  # as the round left them
        for n, p in model.named_parameters():
            if n not in trainable:
                assert torch.equal(p, initial[n]), n  # frozen: bit-identical after the training
    for state in (reply, after):
        changed = {n for n in trainable if not torch.equal(state[n], initial[n])}
        assert {"head.weight", "body.layer1.0.adapter1.conv.weight", "body.layer3.0.bn2.weight"} <= changed
    assert set(after) == set(method.adapter_keys())  # the personalized adapter stays on the client
    assert set(reply) - set(method.adapter_keys()) <= {"num_samples", "align_loss"}
    assert not any(torch.equal(reply[k], after[k]) for k in ("head.weight", "body.layer4.0.adapter2.conv.weight"))


@pytest.mark.parametrize("frozen_backbone", [True, False])
def test_a_frozen_backbone_lets_a_full_model_method_train_only_what_the_adapter_methods_train(frozen_backbone):
    """The control that separates freezing the backbone from the adapter methods' algorithms: FedPer on
    `frozen_backbone = true` changes adapters, bn1/bn2 and the head and leaves every other weight bit-identical."""
    from pfedkit.methods import METHODS

    cls = METHODS["fedper"]
    ctx = MethodContext(lambda: small(frozen_backbone=frozen_backbone), TrainSettings(1, 8, 0.05), 3, 0)
    method = cls(cls.validate_params({}), ctx)
    initial = method.initial_state()
    reply, personal = local_update(method, method.init_server(), method.init_client(0, None), image_data(), 0)
    after = {**reply, **personal}
    trainable = set(trainable_names(method.working_model("main")))
    changed = {n for n, _ in method.working_model("main").named_parameters() if not torch.equal(after[n], initial[n])}
    assert {"head.weight", "body.layer1.0.adapter1.conv.weight", "body.layer3.0.bn2.weight"} <= changed
    assert (changed <= trainable) is frozen_backbone  # without the option FedPer moves the convolutions too
    with pytest.raises(ConfigError, match="frozen_backbone"):
        small(frozen_backbone="yes")


def test_distilled_model_is_kept_only_if_it_beats_the_average_on_the_validation_split(monkeypatch):
    method = heart(params={"kd_steps": 2, "kd_batch": 8, "pgd_steps": 2}, server=server_data())
    average = method.init_server()
    keys = method.adapter_keys()

    def outcome(state: dict) -> tuple[float, float]:
        return float(state["kd_accepted"]), float(state["kd_val_gain"])

    replies = [local_update(method, average, average, image_data(cid), 0)[0] for cid in range(2)]
    teachers = [method.adapter_model(r, f"teacher{cid}") for cid, r in enumerate(replies)]
    model = method.adapter_model(average, "probe").eval()
    with torch.no_grad():  # validation labels the average gets all right: no student can beat it
        val = image_data(cid=5)
        labels = model(val.train_x).argmax(1)
    method.ctx.__dict__["server"] = ServerData(val.train_x, labels, val.train_x, val.train_y, "probe")
    kept = method.distill(average, teachers, 0)
    assert all(torch.equal(kept[k], average[k]) for k in keys)
    assert outcome(kept) == (0.0, 0.0)  # logged in metrics.csv: the average was kept

    def scripted(*accuracies):  # validation accuracies: the average's first, then one per step
        values = iter(accuracies)
        monkeypatch.setattr("pfedkit.methods.perada.accuracy", lambda *a, **k: next(values))

    def run(steps: int) -> dict:
        method.params.__dict__["kd_steps"] = steps
        fresh = [method.adapter_model(r, f"teacher{cid}") for cid, r in enumerate(replies)]  # train-mode BN moves
        return method.distill(average, fresh, 0)

    scripted(0.5, 0.6)
    after_one = run(1)
    assert outcome(after_one) == pytest.approx((1.0, 10.0))  # kept, 10 points above the average on validation
    assert any(not torch.equal(after_one[k], average[k]) for k in keys)
    scripted(0.5, 0.6, 0.55)  # the best step, not the last
    best = run(2)
    assert all(torch.equal(best[k], after_one[k]) for k in keys)
    scripted(0.5, 0.5, 0.4)  # never strictly better than the average
    rejected = run(2)
    assert outcome(rejected) == (0.0, 0.0)
    assert all(torch.equal(rejected[k], average[k]) for k in keys)
    scripted(0.5, 0.4, 0.7)
    last = run(2)
    assert outcome(last) == pytest.approx((1.0, 20.0))
    assert any(not torch.equal(last[k], after_one[k]) for k in keys)
    # kd_keep = "last" (the papers' Alg. 1): no gate, the final student kept even when validation says it is worse;
    # validated twice only (the average, then the final student), never during the steps
    method.params.__dict__["kd_keep"] = "last"
    scripted(0.5, 0.3)
    ungated = run(2)
    assert outcome(ungated) == pytest.approx((1.0, -20.0))
    method.params.__dict__["kd_keep"] = "validated"
    scripted(0.5, 0.6, 0.3)  # the gated run of the same two steps keeps its first step's student instead
    gated = run(2)
    assert any(not torch.equal(ungated[k], gated[k]) for k in keys)


def test_missing_server_data_or_a_plain_model_fails_before_training():
    with pytest.raises(ConfigError, match="proxy.holdout"):
        heart().init_server()
    from pfedkit.methods import METHODS

    cls = METHODS["perada"]
    ctx = MethodContext(lambda: small(adapters=False), TrainSettings(1, 8, 0.1), 3, 0, server_data())
    with pytest.raises(ConfigError, match="resnet18-adapter"):
        cls(cls.validate_params({}), ctx).init_server()
    with pytest.raises(ConfigError, match="at least one view"):
        METHODS["heart-pfl"].validate_params({"adversarial": False, "clean_view": False})


HEART_RUN = [
    'data.dataset="synthetic"',
    "data.options={shape=[1, 12, 12], samples=400, test_samples=200}",
    "partition.clients=4",
    "partition.beta=0.5",
    'eval.protocol="official-test"',
    "train.rounds=2",
    "train.join_ratio=0.5",
    "train.batch_size=16",
    "train.lr=0.05",
    'model.name="small-resnet-adapter"',
    "model.options={widths=[4, 8, 8, 16]}",
    'method.name="heart-pfl"',
    "method.kd_steps=2",
    "method.kd_batch=32",
    "method.pgd_steps=2",
    "proxy.holdout=0.1",
    'proxy.dataset="synthetic"',
    "proxy.options={shape=[1, 12, 12], samples=100, seed=3}",
    "run.workers=1",
]


def test_heart_pfl_runs_through_the_engine_with_an_out_of_domain_proxy(tmp_path):
    from pfedkit.experiments import run_experiment
    from pfedkit.io import read_csv
    from pfedkit.registry import load_config

    summary = run_experiment(load_config(None, HEART_RUN + ["method.kd_rounds=1"]), tmp_path / "run", progress=False)
    held = summary["server_data"]  # the server distilled on the other data set, validated on the held-out share
    assert held["proxy"] == "synthetic" and 0 < held["proxy_samples"] <= 100 and held["validation_samples"] == 40
    rows = [r for r in read_csv(tmp_path / "run" / "metrics.csv") if int(r["clients_trained"]) > 0]
    assert float(rows[0]["kd_accepted"]) in (0.0, 1.0)  # distilled in round 0: kept or not, and what it gained
    assert (float(rows[0]["kd_val_gain"]) > 0) == (float(rows[0]["kd_accepted"]) == 1.0)
    assert [float(r["kd_accepted"]) for r in rows[1:]] == [-1.0]  # no distillation from kd_rounds on


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run.device = cuda)")
def test_heart_pfl_on_a_gpu_starts_from_the_cpu_run_s_model_and_trains(tmp_path):
    from pfedkit.experiments import run_experiment
    from pfedkit.io import read_csv
    from pfedkit.registry import load_config

    run_experiment(load_config(None, HEART_RUN), tmp_path / "cpu", progress=False)
    gpu = run_experiment(load_config(None, HEART_RUN + ['run.device="cuda"']), tmp_path / "gpu", progress=False)
    assert gpu["rounds"] == 2 and 0 <= gpu["last_acc"] <= 1
    first = [float(read_csv(tmp_path / run / "metrics.csv")[0]["acc"]) for run in ("cpu", "gpu")]
    assert abs(first[0] - first[1]) < 0.02  # same seeded weights and data before any training (kernels differ)
    assert all(math.isfinite(float(r["loss"])) for r in read_csv(tmp_path / "gpu" / "metrics.csv"))


# ---------------------------------------------------------------- pretrain


def test_pretrain_saves_a_backbone_the_adapter_models_load(tmp_path):
    from click.testing import CliRunner

    from pfedkit.cli import main

    out = tmp_path / "backbone.pt"
    result = CliRunner().invoke(
        main,
        [
            "pretrain",
            "--dataset",
            "synthetic",
            "--out",
            str(out),
            "--epochs",
            "1",
            "--option",
            "widths=[4, 8, 8, 16]",
            "--option",
            "stem_stride=1",
        ],
    )
    assert result.exit_code == 0, result.output
    saved = torch.load(out, weights_only=True)
    assert "fc.weight" in saved and not any("adapter" in k for k in saved)
    model = build_model("small-resnet-adapter", (1, 8, 8), 4, widths=[4, 8, 8, 16], stem_stride=1, pretrained=str(out))
    assert torch.equal(model.body.state_dict()["layer2.0.conv2.weight"], saved["layer2.0.conv2.weight"])
    assert not torch.equal(
        model.body.state_dict()["layer2.0.conv2.weight"],
        build_model("small-resnet-adapter", (1, 8, 8), 4, widths=[4, 8, 8, 16], stem_stride=1).body.state_dict()[
            "layer2.0.conv2.weight"
        ],
    )
    bad = CliRunner().invoke(main, ["pretrain", "--dataset", "synthetic", "--model", "resnet18", "--out", str(out)])
    assert bad.exit_code == 2 and "resnet18-adapter" in bad.output
    if not torch.cuda.is_available():  # a GPU asked for where there is none: said before any data is read
        no_gpu = CliRunner().invoke(main, ["pretrain", "--dataset", "synthetic", "--device", "cuda", "--out", str(out)])
        assert no_gpu.exit_code == 2 and "no CUDA GPU is visible here; use --device cpu" in no_gpu.output
    typo = CliRunner().invoke(main, ["pretrain", "--dataset", "synthetic", "--device", "gpu", "--out", str(out)])
    assert typo.exit_code == 2 and "cpu or cuda" in typo.output


def test_a_suite_scale_can_pretrain_another_backbone_and_only_if_the_suite_pretrains(tmp_path):
    from pfedkit.errors import ConfigError
    from pfedkit.papers.suites import PAPERS, SUITES, suite_from_toml

    suite = SUITES["heart-cifar100"]
    small, gpu = suite.pretrain_at("small"), suite.pretrain_at("paper")
    assert small["model"] == "small-resnet-adapter" and small["options"]["widths"] == [32, 64, 128, 256]
    assert gpu["model"] == "resnet18-adapter" and gpu["options"] == {"stem": "cifar"}  # options replaced, not merged
    assert gpu["dataset"] == small["dataset"] == "cifar10" and gpu["path"] != small["path"]
    text = (PAPERS / "heart_table1.toml").read_text()
    bad = tmp_path / "bad.toml"
    without = re.sub(r"\n\[pretrain\].*?(?=\n\[)", "", text, flags=re.DOTALL)  # the suite's [pretrain] table cut out
    bad.write_text(without.replace("[scales.small]", "[scales.small]\npretrain = {epochs = 3}"))
    with pytest.raises(ConfigError, match=r"\[scales.small\]: a scale's pretrain changes the suite's \[pretrain\]"):
        suite_from_toml(bad)


def test_a_backbone_another_scale_made_is_reused_before_this_scale_s_folder_exists(tmp_path, monkeypatch):
    """The long scale names the small scale's backbone as "{out}/../heart_cifar100/...": found while {out} does not
    exist yet (the OS cannot walk "missing/.."), it must be reused, not trained again over the committed file."""
    from pfedkit.experiments.cells import pretrain_once

    shared = tmp_path / "heart_cifar100" / "backbone_cifar10.pt"
    shared.parent.mkdir()
    shared.write_bytes(b"the committed backbone")

    def no_training(*args, **kwargs):
        raise AssertionError("pretrained again although the backbone exists")

    monkeypatch.setattr("pfedkit.experiments.pretrain.pretrain_backbone", no_training)
    spec = {
        "dataset": "cifar10",
        "model": "small-resnet-adapter",
        "path": "{out}/../heart_cifar100/backbone_cifar10.pt",
    }
    pretrain_once(spec, tmp_path / "heart_cifar100_long", None, log=lambda line: None)
    assert shared.read_bytes() == b"the committed backbone"
