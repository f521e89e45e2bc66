"""Cohort training (run.cohort): a round's clients trained as one batched computation equal the per-client path."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from pfedkit.data.federated import FederatedDataset
from pfedkit.engine import local_update
from pfedkit.engine.chunk_sizes import ChunkSizes
from pfedkit.engine.cohort import Cohort, runs_of_sizes
from pfedkit.engine.evaluation import evaluate_model
from pfedkit.engine.workers import Task
from pfedkit.methods import METHODS
from pfedkit.methods.base import Capabilities
from pfedkit.methods.functional import sgd_step
from pfedkit.models.base import SplitModel
from pfedkit.records import MethodContext, TrainSettings

BATCHED = [
    "fedavg",
    "local",
    "fedper",
    "fedrep",
    "ditto",
    "fedprox",
    "fedbabu",
    "lg-fedavg",
    "fedavg-ft",
    "fedpac",
    "fedpac-proto",
    "pgfedsplit",
    "pgfedsplit-no-apa",
    "pgfedsplit-no-gau",
    "pgfedsplit-no-both",
    "fedafk",
    "fedafk-no-afa",
    "fedafk-no-kt",
    "fedafk-no-both",
]
SIZES = [13, 7, 22, 1]  # unequal, partial last batches, a client of one sample


def flat_model() -> SplitModel:
    return SplitModel(nn.Sequential(nn.Linear(6, 5), nn.ReLU()), nn.Linear(5, 3), feature_dim=5)


def bn_image_model() -> SplitModel:
    body = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(16, 6),
        nn.ReLU(),
    )
    return SplitModel(body, nn.Linear(6, 3), feature_dim=6)


def federation(images: bool, sizes=SIZES, seed: int = 0) -> FederatedDataset:
    """Made on the CPU whatever the default device (a GPU test moves it with .to)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    total = sum(sizes) * 2
    shape = (total, 3, 6, 6) if images else (total, 6)
    x = torch.randn(*shape, generator=g, device="cpu")
    y = torch.randint(0, 3, (total,), generator=g, device="cpu")
    perm = np.random.default_rng(seed).permutation(total)
    train, test, at = [], [], 0
    for n in sizes:
        train.append(perm[at : at + n])
        test.append(perm[at + n : at + 2 * n])
        at += 2 * n
    shape = (3, 6, 6) if images else (1, 1, 6)
    return FederatedDataset("toy", "official-test", 3, shape, x, y, x, y, train, test)


def method_for(name: str, images: bool, **train):
    settings = dict(
        local_epochs=2,
        batch_size=4,
        lr=0.05,
        momentum=0.9,
        weight_decay=1e-3,
        augment="crop-flip" if images else "none",
    )
    settings.update(train)
    cls = METHODS[name]
    params = {"fedrep": {"head_epochs": 2}}.get(name, {})
    if name.startswith("pgfedsplit"):
        params = {"period_init": 1}  # a head aggregated every round: the next round mixes it in (alpha)
    ctx = MethodContext(bn_image_model if images else flat_model, TrainSettings(**settings), num_classes=3, seed=3)
    return cls(cls.validate_params(params), ctx)


def round_tasks(method, fed, round: int, kind: str = "train", evaluate_after: bool = False) -> list[Task]:
    """The tasks of `round` after a round played one client at a time (so prototypes, a delivered head, moved
    personal parts are there to be used)."""
    server = method.init_server()
    clients = {cid: method.init_client(cid, fed.client(cid)) for cid in range(fed.num_clients)}
    replies = {}
    for cid in clients:
        replies[cid], clients[cid] = local_update(
            method, method.payload(server, round - 1, cid), clients[cid], fed.client(cid), round - 1
        )
    server = method.aggregate(server, replies, round - 1)
    return [
        Task(
            kind, cid, round, method.payload(server, round, cid), clients[cid], len(fed.train_idx[cid]), evaluate_after
        )
        for cid in clients
    ]


def assert_states_close(got: dict, want: dict, what: str) -> None:
    assert set(got) == set(want), what
    for key in want:
        if isinstance(want[key], torch.Tensor):
            assert torch.allclose(got[key].float(), want[key].float(), atol=2e-5, rtol=1e-4), f"{what}: {key}"
        elif isinstance(want[key], float):  # a scalar state (FedAFK's mu)
            assert got[key] == pytest.approx(want[key], abs=1e-6), f"{what}: {key}"
        else:
            assert got[key] == want[key], f"{what}: {key}"


@pytest.mark.parametrize("images", [False, True], ids=["mlp", "batchnorm-cnn-crop-flip"])
@pytest.mark.parametrize("name", BATCHED)
def test_a_cohort_gives_the_replies_and_states_of_one_client_at_a_time(name, images):
    check_cohort_against_one_client_at_a_time(name, images, torch.device("cpu"))


def check_cohort_against_one_client_at_a_time(
    name: str, images: bool, device: torch.device, conv_form: str = "grouped"
) -> Cohort:
    """Replies and states of a cohort equal those of one client at a time; on a GPU the data, models and seeded
    draws live there (as in a simulation on it). The cohort, for what it recorded."""
    with device:
        method = method_for(name, images)
        fed = federation(images).to(device)
        tasks = round_tasks(method, fed, round=2)
        want = {t.cid: local_update(method, t.payload, t.client, fed.client(t.cid), t.round) for t in tasks}
        cohort = Cohort(method, fed, conv_form=conv_form)
        got = dict(cohort.train(tasks))
    assert set(got) == set(want)
    for cid, (reply, state, after) in got.items():
        assert after is None
        assert all(v.device.type == device.type for v in {**reply, **state}.values() if isinstance(v, torch.Tensor))
        assert_states_close(reply, want[cid][0], f"{name} client {cid} reply")
        assert_states_close(state, want[cid][1], f"{name} client {cid} state")
        start = tasks[cid].payload
        moved = [
            k
            for k in want[cid][0]
            if k in start and torch.is_floating_point(start[k]) and not torch.equal(want[cid][0][k], start[k])
        ]
        assert moved or not want[cid][0].keys() - {"num_samples"}, "the round must train something to compare"
    return cohort


@pytest.mark.parametrize(
    "params",
    [
        {"mu_steps": "epoch"},
        {"mu_clip": False, "mu_decay": 0.02},
        {"teacher": "current", "personal_step": "mixture", "kt_form": "feature-sum"},
        {"mu_gradient": "apfl"},
        {"mu_gradient": "apfl", "mu_steps": "epoch"},
        {"mix_buffers": False},
        {"kt_form": "feature-mean"},
        {"kt_form": "logits-random-head"},
        {"momentum": 0.0},
    ],
    ids=[
        "mu-per-epoch",
        "mu-unclipped-decay",
        "current-teacher-mixture",
        "apfl",
        "apfl-per-epoch",
        "buffers-unmixed",
        "feature-mean",
        "logits-random-head",
        "no-momentum",
    ],
)
def test_fedafk_readings_in_a_cohort_equal_one_client_at_a_time(params):
    params = dict(params)
    train = {"momentum": params.pop("momentum")} if "momentum" in params else {}
    method = method_for("fedafk", images=True, **train)
    method.params = method.validate_params(params)
    fed = federation(True)
    tasks = round_tasks(method, fed, round=1)
    got = dict(Cohort(method, fed).train(tasks))
    for t in tasks:
        reply, state = local_update(method, t.payload, t.client, fed.client(t.cid), 1)
        assert_states_close(got[t.cid][0], reply, f"client {t.cid} reply")
        assert_states_close(got[t.cid][1], state, f"client {t.cid} state")


def test_clients_in_chunks_give_the_same_as_one_cohort():
    method, fed = method_for("fedper", images=True), federation(True)
    tasks = round_tasks(method, fed, round=0)
    whole = dict(Cohort(method, fed).train(tasks))
    chunked = dict(Cohort(method, fed, cohort_size=3).train(tasks))
    for cid in whole:
        assert_states_close(chunked[cid][0], whole[cid][0], f"client {cid}")
        assert_states_close(chunked[cid][1], whole[cid][1], f"client {cid} state (its personal head)")


def test_auto_chunks_try_each_split_of_the_clients_and_keep_the_fastest_with_equal_numbers():
    method, fed = method_for("fedper", images=True), federation(True)
    tasks = round_tasks(method, fed, round=0)
    whole = dict(Cohort(method, fed).train(tasks))
    cohort = Cohort(method, fed)
    seconds = iter([0, 10, 10, 20, 20, 25, 25, 30, 30, 38, 38, 46])  # rounds of 10, 10, 5, 5, 8, 8 seconds
    cohort.chunks = ChunkSizes("auto", clock=lambda: next(seconds))
    stacked = []
    real = cohort.run_plans
    cohort.run_plans = lambda slots: stacked.append(len(slots)) or real(slots)
    for round in range(7):
        got = dict(cohort.train(tasks))
        for cid in whole:
            assert_states_close(got[cid][0], whole[cid][0], f"round {round} client {cid}")
    # 4 clients: 1 chunk of 4 (two rounds), 2 of 2 (two rounds), 4 of 1 (two rounds), then 2 chunks, the fastest
    assert stacked == [4, 4, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2]
    assert cohort.chunks.chosen == 2
    assert cohort.record()["cohort_size"].startswith("auto: 2 chunks (1 chunk ")
    assert ChunkSizes("auto", device=torch.device("cpu")).size(9) == 9, "off a GPU: all at once, nothing timed"


@pytest.mark.parametrize("name", ["fedavg", "fedper", "ditto", "local", "fedpac", "pgfedsplit"])
def test_batched_evaluation_equals_each_client_on_its_own(name):
    check_batched_evaluation(name, torch.device("cpu"))


def test_pgfedsplit_evaluated_in_a_cohort_mixes_a_delivered_head_in_first():
    method, fed = method_for("pgfedsplit", images=True), federation(True, sizes=[13, 7, 22, 2, 30])
    tasks = round_tasks(method, fed, round=1, kind="eval")
    assert all(any(k.startswith("aggregated_head.") for k in t.payload) for t in tasks)  # a head was delivered
    got = dict(Cohort(method, fed).evaluate(tasks))
    mixed = unmixed = 0
    for t in tasks:
        data = fed.client(t.cid)
        as_sent = method.load(t.payload, t.client)  # the client's own head, the delivered one left out
        own = evaluate_model(as_sent, data.test_x, data.test_y)
        adapted = evaluate_model(method.personalized_model(t.client, t.payload, data, 1), data.test_x, data.test_y)
        assert got[t.cid][1] == pytest.approx(adapted[1], rel=1e-5, abs=1e-5)
        mixed += got[t.cid][1] != pytest.approx(own[1], rel=1e-5, abs=1e-5)
        unmixed += got[t.cid][1] == pytest.approx(own[1], rel=1e-5, abs=1e-5)
    assert mixed >= 3, (mixed, unmixed)  # alpha < 1 for most clients: their evaluated head is not their own


def check_batched_evaluation(name: str, device: torch.device) -> None:
    with device:
        method, fed = method_for(name, images=True), federation(True, sizes=[13, 7, 22, 2, 30]).to(device)
        tasks = round_tasks(method, fed, round=1, kind="eval")
        got = dict(Cohort(method, fed).evaluate(tasks))
        for t in tasks:
            data = fed.client(t.cid)
            correct, loss, n = evaluate_model(
                method.personalized_model(t.client, t.payload, data, 1), data.test_x, data.test_y
            )
            assert got[t.cid][0] == correct and got[t.cid][2] == n
            assert got[t.cid][1] == pytest.approx(loss, rel=1e-5, abs=1e-5)


def test_after_local_evaluation_comes_with_the_replies():
    method, fed = method_for("fedavg", images=False), federation(False)
    tasks = round_tasks(method, fed, round=0, evaluate_after=True)
    for cid, (reply, state, after) in Cohort(method, fed).train(tasks):
        data = fed.client(cid)
        model = method.trained_model(reply, state, tasks[cid].payload, data, 0)
        assert after == evaluate_model(model, data.test_x, data.test_y)


class CountOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", ["fedavg", "fedrep", "ditto"])
def test_a_cohort_steps_on_slices_of_its_stacks_without_gathering_them(name):
    """Clients ordered by size: at every step those still training are a prefix, partial batches sit together."""
    method = method_for(name, images=True)
    fed = federation(True, sizes=[13, 7, 22, 1, 9, 30])
    tasks = round_tasks(method, fed, round=1)
    with CountOps() as counted:
        got = dict(Cohort(method, fed).train(tasks))
    assert counted.ops["aten.index_select"] == 0 and counted.ops["aten.index_copy_"] == 0
    for t in tasks:
        reply, state = local_update(method, t.payload, t.client, fed.client(t.cid), 1)
        assert_states_close(got[t.cid][0], reply, f"client {t.cid} reply")
        assert_states_close(got[t.cid][1], state, f"client {t.cid} state")


def test_runs_of_equal_batch_sizes_are_found_in_slot_order():
    assert runs_of_sizes([4, 4, 4, 2, 2, 1, 0, 0]) == [(0, 3, 4), (3, 5, 2), (5, 6, 1)]
    assert runs_of_sizes([4, 3, 4, 0]) == [(0, 1, 4), (1, 2, 3), (2, 3, 4)]  # never a gather: three slices
    assert runs_of_sizes([0, 0]) == []


@pytest.mark.parametrize(
    "name,images",
    [("fedavg", True), ("fedper", False), ("fedrep", False), ("ditto", True), ("fedafk", True), ("pgfedsplit", True)],
)
def test_captured_steps_replayed_equal_eager_steps_across_rounds_of_changing_cohorts(name, images):
    """The capture bookkeeping (static input buffers, stacks kept from round to round, a step shape's key) without
    CUDA: a replayed step is the captured step called on the captured buffers, as a graph replay would be."""
    method, fed = method_for(name, images), federation(images, sizes=[13, 7, 22, 1, 9, 30])
    replaying = rounds_captured_against_eager(method, fed, "replay")
    assert replaying.runner.counts["replayed"] > 0 and replaying.runner.counts["captured"] > 0


@pytest.mark.parametrize("name,images", [("pgfedsplit", True), ("fedrep", False)])
def test_a_head_trained_alone_is_captured_once_and_replayed_in_later_rounds(name, images):
    """PGFedSplit's head on given embeddings, FedRep's on features computed once: the same step shape in a later round
    replays the step captured before (a head-only model made anew each round had captured it again every round)."""
    method, fed = method_for(name, images, local_epochs=3), federation(images, sizes=[13, 7, 22, 1, 9, 30])
    cohort = Cohort(method, fed, step_mode="replay")
    for round in (1, 2, 3):
        dict(cohort.train(round_tasks(method, fed, round=round)))
    captured = list(cohort.runner.captured)
    # a step key: ((("phase", phase shape, id(model), trained, head_alone), buffers), form, start, stop, size)
    assert [key for key in captured if key[0][0][4]], "no step of the head alone was captured"
    without_model = {(key[0][0][:2] + key[0][0][3:], *key[1:]) for key in captured}
    assert len(without_model) == len(captured), "a step shape captured again for another model object"


def rounds_captured_against_eager(method, fed, step_mode: str) -> Cohort:
    """Three rounds of changing cohorts (all six clients, four, all six) on one Cohort capturing its steps, each
    round's replies and states checked against a fresh eager cohort's; the capturing cohort, for its counts."""
    capturing = Cohort(method, fed, step_mode=step_mode)
    for round, clients in ((1, None), (2, [0, 2, 3, 5]), (3, None)):
        tasks = [t for t in round_tasks(method, fed, round=round) if clients is None or t.cid in clients]
        got = dict(capturing.train(tasks))
        want = dict(Cohort(method, fed).train(tasks))
        for cid in want:
            assert_states_close(got[cid][0], want[cid][0], f"round {round} client {cid} reply")
            assert_states_close(got[cid][1], want[cid][1], f"round {round} client {cid} state")
    return capturing


def test_functional_sgd_equals_torch_sgd_with_momentum_and_weight_decay():
    torch.manual_seed(0)
    p = torch.randn(5, requires_grad=True)
    mine = p.detach().clone()
    momentum = torch.zeros(5)
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.01)
    for _ in range(3):
        g = torch.randn(5)
        p.grad = g.clone()
        opt.step()
        sgd_step([mine], [g], [momentum], 0.1, 0.9, 0.01)
        assert torch.allclose(mine, p.detach(), atol=1e-7)
    sgd_step([mine], [None], [momentum], 0.1, 0.9, 0.01)  # no gradient: left alone, as SGD leaves it
    assert torch.allclose(mine, p.detach(), atol=1e-7)


def test_methods_declare_what_the_engine_may_batch():
    assert METHODS["fedavg"].capabilities() == Capabilities(plan=True, weights=True)
    assert METHODS["fedavg-ft"].capabilities() == Capabilities(True, False)  # fine-tuned before evaluation: code
    assert METHODS["fedamp"].capabilities() == Capabilities(False, False)
    assert METHODS["fedafk"].capabilities() == Capabilities(True, True)  # three models stepped together: a joint step
    assert METHODS["pgfedsplit"].capabilities() == Capabilities(True, True)  # a delivered head mixed into its weights


def test_a_cohort_inside_the_default_device_mode_of_a_gpu_run():
    method, fed = method_for("fedper", images=True), federation(True)
    tasks = round_tasks(method, fed, round=0)
    plain = dict(Cohort(method, fed).train(tasks))
    with torch.device("cpu"):  # the mode a GPU run trains under; the step loop steps out of it
        inside = dict(Cohort(method, fed).train(tasks))
    for cid in plain:
        assert_states_close(inside[cid][0], plain[cid][0], f"client {cid}")


# ---- whole runs ----
from pfedkit.experiments import run_experiment  # noqa: E402
from pfedkit.io import read_csv  # noqa: E402
from tests.test_engine import COMPARED, synthetic  # noqa: E402


@pytest.mark.parametrize("name", ["fedavg", "fedrep", "ditto"])
def test_a_run_on_the_cohort_path_ends_where_the_per_client_path_does(tmp_path, name, monkeypatch):
    calls = []
    for hook in ("train", "evaluate"):
        original = getattr(Cohort, hook)
        monkeypatch.setattr(Cohort, hook, lambda self, tasks, _o=original, _h=hook: calls.append(_h) or _o(self, tasks))
    settings = dict(method={"name": name}, train={"rounds": 3, "momentum": 0.5}, eval={"point": "both"})
    per_client = run_experiment(synthetic(**settings, run={"cohort": "off"}), tmp_path / "off", progress=False)
    assert not calls
    cohort = run_experiment(synthetic(**settings, run={"cohort": "on"}), tmp_path / "on", progress=False)
    assert calls.count("train") == 3 and calls.count("evaluate") == 4  # every round took the cohort path
    assert abs(cohort["last_acc"] - per_client["last_acc"]) <= 0.001
    assert abs(cohort["last_acc_after"] - per_client["last_acc_after"]) <= 0.001
    off, on = read_csv(tmp_path / "off" / "metrics.csv"), read_csv(tmp_path / "on" / "metrics.csv")
    assert [r["bytes_down"] for r in on] == [r["bytes_down"] for r in off]
    for a, b in zip(on, off):
        assert abs(float(a["acc"]) - float(b["acc"])) <= 0.001 and abs(float(a["loss"]) - float(b["loss"])) < 1e-3


class _Stop(Exception):
    pass


def test_a_killed_cohort_run_resumes_to_the_numbers_of_an_uninterrupted_one(tmp_path):
    from pfedkit.engine.simulation import simulate

    cfg = synthetic(
        method={"name": "fedper"},
        train={"rounds": 5, "momentum": 0.9},
        run={"cohort": "on", "checkpoint_every": 2, "seed": 4},
    )
    simulate(cfg, tmp_path / "straight", progress=False)

    def stop_in_round_2(row):  # after round 2's metrics, before any checkpoint holds it: round 2 is played again
        if row["round"] == 2:
            raise _Stop

    with pytest.raises(_Stop):
        simulate(cfg, tmp_path / "killed", progress=False, observers=[stop_in_round_2])
    assert torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)["next_round"] == 2
    simulate(cfg, tmp_path / "killed", resume=True, progress=False)
    got, want = read_csv(tmp_path / "killed" / "metrics.csv"), read_csv(tmp_path / "straight" / "metrics.csv")
    assert [[r[k] for k in COMPARED] for r in got] == [[r[k] for k in COMPARED] for r in want]


def seeds_apart_and_together(tmp_path, base: dict, seeds=(0, 1, 2), **run):
    """Each seed's config, with run.cohort on (and `run`), and the folders they go to."""
    return {tmp_path / f"seed{seed}": synthetic(**base, run={"cohort": "on", "seed": seed, **run}) for seed in seeds}


def counted_packing(monkeypatch) -> tuple[list[int], list[int]]:
    """How many runs each round's `train_together` took, and how many clients each stacked computation held."""
    from pfedkit.engine import cohort as cohort_module
    from pfedkit.engine import together

    sizes, stacked = [], []
    original, run_plans = together.train_together, cohort_module.Cohort.run_plans
    monkeypatch.setattr(
        together, "train_together", lambda runs, lead=None: sizes.append(len(runs)) or original(runs, lead)
    )
    monkeypatch.setattr(
        cohort_module.Cohort, "run_plans", lambda self, slots: stacked.append(len(slots)) or run_plans(self, slots)
    )
    return sizes, stacked


def assert_same_metrics(got_dir, want_dir) -> None:
    got, want = read_csv(got_dir / "metrics.csv"), read_csv(want_dir / "metrics.csv")
    assert [int(r["round"]) for r in got] == [int(r["round"]) for r in want]
    for a, b in zip(got, want):
        for key in ("acc", "acc_client_mean", "loss", "bytes_down", "bytes_up", "clients_trained"):
            if a[key] not in ("", None):
                assert float(a[key]) == pytest.approx(float(b[key]), abs=1e-5), f"{got_dir} round {a['round']} {key}"


@pytest.mark.parametrize("name", ["fedavg", "fedrep", "fedafk"])
def test_runs_that_differ_in_learning_rate_train_as_one_cohort_each_ending_as_it_would_alone(
    tmp_path, name, monkeypatch
):
    """Issue 92: a sweep of train.lr packs into one stacked computation, each client stepping at its run's rate (a
    method's own Joint step, FedAFK's, packs only runs of one rate); each run ends as it would alone."""
    from pfedkit.experiments.pipeline import run_configs

    sizes, stacked = counted_packing(monkeypatch)
    rates = (0.02, 0.05, 0.1)

    def configs(folder, **run):
        base = dict(method={"name": name}, run={"cohort": "on", "seed": 1, **run})
        return {folder / f"lr{lr}": synthetic(**base, train={"rounds": 2, "momentum": 0.5, "lr": lr}) for lr in rates}

    runs = configs(tmp_path / "together")
    run_configs(runs, resume=False, progress=False, log=lambda line: None)
    assert sizes == [3, 3], "every round of the three runs handed in together"
    joint = name == "fedafk"
    assert max(stacked) == (6 if joint else 18), "6 clients of each run in one stack, unless a Joint step reads lr"
    alone = configs(tmp_path / "alone", together="off")
    run_configs(alone, resume=False, progress=False, log=lambda line: None)
    for got, want in zip(runs, alone):
        assert_same_metrics(got, want)
    finals = [float(read_csv(d / "metrics.csv")[-1]["loss"]) for d in runs]
    assert len(set(finals)) == 3, "the rates gave three runs, not one"


PACKED_VALUES = {  # three values of each packable hyper-parameter, far enough apart to give three runs
    ("fedprox", "mu"): (0.01, 0.3, 1.0),
    ("ditto", "prox_weight"): (0.05, 0.5, 2.0),
    ("pgfedsplit", "proto_weight"): (0.5, 5.0, 20.0),
    ("pgfedsplit", "period_init"): (1, 2, 3),
    ("fedafk", "mu_init"): (0.1, 0.5, 0.9),
    ("fedafk", "kt_weight"): (0.1, 0.3, 0.7),
    ("fedpac", "align_weight"): (0.1, 1.0, 5.0),
}


def test_a_packable_weight_whose_zero_switches_a_term_off_packs_only_with_weights_on_the_same_side():
    """FedAFK's lambda packs (0.1 with 0.7), but lambda 0 leaves the teacher out of the step: no pack with it."""
    from pfedkit.experiments.pipeline import together_key

    def key(kt_weight):
        return together_key(synthetic(method={"name": "fedafk", "kt_weight": kt_weight}, run={"cohort": "on"}))

    assert key(0.1) == key(0.7) != key(0.0)


def test_every_packable_hyper_parameter_is_checked_against_runs_alone():
    """Each name a method declares packable (or inherits: fedprox-ft, pgfedsplit-no-apa) has values to test below."""
    unchecked = set()
    for cls in METHODS.values():
        owner = next(c for c in cls.__mro__ if "packable" in vars(c))  # the class that declared them
        unchecked |= {(owner.name, p) for p in cls.packable if (getattr(owner, "name", ""), p) not in PACKED_VALUES}
    assert not unchecked, f"packable without a test against runs alone: {sorted(unchecked)}"


def test_a_packable_name_that_is_no_hyper_parameter_is_refused_at_registration():
    from pfedkit.errors import PfedkitError
    from pfedkit.methods.base import register
    from pfedkit.methods.fedprox import FedProx

    class Typo(FedProx):
        name = "fedprox-typo-packable"
        packable = ("mu", "mew")

    with pytest.raises(PfedkitError, match="packable names mew, not among its hyper-parameters"):
        register(Typo)
    assert "fedprox-typo-packable" not in METHODS


@pytest.mark.parametrize("name, param", list(PACKED_VALUES))
def test_runs_that_differ_in_a_packable_hyper_parameter_train_as_one_stack_each_ending_as_it_would_alone(
    tmp_path, name, param, monkeypatch
):
    """Issue 92: a sweep of a method's packable hyper-parameter (`pfedkit tune --batch`'s trials, a suite's rows)
    trains as one stacked computation; each run ends as it would alone, and the values gave different runs."""
    from pfedkit.experiments.pipeline import run_configs

    sizes, stacked = counted_packing(monkeypatch)
    values = PACKED_VALUES[(name, param)]

    def configs(folder, **run):
        return {
            folder / f"{param}{value}": synthetic(
                method={"name": name, param: value},
                train={"rounds": 3, "momentum": 0.5},
                run={"cohort": "on", "seed": 1, **run},
            )
            for value in values
        }

    runs = configs(tmp_path / "together")
    run_configs(runs, resume=False, progress=False, log=lambda line: None)
    assert sizes == [3, 3, 3], "every round of the three runs handed in together"
    assert max(stacked) == 18, "6 clients of each of the 3 runs in one stack"
    alone = configs(tmp_path / "alone", together="off")
    run_configs(alone, resume=False, progress=False, log=lambda line: None)
    for got, want in zip(runs, alone):
        assert_same_metrics(got, want)
    finals = [read_csv(d / "metrics.csv")[-1]["loss"] for d in runs]
    assert len(set(finals)) == 3, f"the values of {param} gave three runs, not one"


@pytest.mark.parametrize("name", ["fedavg", "fedrep", "pgfedsplit", "fedafk"])
def test_runs_that_differ_in_seed_train_as_one_cohort_each_ending_as_it_would_alone(tmp_path, name, monkeypatch):
    """FedAFK too: its Joint and Apply stages are bound to each run's method, yet one run's step serves all (their
    code is compared, not the run they are bound to)."""
    from pfedkit.experiments.pipeline import run_configs

    sizes, stacked = counted_packing(monkeypatch)
    base = dict(method={"name": name}, train={"rounds": 3, "momentum": 0.5, "join_ratio": 0.5})
    runs = seeds_apart_and_together(tmp_path / "together", base)
    summaries = run_configs(runs, resume=False, progress=False, log=lambda line: None)
    assert sizes == [3, 3, 3]  # every round of the three runs: one computation
    assert max(stacked) == 9, "3 clients of each of the 3 runs in one stack"
    for run_dir in runs:
        assert summaries[run_dir]["training"]["paths"] == {"cohort": 9}  # 3 of 6 clients for 3 rounds
    # each run's summary tells the group's shared steps, not only the run that holds the stacks
    steps = [summaries[run_dir]["training"] for run_dir in runs]
    assert all(s["trained_together"] == 3 and s["steps_eager"] == steps[0]["steps_eager"] > 0 for s in steps)
    alone = seeds_apart_and_together(tmp_path / "alone", base, together="off")
    run_configs(alone, resume=False, progress=False, log=lambda line: None)
    assert sizes == [3, 3, 3]
    for got, want in zip(runs, alone):
        assert_same_metrics(got, want)


def test_a_killed_group_of_runs_resumes_each_run_to_the_numbers_of_an_uninterrupted_one(tmp_path):
    from pfedkit.engine.simulation import simulate
    from pfedkit.engine.together import run_together
    from pfedkit.experiments.pipeline import run_configs

    base = dict(method={"name": "fedper"}, train={"rounds": 5, "momentum": 0.9})
    runs = seeds_apart_and_together(tmp_path / "group", base, checkpoint_every=2)

    def stop_in_round_3(row):  # one run dies in round 3 (its checkpoint holds round 2); the others go on to the end
        if row["round"] == 3:
            raise _Stop

    def start(run_dir, cfg, member):
        stops = [stop_in_round_3] if run_dir.name == "seed1" else []
        return simulate(cfg, run_dir, progress=False, observers=stops, together=member)

    outcomes = run_together(runs, start)
    assert isinstance(outcomes[tmp_path / "group" / "seed1"], _Stop)
    assert "last_acc" in outcomes[tmp_path / "group" / "seed0"] and "last_acc" in outcomes[tmp_path / "group" / "seed2"]
    run_configs(runs, resume=True, progress=False, log=lambda line: None)  # seed1 alone now, from round 2
    for run_dir, cfg in runs.items():
        straight = tmp_path / "straight" / run_dir.name
        simulate(
            cfg.model_copy(update={"run": cfg.run.model_copy(update={"together": "off"})}), straight, progress=False
        )
        assert_same_metrics(run_dir, straight)


@pytest.fixture
def full_precision_on_the_gpu():
    """TF32 off (cuDNN convolutions default to it): grouped and per-client convolutions then agree to float32's
    precision, so a difference is the cohort's logic, not TF32's rounding."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", BATCHED)
def test_on_a_gpu_a_cohort_gives_the_replies_and_states_of_one_client_at_a_time(name, full_precision_on_the_gpu):
    check_cohort_against_one_client_at_a_time(name, True, torch.device("cuda"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", [n for n in BATCHED if METHODS[n].capabilities().weights])
def test_on_a_gpu_batched_evaluation_equals_each_client_on_its_own(name, full_precision_on_the_gpu):
    check_batched_evaluation(name, torch.device("cuda"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_a_run_takes_the_cohort_path_by_default_and_ends_where_the_per_client_path_does(tmp_path):
    settings = dict(method={"name": "fedper"}, train={"rounds": 3}, eval={"point": "both"})
    on = run_experiment(synthetic(**settings, run={"device": "cuda"}), tmp_path / "auto", progress=False)
    off = run_experiment(
        synthetic(**settings, run={"device": "cuda", "cohort": "off"}), tmp_path / "off", progress=False
    )
    assert abs(on["last_acc"] - off["last_acc"]) <= 0.001 and abs(on["last_acc_after"] - off["last_acc_after"]) <= 0.001
    assert on["training"]["tf32"] == {
        "convolutions": torch.backends.cudnn.allow_tf32,
        "matmul": torch.backends.cuda.matmul.allow_tf32,
    }


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["fedavg", "fedper", "fedrep", "ditto", "fedafk", "pgfedsplit", "fedpac"])
def test_on_a_gpu_steps_captured_as_cuda_graphs_equal_eager_steps_across_rounds(name):
    with torch.device("cuda"):
        method = method_for(name, images=True)
        fed = federation(True, sizes=[13, 7, 22, 1, 9, 30]).to(torch.device("cuda"))
        graphs = rounds_captured_against_eager(method, fed, "cuda-graph")
    assert graphs.runner.counts["replayed"] > 0 and "capture_failed" not in graphs.runner.record(), (
        graphs.runner.record()
    )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_runs_that_differ_in_seed_train_as_one_cohort_each_ending_as_it_would_alone(tmp_path):
    from pfedkit.experiments.pipeline import run_configs

    base = dict(method={"name": "fedavg"}, train={"rounds": 3, "momentum": 0.5})
    runs = seeds_apart_and_together(tmp_path / "together", base, device="cuda", cohort="auto")
    summaries = run_configs(runs, resume=False, progress=False, log=lambda line: None)
    alone = seeds_apart_and_together(tmp_path / "alone", base, device="cuda", cohort="auto", together="off")
    run_configs(alone, resume=False, progress=False, log=lambda line: None)
    for got, want in zip(runs, alone):
        assert summaries[got]["training"]["step_mode"] == "cuda-graph"
        assert_same_metrics(got, want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "name, param", [("ditto", "prox_weight"), ("fedafk", "kt_weight"), ("pgfedsplit", "proto_weight")]
)
def test_on_a_gpu_runs_that_differ_in_a_packable_hyper_parameter_pack_each_ending_as_it_would_alone(
    tmp_path, name, param, full_precision_on_the_gpu
):
    from pfedkit.experiments.pipeline import run_configs

    def configs(folder, **run):
        return {
            folder / f"{param}{value}": synthetic(
                method={"name": name, param: value},
                train={"rounds": 3, "momentum": 0.5},
                run={"device": "cuda", "cohort": "auto", "seed": 1, **run},
            )
            for value in PACKED_VALUES[(name, param)]
        }

    runs = configs(tmp_path / "together")
    summaries = run_configs(runs, resume=False, progress=False, log=lambda line: None)
    alone = configs(tmp_path / "alone", together="off")
    run_configs(alone, resume=False, progress=False, log=lambda line: None)
    for got, want in zip(runs, alone):
        assert summaries[got]["training"]["trained_together"] == 3
        assert_same_metrics(got, want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_two_methods_packs_trained_at_once_in_two_threads_each_end_as_alone(tmp_path):
    """Issue 92's streams: two packs in one process at once (each capturing its steps while the other runs) end
    with the numbers each has alone; a capture in global error mode would fail the other thread's calls."""
    import threading

    from pfedkit.experiments.pipeline import run_configs

    def pack(folder, name, **run):
        base = dict(method={"name": name}, train={"rounds": 3, "momentum": 0.5})
        return seeds_apart_and_together(folder / name, base, seeds=(0, 1), device="cuda", cohort="auto", **run)

    packs = [pack(tmp_path / "at-once", name) for name in ("fedavg", "pgfedsplit")]
    failures = []

    def go(runs):
        try:
            run_configs(runs, resume=False, progress=False, log=lambda line: None)
        except BaseException as err:
            failures.append(err)

    threads = [threading.Thread(target=go, args=(runs,)) for runs in packs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    for name, runs in zip(("fedavg", "pgfedsplit"), packs):
        alone = pack(tmp_path / "alone", name, together="off")
        run_configs(alone, resume=False, progress=False, log=lambda line: None)
        for got, want in zip(runs, alone):
            assert_same_metrics(got, want)


def test_the_cohort_path_is_the_default_on_a_gpu_and_never_on_a_cpu():
    from pfedkit.engine.placement import cohort_path

    def run(**values):
        return synthetic(run=values).run

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert cohort_path(run(device="cuda"), cuda)
    assert not cohort_path(run(), cpu)
    assert not cohort_path(run(device="cuda", gpus_per_worker=0.25), cpu)  # GPU-sharing worker processes
    assert not cohort_path(run(device="cuda", cohort="off"), cuda)
    assert cohort_path(run(cohort="on"), cpu)


def test_bf16_precision_trains_under_autocast_on_both_paths_and_is_refused_for_code_methods(tmp_path):
    """run.precision = "bf16" (issue 92): local training's forward passes in bfloat16, one client at a time and in a
    cohort alike; other numbers than float32's, close to them; float32 stays the default and bit for bit as before;
    a method whose training is code of its own is refused by name."""
    from pfedkit.errors import ConfigError
    from pfedkit.registry import build_config

    runs = {}
    for name, run in (
        ("f32", {}),
        ("bf16", {"precision": "bf16"}),
        ("bf16-cohort", {"precision": "bf16", "cohort": "on"}),
    ):
        out = tmp_path / name
        run_experiment(synthetic(train={"rounds": 3}, run=run), out, progress=False)
        runs[name] = read_csv(out / "metrics.csv")
    losses = {name: [float(r["loss"]) for r in rows] for name, rows in runs.items()}
    assert losses["bf16"] != losses["f32"]  # autocast ran: bfloat16 rounds otherwise
    for name in ("bf16", "bf16-cohort"):
        assert losses[name][-1] == pytest.approx(losses["f32"][-1], rel=0.05)
        assert float(runs[name][-1]["acc"]) == pytest.approx(float(runs["f32"][-1]["acc"]), abs=0.05)
    with pytest.raises(ConfigError, match="run.precision = 'bf16' applies to methods whose local training is a plan"):
        build_config({**synthetic().to_dict(), "method": {"name": "pfedme"}, "run": {"precision": "bf16"}})


def test_a_plan_method_whose_local_plan_returns_none_is_told_so_on_either_path(monkeypatch):
    from pfedkit.errors import PfedkitError

    method, fed = method_for("fedavg", images=False), federation(False)
    tasks = round_tasks(method, fed, round=0)
    monkeypatch.setattr(method, "local_plan", lambda *args: None)
    for path in (
        lambda: local_update(method, tasks[0].payload, tasks[0].client, fed.client(0), 0),
        lambda: dict(Cohort(method, fed).train(tasks)),
    ):
        with pytest.raises(PfedkitError, match="local_plan returned None for client 0; return a LocalPlan"):
            path()


def test_drop_last_leaves_out_each_epochs_partial_batch_on_both_paths():
    """train.drop_last (PFLlib's loaders' reading): batches of exactly batch_size, the order drawn as without it; a
    client smaller than a batch takes no step; the cohort gives what one client at a time gives."""
    method, fed = method_for("fedavg", images=True, drop_last=True), federation(True)
    plain = method_for("fedavg", images=True)
    for cid, n in enumerate(SIZES):
        data = fed.client(cid)
        kept = list(method.batches(data, 0, "train"))
        every = list(plain.batches(data, 0, "train"))
        assert all(len(idx) == 4 for idx in kept) and len(kept) == 2 * (n // 4)
        assert [idx.tolist() for idx in kept] == [idx.tolist() for idx in every if len(idx) == 4]
    tasks = round_tasks(method, fed, round=2)
    want = {t.cid: local_update(method, t.payload, t.client, fed.client(t.cid), t.round) for t in tasks}
    got = dict(Cohort(method, fed).train(tasks))
    for cid in want:
        assert_states_close(got[cid][0], want[cid][0], f"client {cid} reply")
    alone = [t for t in tasks if SIZES[t.cid] < 4][0]  # the client of one sample: no step, its weights as received
    start = alone.payload
    assert all(torch.equal(want[alone.cid][0][k], start[k]) for k in start if k in want[alone.cid][0])


def test_the_fedafk_sweeps_suite_packs_every_row_and_seed_into_one_cohort_on_the_cohort_path():
    """Issue 92: Tables 1 and 2's sweep rows differ only in lambda, mu_init or the repeat, all packable: on a GPU the
    suite's 15 rows x 3 seeds train as one stacked computation (with run.together off, 45 runs one after another)."""
    from pfedkit.experiments.cells import cell_config
    from pfedkit.experiments.pipeline import together_batches
    from pfedkit.papers.suites import suite_from_toml
    from pfedkit.registry import build_config

    suite = suite_from_toml(
        Path(__file__).resolve().parents[1] / "pfedkit" / "papers" / "tables" / "fedafk_sweeps.toml"
    )

    def runs(*overrides):
        return {
            Path(f"{column}/{row}/seed{seed}"): build_config(
                cell_config(suite, "small", column, row, overrides=["run.cohort=on", f"run.seed={seed}", *overrides])
            )
            for column in suite.columns
            for row in suite.rows
            for seed in (0, 1, 2)
        }

    per_column = len(suite.rows) * 3
    assert [len(b) for b in together_batches(runs())] == [per_column] * len(suite.columns)
    assert {len(b) for b in together_batches(runs("run.together=off"))} == {1}
