"""Names -> methods, models, datasets; unknown names fail with the valid choices. A config is complete here: its
names checked, its method's hyper-parameters validated, and the method built from it."""

from __future__ import annotations

import functools
import importlib
import sys
from pathlib import Path
from typing import Any, Optional

import torch

from pfedkit.config import (
    PLACEMENT_KEYS,
    Config,
    MethodSection,
    apply_overrides,
    config_differences,
    parse_config,
    read_toml,
    training_seed,
)
from pfedkit.data.sources import DATASET_NAMES
from pfedkit.errors import ConfigError
from pfedkit.methods import METHODS
from pfedkit.methods.base import Method
from pfedkit.models import MODEL_NAMES, build_model
from pfedkit.records import MethodContext, ServerData, TrainSettings


def method_names() -> list[str]:
    return sorted(METHODS)


ENTRY_POINTS = "pfedkit.methods"  # installed packages declare their methods' modules in this entry-point group


def method_class(name: str, module: Optional[str] = None) -> type[Method]:
    """The registered method `name`, after importing `module` (method.module) if given; a name still unknown is
    looked up among the installed packages' `pfedkit.methods` entry points."""
    if module:
        import_method_module(module)
    if name not in METHODS:
        from importlib.metadata import entry_points

        for point in entry_points(group=ENTRY_POINTS):
            if point.name == name:
                point.load()
    if name not in METHODS:
        raise ConfigError(
            f"unknown method {name!r} in `method.name`; choose one of: {', '.join(method_names())}. A method of your "
            'own: set `method.module` to the module that registers it ("my_package.my_method", or the path of its '
            f".py file), or install a package that declares it in the {ENTRY_POINTS!r} entry-point group "
            "(docs/writing-a-method.md)"
        )
    return METHODS[name]


def import_method_module(spec: str) -> None:
    """Import a user's method module: a dotted name on the Python path, or a .py file (its folder joins sys.path, so
    worker processes started afresh import it by name too)."""
    name = spec
    if spec.endswith(".py"):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise ConfigError(
                f"method.module = {spec!r}: there is no such file; give the path of the .py file that "
                "registers the method, or an importable module name"
            )
        folder = str(path.resolve().parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        name = path.stem
    try:
        importlib.import_module(name)
    except ImportError as err:
        raise ConfigError(
            f"method.module = {spec!r} cannot be imported ({err}); put its folder on PYTHONPATH, install "
            "its package, or give the path of its .py file"
        ) from None


def check_names(config: Config) -> None:
    if config.data.dataset not in DATASET_NAMES:
        raise ConfigError(
            f"unknown dataset {config.data.dataset!r} in `data.dataset`; choose one of: {', '.join(DATASET_NAMES)}"
        )
    if config.model.name not in MODEL_NAMES:
        raise ConfigError(
            f"unknown model {config.model.name!r} in `model.name`; choose one of: {', '.join(MODEL_NAMES)}"
        )
    method_class(config.method.name, config.method.module)


def build_config(raw: dict[str, Any]) -> Config:
    """Validate sections, then names against the registries, then the method's hyper-parameters."""
    config = parse_config(raw)
    if config.method.module and config.method.module.endswith(".py"):  # the run names its file wherever it resumes
        config.method.module = str(Path(config.method.module).expanduser().resolve())
    if "name" not in config.model.model_fields_set and config.data.dataset == "digits":
        config.model.name = "smallcnn"  # the default fedavgcnn needs 16x16 inputs; the bundled digits are 8x8
    check_names(config)
    method = method_class(config.method.name)
    given = config.method_params()
    for key, value in method.Params.run_defaults(config.train).items():
        if key not in given:  # recorded in the resolved config, so the run states the value it used
            setattr(config.method, key, value)
    method.validate_params(config.method_params())
    return config


def load_config(path: str | Path | None, overrides: list[str] = ()) -> Config:
    raw = read_toml(path) if path is not None else {}
    module = raw.get("method", {}).get("module") if isinstance(raw.get("method"), dict) else None
    if isinstance(module, str) and module.endswith(".py") and not Path(module).expanduser().is_absolute():
        raw["method"]["module"] = str(Path(path).resolve().parent / module)  # a file named in a file: beside it
    return build_config(apply_overrides(raw, list(overrides)))


def with_method_values(config: Config) -> Config:
    """A copy whose [method] section states every hyper-parameter's value, defaults included."""
    values = method_class(config.method.name).validate_params(config.method_params()).model_dump(mode="json")
    copy = config.model_copy(deep=True)
    copy.method = MethodSection(name=config.method.name, **values)
    return copy


def inert_keys(config: Config) -> tuple[str, ...]:
    """The config's method hyper-parameters that its other values leave unused (HyperParams.inert), as dotted keys."""
    params = method_class(config.method.name).validate_params(config.method_params())
    return tuple(f"method.{key}" for key in sorted(params.inert()))


def run_differences(old: Config, new: Config) -> list[str]:
    """What makes two configs different runs ("key: old -> new"): a hyper-parameter left at its default and one
    stated at that default are the same run, and so are two values of one the others leave unused. (Unused in
    one config and used in the other means a key it depends on differs, and that difference is reported.)"""
    return config_differences(
        with_method_values(old), with_method_values(new), ignore=PLACEMENT_KEYS + inert_keys(old) + inert_keys(new)
    )


def run_identity(config: Config) -> str:
    """A digest of what makes a run this run (data, partition, model, method and its values, seed, training), less
    where it runs and how long: the files a run writes carry it, so a file of another run is refused."""
    import hashlib
    import json

    from pfedkit.config import flat

    ignore = set(PLACEMENT_KEYS) | set(inert_keys(config)) | {"train.rounds"}
    values = {k: v for k, v in flat(with_method_values(config).to_dict()).items() if k not in ignore}
    values["data.checksum"] = config.data.checksum  # a placement key for resuming elsewhere, but the data's identity
    if not config.run.repeat:
        del values["run.repeat"]  # added later: a run from before it keeps its identity
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:16]


def continues(old: Config, new: Config, changes: Optional[list[str]] = None) -> bool:
    """`new` is `old` run for more rounds and for nothing else, so a finished `old` run can be carried on into it
    (a method whose defaults follow train.rounds, such as FedPHP's schedule, differs in more than the rounds).
    `changes`: run_differences(old, new), where the caller has it already."""
    changes = run_differences(old, new) if changes is None else changes
    return new.train.rounds > old.train.rounds and [change.split(":")[0] for change in changes] == ["train.rounds"]


def read_saved_config(path: Path) -> Config:
    """A run folder's config.toml, validated."""
    return build_config(read_toml(path))


def build_model_on(device: torch.device, *args: Any, **kwargs: Any) -> torch.nn.Module:
    with torch.device("cpu"):  # built and seeded on the CPU whatever the run's device: the same initial weights
        model = build_model(*args, **kwargs)
    return model.to(device)


def build_method(
    config: Config, input_shape: tuple[int, ...], num_classes: int, server: Optional[ServerData] = None
) -> Method:
    """The configured method for data of this shape; a server without data (Flower) learns the shape from its nodes."""
    cls = method_class(config.method.name)
    params = cls.validate_params(config.method_params())
    factory = functools.partial(
        build_model_on,
        torch.device(config.run.device),
        config.model.name,
        tuple(input_shape),
        num_classes,
        **config.model.options,
    )
    train = TrainSettings(
        local_epochs=config.train.local_epochs,
        batch_size=config.train.batch_size,
        lr=config.train.lr,
        momentum=config.train.momentum,
        weight_decay=config.train.weight_decay,
        augment=config.train.augment,
    )
    return cls(params, MethodContext(factory, train, num_classes, training_seed(config.run), server))
