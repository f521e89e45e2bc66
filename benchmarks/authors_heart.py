"""HEART-PFL step by step against the authors' released code (GitHub danny0628/HEART-PFL, a fork of NVlabs/PerAda).

Their code is read from a local, git-ignored extraction (`--peer`, default .peers/HEART-PFL) and never copied here:

    mkdir -p .peers/HEART-PFL && git --git-dir=<the fetched mirror> archive HEAD | tar -x -C .peers/HEART-PFL

One round of two clients runs on both sides from the same starting weights, on the same batches in the same order,
with matched hyper-parameters, and the results are compared tensor by tensor:
(a) a client's personalized update omega_k and local update phi_k, its stage prototypes and its logged HDA values;
(b) what a client uploads;
(c) the server's averaging and its adversarial knowledge transfer (AKT), with the PGD random starts drawn once (by
    pfedkit's generator) and fed to both sides.

pfedkit is set to the code's reading wherever a flag exists (docs/methods.md 2.5): prox_weight = 1.0 (2.5-d),
alignment = "code" (2.5-a), ensemble = "logits" (2.5-e), symmetric = false (2.5-j), pgd_space = "normalized" (2.5-g),
kd_keep = "validated". Adapter dropout is 0 on both sides: the code passes the personalized model through the
network twice per batch (and the prototypes' pass twice), so its dropout draws cannot line up with pfedkit's.

How their code is driven (harness only; none of its computation is changed except where a row says so):
- it calls `.to("cuda")` / `.cuda()` throughout: these are no-ops during their calls, so it runs on the CPU;
- at this commit two files of optim/ do not compile: base.py (imported only by optim/__init__.py through fedavg.py;
  the package is entered without its __init__) and base_al.py, whose last method (FedBaseAL.test, not on the paths
  compared) ends with two lines indented too deep; those two lines are compiled one level out, in memory;
- modules it imports but that these paths never use are stubbed: wandb always, pandas and torchvision when missing;
- the client class `optim.ours.AL` is built without its `__init__` (which needs the data pipeline and allocates 20
  flat copies of the model on CUDA); the attributes these paths read are set as `__init__` sets them, and the
  backbone is frozen by its own `is_global_update` test;
- its prototypes and per-batch HDA values are read from its frames with `sys.settrace`;
- during its distillation `torch.Tensor.uniform_` (torchattacks' PGD random start) returns pfedkit's draws, and the
  validation accuracies are scripted on both sides (`aggregation.distillation.test`, `pfedkit.methods.perada.accuracy`)
  so that the same step is kept; AKT is compared in float32 and again in float64 from the same inputs cast, where
  Adam's sign-like first steps no longer turn rounding noise into steps of lr;
- its reverse KL term is NaN on current PyTorch; the AKT rows use its value on the PyTorch 1.12 it pins (0, no
  gradient), and a row reports the NaN.

Run: python3 benchmarks/authors_heart.py [--peer .peers/HEART-PFL] [--out results/authors/heart.md]
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import importlib.machinery
import importlib.util
import inspect
import io
import math
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # pfedkit from this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/: authors_peer.py

from authors_peer import PeerCode, PeerMissing, from_peer, is_stat, max_diff, patched, run_comparison, to_peer  # noqa: E402

PEER = REPO / ".peers" / "HEART-PFL"
PEER_COMMIT = "d90e395d213621df6e794a7b2fd99e9ee563fe7b"  # the HEAD extracted (git archive of the fetched mirror)
OUT = REPO / "results" / "authors" / "heart.md"
TOL = 1e-5  # float32, the same operations on both sides

# ---- the setting
SEED = 0
CLASSES = 5
SHAPE = (3, 16, 16)  # ImageNet stem: 16 -> 8 -> 4, stages at 4, 2, 1, 1 pixels
N_TRAIN = 32  # per client; a multiple of BATCH, so the code's drop_last drops nothing
BATCH = 8  # at least 8 values per channel in the 1x1 deep stages keeps train-mode BatchNorm well conditioned
EPOCHS = 2
LR = 0.001  # the released CIFAR-100 script's lr
CLIENT_CLASSES = ((0, 1, 2), (2, 3, 4))
PROXY = 8  # two proxy batches: the third AKT step reshuffles the proxy set
KD_STEPS = 3
KD_BATCH = 4
PGD_STEPS = 20  # hard-coded in the code's Distillation: torchattacks.PGD(model, steps=20)
PGD_EPS = 8 / 255  # torchattacks' defaults, which the code keeps
VAL_SCRIPT = (0.50, 0.60, 0.70, 0.70)  # the average's validation accuracy, then steps 1-3: step 2 is kept (a tie)
PARAMS = dict(
    prox_weight=1.0,
    alignment="code",
    align_weight=0.1,
    early_stages=2,
    ensemble="logits",
    symmetric=False,
    pgd_space="normalized",
    pgd_eps=PGD_EPS,
    pgd_alpha=2 / 255,
    pgd_steps=PGD_STEPS,
    kd_rounds=1,
    kd_steps=KD_STEPS,
    kd_batch=KD_BATCH,
    kd_lr=1e-3,
    kd_eval_every=1,
    kd_keep="validated",
)
UPDATE_NAMES = ["adapter", "bn1", "bn2", "fc.weight", "fc.bias"]  # the code's update_layer_name for an adapter net
PEER_TOPS = ("optim", "models", "aggregation", "utils", "baseline_constants", "datasets", "parameters")
STUBS = ("wandb", "pandas", "torchvision")


class Peer(PeerCode):
    """The authors' modules this check drives, imported from `path` (`PeerCode`: only while `active()`)."""

    def __init__(self, path: Path):
        super().__init__(path, PEER_TOPS, STUBS)
        if not (self.path / "optim" / "ours.py").is_file():
            raise PeerMissing(
                f"the authors' HEART-PFL code is not at {self.path}: fetch GitHub danny0628/HEART-PFL and extract it "
                "there (mkdir -p .peers/HEART-PFL && git --git-dir=<mirror> archive HEAD | tar -x -C .peers/HEART-PFL)"
            )
        with self.active():
            # optim/__init__.py imports optim/fedavg.py -> optim/base.py, which does not compile (an indentation error
            # in FedBase.test_al at this commit): the package is entered without its __init__, as ours.py needs
            # only base_al.py and pdg.py from it
            package = importlib.util.module_from_spec(importlib.machinery.ModuleSpec("optim", None, is_package=True))
            package.__path__ = [str(self.path / "optim")]
            sys.modules["optim"] = package
            self.repaired = load_repaired(self.path / "optim" / "base_al.py", "optim.base_al")
            self.ours = importlib.import_module("optim.ours")
            self.averaging = importlib.import_module("aggregation.averaging")
            self.distillation = importlib.import_module("aggregation.distillation")
            self.model_utils = importlib.import_module("models.model_utils")
        self.check_origin(self.ours, self.averaging, self.distillation, self.model_utils)

    def model(self) -> nn.Module:
        """Their adapter ResNet-18 (`get_adapter_model`), ImageNet stem, without the pretrained download."""
        with self.active():
            return self.model_utils.get_adapter_model(net="resnet18_adapter_fix", num_classes=CLASSES, per_dropout=0.0)


BROKEN_TAIL = "\n            acc = 100.0 * correct / total\n            return test_loss / len(testloader), acc"


def load_repaired(path: Path, name: str) -> str:
    """Import `path` as module `name`. The released optim/base_al.py does not compile: the last two lines of its
    last method (FedBaseAL.test) are indented deeper than the block they close. Only if it fails to compile, those
    two lines are compiled one level out (in memory; the file and every line number stay as released). Returns what
    was repaired, or "" when nothing was."""
    source, repaired = path.read_text(encoding="utf-8"), ""
    try:
        compile(source, str(path), "exec")
    except SyntaxError:
        if not source.rstrip().endswith(BROKEN_TAIL.strip()) or source.count(BROKEN_TAIL) != 1:
            raise
        source = source.replace(BROKEN_TAIL, BROKEN_TAIL.replace("\n            ", "\n        "))
        repaired = f"{path.parent.name}/{path.name}: FedBaseAL.test's last two lines re-indented"
    module = types.ModuleType(name)
    module.__file__, module.__package__ = str(path), name.rpartition(".")[0]
    sys.modules[name] = module
    exec(compile(source, str(path), "exec"), module.__dict__)
    return repaired


def peer_args() -> SimpleNamespace:
    return SimpleNamespace(
        lr=LR,
        lmbda=PARAMS["prox_weight"],
        num_epochs=EPOCHS,
        aggregation="kd",
        kd_max_round=PARAMS["kd_rounds"],
        kd_lr=PARAMS["kd_lr"],
        kd_eval_batches_freq=PARAMS["kd_eval_every"],
        early_stopping_server_batches=10_000,
        total_n_server_pseudo_batches=KD_STEPS,
        kd_KL_temperature=1,
        dataset="synthetic",
        kd_dataset="synthetic",
        log_online=False,
        nologging=True,
        net="resnet18_adapter_fix",
    )


class Passes:
    """A data loader serving one given batch order per pass (the code iterates its loader once per epoch)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, passes: list[list[torch.Tensor]]):
        self.x, self.y, self.passes, self.served = x, y, passes, 0

    def __len__(self) -> int:
        return len(self.passes[0])

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = self.passes[self.served]
        self.served += 1
        return iter([(self.x[i], self.y[i]) for i in order])


class FrameReader:
    """Reads, without changing anything, the code's prototypes (train_per's `mean_prototypes_layer` when it returns)
    and each batch's HDA value (train_core's `align_loss` when the line adding it to the loss is reached)."""

    def __init__(self, train_per: Callable):
        self.file = train_per.__code__.co_filename
        lines, first = inspect.getsourcelines(train_per)
        hits = [first + i for i, line in enumerate(lines) if line.strip().startswith("loss =") and "align_loss" in line]
        if len(hits) != 1:
            raise RuntimeError(f"cannot find the line of train_per that adds align_loss to the loss ({hits})")
        self.loss_line = hits[0]
        self.prototypes: list[list[dict[int, torch.Tensor]]] = []
        self.hda: list[float] = []

    def __enter__(self) -> "FrameReader":
        self.previous = sys.gettrace()
        sys.settrace(self.calls)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.settrace(self.previous)

    def calls(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename != self.file:
            return None
        return {"train_core": self.core, "train_per": self.per}.get(frame.f_code.co_name)

    def core(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "line" and frame.f_lineno == self.loss_line:
            self.hda.append(float(frame.f_locals["align_loss"]))
        return self.core

    def per(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "return":
            layers = frame.f_locals["mean_prototypes_layer"]
            self.prototypes.append([{c: t.detach().clone() for c, t in layer.items()} for layer in layers])
        return self.per


def reverse_as_on_torch_1_12(
    student_logits: torch.Tensor, teacher: torch.Tensor, kd_KL_temperature: float = 1, *_: Any
):
    """The code's reverse term, F.kl_div(softmax(teacher), log_softmax(student)), as PyTorch 1.12's kl_div computed
    it: only targets > 0 count, and log-probabilities never are, so the value and its gradient are 0."""
    inputs = F.softmax(teacher / kd_KL_temperature, dim=1)
    target = F.log_softmax(student_logits / kd_KL_temperature, dim=1)
    positive = target > 0
    safe = torch.where(positive, target, torch.ones_like(target))
    pointwise = torch.where(positive, safe * (safe.log() - inputs), torch.zeros_like(target))
    return pointwise.sum() / student_logits.shape[0]


# ---------------------------------------------------------------- pfedkit's side


def client_data(cid: int):
    from pfedkit.records import ClientData

    g = torch.Generator().manual_seed(100 + cid)
    classes = torch.tensor(CLIENT_CLASSES[cid])
    y = classes[torch.arange(N_TRAIN) % len(classes)]
    pixels = (torch.rand(N_TRAIN, *SHAPE, generator=g) * 0.6 + 0.4 * y.view(-1, 1, 1, 1) / CLASSES).clamp(0, 1)
    x = (pixels - 0.5) / 0.5  # pfedkit's normalization: the code's [0, 1] clamp in PGD cuts the negative half
    return ClientData(cid, x, y, x[:4].clone(), y[:4].clone(), num_classes=CLASSES)


def server_data():
    from pfedkit.records import ServerData

    g = torch.Generator().manual_seed(200)
    x = torch.rand(2 * PROXY, *SHAPE, generator=g) * 2 - 1
    y = torch.arange(2 * PROXY) % CLASSES
    return ServerData(x[:PROXY], y[:PROXY], x[PROXY:], y[PROXY:], "synthetic proxy")


def pfedkit_method(server, dtype: torch.dtype = torch.float32):
    from pfedkit.methods import METHODS
    from pfedkit.models import build_model
    from pfedkit.records import MethodContext, TrainSettings

    cls = METHODS["heart-pfl"]

    def factory() -> nn.Module:
        return build_model("resnet18-adapter", SHAPE, CLASSES, dropout=0.0).to(dtype)

    ctx = MethodContext(factory, TrainSettings(EPOCHS, BATCH, LR), CLASSES, SEED, server)
    return cls(cls.validate_params(PARAMS), ctx)


def model_entries(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A reply's model tensors, without its metadata (num_samples, align_loss)."""
    return {k: v for k, v in state.items() if k.startswith(("body.", "head."))}


# ---------------------------------------------------------------- the comparison


@dataclass
class Row:
    what: str
    diff: float | None  # None: not compared
    expected: str  # "equal", "differs" or "not compared"
    reason: str = ""
    tol: float = TOL

    @property
    def verdict(self) -> str:
        if self.expected == "not compared":
            return f"not compared: {self.reason}"
        if self.expected == "equal":
            return "equal" if self.diff is not None and self.diff <= self.tol else "differs: unexpected"
        return f"differs: {self.reason}"

    @property
    def as_expected(self) -> bool:
        if self.expected == "equal":
            return self.diff is not None and self.diff <= self.tol
        if self.expected == "differs":
            return self.diff is None or not (self.diff <= self.tol)  # NaN counts as differing
        return True


def run_pfedkit_clients(method, server_state):
    """One round of both clients on pfedkit, recording the batches it draws and its prototypes and HDA values."""
    from pfedkit.engine import local_update

    drawn: list[tuple[str, torch.Tensor]] = []
    contexts: list[dict] = []
    draw, context = method.batches, method.client_context

    def recording_batches(data, round, purpose, epochs=None, drop_single=False):
        for idx in draw(data, round, purpose, epochs, drop_single):
            drawn.append((purpose, idx.clone()))
            yield idx

    def recording_context(*args, **kwargs):
        contexts.append(context(*args, **kwargs))
        return contexts[-1]

    method.batches, method.client_context = recording_batches, recording_context
    out = []
    try:
        for cid in (0, 1):
            data = client_data(cid)
            drawn.clear()
            payload = method.payload(server_state, 0, cid)
            reply, personal = local_update(method, payload, method.init_client(cid, data), data, 0)
            per_epoch = math.ceil(N_TRAIN / BATCH)
            passes = []
            for purpose in ("prototypes", "personal", "local"):  # the code's order: prototypes, omega_k, phi_k
                idx = [i for p, i in drawn if p == purpose]
                passes += [idx[e : e + per_epoch] for e in range(0, len(idx), per_epoch)]
            if len(passes) != 1 + 2 * EPOCHS or any(len(p) != per_epoch for p in passes):
                raise RuntimeError(f"pfedkit drew {[(p, len(i)) for p, i in drawn]}: not the passes expected")
            out.append(dict(data=data, reply=reply, personal=personal, context=contexts[-1], passes=passes))
    finally:
        del method.batches, method.client_context
    return out


def peer_server(peer: Peer, initial: dict[str, torch.Tensor]):
    """The code's client-and-server object (optim.ours.AL) and its model, from pfedkit's initial weights, with what
    AL.__init__ sets for these paths: the frozen backbone, one personalized model per client, the arguments."""
    dtype = next(iter(v for v in initial.values() if torch.is_floating_point(v))).dtype
    base = peer.model().to(dtype)
    base.load_state_dict(to_peer(initial), strict=True)
    inst = peer.ours.AL.__new__(peer.ours.AL)
    inst.update_layer_name = list(UPDATE_NAMES)
    for name, param in base.named_parameters():  # AL.__init__: freeze all but update_layer_name
        if not inst.is_global_update(name):
            param.requires_grad_(False)
    inst.args = peer_args()
    inst.criterion = nn.CrossEntropyLoss()
    inst.global_model = copy.deepcopy(base)
    inst.personalized_model_list = [copy.deepcopy(base) for _ in CLIENT_CLASSES]
    inst.personalized_optimizers = [None for _ in CLIENT_CLASSES]  # train_per builds its own SGD
    inst.h_dict = {u: None for u in range(len(CLIENT_CLASSES))}
    inst.current_round = 0
    return inst, base


def run_peer_clients(peer: Peer, inst, base: nn.Module, clients: list[dict]) -> list[dict]:
    """The code's client round (AL.run_local_updates: train_per for omega_k, then train for phi_k) on pfedkit's
    batches, reading its prototypes and HDA values."""
    results = []
    for u, c in enumerate(clients):
        local = copy.deepcopy(base)  # FedBaseAL.__init__: each client's local model is a copy of the global one
        loader = Passes(c["data"].train_x, c["data"].train_y, c["passes"])
        with peer.active(), FrameReader(peer.ours.AL.train_per) as reader, contextlib.redirect_stdout(io.StringIO()):
            local.load_state_dict(inst.state_dict_sever_to_client(), strict=False)
            inst.run_local_updates(u, local, loader, EPOCHS, None)
        if loader.served != len(c["passes"]):
            raise RuntimeError(f"the code took {loader.served} passes over the loader, not {len(c['passes'])}")
        state = local.state_dict()
        results.append(
            dict(
                personal=from_peer(inst.personalized_model_list[u].state_dict()),
                local=from_peer(state),
                uploaded=sorted(k for k, n in zip(from_peer(state), state) if inst.is_global_update(n)),
                prototypes=reader.prototypes[0],
                hda=reader.hda,
            )
        )
    return results


def run_pfedkit_akt(method, replies: dict[int, dict]):
    """pfedkit's aggregation with AKT (round 0 < kd_rounds), recording its PGD views and starts and the student each
    time it is validated (the average first, then after each step)."""
    import pfedkit.methods.heart as heart
    import pfedkit.methods.perada as perada

    views: list[torch.Tensor] = []
    starts: list[torch.Tensor] = []
    students: list[dict[str, torch.Tensor]] = []
    attack, scripted = heart.pgd_attack, iter(VAL_SCRIPT)

    def recording_attack(model, x, y, *, generator, **kwargs):
        probe = torch.Generator(device=generator.device)
        probe.set_state(generator.get_state())  # the start pgd_attack is about to draw (methods/distillation.py)
        starts.append((torch.rand(x.shape, generator=probe, dtype=x.dtype) * 2 - 1) * kwargs["eps"])
        views.append(attack(model, x, y, generator=generator, **kwargs))
        return views[-1]

    def scripted_accuracy(model, x, y, batch=1000):
        students.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return next(scripted)

    with patched(heart, "pgd_attack", recording_attack), patched(perada, "accuracy", scripted_accuracy):
        result = method.aggregate(method.init_server(), replies, 0)
    return result, views, starts, students


def run_peer_akt(peer: Peer, inst, base: nn.Module, replies: dict[int, dict], starts: list[torch.Tensor], server):
    """The code's server_aggregation (FedAveraging, then Distillation in round 0 < kd_max_round) on the same replies,
    with the proxy batches in pfedkit's order and the PGD starts pfedkit drew."""
    import torchattacks

    from pfedkit.seeding import torch_generator

    gen = torch_generator(SEED, 0, -1, "proxy-batches")  # pfedkit's proxy order (methods/perada.py)
    passes, taken = [], 0
    while taken < KD_STEPS:
        order = torch.randperm(PROXY, generator=gen)
        passes.append([order[i : i + KD_BATCH] for i in range(0, PROXY, KD_BATCH)])
        taken += len(passes[-1])
    teachers = []
    for cid in sorted(replies):
        model = copy.deepcopy(base)
        model.load_state_dict({**model.state_dict(), **to_peer(model_entries(replies[cid]))})
        teachers.append(model.train())
    fed = []
    for step in range(
        KD_STEPS
    ):  # pfedkit draws for the average, teacher 0, teacher 1; the code attacks t0, avg, t1, avg
        anchor, t0, t1 = starts[3 * step : 3 * step + 3]
        fed += [t0, anchor, t1, anchor]

    def fed_uniform(self, low=0.0, high=1.0, *, generator=None):
        start = fed.pop(0)
        if start.shape != self.shape or (low, high) != (-PGD_EPS, PGD_EPS):
            raise RuntimeError(f"unexpected uniform_ draw {tuple(self.shape)} in [{low}, {high}]")
        return self.copy_(start)

    views: list[torch.Tensor] = []
    forward = torchattacks.PGD.forward

    def recording_forward(self, images, labels):
        views.append(forward(self, images, labels))
        return views[-1]

    students: list[dict[str, torch.Tensor]] = []
    scripted = iter(VAL_SCRIPT)

    def scripted_test(dataset, model, loader, log=False):
        students.append(from_peer(model.state_dict()))
        return 0.0, 100.0 * next(scripted)

    inst.kd_trainset = Passes(server.proxy_x, server.proxy_y, passes)
    inst.val_dataloader = [(server.val_x, server.val_y)]
    inst.test_dataloader = [(server.val_x, server.val_y)]
    before = inst.global_model
    with contextlib.ExitStack() as stack:
        stack.enter_context(peer.active())
        stack.enter_context(patched(torch.Tensor, "uniform_", fed_uniform))
        stack.enter_context(patched(torchattacks.PGD, "forward", recording_forward))
        stack.enter_context(patched(peer.distillation, "test", scripted_test))
        stack.enter_context(patched(peer.distillation, "divergence_reverse", reverse_as_on_torch_1_12))
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        inst.server_aggregation(teachers, [N_TRAIN] * len(teachers), inst.update_layer_name)
    if fed:
        raise RuntimeError(f"{len(fed)} PGD starts left unused: the code drew fewer than expected")
    accepted = inst.global_model is not before
    return from_peer(inst.global_model.state_dict()), views, students, accepted


# ---------------------------------------------------------------- the rows


def client_rows(method, ours: list[dict], theirs: list[dict]) -> list[Row]:
    from pfedkit.models.adapters import trainable_names

    trainable = trainable_names(method.working_model("main"))
    stats = [k for k in method.adapter_keys() if is_stat(k) and not k.endswith("num_batches_tracked")]
    tracked = "body.layer1.0.bn1.num_batches_tracked"

    def count(state: dict) -> int:
        return int(state[tracked])

    rows = [
        Row(
            f"(a) personalized adapter omega_k: trainable tensors ({len(trainable)}), both clients",
            max(max_diff(o["personal"], t["personal"], trainable) for o, t in zip(ours, theirs)),
            "equal",
        ),
        Row(
            f"(a) local adapter phi_k: trainable tensors ({len(trainable)}), both clients",
            max(max_diff(o["reply"], t["local"], trainable) for o, t in zip(ours, theirs)),
            "equal",
        ),
        Row(
            "(a) omega_k: BatchNorm running statistics",
            max(max_diff(o["personal"], t["personal"], stats) for o, t in zip(ours, theirs)),
            "differs",
            "the code passes omega_k through the network twice for each batch (prototypes: extract_features and "
            "extract_features_all; training: the logits, then features it does not use), pfedkit once, so its "
            f"statistics take twice the momentum updates (num_batches_tracked {count(theirs[0]['personal'])} against "
            f"{count(ours[0]['personal'])}); the trained tensors are not affected (train-mode BatchNorm normalizes "
            "with batch statistics)",
        ),
        Row(
            "(a) phi_k: BatchNorm running statistics",
            max(max_diff(o["reply"], t["local"], stats) for o, t in zip(ours, theirs)),
            "differs",
            "the code's HDA forward of the global copy g runs in train mode on the client's local model itself, so "
            "phi_k starts from theta's statistics moved by the personalized step's batches (num_batches_tracked "
            f"{count(theirs[0]['local'])} against {count(ours[0]['reply'])}); pfedkit (alignment = code) runs it on a "
            "separate copy",
        ),
    ]
    worst = 0.0
    for o, t in zip(ours, theirs):
        protos, available = o["context"]["protos"], o["context"]["available"]
        present = {int(c) for c in torch.nonzero(available).flatten()}
        for stage, layer in enumerate(t["prototypes"]):
            if set(layer) != present or len(t["prototypes"]) != len(protos):
                worst = math.inf
                continue
            for c, v in layer.items():
                worst = max(worst, float((protos[stage][c].double() - v.double()).abs().max()))
    rows.append(Row("(a) stage prototypes (4 stages x classes present), both clients", worst, "equal"))
    hda = [
        max(abs(a - b) for a, b in zip(o["context"]["logged"], t["hda"]))
        if len(o["context"]["logged"]) == len(t["hda"])
        else math.inf
        for o, t in zip(ours, theirs)
    ]
    rows.append(Row("(a) HDA value of each personalized batch (added to the loss without gradient)", max(hda), "equal"))
    return rows


def upload_rows(ours: list[dict], theirs: list[dict]) -> list[Row]:
    sent = sorted(model_entries(ours[0]["reply"]))
    uploaded = theirs[0]["uploaded"]  # what the code's FedAveraging averages of the local model
    extra = sorted(set(sent) - set(uploaded))
    return [
        Row(
            "(b) upload: trainable tensors the code averages (phi_k; its BatchNorm statistics: row above)",
            max(
                max_diff(o["reply"], t["local"], [k for k in uploaded if not is_stat(k)]) for o, t in zip(ours, theirs)
            ),
            "equal",
        ),
        Row(
            "(b) upload: key set (count of keys only one side sends)",
            float(len(set(sent) ^ set(uploaded))),
            "differs",
            f"pfedkit also sends the {len(extra)} statistics of the downsample BatchNorms (its documented choice, "
            "models/adapters.py adapter_state_names), which the code never averages; both send nothing else "
            "(pfedkit's num_samples and align_loss are metadata, prototypes stay on the client)",
        ),
    ]


def averaging_rows(peer: Peer, method, server_state, replies: dict[int, dict], uploaded: list[str]) -> list[Row]:
    mine = method.aggregate(server_state, replies, PARAMS["kd_rounds"])  # a round >= kd_rounds: averaging only
    with peer.active(), contextlib.redirect_stdout(io.StringIO()):
        average = peer.averaging.FedAveraging(
            [to_peer(model_entries(r)) for r in replies.values()], weights=[], update_layer_name=UPDATE_NAMES
        )
    theirs = from_peer(average)
    downsample = [k for k in model_entries(replies[0]) if "downsample" in k and not k.endswith("num_batches_tracked")]
    return [
        Row("(c) server averaging (FedAveraging): the keys it averages", max_diff(mine, theirs, uploaded), "equal"),
        Row(
            "(c) server averaging: downsample BatchNorm statistics",
            max_diff(mine, theirs, downsample),
            "differs",
            "pfedkit averages them; the code keeps the first client's (they are outside its update names) and never "
            "sends them to clients",
        ),
    ]


def akt_rows(peer: Peer, replies: dict[int, dict], dtype: torch.dtype) -> list[Row]:
    """AKT on both sides from the same replies, in `dtype` (float64: the same inputs cast)."""
    from pfedkit.records import ServerData

    def cast(state: dict) -> dict:
        return {k: v.to(dtype) if torch.is_tensor(v) and torch.is_floating_point(v) else v for k, v in state.items()}

    s = server_data()
    server = ServerData(s.val_x.to(dtype), s.val_y, s.proxy_x.to(dtype), s.proxy_y, s.proxy_name)
    method = pfedkit_method(server, dtype)
    inst, base = peer_server(peer, method.initial_state())
    replies = {cid: cast(r) for cid, r in replies.items()}
    mine, my_views, starts, my_students = run_pfedkit_akt(method, replies)
    kept, their_views, their_students, accepted = run_peer_akt(peer, inst, base, replies, starts, server)
    same_student_view = all(
        torch.equal(their_views[4 * s + 1], their_views[4 * s + 3]) for s in range(KD_STEPS)
    )  # the code crafts the student's view once per teacher; both are the same (same start, frozen average)
    ordered_mine = [my_views[3 * s + i] for s in range(KD_STEPS) for i in range(3)]
    ordered_theirs = [their_views[4 * s + i] for s in range(KD_STEPS) for i in (3, 0, 2)]
    views = max(float((a - b).abs().max()) for a, b in zip(ordered_mine, ordered_theirs))
    name = "float64" if dtype == torch.float64 else "float32"
    if len(my_students) != len(their_students) or not same_student_view:
        views = math.inf
    trainable = [k for k in method.adapter_keys() if not is_stat(k)]
    full = [k for k in method.adapter_keys() if not k.endswith("num_batches_tracked")]
    agree = bool(float(mine["kd_accepted"]) == 1.0) == accepted
    if dtype == torch.float64:
        tol = 1e-9
        return [
            Row(f"(c) AKT, {name}: PGD views, as above", views, "equal", tol=tol),
            Row(
                f"(c) AKT, {name}: student after each Adam step, trainable tensors and BatchNorm statistics",
                max(max_diff(a, b, full) for a, b in zip(my_students, their_students)),
                "equal",
                tol=tol,
            ),
            Row(
                f"(c) AKT, {name}: theta kept, trainable tensors and BatchNorm statistics",
                max_diff(mine, kept, full) if agree else math.inf,
                "equal",
                tol=tol,
            ),
        ]
    adam = 2 * PARAMS["kd_lr"] * KD_STEPS
    return [
        Row(
            f"(c) AKT, {name}: PGD views, {KD_STEPS} steps x (student against the average, each of 2 teachers), "
            f"{PGD_STEPS} iterations from the same starts",
            views,
            "equal",
        ),
        Row(
            f"(c) AKT, {name}: student after each of the {KD_STEPS} Adam steps, trainable tensors",
            max(max_diff(a, b, trainable) for a, b in zip(my_students, their_students)),
            "equal",
            tol=adam,
        ),
        Row(
            f"(c) AKT, {name}: theta kept (validation scripted {', '.join(f'{v:.2f}' for v in VAL_SCRIPT)}: step 2 "
            "kept on both sides), trainable tensors",
            max_diff(mine, kept, trainable) if agree else math.inf,
            "equal",
            tol=adam,
        ),
    ]


def compare(peer_path: Path = PEER) -> tuple[list[Row], dict[str, Any]]:
    """Every row of the table, and facts for the report (time taken, stubbed modules, repairs)."""
    started = time.perf_counter()
    peer = Peer(peer_path)
    method = pfedkit_method(server_data())
    initial, server_state = method.initial_state(), method.init_server()
    ours = run_pfedkit_clients(method, server_state)
    inst, base = peer_server(peer, initial)
    theirs = run_peer_clients(peer, inst, base, ours)
    rows = client_rows(method, ours, theirs) + upload_rows(ours, theirs)
    replies = {cid: dict(o["reply"]) for cid, o in enumerate(ours)}
    rows += averaging_rows(peer, method, server_state, replies, theirs[0]["uploaded"])
    for k in model_entries(replies[0]):  # AKT from the same average on both sides (the row above: the difference)
        if "downsample" in k:
            replies[1][k] = replies[0][k].clone()
    rows += akt_rows(peer, replies, torch.float32) + akt_rows(peer, replies, torch.float64)
    g = torch.Generator().manual_seed(1)
    released = float(
        peer.distillation.divergence_reverse(torch.randn(4, CLASSES, generator=g), torch.randn(4, CLASSES))
    )
    rows.append(
        Row(
            f"(c) AKT: the code's reverse KL term as released (torch {torch.__version__.split('+')[0]})",
            released if math.isnan(released) else abs(released),
            "differs",
            "F.kl_div is given log-probabilities as its target: NaN on current PyTorch, 0 without gradient on the "
            "1.12 the code pins; the AKT rows use the 1.12 value against pfedkit's symmetric = false (docs/methods.md "
            "2.5-j)",
        )
    )
    rows.append(
        Row(
            "adapter dropout 0.3 (every row above uses 0 on both sides)",
            None,
            "not compared",
            "the code draws dropout masks in passes pfedkit does not make (two prototype passes and two passes of "
            "omega_k per batch, one of g), so the masks cannot line up",
        )
    )
    facts = dict(seconds=time.perf_counter() - started, stubbed=peer.stubbed, repaired=peer.repaired)
    return rows, facts


def render(rows: list[Row], facts: dict[str, Any]) -> str:
    def number(d: float | None) -> str:
        return "-" if d is None else ("nan" if math.isnan(d) else f"{d:.2e}" if d else "0")

    stubbed = ", ".join(facts["stubbed"]) or "none"
    repaired = facts["repaired"] or "nothing"
    lines = [
        f"# HEART-PFL: the authors' code (danny0628/HEART-PFL @ {PEER_COMMIT[:7]})",
        "",
        f"Setting: ResNet-18 with its 16 adapters (ImageNet stem, {SHAPE[1]}x{SHAPE[2]} RGB inputs, {CLASSES} classes,"
        f" adapter dropout 0), the same random initial weights on both sides; one round of 2 clients of {N_TRAIN}"
        f" samples, batch {BATCH}, {EPOCHS} epochs for each of omega_k and phi_k, SGD lr {LR}, pfedkit's batch orders"
        f" fed to the code; then the server on the same two replies: averaging, and {KD_STEPS} AKT steps (Adam 1e-3,"
        f" cosine) on proxy batches of {KD_BATCH} in pfedkit's order, PGD {PGD_STEPS} x 2/255 in an 8/255 ball from"
        " the random starts pfedkit drew, validation accuracies scripted on both sides. Float32 on one CPU thread;"
        " the float64 rows repeat AKT from the same inputs cast.",
        "pfedkit set to the code's reading (docs/methods.md 2.5): prox_weight = 1.0, alignment = code, align_weight ="
        " 0.1, early_stages = 2, ensemble = logits, symmetric = false, pgd_space = normalized, kd_keep = validated.",
        "Harness (the code is driven, not changed): .to('cuda') and .cuda() are no-ops; optim/ is entered without its"
        " __init__ (optim/base.py does not compile); repaired in memory: " + repaired + "; stubbed unused imports:"
        f" {stubbed}; AL built without its __init__; prototypes and HDA read by sys.settrace; the reverse KL term"
        " takes its PyTorch 1.12 value in the AKT rows. The float32 AKT tolerance on trainable tensors is 2 x Adam lr"
        " x steps: Adam's first steps are about lr x sign(gradient), and elements whose gradient is at rounding level"
        " (chiefly the adapters' BatchNorm biases, whose gradient is 0 in exact arithmetic because a train-mode"
        " BatchNorm follows) take steps of +-lr whose sign is float32 noise, which differs between two equivalent"
        " orders of operations (a mean of the teachers' logits vs a sum of logits / K; F.kl_div vs pfedkit's KL"
        " formula). In float64 the two sides agree to 1e-9, BatchNorm statistics included.",
        "",
        "| what | max abs difference | tolerance | verdict |",
        "|---|---|---|---|",
    ]
    for r in rows:
        tol = "-" if r.expected == "not compared" else f"{r.tol:.0e}"
        lines.append(f"| {r.what} | {number(r.diff)} | {tol} | {r.verdict} |")
    lines += [
        "",
        f"Rerun (about {max(1, round(facts['seconds']))} s on one CPU thread; needs the authors' code extracted in"
        " .peers/HEART-PFL, and torchattacks): `python3 benchmarks/authors_heart.py`",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return run_comparison(__doc__.splitlines()[0], PEER, OUT, compare, render, argv)


if __name__ == "__main__":
    sys.exit(main())
