"""Model zoo: pinned parameter counts, the body/head split, ResNet stems, determinism and config errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pfedkit.errors import ConfigError
from pfedkit.models import MODEL_NAMES, build_model, model_options
from pfedkit.models.base import SplitModel


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def conv(cin: int, cout: int, k: int) -> int:
    return cin * cout * k * k + cout


def linear(fin: int, fout: int) -> int:
    return fin * fout + fout


# (name, input shape, options) for every model on the shapes it is meant for; ResNet stays at batch 2 to keep this fast.
SUPPORTED = [
    ("fedavgcnn", (1, 28, 28), {}),
    ("fedavgcnn", (3, 32, 32), {}),
    ("fedavgcnn", (3, 64, 64), {}),
    ("fedpac-fmnist", (1, 28, 28), {}),
    ("fedpac-cifar", (3, 32, 32), {}),
    ("resnet18", (3, 32, 32), {"stem": "imagenet"}),
    ("resnet18", (3, 32, 32), {"stem": "cifar"}),
    ("mlp", (1, 8, 8), {}),
    ("mlp", (1, 1, 60), {"hidden": 32}),
    ("smallcnn", (1, 8, 8), {}),
    ("smallcnn", (3, 32, 32), {}),
]


def test_names_and_options():
    assert MODEL_NAMES == (
        "fedavgcnn",
        "fedpac-fmnist",
        "fedpac-cifar",
        "resnet18",
        "mlp",
        "smallcnn",
        "resnet18-adapter",
        "small-resnet-adapter",
    )
    assert model_options("resnet18") == {"stem": "imagenet"}
    assert model_options("mlp") == {"hidden": 128}
    assert all(model_options(n) == {} for n in ("fedavgcnn", "fedpac-fmnist", "fedpac-cifar", "smallcnn"))
    model_options("mlp")["hidden"] = 1  # a copy: editing it must not change the defaults
    assert model_options("mlp") == {"hidden": 128}


@pytest.mark.parametrize(
    "name, shape, classes, expected",
    [
        ("fedavgcnn", (1, 28, 28), 10, 582_026),
        ("fedavgcnn", (3, 32, 32), 10, 878_538),
        ("resnet18", (3, 224, 224), 1000, 11_689_512),
        ("resnet18", (3, 32, 32), 10, 11_181_642),
        # the CIFAR-100 builds the papers use: FedAvgCNN for PGFedSplit, ResNet-18 (not pretrained) for FedAFK's Table 3
        ("fedavgcnn", (3, 32, 32), 100, 878_538 - linear(512, 10) + linear(512, 100)),
        ("resnet18", (3, 32, 32), 100, 11_227_812),  # torchvision's resnet18(num_classes=100)
        # FedPAC CNN_FMNIST: conv1 1->16 k5, conv2 16->32 k5, fc1 800->128, fc2 128->10
        ("fedpac-fmnist", (1, 28, 28), 10, conv(1, 16, 5) + conv(16, 32, 5) + linear(800, 128) + linear(128, 10)),
        # FedPAC CifarCNN: conv1 3->16 k5, conv2 16->32 k5, conv3 32->64 k3, fc1 576->128, fc2 128->10
        (
            "fedpac-cifar",
            (3, 32, 32),
            10,
            conv(3, 16, 5) + conv(16, 32, 5) + conv(32, 64, 3) + linear(576, 128) + linear(128, 10),
        ),
        # mlp on 8x8 digits: 64->128->128->10
        ("mlp", (1, 8, 8), 10, linear(64, 128) + linear(128, 128) + linear(128, 10)),
        # smallcnn on 8x8: conv 1->16 k3, conv 16->32 k3, two 2x2 pools leave 32x2x2=128, fc 128->128, head 128->10
        ("smallcnn", (1, 8, 8), 10, conv(1, 16, 3) + conv(16, 32, 3) + linear(128, 128) + linear(128, 10)),
    ],
)
def test_parameter_counts(name, shape, classes, expected):
    assert n_params(build_model(name, shape, classes)) == expected


def test_resnet18_cifar_stem_is_the_common_cifar_variant():
    model = build_model("resnet18", (3, 32, 32), 10, stem="cifar")
    assert n_params(model) == 11_173_962  # one 3x3/1 conv and no max-pool: 32x32 reaches layer1 at full size
    assert model.body.conv1.kernel_size == (3, 3) and not hasattr(model.body, "maxpool")


def test_fedavgcnn_flatten_dim_follows_input():
    for shape, dim in [((1, 28, 28), 1024), ((3, 32, 32), 1600), ((3, 64, 64), 10816)]:
        assert build_model("fedavgcnn", shape, 10).body.fc1.in_features == dim


@pytest.mark.parametrize("name, shape, options", SUPPORTED)
def test_body_head_split(name, shape, options):
    torch.manual_seed(0)
    model = build_model(name, shape, 7, **options)
    assert isinstance(model, SplitModel)
    names = [n for n, _ in model.named_parameters()]
    assert all(n.startswith(("body.", "head.")) for n in names)
    # The head is exactly the final Linear: feature_dim -> classes, and nothing else.
    assert type(model.head) is nn.Linear
    assert (model.head.in_features, model.head.out_features) == (model.feature_dim, 7)
    assert sorted(n for n in names if n.startswith("head.")) == ["head.bias", "head.weight"]
    x = torch.randn(2, *shape)
    with torch.no_grad():
        features = model.features(x)
        out = model(x)
    assert features.shape == (2, model.feature_dim)
    assert out.shape == (2, 7)
    assert torch.allclose(out, model.head(features))


def test_feature_dims_and_activations():
    assert build_model("fedavgcnn", (1, 28, 28), 10).feature_dim == 512
    assert build_model("fedpac-fmnist", (1, 28, 28), 10).feature_dim == 128
    assert build_model("fedpac-cifar", (3, 32, 32), 10).feature_dim == 128
    assert build_model("smallcnn", (1, 8, 8), 10).feature_dim == 128
    assert build_model("mlp", (1, 8, 8), 10, hidden=16).feature_dim == 16
    torch.manual_seed(0)
    model = build_model("fedavgcnn", (1, 28, 28), 10)
    with torch.no_grad():
        assert (model.features(torch.randn(4, 1, 28, 28)) >= 0).all()  # ReLU feature, as in PFLlib
    fedpac = build_model("fedpac-cifar", (3, 32, 32), 10)
    slopes = [m.negative_slope for m in fedpac.body if isinstance(m, nn.LeakyReLU)]
    assert slopes == [0.01] * 4


@pytest.mark.parametrize(
    "stem, shape, stem_side, final_side",
    [
        ("imagenet", (3, 32, 32), 8, 1),
        ("imagenet", (3, 64, 64), 16, 2),
        ("cifar", (3, 32, 32), 32, 4),
        ("cifar", (3, 64, 64), 64, 8),
    ],
)
def test_resnet_stems(stem, shape, stem_side, final_side):
    torch.manual_seed(0)
    model = build_model("resnet18", shape, 10, stem=stem).eval()
    body = model.body
    x = torch.randn(2, *shape)
    with torch.no_grad():
        after_stem = body[: list(body._modules).index("layer1")](x)
        after_layer4 = body[: list(body._modules).index("avgpool")](x)
        out = model(x)
    assert after_stem.shape == (2, 64, stem_side, stem_side)
    assert after_layer4.shape == (2, 512, final_side, final_side)
    assert out.shape == (2, 10)
    assert ("maxpool" in body._modules) == (stem == "imagenet")


def test_resnet_init_and_cifar_stem_count():
    torch.manual_seed(0)
    model = build_model("resnet18", (3, 32, 32), 10)
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert bns and all((m.weight == 1).all() and (m.bias == 0).all() for m in bns)
    assert all(m.bias is None for m in model.modules() if isinstance(m, nn.Conv2d))
    # kaiming_normal fan_out: std = sqrt(2 / (out_channels * k * k))
    w = model.body.layer4[1].conv2.weight
    assert w.std().item() == pytest.approx((2 / (512 * 9)) ** 0.5, rel=0.05)
    cifar = build_model("resnet18", (3, 32, 32), 10, stem="cifar")
    assert n_params(cifar) == 11_181_642 - 3 * 64 * (7 * 7 - 3 * 3)


@pytest.mark.parametrize("name, shape, options", SUPPORTED)
def test_construction_is_deterministic(name, shape, options):
    def state(seed):
        torch.manual_seed(seed)
        return build_model(name, shape, 5, **options).state_dict()

    a, b, c = state(3), state(3), state(4)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a if a[k].is_floating_point())


def test_unknown_name_lists_valid_names():
    for call in (lambda: build_model("resnet50", (3, 32, 32), 10), lambda: model_options("resnet50")):
        with pytest.raises(ConfigError) as err:
            call()
        assert "resnet50" in str(err.value)
        assert all(n in str(err.value) for n in MODEL_NAMES)


@pytest.mark.parametrize(
    "name, shape, smallest",
    [
        ("fedavgcnn", (1, 8, 8), 16),
        ("fedpac-fmnist", (1, 8, 8), 12),
        ("fedpac-cifar", (3, 12, 32), 16),
        ("smallcnn", (1, 1, 60), 4),
    ],
)
def test_too_small_input_names_minimum(name, shape, smallest):
    with pytest.raises(ConfigError) as err:
        build_model(name, shape, 10)
    message = str(err.value)
    assert name in message and str(shape) in message
    assert f"at least {smallest}" in message and "'mlp'" in message
    bigger = (shape[0], smallest, smallest)  # the size the message names must actually work
    assert build_model(name, bigger, 10)(torch.randn(1, *bigger)).shape == (1, 10)


@pytest.mark.parametrize(
    "name, shape, classes, options, fragment",
    [
        ("fedavgcnn", (28, 28), 10, {}, "input_shape"),
        ("mlp", (1, 8, 8), 0, {}, "num_classes"),
        ("mlp", (1, 8, 8), 10, {"width": 4}, "hidden (default 128)"),
        ("fedavgcnn", (1, 28, 28), 10, {"hidden": 4}, "valid options: none"),
        ("mlp", (1, 8, 8), 10, {"hidden": 0}, "hidden"),
        ("resnet18", (3, 32, 32), 10, {"stem": "tiny"}, "imagenet, cifar"),
    ],
)
def test_bad_arguments(name, shape, classes, options, fragment):
    with pytest.raises(ConfigError) as err:
        build_model(name, shape, classes, **options)
    assert fragment in str(err.value)
