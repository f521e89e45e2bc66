"""Names -> methods, models, datasets; unknown names fail with the valid choices."""
from __future__ import annotations

from typing import TYPE_CHECKING

from pfedkit.errors import ConfigError

if TYPE_CHECKING:
    from pfedkit.config import Config
    from pfedkit.methods.base import Method


def method_names() -> list[str]:
    from pfedkit.methods import METHODS

    return sorted(METHODS)


def method_class(name: str) -> type["Method"]:
    from pfedkit.methods import METHODS

    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r} in `method.name`; choose one of: {', '.join(method_names())}")
    return METHODS[name]


def check_names(config: "Config") -> None:
    from pfedkit.data.sources import DATASET_NAMES
    from pfedkit.models import MODEL_NAMES

    if config.data.dataset not in DATASET_NAMES:
        raise ConfigError(f"unknown dataset {config.data.dataset!r} in `data.dataset`; choose one of: {', '.join(DATASET_NAMES)}")
    if config.model.name not in MODEL_NAMES:
        raise ConfigError(f"unknown model {config.model.name!r} in `model.name`; choose one of: {', '.join(MODEL_NAMES)}")
    method_class(config.method.name)
