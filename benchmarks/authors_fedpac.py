"""FedPAC against its authors' released code (JianXu95/FedPAC), step by step, on a tiny setting.

The authors' modules run unchanged from a checkout in an ignored folder (default `.peers/FedPAC`; nothing of their
code is in this repository): `running.train_round_fedpac` drives their clients (`methods/fedpac.py`,
`LocalUpdate_FedPAC`) and their server steps (`tools.py`). pfedkit's `fedpac` runs through its engine's
`local_update` and the method's `aggregate`. Both start every round from the same weights (pfedkit's state at the
round's start is loaded into the authors' clients: their body, their head, their global prototypes), see the same
batches in the same order (the index batches pfedkit's seeded shuffles draw are recorded and replayed to the
authors' clients through a loader stand-in) and use the same hyper-parameters (the authors' defaults, pfedkit set to
match: body lr 0.01, head lr 0.1, SGD momentum 0.5, weight decay 5e-4, batch 50, 1 head epoch then 5 body epochs,
lambda 1). Compared, per round: the statistics V_i and h_i on the received body, the head after its epoch, the body
after its epochs (round 0: cross-entropy alone; round 1: with the feature alignment to the global prototypes), the
local prototypes, the body average, the global prototypes, the head weights of the quadratic program and the combined
heads; then the server steps fed pfedkit's replies directly, and the QP weights on random statistics.

Two things are adapted to today's software, neither a change of their code: `torch.eig` (removed from PyTorch,
called by `tools.get_head_agg_weight`) is supplied for the duration of the call as the old function over
`torch.linalg.eig` (LAPACK geev, as before: eigenvalues as an (n, 2) tensor of real and imaginary parts, eigenvectors
as columns); and their clients' torch DataLoaders are replaced by a stand-in with the same interface (`dataset`,
`len()` of a pass) that replays pfedkit's batches.

Usage:
  python3 benchmarks/authors_fedpac.py [--peer .peers/FedPAC] [--out results/authors/fedpac.md]
Their code imports cvxpy (`pip install cvxpy`).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import io
import math
import sys
import warnings
from collections import defaultdict
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator, Optional

import torch
from torch.utils.data import DataLoader, TensorDataset

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # pfedkit from this checkout, installed or not

from pfedkit.engine import local_update  # noqa: E402
from pfedkit.methods.base import Method, select  # noqa: E402
from pfedkit.methods.fedpac import HEAD_KEY  # noqa: E402
from pfedkit.models.cnn import fedpac_fmnist  # noqa: E402
from pfedkit.records import ClientData, MethodContext, State, TrainSettings  # noqa: E402
from pfedkit.registry import method_class  # noqa: E402

PEER = Path(".peers/FedPAC")
PEER_COMMIT = "5770f4ff8f11ad3be61c2a62b038245fa3f25248"  # the commit extracted into .peers/FedPAC (git archive HEAD)
OUT = Path("results/authors/fedpac.md")
TOLERANCE = 1e-5  # float32 quantities computed by the same operations in another order
# QP weights: cvxpy's default solver (an interior-point method, tolerances about 1e-8) against SciPy's SLSQP, on a
# convex problem whose minimizer is unique but whose objective is flat along some directions: the two solvers stop at
# points a few 1e-6 apart. The combined heads inherit that gap times the heads' size (entries of order 0.1 to 1).
QP_TOLERANCE = 1e-4


@dataclass(frozen=True)
class Setting:
    clients: int = 3
    train_per_client: int = 150
    test_per_client: int = 30
    num_classes: int = 10
    rounds: int = 2  # round 0 without alignment (no global prototypes yet), round 1 with it
    batch_size: int = 50  # the authors' defaults from here on (options.py, methods/fedpac.py)
    lr: float = 0.01
    head_lr: float = 0.1
    momentum: float = 0.5
    weight_decay: float = 5e-4
    body_epochs: int = 5
    head_epochs: int = 1
    lam: float = 1.0
    seed: int = 0

    def describe(self) -> str:
        return (
            f"{self.clients} clients, all in every round, {self.train_per_client} training and {self.test_per_client} "
            f"test samples each (random 1x28x28 images around a fixed pattern per class, {self.num_classes} classes, "
            f"80% of each client's labels on 4 dominant classes); their CNN_FMNIST (pfedkit's `fedpac-fmnist`, weights "
            f"mapped by name); {self.rounds} rounds (round 0 without alignment, round 1 with it); their defaults: "
            f"batch {self.batch_size}, body lr {self.lr}, head lr {self.head_lr}, momentum {self.momentum}, weight "
            f"decay {self.weight_decay}, {self.head_epochs} head epoch then {self.body_epochs} body epochs, lambda "
            f"{self.lam}; pfedkit's `train.*` and `method.*` set to the same; seed {self.seed}, float32 on the CPU."
        )


# ---- the authors' code ----
PEER_MODULES = ("running", "tools", "methods", "models", "options", "data_loader")  # their top-level names


def load_peer(peer: Path) -> SimpleNamespace:
    """Their modules, imported from the checkout; afterwards neither their folder stays on sys.path nor their
    top-level names (running, tools, methods, models) in sys.modules, where they would shadow others'."""
    if not (peer / "running.py").is_file() or not (peer / "tools.py").is_file():
        raise FileNotFoundError(
            f"no FedPAC checkout at {peer}: fetch github:JianXu95/FedPAC and extract it there unchanged "
            "(git --git-dir=<mirror> archive HEAD | tar -x -C .peers/FedPAC)"
        )

    def theirs(name: str) -> bool:
        return name.split(".")[0] in PEER_MODULES

    path = str(peer.resolve())
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if theirs(name)}
    sys.path.insert(0, path)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="numpy.core", category=DeprecationWarning)  # their numpy import
            loaded = SimpleNamespace(
                running=importlib.import_module("running"),
                tools=importlib.import_module("tools"),
                client=importlib.import_module("methods.fedpac"),
                models=importlib.import_module("models.cnn"),
            )
    finally:
        sys.path.remove(path)
        for name in [name for name in sys.modules if theirs(name)]:
            del sys.modules[name]
        sys.modules.update(saved)
    return loaded


@contextlib.contextmanager
def legacy_torch_eig() -> Iterator[None]:
    """torch.eig as it was before PyTorch removed it (today's raises): (eigenvalues as [n, 2] real and imaginary parts,
    eigenvectors as columns), both from LAPACK's geev through torch.linalg.eig."""

    def eig(matrix: torch.Tensor, eigenvectors: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        values, vectors = torch.linalg.eig(matrix)
        return torch.stack([values.real, values.imag], 1), vectors.real if eigenvectors else torch.empty(0)

    previous = torch.eig  # today's raises, telling the caller to move to torch.linalg.eig
    torch.eig = eig
    try:
        yield
    finally:
        torch.eig = previous


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Their prints (a round header, the first client's weights) and their torch.tensor(tensor) warning, silenced."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.filterwarnings("ignore", message="To copy construct from a tensor", category=UserWarning)
        yield


class Pass:
    """One pass over a loader: an iterator with a length (their loops call len() on iter(loader))."""

    def __init__(self, batches: list[tuple[torch.Tensor, torch.Tensor]]):
        self.batches, self.position = batches, 0

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> "Pass":
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.position >= len(self.batches):
            raise StopIteration
        self.position += 1
        return self.batches[self.position - 1]


class ReplayLoader:
    """Stands in for a client's training DataLoader: each pass takes the next scheduled batch order (a list of index
    tensors, one epoch) or, when none is scheduled (`None`), the samples in order in batches of `batch_size`."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int):
        self.dataset = TensorDataset(x, y)
        self.x, self.y, self.batch_size = x, y, batch_size
        self.scheduled: list[Optional[list[torch.Tensor]]] = []

    def __len__(self) -> int:
        return math.ceil(len(self.y) / self.batch_size)

    def __iter__(self) -> Pass:
        order = self.scheduled.pop(0) if self.scheduled else None
        if order is None:
            order = list(torch.arange(len(self.y)).split(self.batch_size))
        return Pass([(self.x[idx], self.y[idx]) for idx in order])


def to_authors(state: State) -> State:
    """pfedkit's fedpac-fmnist keys (body.conv1.weight, head.weight) as the authors' CNN_FMNIST's (conv1.weight,
    fc2.weight)."""
    return {("fc2." + k[5:] if k.startswith("head.") else k[5:]): v for k, v in state.items()}


def from_authors(state: State) -> State:
    return {("head." + k[4:] if k.startswith("fc2.") else "body." + k): v for k, v in state.items()}


# ---- pfedkit ----
def make_method(setting: Setting) -> Method:
    cls = method_class("fedpac")
    params = cls.validate_params(
        {"align_weight": setting.lam, "head_epochs": setting.head_epochs, "head_lr": setting.head_lr}
    )
    train = TrainSettings(
        local_epochs=setting.body_epochs,
        batch_size=setting.batch_size,
        lr=setting.lr,
        momentum=setting.momentum,
        weight_decay=setting.weight_decay,
    )
    factory = partial(fedpac_fmnist, (1, 28, 28), setting.num_classes)
    return cls(params, MethodContext(factory, train, setting.num_classes, setting.seed))


class OrderRecorder:
    """Records the index batches pfedkit's seeded shuffles draw, per (round, client, purpose), grouped by epoch;
    the method's batches are passed through unchanged."""

    def __init__(self, method: Method):
        self.epochs: dict[tuple[int, int, str], list[list[torch.Tensor]]] = defaultdict(list)
        inner = method.batches

        def batches(data: ClientData, round: int, purpose: str, epochs: Any = None, drop_single: bool = False):
            passes = self.epochs[(round, data.cid, purpose)]
            seen = data.num_train
            for idx in inner(data, round, purpose, epochs, drop_single):
                if seen >= data.num_train:
                    passes.append([])
                    seen = 0
                passes[-1].append(idx.clone())
                seen += idx.numel()
                yield idx

        method.batches = batches


def make_data(setting: Setting) -> list[ClientData]:
    g = torch.Generator().manual_seed(setting.seed)
    patterns = torch.randn(setting.num_classes, 1, 28, 28, generator=g)
    clients = []
    for cid in range(setting.clients):
        dominant = torch.tensor([(3 * cid + k) % setting.num_classes for k in range(4)])  # 0-3, 3-6, 6-9: all 10

        def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
            uniform = torch.randint(0, setting.num_classes, (n,), generator=g)
            main = dominant[torch.randint(0, len(dominant), (n,), generator=g)]
            y = torch.where(torch.rand(n, generator=g) < 0.2, uniform, main)
            return patterns[y] + torch.randn(n, 1, 28, 28, generator=g), y

        (train_x, train_y), (test_x, test_y) = draw(setting.train_per_client), draw(setting.test_per_client)
        clients.append(ClientData(cid, train_x, train_y, test_x, test_y, setting.num_classes))
    return clients


# ---- the comparison ----
def max_diff(a: Any, b: Any) -> float:
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    if a.shape != b.shape:
        return math.inf
    return float((a - b).abs().max()) if a.numel() else 0.0


def state_diff(ours: State, theirs: State, keys: Any) -> float:
    return max((max_diff(ours[k], theirs[k]) for k in keys), default=0.0)


class Rows:
    """(what, max abs difference, tolerance) in order; the same `what` again keeps the largest difference."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[float, float]] = {}
        self.notes: list[str] = []  # what the compared numbers were like (so a reader sees nothing was trivial)

    def add(self, what: str, diff: float, tolerance: float = TOLERANCE) -> None:
        old = self.rows.get(what, (0.0, tolerance))[0]
        self.rows[what] = (max(old, diff), tolerance)


def authors_round(peer: SimpleNamespace, args: SimpleNamespace, clients: list, rnd: int) -> dict[str, Any]:
    """Their train_round_fedpac on their clients; what it computed along the way, recorded by pass-through
    wrappers: each client's (V, h), its local_training results, and the QP weights."""
    seen: dict[str, Any] = {"stats": [], "trained": [], "alphas": None}
    for client in clients:
        stats, train = client.statistics_extraction, client.local_training

        def statistics(stats=stats):
            v, h = stats()
            seen["stats"].append((v, h.clone()))
            return v, h

        def training(*a, train=train, **k):
            result = train(*a, **k)
            seen["trained"].append(copy.deepcopy(result))  # the state dict shares the live weights
            return result

        client.statistics_extraction, client.local_training = statistics, training
    agg = peer.running.get_head_agg_weight

    def head_weights(*a, **k):
        seen["alphas"] = agg(*a, **k)
        return seen["alphas"]

    peer.running.get_head_agg_weight = head_weights
    try:
        with quiet(), legacy_torch_eig():
            peer.running.train_round_fedpac(args, None, clients, rnd)  # (its global_model argument is unused)
    finally:
        peer.running.get_head_agg_weight = agg
        for client in clients:
            del client.statistics_extraction, client.local_training
    return seen


def normalized(alpha: Any) -> torch.Tensor:
    """Their weights as applied: zeroed below 1e-3, then divided by their sum in agg_classifier_weighted_p."""
    alpha = torch.as_tensor([float(a) for a in alpha], dtype=torch.float64)
    return alpha / alpha.sum()


def compare(setting: Setting = Setting(), peer_dir: Path = PEER, perturb: Optional[dict] = None) -> Rows:
    """Every compared quantity's largest difference. `perturb` changes pfedkit's hyper-parameters alone (a check
    that the comparison sees a wrong update)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is the fastest, and it leaves the other cores alone
    try:
        return compare_steps(setting, load_peer(peer_dir), perturb)
    finally:
        torch.set_num_threads(threads)


def compare_steps(setting: Setting, peer: SimpleNamespace, perturb: Optional[dict]) -> Rows:
    torch.manual_seed(setting.seed)
    data = make_data(setting)
    method = make_method(setting)
    if perturb:
        method.params = method.params.model_copy(update=perturb)
    recorder = OrderRecorder(method)
    rows = Rows()
    C, cids = setting.num_classes, list(range(setting.clients))

    # their clients, as federated_main builds them: one model each, the global model's copy
    init = method.initial_state()
    net = peer.models.CNN_FMNIST(num_classes=C)
    assert set(net.state_dict()) == set(to_authors(init)), "the two CNNs' parameters differ"
    net.load_state_dict(to_authors(init))
    args = SimpleNamespace(
        num_classes=C,
        device="cpu",
        lr=setting.lr,
        lam=setting.lam,
        num_users=setting.clients,
        frac=1.0,
        epochs=setting.rounds,
        local_epoch=setting.body_epochs,
        agg_g=1,
    )
    theirs = []
    for d in data:
        loader = ReplayLoader(d.train_x, d.train_y, setting.batch_size)
        test = DataLoader(TensorDataset(d.test_x, d.test_y), batch_size=setting.batch_size)
        theirs.append(peer.client.LocalUpdate_FedPAC(d.cid, args, loader, test, copy.deepcopy(net)))

    # the model: same weights, same features and logits
    ours_model = method.load(init)
    with torch.no_grad():
        features, logits = net(data[0].train_x)
        rows.add(
            "the model: features and logits at the same weights",
            max(max_diff(ours_model.body(data[0].train_x), features), max_diff(ours_model(data[0].train_x), logits)),
        )

    server = method.init_server()
    states = {cid: method.init_client(cid, data[cid]) for cid in cids}
    body_keys = [k for k in init if k.startswith("body.")]
    head_keys = [k for k in init if k.startswith("head.")]
    for rnd in range(setting.rounds):
        # the round's starting point, as pfedkit's clients load it, into their clients
        payloads = {cid: method.payload(server, rnd, cid) for cid in cids}
        for cid in cids:
            theirs[cid].local_model.load_state_dict(to_authors(method.model_weights(states[cid], payloads[cid])))
        if bool((server["proto_counts"] > 0).any()):
            for client in theirs:
                client.update_global_protos({k: server["protos"][k].clone() for k in range(C)})

        # pfedkit's round: each client's local update, then the server
        replies = {}
        for cid in cids:
            method.forget_draws()
            replies[cid], states[cid] = local_update(method, payloads[cid], states[cid], data[cid], rnd)
        new_server = method.aggregate(server, replies, rnd)
        weights = method.head_weights([replies[c] for c in cids])

        # their round on the same batches: stats pass, pre-training prototypes, head epochs, body epochs, prototypes
        for cid in cids:
            head = recorder.epochs[(rnd, cid, "head")]
            body = recorder.epochs[(rnd, cid, "body")]
            assert len(head) == setting.head_epochs and len(body) == setting.body_epochs
            theirs[cid].train_data.scheduled = [None, None, *head, *body, None]
        seen = authors_round(peer, args, theirs, rnd)
        assert all(not c.train_data.scheduled for c in theirs), "their client took another number of passes"

        step = "CE only" if rnd == 0 else "CE + lambda * MSE to the global prototypes"
        for cid in cids:
            reply, (v, h), trained = replies[cid], seen["stats"][cid], seen["trained"][cid]
            w, protos = from_authors(trained[0]), trained[-1]
            rows.add(f"round {rnd}: V_i on the received body", abs(float(reply["feature_var"]) - v))
            rows.add(f"round {rnd}: h_i on the received body", max_diff(reply["label_means"], h))
            rows.add(
                f"round {rnd}: head after {setting.head_epochs} head epoch (lr {setting.head_lr})",
                state_diff(reply, w, head_keys),
            )
            rows.add(
                f"round {rnd}: body after {setting.body_epochs} body epochs ({step})", state_diff(reply, w, body_keys)
            )
            present = (reply["proto_counts"] > 0).nonzero().squeeze(1).tolist()
            same_classes = sorted(protos) == present
            rows.add(
                f"round {rnd}: local prototypes after training",
                max_diff(reply["protos"][present], torch.stack([protos[k] for k in present]))
                if same_classes
                else math.inf,
            )

        # the server: body average (loaded into every client), global prototypes, QP weights, combined heads
        after = [from_authors(c.local_model.state_dict()) for c in theirs]
        rows.add(f"round {rnd}: body average", max(state_diff(new_server, a, body_keys) for a in after))
        global_protos = theirs[0].global_protos
        rows.add(
            f"round {rnd}: global prototypes",
            max_diff(new_server["protos"], torch.stack([global_protos[k] for k in range(C)])),
        )
        for cid in cids:
            alpha = seen["alphas"][cid]
            rows.add(
                f"round {rnd}: head weights of the QP",
                math.inf
                if (alpha is None) != (weights[cid] is None)
                else 0.0
                if alpha is None
                else max_diff(weights[cid], normalized(alpha)),
                QP_TOLERANCE,
            )
            combined = {f"head.{k}": new_server[HEAD_KEY.format(cid=cid) + k] for k in ("weight", "bias")}
            rows.add(f"round {rnd}: combined heads", state_diff(combined, after[cid], head_keys), QP_TOLERANCE)
        server = new_server
    if all(w is not None for w in weights):
        table = torch.stack(weights)
        own = table.diagonal().clone()
        rows.notes.append(
            f"round {setting.rounds - 1}'s QP weights (pfedkit's): own head {float(own.min()):.3f}-"
            f"{float(own.max()):.3f}, the others' {float(table.fill_diagonal_(-1).max()):.3f} at most"
        )

    aggregation_on_given_replies(peer, method, replies, server, rows, setting)
    qp_on_random_statistics(peer, method, rows, setting)
    return rows


def aggregation_on_given_replies(
    peer: SimpleNamespace, method: Method, replies: dict[int, State], server: State, rows: Rows, setting: Setting
) -> None:
    """Their server functions fed pfedkit's last replies (the same inputs), against pfedkit's aggregation of them."""
    cids = sorted(replies)
    tools = peer.tools
    models = [to_authors(select(replies[c], ("body", "head"))) for c in cids]
    sizes = torch.tensor([replies[c]["num_samples"] for c in cids])
    with quiet():
        body = from_authors(tools.average_weights_weighted(models, sizes))
    rows.add("pfedkit's replies: body average", state_diff(server, body, [k for k in body if k.startswith("body.")]))
    present = [(replies[c]["proto_counts"] > 0).nonzero().squeeze(1).tolist() for c in cids]
    protos = tools.protos_aggregation(
        [{k: replies[c]["protos"][k] for k in ks} for c, ks in zip(cids, present)],
        [replies[c]["proto_counts"].float() for c in cids],
    )
    rows.add(
        "pfedkit's replies: global prototypes",
        max_diff(server["protos"], torch.stack([protos[k] for k in range(setting.num_classes)])),
    )
    with quiet(), legacy_torch_eig():
        alphas = tools.get_head_agg_weight(
            len(cids), [float(replies[c]["feature_var"]) for c in cids], [replies[c]["label_means"] for c in cids]
        )
    ours = method.head_weights([replies[c] for c in cids])
    for row, cid in enumerate(cids):
        rows.add(
            "pfedkit's replies: head weights of the QP", max_diff(ours[row], normalized(alphas[row])), QP_TOLERANCE
        )
        theirs = from_authors(tools.agg_classifier_weighted_p(models, alphas[row], ["fc2.weight", "fc2.bias"], row))
        combined = {f"head.{k}": server[HEAD_KEY.format(cid=cid) + k] for k in ("weight", "bias")}
        rows.add("pfedkit's replies: combined heads", state_diff(combined, theirs, combined), QP_TOLERANCE)


def qp_on_random_statistics(
    peer: SimpleNamespace, method: Method, rows: Rows, setting: Setting, cases: int = 30, m: int = 5
) -> None:
    """The QP weights of both for random statistics (m clients, 4 classes, 8-d features), float32 as uploaded."""
    g = torch.Generator().manual_seed(setting.seed + 1)
    boundary = 0
    for _ in range(cases):
        scale = float(torch.rand((), generator=g)) * 2
        variances = torch.rand(m, generator=g) * scale
        means = torch.randn(m, 4, 8, generator=g) * 0.3
        with quiet(), legacy_torch_eig():
            alphas = peer.tools.get_head_agg_weight(m, [float(v) for v in variances], list(means))
        ours = method.head_weights([{"feature_var": v, "label_means": h} for v, h in zip(variances, means)])
        for row in range(m):
            rows.add(
                f"QP weights, {cases} random statistic sets of {m} clients",
                max_diff(ours[row], normalized(alphas[row])),
                QP_TOLERANCE,
            )
            boundary += int(bool((ours[row] == 0).any()))
    rows.notes.append(f"random statistics: {boundary} of {cases * m} weight rows on the simplex's boundary (a zero)")


# ---- the report ----
def verdict(diff: float, tolerance: float) -> str:
    if diff <= tolerance:
        return "equal"
    return "differs: beyond the tolerance (see the notes)"


def markdown(rows: Rows, setting: Setting, commit: str) -> str:
    lines = [
        f"## FedPAC: the authors' code (JianXu95/FedPAC @ {commit[:7]})",
        "",
        "Setting: " + setting.describe(),
        "Both start each round from the same weights (pfedkit's round-start state loaded into their clients) and see"
        " the same batches in the same order (pfedkit's recorded, replayed to theirs).",
        "",
        "| what | max abs difference | tolerance | verdict |",
        "|---|---|---|---|",
    ]
    for what, (diff, tolerance) in rows.rows.items():
        lines.append(f"| {what} | {diff:.2e} | {tolerance:.0e} | {verdict(diff, tolerance)} |")
    lines += [
        "",
        "Seen: " + "; ".join(rows.notes) + ".",
        "",
        "Notes: QP weights are theirs as applied (below 1e-3 set to 0, divided by their sum in"
        " `agg_classifier_weighted_p`); the QP tolerance is the two solvers' stopping gap (cvxpy's default"
        " interior-point solver for theirs, SciPy's SLSQP for pfedkit's). Their `torch.eig` call runs on a stand-in"
        " over `torch.linalg.eig` (PyTorch removed it). Not exercised here: a class no client of the round holds"
        " (their `update_global_protos` raises a KeyError; pfedkit keeps the class's previous prototype, docs/"
        "methods.md 4.1), partial participation, and the PSD repair (diag(V) + D_i is PSD by construction; theirs"
        " tests its eigenvalues in float32, pfedkit's in float64, so the two could part only for a matrix within"
        " float32 rounding of singular).",
        "",
        "Rerun: `python3 benchmarks/authors_fedpac.py` (their checkout in `.peers/FedPAC`, `--peer` for another"
        " place; needs cvxpy).",
        "",
    ]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peer", type=Path, default=PEER, help="the authors' checkout (default .peers/FedPAC)")
    parser.add_argument("--commit", default=PEER_COMMIT, help="the commit the checkout holds (for the heading)")
    parser.add_argument("--out", type=Path, default=OUT, help="the markdown written (default %(default)s)")
    args = parser.parse_args(argv)
    if not (args.peer / "running.py").is_file():
        print(
            f"no FedPAC checkout at {args.peer}: fetch github:JianXu95/FedPAC and extract it there unchanged, "
            "e.g. mkdir -p .peers/FedPAC && git --git-dir=<its git dir> archive HEAD | tar -x -C .peers/FedPAC",
            file=sys.stderr,
        )
        return 2
    setting = Setting()
    rows = compare(setting, args.peer)
    text = markdown(rows, setting, args.commit)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"written: {args.out}")
    return 0 if all(d <= t for d, t in rows.rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
