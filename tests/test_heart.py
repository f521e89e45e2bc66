"""HEART-PFL and PerAda: adapter models, pretrained loading, PGD, symmetric KL, hierarchical alignment, proxy data,
what client training may change, and the server's distillation choice."""
from __future__ import annotations

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
    load_backbone,
)

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
    from pfedkit.config import load_config
    from pfedkit.data.federated import build_federated
    from pfedkit.data.sources import load_dataset

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
    ood = build_federated(load_config(None, base + ['proxy.dataset="synthetic"', "proxy.options={seed=5}",
                                                    "proxy.max_samples=50"]))
    assert len(ood.server.proxy_y) == 50 and ood.server.proxy_name == "synthetic"
