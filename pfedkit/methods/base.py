"""The shared base of every method: messages and state in, messages and state out; the engine owns the loop.

A method says what the server sends (`broadcast`), what a client does with it and replies (`local_update`),
how the server combines replies (`aggregate`), and which model is evaluated for a client
(`personalized_model`). Payloads, replies and states are flat dicts of tensors and plain numbers.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Mapping, Optional

import torch
from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from torch import nn

from pfedkit.config import describe_validation_error
from pfedkit.errors import ConfigError, PfedkitError
from pfedkit.methods.local_sgd import LocalSGD
from pfedkit.methods.plan import LocalPlan, part_of
from pfedkit.models.base import PARTS, SplitModel
from pfedkit.records import ClientData, MethodContext, State
from pfedkit.seeding import seeded_torch


class HyperParams(BaseModel):
    """A method's hyper-parameters; each field's description names its source (paper section or 'our choice')."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)  # as the config's sections

    @classmethod
    def run_defaults(cls, train: Any) -> dict[str, Any]:
        """Values of hyper-parameters that depend on the run (`train`: rounds, join_ratio), for keys not given."""
        return {}

    @classmethod
    def step_sizes(cls) -> tuple[str, ...]:
        """The hyper-parameters that are step sizes (named *lr* or *_step, or described as a learning rate or step
        size): what a divergence message suggests lowering beside train.lr."""

        def is_step(name: str, info: Any) -> bool:
            text = (info.description or "").lower()
            return "lr" in name or name.endswith("_step") or "learning rate" in text or "step size" in text

        return tuple(name for name, info in cls.model_fields.items() if is_step(name, info))

    def inert(self) -> frozenset[str]:
        """Hyper-parameters these values make unused (a KT form at KT weight 0): two runs that differ only in them are
        the same run, so resume and suite reuse compare without them."""
        return frozenset()


def searched(low: float, high: float, *, log: bool = False, source: str = "our choice") -> dict[str, Any]:
    """A hyper-parameter's range for `pfedkit tune`, declared beside its default: Field(..., json_schema_extra=
    searched(0.001, 1, log=True, source="FedProx paper's grid")). An int field is searched over integers."""
    if not low < high:
        raise ValueError(f"a search range needs low < high, got {low}, {high}")
    return {"search": {"low": low, "high": high, "log": log, "source": source}}


def search_space(params: type[HyperParams]) -> dict[str, dict[str, Any]]:
    """The hyper-parameters a method declares a search range for: name -> {low, high, log, source, integer}."""
    space = {}
    for name, field in params.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if "search" in extra:
            space[name] = {**extra["search"], "integer": field.annotation is int}
    return space


def select(state: Mapping[str, Any], parts: Iterable[str]) -> State:
    parts = tuple(parts)
    return {k: v for k, v in state.items() if part_of(k) in parts}


def named_by(key: str, names: Iterable[str]) -> bool:
    """Whether `names` (keys, or prefixes ending in ".") name this state key: server_only's and PartSharing.sent's."""
    return any(key == name or (name.endswith(".") and key.startswith(name)) for name in names)


def strip_prefix(state: Mapping[str, Any], prefix: str) -> State:
    """The entries whose key starts with `prefix`, keyed without it (e.g. a model's head from "head.*" keys)."""
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


def add_prefix(state: Mapping[str, Any], prefix: str) -> State:
    """Every entry keyed with `prefix` in front (e.g. a head stored under a client's own keys)."""
    return {prefix + k: v for k, v in state.items()}


def reply_weight(cid: int, reply: State, weight: str = "num_samples") -> float:
    """A reply's weight in a weighted mean; a reply without it is refused, naming the fix."""
    if weight not in reply:
        raise PfedkitError(
            f"client {cid}'s reply has no {weight!r} (the weight of a sample-weighted mean: the client's training-set "
            f"size); add {weight!r}: data.num_train to what local_update or plan_result returns, or aggregate "
            "without weighting"
        )
    return float(reply[weight])


def weighted_mean(replies: Mapping[int, State], keys: Iterable[str], weight: str = "num_samples") -> State:
    """Sample-weighted mean of the given tensors over replies; integer buffers are taken from the first reply."""
    fold = WeightedMeanFold(keys, {cid: reply_weight(cid, reply, weight) for cid, reply in replies.items()}, weight)
    for cid, reply in replies.items():
        fold.add(cid, reply)
    return fold.result()


class WeightedMeanFold:
    """`weighted_mean` taken one reply at a time, so the server need not hold every reply until aggregation.

    The replies expected and their weights are known when the round starts; a reply joins the running sum when its
    turn in client order comes (an early one waits), so the sum is bit for bit the same whatever order they arrive in.
    """

    def __init__(self, keys: Iterable[str], weights: Mapping[int, float], weight: str = "num_samples"):
        self.keys, self.weight = tuple(keys), weight
        self.expected = {int(cid): float(w) for cid, w in weights.items()}
        self.order = sorted(self.expected)
        self.total = float(sum(weights[cid] for cid in sorted(weights)))
        self.waiting: dict[int, State] = {}
        self.folded = 0
        self.sum: State = {}

    @property
    def complete(self) -> bool:
        return self.folded == len(self.order)

    def check_weight(self, cid: int, reply: State) -> None:
        """The reply weighs what the client's training split promised (held replies are checked too, so that the
        aggregate does not depend on where they are kept)."""
        if reply_weight(cid, reply, self.weight) != self.expected[cid]:
            raise PfedkitError(
                f"client {cid}'s reply weighs {reply[self.weight]}, not the {self.expected[cid]} its "
                "training split promised; a method weighting replies otherwise must aggregate them itself"
            )

    def add(self, cid: int, reply: State) -> None:
        if cid not in self.expected or cid in self.waiting or self.order.index(cid) < self.folded:
            raise PfedkitError(f"reply from client {cid} was not expected (expected once each from {self.order})")
        self.check_weight(cid, reply)
        self.waiting[cid] = reply
        while not self.complete and self.order[self.folded] in self.waiting:
            self._fold(self.waiting.pop(self.order[self.folded]))
            self.folded += 1

    def _fold(self, reply: State) -> None:
        alpha = float(reply[self.weight]) / self.total
        for key in self.keys:
            value = reply[key]
            if not torch.is_floating_point(value):
                self.sum.setdefault(key, value.clone())
                continue
            if key not in self.sum:
                self.sum[key] = torch.zeros_like(value)
            self.sum[key].add_(value, alpha=alpha)

    def result(self) -> State:
        if not self.complete:
            raise PfedkitError(f"aggregation asked for before every reply arrived ({self.folded} of {len(self.order)})")
        return dict(self.sum)


@dataclass(frozen=True)
class Capabilities:
    """What a method declares the engine may do with it: train its clients as a cohort (a plan) and evaluate them as
    one (weights); `pfedkit methods` prints them with the path each takes."""

    plan: bool
    weights: bool

    def training_path(self) -> str:
        if self.plan:
            return (
                "the round's clients as one cohort on a GPU (run.cohort), one client at a time elsewhere, from the "
                "same plan; a model with dropout trains one client at a time"
            )
        return "one client at a time everywhere (local_update, written as code)"

    def evaluation_path(self) -> str:
        if self.weights:
            return "batched over the clients in a cohort on a GPU (evaluation_weights), one at a time elsewhere"
        return "one client at a time everywhere (personalized_model)"


class Method(LocalSGD):
    name: ClassVar[str]
    summary: ClassVar[str] = ""
    Params: ClassVar[type[HyperParams]] = HyperParams
    logged: ClassVar[tuple[str, ...]] = ()  # server-state numbers written to metrics.csv after each round's aggregation
    # client-state numbers summarized over the round's trained clients in metrics.csv: <key>_mean, _min, _max
    client_logged: ClassVar[tuple[str, ...]] = ()
    # server-state keys kept on the server and never broadcast (a key, or a prefix ending in "."), whatever
    # `broadcast` returns: a server's momentum, per-client stores, counters
    server_only: ClassVar[tuple[str, ...]] = ()
    # How the local training is stated: "plan" (local_plan and plan_result: the engine runs it one client at a time or
    # a whole cohort at once) or "code" (local_update, one client at a time).
    training: ClassVar[str] = "code"
    # How a client's personalized model is had for evaluation: "weights" (evaluation_weights: the working model with
    # those weights, so evaluation may be batched) or "model" (personalized_model only, one client at a time).
    evaluation: ClassVar[str] = "model"
    # Hyper-parameters that runs packed into one cohort may differ in (run.together, `pfedkit tune --batch`): each
    # reaches local training only as a per-client tensor (a phase's `given`, a plan's models, the client state) or
    # stays on the server, never in what a plan's step closes over; tests/test_cohort.py checks each against runs alone.
    packable: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def pack_key(cls, params: HyperParams) -> tuple[Any, ...]:
        """What of the packable hyper-parameters still shapes the step, so runs differing in it do not pack (a weight
        whose zero switches a term off: FedAFK's kt_weight)."""
        return ()

    def __init__(self, params: HyperParams, ctx: MethodContext):
        self.params = params
        self.ctx = ctx
        self._models: dict[str, SplitModel] = {}
        self._initial: Optional[State] = None
        self._drawn: tuple[int, int, set[str]] = (-1, -1, set())  # (round, client, purposes shuffled so far)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (for a spawned worker or a Ray actor) without the working models: each process builds its own, on its
        device, and never shares one it writes into."""
        return {**self.__dict__, "_models": {}}

    # ---- hyper-parameters ----
    @classmethod
    def validate_params(cls, raw: Mapping[str, Any]) -> HyperParams:
        try:
            return cls.Params(**raw)
        except ValidationError as err:
            valid = f"method {cls.name}'s hyper-parameters: {', '.join(cls.Params.model_fields) or 'none'}"
            raise ConfigError(describe_validation_error(err, "method.", lambda loc: valid)) from None

    # ---- the messages-and-state hooks; the engine calls these (payload wraps broadcast) ----
    def init_server(self) -> State:
        return {}

    def init_client(self, cid: int, data: ClientData) -> State:
        return {}

    def broadcast(self, server: State, round: int, cid: int) -> State:
        return {}

    def payload(self, server: State, round: int, cid: int) -> State:
        """What the engine sends client `cid`: `broadcast` without the server-only keys."""
        return {k: v for k, v in self.broadcast(server, round, cid).items() if not self.is_server_only(k)}

    @classmethod
    def is_server_only(cls, key: str) -> bool:
        return named_by(key, cls.server_only)

    def local_update(self, payload: State, client: State, data: ClientData, round: int) -> tuple[State, State]:
        """(reply, new client state): the local update written as code (`training = "code"`). A method whose training
        is a plan (`training = "plan"`) states local_plan instead, and the engine runs the plan
        (`pfedkit.engine.local_update(method, payload, client, data, round)`, whichever way the method states it)."""
        raise NotImplementedError(
            f"method {self.name} declares training = {self.training!r}: "
            + (
                "the engine runs its plan; call pfedkit.engine.local_update(method, payload, client, data, round)"
                if self.training == "plan"
                else "write local_update"
            )
        )

    def aggregate(self, server: State, replies: Mapping[int, State], round: int) -> State:
        return server

    def reply_fold(self, server: State, round: int, weights: Mapping[int, float]) -> Optional[WeightedMeanFold]:
        """An aggregation that takes this round's replies one at a time as they arrive (`weights`: the clients and
        their training sizes), or None when `aggregate` needs them all at once."""
        return None

    def personalized_model(self, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        """The model that counts as the client's personalized model: for a method declaring evaluation = "weights",
        its evaluation_weights loaded into the working model (written once); one declaring "model" writes this."""
        weights = self.evaluation_weights(client, payload, data, round)
        if weights is None:
            raise NotImplementedError(f"{self.name}: evaluation = 'model' needs personalized_model written")
        return self.load(weights)

    # ---- the batchable form (methods/plan.py): a method stating these may train and evaluate in cohorts ----
    def local_plan(self, payload: State, client: State, data: ClientData, round: int) -> Optional[LocalPlan]:
        """The local update as models and phases of SGD, or None: then only `local_update` runs it (one client at a
        time). A method returning a plan also states `plan_result`, and its `local_update` runs the plan."""
        return None

    def plan_result(
        self, trained: dict[str, State], plan: LocalPlan, data: ClientData, round: int
    ) -> tuple[State, State]:
        """The reply and the new client state from the plan's trained models (`trained`: model name -> weights) and
        what the plan noted (`plan.notes`)."""
        raise NotImplementedError

    def evaluation_weights(self, client: State, payload: State, data: ClientData, round: int) -> Optional[State]:
        """The weights of the personalized model when it is the working model with weights loaded and nothing more
        (no fine-tuning), so evaluation may be batched; None otherwise."""
        return None

    @classmethod
    def capabilities(cls) -> Capabilities:
        """What the engine may do with this method, as it declares (`training`, `evaluation`)."""
        return Capabilities(cls.training == "plan", cls.evaluation == "weights")

    @classmethod
    def declaration_problems(cls) -> list[str]:
        """Where the hooks a class writes contradict what it declares (checked when it is registered)."""
        problems = []
        if cls.training not in ("plan", "code"):
            problems.append(f"training = {cls.training!r}: declare 'plan' (local_plan) or 'code' (local_update)")
        elif cls.training == "plan":
            missing = [h for h in ("local_plan", "plan_result") if getattr(cls, h) is getattr(Method, h)]
            if missing:
                problems.append(f"training = 'plan' but {' and '.join(missing)} not written")
        elif cls.local_update is Method.local_update:
            problems.append("training = 'code' but local_update not written (or declare training = 'plan')")
        if cls.evaluation not in ("weights", "model"):
            problems.append(f"evaluation = {cls.evaluation!r}: declare 'weights' or 'model'")
        elif cls.evaluation == "weights" and cls.evaluation_weights is Method.evaluation_weights:
            problems.append("evaluation = 'weights' but evaluation_weights not written")
        elif cls.evaluation == "model" and cls.personalized_model is Method.personalized_model:
            problems.append("evaluation = 'model' but personalized_model not written: the engine evaluates with it")
        unknown = [name for name in cls.packable if name not in cls.Params.model_fields]
        if unknown:
            problems.append(f"packable names {', '.join(unknown)}, not among its hyper-parameters")
        if cls.packable and cls.training != "plan":
            problems.append("packable hyper-parameters, but training = 'code' never trains in a cohort")
        return problems

    def trained_model(self, reply: State, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        """The client's personalized model right after its local update (`eval.point = "after-local"`): the method's
        personalized model with the reply's trained weights in place of the broadcast ones and the updated state.
        A method whose reply carries no trained weights (deltas) or whose evaluation adapts the broadcast
        model overrides it."""
        weights = self.model.state_dict()
        trained = {k: v for k, v in reply.items() if k in payload and k in weights}
        return self.personalized_model(client, {**payload, **trained}, data, round)

    # ---- helpers the methods share ----
    @property
    def model(self) -> SplitModel:
        """One working model per process, reused: loading a state is cheaper than building a model."""
        return self.working_model("main")

    def working_model(self, slot: str) -> SplitModel:
        """A further reusable model instance, for methods that hold several models at once (global and personal)."""
        if slot not in self._models:  # its random initial weights drawn apart: built lazily, perhaps inside a
            with seeded_torch(
                self.ctx.seed, -1, -1, "working-model"
            ):  # seeded block, it must not use that block's draws
                self._models[slot] = self.ctx.model_factory()
        return self._models[slot]

    def initial_state(self) -> State:
        """The seeded initial model, identical for the server and every client."""
        if self._initial is None:
            with seeded_torch(self.ctx.seed, -1, -1, "model-init"):
                fresh = self.ctx.model_factory()
            self._initial = {k: v.detach().clone() for k, v in fresh.state_dict().items()}
        return self._initial

    def random_head(self) -> State:
        """The seeded initial head: the fixed random classifier of FedBABU-style methods, identical everywhere."""
        return select(self.initial_state(), ("head",))

    def load(self, *states: Mapping[str, Any], slot: str = "main") -> SplitModel:
        """Load the model entries of the given states (later ones win); together they must cover the model."""
        model = self.working_model(slot)
        model.load_state_dict(self.model_weights(*states, slot=slot))
        return model

    def model_weights(self, *states: Mapping[str, Any], slot: str = "main") -> State:
        """The model's entries of the given states (later ones win), as `load` loads them: a plan's starting weights."""
        merged: State = {}
        for state in states:
            merged.update(state)
        own = self.working_model(slot).state_dict()
        missing = [k for k in own if k not in merged]
        if missing:
            raise RuntimeError(f"{self.name}: states do not cover the model; missing {missing[:3]}...")
        return {k: merged[k] for k in own}

    @staticmethod
    def state_of(model: nn.Module, parts: Iterable[str] = PARTS) -> State:
        return {k: v.detach().clone() for k, v in select(model.state_dict(), parts).items()}


METHODS: dict[str, type[Method]] = {}
REGISTERED_BY: dict[str, dict[str, type[Method]]] = {}  # module name -> the methods it registered, by name


def register(cls: type[Method]) -> type[Method]:
    if problems := cls.declaration_problems():
        raise PfedkitError(
            f"method {cls.name} ({cls.__module__}.{cls.__qualname__}) contradicts what it declares: "
            + "; ".join(problems)
        )
    if cls.name in METHODS:
        taken = METHODS[cls.name]
        built_in = taken.__module__.split(".")[0] == "pfedkit"
        in_one_module = taken.__module__ == cls.__module__  # two classes of one module under one name
        if (built_in or in_one_module) and not same_definition(taken, cls):
            owner = "pfedkit's built-in" if built_in else "the method"
            raise PfedkitError(
                f"method name {cls.name!r} ({cls.__module__}.{cls.__qualname__}) is taken by {owner} "
                f"{taken.__module__}.{taken.__qualname__}; give yours another name (its class attribute `name`)"
            )
    METHODS[cls.name] = cls  # another file's method of this name: method.module says which one a run means
    REGISTERED_BY.setdefault(cls.__module__, {})[cls.name] = cls
    return cls


def same_definition(a: type, b: type) -> bool:
    """The same class from the same file, imported again (a method file edited and re-imported in one process)."""
    import inspect

    try:
        return a.__qualname__ == b.__qualname__ and inspect.getsourcefile(a) == inspect.getsourcefile(b)
    except TypeError:
        return False


def variant(base: type[Method], name: str, summary: str, **defaults: Any) -> type[Method]:
    """Register `base` under another name with other defaults (a paper's ablation or variant, as a preset): the same
    code, each changed hyper-parameter keeping its constraints and description. The variant belongs to the module
    that declares it: that file is its source in a run's record, and it is found there by name when pickled."""
    home = sys._getframe(1).f_globals.get("__name__", base.__module__)
    fields = {}
    for key, value in defaults.items():
        if key not in base.Params.model_fields:
            raise TypeError(f"variant {name}: {base.name} has no hyper-parameter {key}")
        info = copy.copy(base.Params.model_fields[key])
        info.default = value
        fields[key] = (info.annotation, info)
    suffix = name.replace("-", "_")
    params = create_model(f"{base.Params.__name__}_{suffix}", __base__=base.Params, __module__=home, **fields)
    cls = type(
        f"{base.__name__}_{suffix}", (base,), {"name": name, "summary": summary, "Params": params, "__module__": home}
    )
    registered = register(cls)
    if home in sys.modules:  # where a spawned worker looks them up by name when it unpickles the method
        setattr(sys.modules[home], params.__name__, params)
        setattr(sys.modules[home], cls.__name__, cls)
    return registered
