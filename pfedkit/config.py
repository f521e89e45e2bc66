"""Typed experiment configuration, loaded from TOML and validated before any training starts."""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Optional, Union

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pfedkit.errors import ConfigError
from pfedkit.io import atomic_write_text
from pfedkit.seeding import derive_seed

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


class Section(BaseModel):
    # strict: `rounds = true` or `rounds = "5"` is refused, not read as 1 or 5 (an int still serves for a float)
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False, strict=True)


class DataSection(Section):
    dataset: str = "digits"
    root: Optional[str] = None  # else $PFEDKIT_DATA, else ~/.cache/pfedkit
    options: dict[str, Any] = Field(default_factory=dict)
    fraction: float = Field(
        1.0, gt=0, le=1
    )  # keep this share of each class of each split (seeded), for small-scale runs
    # sha256 of the loaded data set, recorded by the run; given, the data must match it (so another root may be used)
    checksum: Optional[str] = None


class PartitionSection(Section):
    scheme: Literal["iid", "dirichlet", "pathological", "dominant-classes"] = "dirichlet"
    clients: int = Field(20, ge=1)
    beta: float = Field(0.1, gt=0)
    classes_per_client: int = Field(2, ge=1)
    balanced: bool = False
    min_samples: Optional[int] = Field(None, ge=0)  # None: PFLlib's min(batch/(1-0.75), N/n/2)
    max_redraws: int = Field(1000, ge=1)
    samples_per_client: int = Field(600, ge=1)
    uniform_share: float = Field(0.2, ge=0, le=1)
    # dominant-classes: a class that runs out is dealt again from its start, so clients share samples (FedPAC's code
    # does this, e.g. 100 clients x 600 on CIFAR-10's 50,000); false: an error names the class that ran out
    reuse_samples: bool = False
    test_fraction: float = Field(0.25, gt=0, lt=1)  # protocol pfllib
    test_per_client: Optional[int] = Field(
        None, ge=1
    )  # protocol official-test; None keeps the official train/test ratio


class ModelSection(Section):
    name: str = "fedavgcnn"
    options: dict[str, Any] = Field(default_factory=dict)


class MethodSection(BaseModel):
    """`name` plus the method's own hyper-parameters, validated against its Params class."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    name: str = "fedavg"
    # a module that defines the method with @register, imported before the name is looked up: an importable name
    # ("my_package.my_method") or a .py file (relative to the config file that names it; recorded as an absolute
    # path), or a list of them (methods from several files); docs/writing-a-method.md
    module: Optional[Union[str, list[str]]] = None
    # what the method's code was when the run began: "pfedkit <version>" for a built-in, "sha256:<digest>" of its
    # module's file for yours; recorded by each run, and a resume refuses another (registry.method_source)
    source: Optional[str] = None


class TrainSection(Section):
    rounds: int = Field(50, ge=1)
    local_epochs: int = Field(1, ge=1)
    batch_size: int = Field(10, ge=1)
    lr: float = Field(0.005, gt=0)
    momentum: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    join_ratio: float = Field(1.0, gt=0, le=1)
    full_last_round: bool = False  # every client trains in the last training round (FedPAC's code with 100 clients)
    # training batches only: a random crop of the image padded by 4 and a left-right flip (FedPAC's CIFAR code)
    augment: Literal["none", "crop-flip"] = "none"
    # leave out each epoch's last partial batch, as torch's DataLoader(drop_last=True) does (PFLlib's training
    # loaders; a client with fewer samples than a batch then takes no step); false keeps it, as the papers' text reads
    drop_last: bool = False


class EvalSection(Section):
    protocol: Literal["pfllib", "official-test"] = "pfllib"
    every: int = Field(1, ge=1)
    # start: each client's personalized model after the broadcast, before local training (PFLlib; FedAFK, PGFedSplit);
    # after-local: each trained client's model right after its local update (FedPAC's released code, FL-bench); both
    point: Literal["start", "after-local", "both"] = "start"
    clients: int = Field(0, ge=0)  # clients evaluated at the start of a round: a seeded sample of this many; 0 = all
    # a share of each client's training data held out as its validation split (seeded); > 0 makes the run a tuning
    # run: clients train on the rest, every evaluation reads the validation split, the test split is never loaded
    validation: float = Field(0.0, ge=0, lt=1)


class ProxySection(Section):
    """Server-side data (HEART-PFL, PerAda): a split held out from the training data before partitioning is the
    server's validation set and, unless `dataset` names another data set (out-of-domain), its proxy set."""

    holdout: float = Field(0.0, ge=0, lt=1)  # fraction held out per class; 0 = no server data (HEART code: 0.1)
    dataset: str = ""  # out-of-domain proxy: this data set's training split; "" = the held-out split
    options: dict[str, Any] = Field(default_factory=dict)  # load options of the out-of-domain data set
    max_samples: int = Field(0, ge=0)  # cap on the proxy set (a seeded random subset); 0 = all


class RunSection(Section):
    seed: int = Field(0, ge=0, lt=2**32)  # one 32-bit seed: seeds 2**32 apart would draw alike
    # another draw of the training randomness (model init, batch orders, augmentation, dropout) on the same data,
    # partition and sampled clients: repeats of one config measure the noise floor a one-seed verdict must clear
    repeat: int = Field(0, ge=0)
    checkpoint_every: int = Field(10, ge=1)
    # cpu, or cuda / cuda:N: the whole simulation on one GPU (one worker process; not the Flower nodes)
    device: str = "cpu"
    workers: int = Field(0, ge=0)  # 0: one worker process per core (Ray: one actor per CPU of the cluster, at most 64)
    # where client work runs: "local" (a pool of this machine's processes) or "ray" (actors on a Ray cluster;
    # pip install -e ".[ray]"); the same run ends with the same metrics on either
    backend: Literal["local", "ray"] = "local"
    # memory: every client's state on the driver (and in checkpoint.pt); disk: in versioned files under the run folder,
    # the most recently used up to state_memory_mb in memory, so the driver does not grow with the clients
    client_state: Literal["memory", "disk"] = "memory"
    state_memory_mb: float = Field(256.0, gt=0)
    # a round's replies held on the driver; past this, a weighted-mean method folds them in as they arrive and any
    # other keeps the rest on disk under the run folder until it aggregates (the numbers are the same either way)
    reply_memory_mb: float = Field(256.0, gt=0)
    # a GPU's share per worker process (local) or Ray actor: 0.25 puts four on one GPU; 0 = the simulation on one GPU
    # in one process (run.device), as before. Needs run.device = "cuda"
    gpus_per_worker: float = Field(0.0, ge=0, le=1)
    # train (and evaluate) the round's clients together as one batched computation: "auto" on a GPU with the
    # simulation in one process, "on" anywhere (for tests; slower on a CPU), "off" one client at a time; methods
    # without the batchable form (`pfedkit methods` says which) always go one client at a time
    cohort: Literal["auto", "on", "off"] = "auto"
    # clients one cohort step stacks at most (memory); 0 = all the round's clients; "auto": on a GPU 1, 2 and 4
    # chunks of the round's clients each timed and the fastest kept (engine/chunk_sizes.py), all at once elsewhere
    cohort_size: Union[Literal["auto"], int] = "auto"
    # how a cohort runs its steps: "auto" captures each repeated step shape once as a CUDA graph on a GPU and replays
    # it (a step that cannot be captured runs eagerly; summary.json says which ran), eager elsewhere
    cohort_step: Literal["auto", "eager", "cuda-graph"] = "auto"
    # the form of a cohort step's convolutions (engine/conv_forms.py): "auto" times, on a GPU, vmap's grouped
    # convolution against unfold + batched matmul once per layer shape and keeps the faster (summary.json lists
    # them); "grouped" or "unfold" for every layer. The forms agree to float rounding; off a GPU "auto" is "grouped"
    conv_form: Literal["auto", "grouped", "unfold"] = "auto"
    # the arithmetic of local training's forward passes: "bf16" runs them under torch.autocast in bfloat16 (faster
    # on a GPU's tensor cores, other numbers; gradients and weights stay float32), for methods whose training is a
    # plan; "float32" as written
    precision: Literal["float32", "bf16"] = "float32"
    # runs of one method that differ only in seed, run.repeat, train.lr or a method's packable hyper-parameters
    # (compare --seeds, reproduce, a sweep, pfedkit tune --batch) train as one cohort, in one process, when they take
    # the cohort path: "auto"; "off": one after another
    together: Literal["auto", "off"] = "auto"
    ray_address: str = (
        ""  # a running cluster (e.g. "127.0.0.1:6379"); "" = $RAY_ADDRESS, else a local Ray started for the run
    )
    # trackers that also get every round's metrics, the config and the curves (optional extras: pip install -e
    # ".[tracking]"); W&B runs offline, into the run folder, unless you are logged in (`wandb login`)
    log_to: list[Literal["tensorboard", "wandb"]] = Field(default_factory=list)

    @field_validator("cohort_size")
    @classmethod
    def _clients_or_auto(cls, value: Any) -> Any:
        if value != "auto" and value < 0:
            raise ValueError("cohort_size is a number of clients (0: all of the round's) or 'auto'")
        return value

    @field_validator("device")
    @classmethod
    def _known_device(cls, value: str) -> str:
        if not re.fullmatch(r"cpu|cuda(:[0-9]+)?", value):
            raise ValueError("the device is cpu, cuda or cuda:N (N the GPU's index)")
        return value


class Config(Section):
    data: DataSection = Field(default_factory=DataSection)
    partition: PartitionSection = Field(default_factory=PartitionSection)
    model: ModelSection = Field(default_factory=ModelSection)
    method: MethodSection = Field(default_factory=MethodSection)
    train: TrainSection = Field(default_factory=TrainSection)
    eval: EvalSection = Field(default_factory=EvalSection)
    proxy: ProxySection = Field(default_factory=ProxySection)
    run: RunSection = Field(default_factory=RunSection)

    def method_params(self) -> dict[str, Any]:
        return {k: v for k, v in self.method.model_dump().items() if k not in ("name", "module", "source")}

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        if self.proxy == ProxySection():  # runs without server data keep their config text (resume compares it)
            del data["proxy"]
        return data


SECTIONS = tuple(Config.model_fields)


def describe_validation_error(err: ValidationError, prefix: str, unknown_key: Callable[[list[str]], str]) -> str:
    """One "bad configuration" message for a pydantic error: each bad value with what was given, and for an unknown
    key `unknown_key(location)`'s list of the valid ones. `prefix` is prepended to every key ("method.")."""
    lines = []
    for item in err.errors():
        loc = [str(p) for p in item["loc"]]
        key = prefix + ".".join(loc)
        if item["type"] == "extra_forbidden":
            lines.append(f"unknown key `{key}`; {unknown_key(loc)}")
        else:
            lines.append(f"`{key}`: {item['msg']} (got {item.get('input')!r})")
    return "bad configuration:\n  " + "\n  ".join(lines)


def _valid_section_keys(loc: list[str]) -> str:
    section_cls = Config if len(loc) == 1 else Config.model_fields[loc[0]].annotation
    where = f"[{loc[0]}]" if len(loc) > 1 else "the top level"
    return f"valid keys in {where}: {', '.join(section_cls.model_fields) if section_cls else ''}"


def parse_override(text: str) -> tuple[list[str], Any]:
    """`section.key=value`; the value is read as a TOML literal, else kept as a string."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected section.key=value, e.g. --set train.lr=0.01")
    if "\n" in text or "\r" in text:  # TOML would read the first line and drop the rest without a word
        raise ConfigError(
            f"--set {text!r}: a value spans several lines; give it on one line (a TOML array or inline "
            "table on one line, e.g. --set 'model.options={stem = \"cifar\"}')"
        )
    key, value = text.split("=", 1)
    path = key.strip().split(".")
    if len(path) < 2 or path[0] not in SECTIONS:
        raise ConfigError(f"--set {text!r}: the key must start with a section, one of: {', '.join(SECTIONS)}")
    return path, override_value(value, f"--set {text!r}")


def override_value(value: str, given: str) -> Any:
    """A command-line value read as a TOML literal; a bare word is the string itself (`--set data.name=cifar10`).
    `given` names the option and text in the error."""
    try:
        return tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError as err:
        if value.strip()[:1] in ("[", "{", '"', "'"):  # meant as an array, table or quoted string: a typo, not a word
            raise ConfigError(
                f"{given}: {value.strip()!r} is not a TOML value ({err}); check its brackets and quotes, "
                "e.g. widths=[8,16,32,64] or name='\"cifar10\"'"
            ) from None
        return value.strip()


def merge(raw: dict[str, Any], changes: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Sections of `changes` merged into a copy of `raw`, key by key (nested dicts merged too)."""
    out = copy.deepcopy(raw)
    for section, values in changes.items():
        target = out.setdefault(section, {})
        for key, value in values.items():
            if isinstance(value, Mapping) and isinstance(target.get(key), dict):
                target[key] = {**target[key], **value}
            else:
                target[key] = copy.deepcopy(value)
    return out


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    for text in overrides:
        path, value = parse_override(text)
        node = raw
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {text!r}: {part} is not a section")
        node[path[-1]] = value
    return raw


def parse_config(raw: dict[str, Any]) -> Config:
    """The sections and their keys checked; names and a method's hyper-parameters are checked by
    `registry.build_config`, which knows the registered methods, models and data sets."""
    try:
        return Config.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(describe_validation_error(err, "", _valid_section_keys)) from None


def read_toml(path: str | Path) -> dict[str, Any]:
    """A TOML file as a dict, or a ConfigError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist; pass the path of a TOML file")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path} is not valid TOML: {err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path} is not text (UTF-8): {err}; restore the file or write it again") from None


def without_none(data: Any) -> Any:
    """TOML has no null: keys whose value is None are left out, at every depth."""
    if isinstance(data, dict):
        return {k: without_none(v) for k, v in data.items() if v is not None}
    return data


def dump_toml(data: dict[str, Any]) -> str:
    return tomli_w.dumps(without_none(data))


# Keys that say where files are or how a run is carried out, not what it computes: a run may change them and stay
# the same run (the data themselves are checked by data.checksum).
PLACEMENT_KEYS = (
    "data.root",
    "data.checksum",
    "model.options.pretrained",
    "run.workers",
    "run.checkpoint_every",
    "run.backend",
    "run.ray_address",
    "run.state_memory_mb",
    "run.reply_memory_mb",
    "run.gpus_per_worker",
    "run.log_to",
    "run.cohort",
    "run.cohort_size",
    "run.cohort_step",
    "run.conv_form",
    "run.together",
    "method.module",
)


def flat(section: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested sections as one level of dotted keys."""
    out: dict[str, Any] = {}
    for key, value in section.items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_differences(old: Config, new: Config, ignore: tuple[str, ...] = PLACEMENT_KEYS) -> list[str]:
    """What differs between two configs ("key: old -> new"), leaving out the `ignore` keys."""
    a, b = flat(old.to_dict()), flat(new.to_dict())
    return [
        f"{k}: {a.get(k)!r} -> {b.get(k)!r}"
        for k in sorted(a.keys() | b.keys())
        if k not in ignore and a.get(k) != b.get(k)
    ]


CONFIG_HEADER = "# written by pfedkit: this run's resolved configuration (`pfedkit run` this file to repeat the run)\n"


def save_config(config: Config, path: Path) -> None:
    atomic_write_text(path, CONFIG_HEADER + dump_toml(config.to_dict()))


def training_seed(run: "RunSection") -> int:
    """The seed of a method's draws: run.seed itself for repeat 0 (every earlier run), a derived one for a repeat."""
    if run.repeat == 0:
        return run.seed
    return derive_seed(run.seed, -1, run.repeat, "repeat") & 0x7FFFFFFF
