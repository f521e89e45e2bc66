"""Model names -> SplitModel builders; bad names, shapes and options fail with a ConfigError saying what is valid."""

from __future__ import annotations

from typing import Callable

from pfedkit.errors import ConfigError
from pfedkit.models import adapters, cnn, resnet
from pfedkit.models.base import SplitModel

# name -> (builder, {option: default}); options are passed to the builder as keywords.
_MODELS: dict[str, tuple[Callable[..., SplitModel], dict[str, object]]] = {
    "fedavgcnn": (cnn.fedavgcnn, {}),
    "fedpac-fmnist": (cnn.fedpac_fmnist, {}),
    "fedpac-cifar": (cnn.fedpac_cifar, {}),
    "resnet18": (resnet.resnet18, {"stem": "imagenet"}),
    "mlp": (cnn.mlp, {"hidden": 128}),
    "smallcnn": (cnn.smallcnn, {}),
    "resnet18-adapter": (
        adapters.resnet18_adapter,
        {
            "stem": "imagenet",
            "adapters": True,
            "dropout": 0.3,
            "pretrained": "",
            "pretrained_bn_stats": False,
            "frozen_backbone": False,
        },
    ),
    "small-resnet-adapter": (
        adapters.small_resnet_adapter,
        {
            "widths": (8, 16, 32, 64),
            "blocks": 1,
            "stem_stride": 2,
            "adapters": True,
            "dropout": 0.3,
            "pretrained": "",
            "pretrained_bn_stats": False,
            "frozen_backbone": False,
        },
    ),
}

MODEL_NAMES: tuple[str, ...] = tuple(_MODELS)

__all__ = ["MODEL_NAMES", "SplitModel", "build_model", "is_input_shape", "is_positive_int", "model_options"]


def _entry(name: str) -> tuple[Callable[..., SplitModel], dict[str, object]]:
    if name not in _MODELS:
        raise ConfigError(f"unknown model {name!r}; choose one of: {', '.join(MODEL_NAMES)}")
    return _MODELS[name]


def model_options(name: str) -> dict[str, object]:
    """The options `name` takes, with their defaults (a copy, safe to modify)."""
    return dict(_entry(name)[1])


def is_input_shape(value: object) -> bool:
    """Three positive integers (C, H, W), as a list or tuple: what every model is built for."""
    return isinstance(value, (tuple, list)) and len(value) == 3 and all(is_positive_int(v) for v in value)


def is_positive_int(value: object) -> bool:
    """A whole number above 0, not a bool: a count build_model accepts (num_classes, hidden)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check_options(name: str, options: dict[str, object]) -> dict[str, object]:
    defaults = model_options(name)
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        valid = ", ".join(f"{k} (default {v!r})" for k, v in defaults.items()) or "none"
        raise ConfigError(f"model {name!r} has no option(s) {', '.join(unknown)}; valid options: {valid}")
    merged = {**defaults, **options}
    if "stem" in merged and merged["stem"] not in resnet.STEMS:
        raise ConfigError(f"model {name!r}: `stem` must be one of {', '.join(resnet.STEMS)}, got {merged['stem']!r}")
    if "hidden" in merged and not is_positive_int(merged["hidden"]):
        raise ConfigError(f"model {name!r}: `hidden` must be a positive integer, got {merged['hidden']!r}")
    return merged


def build_model(name: str, input_shape: tuple[int, int, int], num_classes: int, **options) -> SplitModel:
    """Build model `name` for inputs of shape (C, H, W) and `num_classes` outputs; uses only torch's global RNG."""
    builder, _ = _entry(name)
    if not is_input_shape(input_shape):
        raise ConfigError(f"model {name!r}: input_shape must be three positive integers (C, H, W), got {input_shape!r}")
    if not is_positive_int(num_classes):
        raise ConfigError(f"model {name!r}: num_classes must be a positive integer, got {num_classes!r}")
    return builder(tuple(input_shape), num_classes, **_check_options(name, options))
