"""Names -> methods, models, datasets; unknown names fail with the valid choices. A config is complete here: its
names checked, its method's hyper-parameters validated, and the method built from it."""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.util
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
from pfedkit.methods.base import REGISTERED_BY, Method
from pfedkit.models import MODEL_NAMES, build_model
from pfedkit.records import MethodContext, RunSetting, ServerData, TrainSettings


def method_names() -> list[str]:
    return sorted(METHODS)


ENTRY_POINTS = "pfedkit.methods"  # installed packages declare their methods' modules in this entry-point group


def modules_of(module: "Optional[str | list[str]]") -> list[str]:
    """method.module as a list: none, one, or several modules."""
    if not module:
        return []
    return [module] if isinstance(module, str) else list(module)


def method_class(name: str, module: "Optional[str | list[str]]" = None) -> type[Method]:
    """The registered method `name`, after importing `module` (method.module: one or several) if given; a name still
    unknown is looked up among the installed packages' `pfedkit.methods` entry points."""
    for spec in modules_of(module):
        import_method_module(spec)
        own = REGISTERED_BY.get(module_name_of(spec), {})
        if name in own:  # the class this module defines, whichever file last registered the name
            return own[name]
    if name not in METHODS:
        from importlib.metadata import entry_points

        for point in entry_points(group=ENTRY_POINTS):
            if point.name == name:
                point.load()
    if name not in METHODS:
        given = modules_of(module)
        hint = (
            f"the module(s) {', '.join(map(repr, given))} that method.module names define no method {name!r} "
            "(is it decorated with @register, under that name?)"
            if given
            else 'a method of your own: set `method.module` to the module that registers it ("my_package.my_method", '
            f"or the path of its .py file), or install a package that declares it in the {ENTRY_POINTS!r} "
            "entry-point group (docs/writing-a-method.md)"
        )
        raise ConfigError(
            f"unknown method {name!r} in `method.name`; choose one of: {', '.join(method_names())}; {hint}"
        )
    return METHODS[name]


def import_installed_methods() -> list[str]:
    """Import every method the installed packages declare in the `pfedkit.methods` entry-point group; returns what
    could not be imported, one line each (a broken package does not hide the others)."""
    from importlib.metadata import entry_points

    problems = []
    for point in entry_points(group=ENTRY_POINTS):
        try:
            point.load()
        except Exception as err:  # noqa: BLE001  (any error of a package's import is reported, not raised)
            problems.append(f"the installed method {point.name!r} ({point.value}) did not import: {err}")
    return problems


def module_name_of(spec: str) -> str:
    """The name a method.module entry is imported under."""
    return module_name_for(Path(spec).expanduser().resolve()) if spec.endswith(".py") else spec


def file_digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def module_name_for(path: Path) -> str:
    """The name a method file is imported under: its stem and a digest of its path, so that a file named like a
    standard module (json.py), or two files of one name, never stand in for each other."""
    import hashlib

    tag = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    return f"pfedkit_user_{stem}_{tag}"


def import_method_module(spec: str) -> None:
    """Import a user's method module (see _import_method_module), refused when importing it changed torch's
    default dtype: pfedkit's models, data and replies are float32, and a float64 default set at import would fail
    later, deep inside a worker, with a long traceback."""
    before, loaded = torch.get_default_dtype(), set(sys.modules)
    _import_method_module(spec)
    after = torch.get_default_dtype()
    if after != before:
        torch.set_default_dtype(before)
        for name in set(sys.modules) - loaded:  # imported again, it is refused again
            del sys.modules[name]
        raise ConfigError(
            f"method.module = {spec!r} sets torch's default dtype to {after} when it is imported; pfedkit's models, "
            f"data and replies are {before}: remove the torch.set_default_dtype call (cast your own tensors where "
            "you need another precision)"
        )


def _import_method_module(spec: str) -> None:
    """A dotted name on the Python path, or a .py file (imported under a name of its own, module_name_for; again
    when the file has changed since; its folder joins the end of sys.path for its own imports)."""
    if not spec.endswith(".py"):
        try:
            importlib.import_module(spec)
        except ImportError as err:
            raise ConfigError(
                f"method.module = {spec!r} cannot be imported ({err}); put its folder on PYTHONPATH, install "
                "its package, or give the path of its .py file"
            ) from None
        except Exception as err:
            raise import_failure(spec, err) from None
        return
    path = Path(spec).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(
            f"method.module = {spec!r}: there is no such file; give the path of the .py file that registers the "
            "method (in a config file, relative to that file), or an importable module name"
        )
    name = module_name_for(path)
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__pfedkit_digest__", None) == file_digest(path):
        return
    folder = str(path.parent)
    if folder not in sys.path:  # last: a file there named like a standard or installed module must not shadow it
        sys.path.append(folder)
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    module.__pfedkit_digest__ = file_digest(path)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise import_failure(spec, err) from None


def import_failure(spec: str, err: Exception) -> ConfigError:
    """A method module that failed while it was imported, in a line that says where."""
    import traceback

    if isinstance(err, SyntaxError):
        where = f"{err.filename}, line {err.lineno}"
        return ConfigError(f"method.module = {spec!r} has a syntax error ({where}): {err.msg}; fix the file")
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "importlib" not in f.filename]
    where = f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""
    first = str(err).splitlines()[0] if str(err) else ""
    return ConfigError(
        f"method.module = {spec!r} raised {type(err).__name__} while it was imported{where}: {first}; fix the module "
        "(PFEDKIT_DEBUG=1 shows the traceback)"
    )


def method_source(config: Config) -> str:
    """What the method's code is: "pfedkit <version>" for a built-in, "sha256:<digest>" of the file that defines it
    for a method of your own (method.module or an installed package's entry point)."""
    import inspect

    import pfedkit

    cls = method_class(config.method.name, config.method.module)
    if cls.__module__.split(".")[0] == "pfedkit":
        return f"pfedkit {pfedkit.__version__}"
    try:
        return f"sha256:{code_digest(Path(inspect.getsourcefile(cls)))}"
    except (TypeError, OSError):  # defined where no file holds it (a notebook cell): nothing to compare
        return "unknown"


def code_digest(path: Path) -> str:
    """The method file's digest, and with it the helper files it imports from its own folder (and they from
    theirs): an edited helper is other code too. A file that imports no helper keeps its file's own digest."""
    helpers = sorted(local_imports(path) - {path.resolve()})
    if not helpers:
        return file_digest(path)
    import hashlib

    parts = [f"{p.relative_to(path.resolve().parent)} {file_digest(p)}" for p in [path.resolve(), *helpers]]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def local_imports(path: Path, seen: Optional[set[Path]] = None) -> set[Path]:
    """`path` and the .py files beside it that it imports (`import helper`, `from helper import x`, `from . import
    helper`), followed into those files; other modules (installed packages, the standard library) are not code of
    the method's."""
    import ast

    path = path.resolve()
    seen = set() if seen is None else seen
    if path in seen or not path.is_file():
        return seen
    seen.add(path)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return seen
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.module:
                names.append(node.module.split(".")[0])
            if node.level:  # from . import helper
                names += [alias.name for alias in node.names]
    for name in names:
        local_imports(path.parent / f"{name}.py", seen)
    return seen


def read_config_file(path: "str | Path") -> dict[str, Any]:
    """A config file's sections, its method.module .py paths made relative to the file that names them."""
    raw = read_toml(path)
    section = raw.get("method")
    if isinstance(section, dict) and section.get("module"):
        base = Path(path).resolve().parent

        def beside(spec: Any) -> Any:
            if isinstance(spec, str) and spec.endswith(".py") and not Path(spec).expanduser().is_absolute():
                return str(base / spec)
            return spec

        module = section["module"]
        section["module"] = [beside(m) for m in module] if isinstance(module, list) else beside(module)
    return raw


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
    if config.method.module:  # the run names its files absolutely, wherever it resumes
        absolute = [
            str(Path(m).expanduser().resolve()) if m.endswith(".py") else m for m in modules_of(config.method.module)
        ]
        config.method.module = absolute[0] if isinstance(config.method.module, str) else absolute
    if "name" not in config.model.model_fields_set and config.data.dataset == "digits":
        config.model.name = "smallcnn"  # the default fedavgcnn needs 16x16 inputs; the bundled digits are 8x8
    check_names(config)
    method = method_class(config.method.name, config.method.module)
    if config.run.precision != "float32" and not method.capabilities().plan:
        raise ConfigError(
            f"run.precision = {config.run.precision!r} applies to methods whose local training is a plan; "
            f"{config.method.name} trains with code of its own (`pfedkit methods` says which): leave run.precision "
            "at float32 for it"
        )
    given = config.method_params()
    for key, value in method.Params.run_defaults(config.train).items():
        if key not in given:  # recorded in the resolved config, so the run states the value it used
            setattr(config.method, key, value)
    method.validate_params(config.method_params())
    return config


def load_config(path: str | Path | None, overrides: list[str] = ()) -> Config:
    raw = read_config_file(path) if path is not None else {}
    return build_config(apply_overrides(raw, list(overrides)))


def with_method_values(config: Config) -> Config:
    """A copy whose [method] section states every hyper-parameter's value, defaults included (what a run records, so
    that a default changed later cannot change a resumed run)."""
    values = method_class(config.method.name, config.method.module).validate_params(config.method_params())
    copy = config.model_copy(deep=True)
    copy.method = MethodSection(
        name=config.method.name,
        module=config.method.module,
        source=config.method.source,
        **values.model_dump(mode="json"),
    )
    return copy


def inert_keys(config: Config) -> tuple[str, ...]:
    """The config's method hyper-parameters that its other values leave unused (HyperParams.inert), as dotted keys."""
    params = method_class(config.method.name, config.method.module).validate_params(config.method_params())
    return tuple(f"method.{key}" for key in sorted(params.inert()))


def run_differences(old: Config, new: Config) -> list[str]:
    """What makes two configs different runs ("key: old -> new"): a hyper-parameter left at its default and one
    stated at that default are the same run, and so are two values of one the others leave unused. (Unused in
    one config and used in the other means a key it depends on differs, and that difference is reported.)"""
    unknown = (
        ("method.source",)
        if "unknown" in (old.method.source, new.method.source)
        or None
        in (
            old.method.source,
            new.method.source,
        )
        else ()
    )  # a run from before sources were recorded, or code no file holds: nothing to compare
    return config_differences(
        with_method_values(old),
        with_method_values(new),
        ignore=PLACEMENT_KEYS + inert_keys(old) + inert_keys(new) + unknown,
    )


def run_identity(config: Config) -> str:
    """A digest of what makes a run this run (data, partition, model, method and its values, seed, training), less
    where it runs and how long: the files a run writes carry it, so a file of another run is refused."""
    import hashlib
    import json

    from pfedkit.config import flat

    ignore = set(PLACEMENT_KEYS) | set(inert_keys(config)) | {"train.rounds", "method.source", "method.module"}
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


def read_saved_config(path: Path, module_now: Any = None) -> Config:
    """A run folder's config.toml, validated (see recorded_config)."""
    return recorded_config(read_toml(path), module_now)


def recorded_config(raw: dict[str, Any], module_now: Any = None) -> Config:
    """A config a run recorded (config.toml, a checkpoint's), validated. `module_now`: where the method's file is now,
    used when the recorded method.module file is gone (the file moved; its code is still checked, by method.source)."""
    raw = copy.deepcopy(raw)
    section = raw.get("method", {})
    recorded = section.get("module")
    moved = [m for m in (recorded if isinstance(recorded, list) else [recorded]) if isinstance(m, str)]
    if module_now and any(m.endswith(".py") and not Path(m).expanduser().exists() for m in moved):
        section["module"] = module_now
    return build_config(raw)


def build_model_on(device: torch.device, *args: Any, **kwargs: Any) -> torch.nn.Module:
    with torch.device("cpu"):  # built and seeded on the CPU whatever the run's device: the same initial weights
        model = build_model(*args, **kwargs)
    return model.to(device)


def build_method(
    config: Config, input_shape: tuple[int, ...], num_classes: int, server: Optional[ServerData] = None
) -> Method:
    """The configured method for data of this shape; a server without data (Flower) learns the shape from its nodes."""
    cls = method_class(config.method.name, config.method.module)
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
        drop_last=config.train.drop_last,
        precision=config.run.precision,
    )
    setting = RunSetting(config.partition.clients, config.train.rounds, config.train.join_ratio)
    return cls(params, MethodContext(factory, train, num_classes, training_seed(config.run), server, setting))
