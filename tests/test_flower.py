"""pfedkit on Flower: records, client state on disk, node data, the ServerApp's rounds (on a fake grid, then on
a real SuperLink and SuperNodes on 127.0.0.1), a node killed and restarted mid-run."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from pfedkit.data.federated import build_federated
from pfedkit.engine import local_update
from pfedkit.engine.client_states import ClientStateStore
from pfedkit.engine.simulation import Simulation
from pfedkit.engine.store import load_checkpoint
from pfedkit.errors import ConfigError, PfedkitError
from pfedkit.experiments import run_experiment
from pfedkit.flower.node_data import load_node_data
from pfedkit.flower.settings import RunSettings, write_app
from pfedkit.io import read_csv
from pfedkit.records import ClientData
from pfedkit.registry import build_config
from tests.conftest import make, tiny_data

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

COMPARED = ("round", "acc", "acc_client_mean", "loss", "bytes_down", "bytes_up", "clients_trained")


def small(clients: int = 2, rounds: int = 2, method: str = "fedper", **run):
    return build_config(
        {
            "data": {"dataset": "synthetic", "options": {"samples": 600, "test_samples": 100}},
            "partition": {"clients": clients, "beta": 1.0},
            "model": {"name": "mlp", "options": {"hidden": 16}},
            "method": {"name": method},
            "train": {"rounds": rounds, "batch_size": 16, "lr": 0.05},
            "run": {"workers": 1, "checkpoint_every": 1, **run},
        }
    )


def same_message(a: dict, b: dict) -> bool:
    if list(a) != list(b):
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, torch.Tensor):
            if not (isinstance(y, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


# ---------------------------------------------------------------- records (no network)

CHEAP = {"kd_steps": 2, "kd_batch": 8, "pgd_steps": 2, "max_first_epochs": 3}  # fewer inner steps, same messages


def required_params(cls) -> dict:
    """Smallest valid values for hyper-parameters without a default (they depend on the run, e.g. FedPHP's K),
    and few inner steps where a method has them: the messages keep their shape and types."""
    out = {k: v for k, v in CHEAP.items() if k in cls.Params.model_fields}
    for name, field in cls.Params.model_fields.items():
        if field.is_required():
            low = next((m.ge for m in field.metadata if getattr(m, "ge", None) is not None), 1)
            out[name] = field.annotation(max(low, 1))
    return out


def image_setup():
    """Methods that train adapters need an adapter model and image inputs; some also need server data."""
    from pfedkit.models import build_model
    from pfedkit.records import MethodContext, ServerData, TrainSettings

    def data(cid: int, n: int = 16):
        g = torch.Generator().manual_seed(cid)
        x, y = torch.rand(n, 1, 12, 12, generator=g) * 2 - 1, torch.arange(n) % 3
        return ClientData(cid, x, y, x.clone(), y.clone(), num_classes=3)

    held = data(9)
    server = ServerData(held.train_x, held.train_y, held.train_x, held.train_y, "test proxy")
    ctx = MethodContext(
        lambda: build_model("small-resnet-adapter", (1, 12, 12), 3, widths=[4, 8, 8, 16]),
        TrainSettings(local_epochs=1, batch_size=8, lr=0.05),
        num_classes=3,
        seed=0,
        server=server,
    )
    return ctx, data


def two_rounds(method, data) -> list[dict]:
    """Every payload and reply of two rounds over two clients (round 1's come from aggregated state)."""
    server = method.init_server()
    datasets = {cid: data(cid) for cid in range(2)}
    clients = {cid: method.init_client(cid, datasets[cid]) for cid in range(2)}
    messages = []
    for round in range(2):
        replies = {}
        for cid in range(2):
            payload = method.payload(server, round, cid)
            replies[cid], clients[cid] = local_update(method, payload, clients[cid], datasets[cid], round)
            messages += [payload, replies[cid]]
        server = method.aggregate(server, replies, round)
    return messages


@pytest.fixture
def one_thread():
    """Tiny models on a shared CPU: one thread avoids contention that makes them many times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_every_method_payload_and_reply_survive_flower_records_exactly(one_thread):
    pytest.importorskip("flwr")
    from flwr.common.serde import recorddict_from_proto, recorddict_to_proto

    from pfedkit.flower.records import from_records, to_records
    from pfedkit.methods import METHODS

    for name in sorted(METHODS):
        cls = METHODS[name]
        params = cls.validate_params(required_params(cls))
        try:
            messages = two_rounds(make(name, params=required_params(cls)), tiny_data)
        except ConfigError:  # it asks for another model (adapters) or server data
            ctx, data = image_setup()
            messages = two_rounds(cls(params, ctx), data)
        assert any(isinstance(v, torch.Tensor) for m in messages for v in m.values()) or name == "local", name
        for message in messages:
            on_the_wire = recorddict_from_proto(recorddict_to_proto(to_records(message)))
            assert same_message(from_records(on_the_wire), message), name


def test_records_refuse_what_they_cannot_carry():
    pytest.importorskip("flwr")
    from pfedkit.flower.records import to_records

    with pytest.raises(PfedkitError, match="'weights' is a list"):
        to_records({"weights": [1.0, 2.0]})


# ---------------------------------------------------------------- client state on disk


def test_client_state_store_resumes_after_a_restart_and_keeps_what_a_resume_needs(tmp_path):
    head = {"head.weight": torch.randn(2, 3), "head.bias": torch.randn(2), "mu": 0.3}
    store = ClientStateStore(tmp_path, "run-abc", 1)
    assert store.load(0) == (None, -1)
    store.save(head, after_round=0, keep_from=0)
    later = {**head, "head.bias": head["head.bias"] + 1}
    store.save(later, after_round=1, keep_from=0)
    restarted = ClientStateStore(tmp_path, "run-abc", 1)  # a new process: only the disk is left
    state, after = restarted.load(before_round=1)
    assert after == 0 and same_message(state, head)
    state, after = restarted.load(before_round=5)
    assert after == 1 and same_message(state, later)
    restarted.save(later, after_round=3, keep_from=3)  # the server checkpointed at 3: version 0 can go
    assert restarted.versions() == [1, 3]
    assert not [p for p in store.folder.iterdir() if p.name.startswith(".")]  # no temporary files left
    assert ClientStateStore(tmp_path, "another-run", 1).load(9) == (None, -1)  # keyed by run


def test_client_state_store_rejects_a_run_key_that_is_not_a_folder_name(tmp_path):
    with pytest.raises(PfedkitError, match="run key"):
        ClientStateStore(tmp_path, "../x", 0)


# ---------------------------------------------------------------- node data


def test_node_partition_is_the_simulation_client():
    cfg = small(clients=3)
    node = load_node_data(cfg, {"client-id": 2})
    expected = build_federated(cfg).client(2)
    for field in ("train_x", "train_y", "test_x", "test_y"):
        assert torch.equal(getattr(node, field), getattr(expected, field)), field
    assert load_node_data(cfg, {"partition-id": 2, "num-partitions": 3}).cid == 2


def test_node_config_errors_name_the_fix():
    cfg = small(clients=2)
    with pytest.raises(ConfigError, match="client-id=K"):
        load_node_data(cfg, {})
    with pytest.raises(ConfigError, match="outside 0..1"):
        load_node_data(cfg, {"client-id": 2})
    with pytest.raises(ConfigError, match="num-partitions=3"):
        load_node_data(cfg, {"client-id": 0, "num-partitions": 3})
    with pytest.raises(ConfigError, match="unknown node config key"):
        load_node_data(cfg, {"client-id": 0, "dataa-dir": "/x"})


def test_node_own_arrays_and_image_folders(tmp_path):
    from PIL import Image

    cfg = small()
    rng = np.random.default_rng(0)
    arrays = tmp_path / "arrays"
    arrays.mkdir()
    np.savez(arrays / "train.npz", x=rng.integers(0, 255, (20, 8, 8), dtype=np.uint8), y=np.arange(20) % 3)
    data = load_node_data(cfg, {"client-id": 1, "data-dir": str(arrays)})
    assert data.train_x.shape[1:] == (1, 8, 8) and data.num_train + len(data.test_y) == 20 and len(data.test_y) == 5
    assert data.num_classes == 3 and data.cid == 1
    images = tmp_path / "images"
    for cls in ("cat", "dog"):
        (images / "train" / cls).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(rng.integers(0, 255, (10, 10, 3), dtype=np.uint8)).save(images / "train" / cls / f"{i}.png")
    data = load_node_data(cfg, {"client-id": 0, "data-dir": str(images), "image-size": 6, "classes": "dog,cat"})
    assert data.train_x.shape[1:] == (3, 6, 6) and data.num_classes == 2
    assert sorted((torch.cat([data.train_y, data.test_y])).tolist()) == [0, 0, 0, 1, 1, 1]
    with pytest.raises(PfedkitError, match="neither train.npz nor train/"):
        load_node_data(cfg, {"client-id": 0, "data-dir": str(tmp_path)})


# ---------------------------------------------------------------- settings and the app folder


def test_app_folder_carries_the_run_settings(tmp_path):
    settings = RunSettings(small(), tmp_path / "out", run_name="r1", min_replies=2, round_timeout=30)
    path = write_app(tmp_path / "app", settings)
    app = tomllib.loads(path.read_text())["tool"]["flwr"]["app"]
    assert app["components"]["serverapp"] == "pfedkit.flower.server_app:app"
    again = RunSettings.from_run_config(app["config"])
    assert again == settings
    with pytest.raises(ConfigError, match="unknown run config key"):
        RunSettings.from_run_config({**app["config"], "min-reply": 1})
    with pytest.raises(ConfigError, match="min-clients=5 exceeds"):
        RunSettings(small(), tmp_path, min_clients=5)


# ---------------------------------------------------------------- the ServerApp's rounds on a fake grid


class FakeGrid:
    """Delivers messages to in-process ClientApp nodes; a node listed in `dead` never answers."""

    def __init__(self, cfg, node_ids: dict[int, int], state_root: Path):
        from pfedkit.flower.client_app import Node

        self.nodes = {
            node: Node(cfg, {"client-id": cid, "state-dir": str(state_root)}) for cid, node in node_ids.items()
        }
        self.dead: dict[int, set[int]] = {}  # round -> node ids that do not answer
        self.crash_in_round: int | None = None  # the server dies once the clients of this round have trained

    def get_node_ids(self):
        return list(self.nodes)

    def send_and_receive(self, messages, timeout=None):
        from pfedkit.flower.client_app import describe, work

        replies = []
        for msg in messages:
            node_id = msg.metadata.dst_node_id
            node = self.nodes[node_id]
            if msg.metadata.message_type == "query.info":
                content = describe(node)
            elif node_id in self.dead.get(int(msg.metadata.group_id), ()):
                continue
            else:
                content = work(node, msg.content)
            replies.append(
                SimpleNamespace(
                    metadata=SimpleNamespace(src_node_id=node_id), content=content, has_error=lambda: False, error=None
                )
            )
        if messages and messages[0].metadata.group_id == str(self.crash_in_round):
            raise KeyboardInterrupt("the server machine went down")
        return replies


@pytest.fixture
def in_a_run(monkeypatch):
    """Flower messages need the id of the run they belong to; a real ServerApp process has one."""
    pytest.importorskip("flwr")
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 0)


def flower_run_on(grid, cfg, out, **settings):
    from pfedkit.flower.server_app import FlowerRun

    return FlowerRun(grid, RunSettings(cfg, out, connect_timeout=5, **settings))


def test_server_rounds_equal_the_simulation(tmp_path, in_a_run, one_thread):
    cfg = small(clients=3)
    run = flower_run_on(FakeGrid(cfg, {0: 101, 1: 102, 2: 103}, tmp_path / "state"), cfg, tmp_path / "fl")
    run.run()
    run_experiment(cfg, tmp_path / "sim", progress=False)
    flower_rows, sim_rows = read_csv(tmp_path / "fl/metrics.csv"), read_csv(tmp_path / "sim/metrics.csv")
    assert [[r[k] for k in COMPARED] for r in flower_rows] == [[r[k] for k in COMPARED] for r in sim_rows]
    assert read_csv(tmp_path / "fl/clients.csv") == read_csv(tmp_path / "sim/clients.csv")
    assert [r["answered"] for r in flower_rows] == ["0 1 2"] * 3


def test_missing_replies_do_not_stop_a_round_and_min_replies_holds_the_server(tmp_path, in_a_run, one_thread):
    cfg = small(clients=3)
    grid = FakeGrid(cfg, {0: 101, 1: 102, 2: 103}, tmp_path / "state")
    grid.dead = {1: {103}}
    run = flower_run_on(grid, cfg, tmp_path / "a")
    run.run()
    rows = read_csv(tmp_path / "a/metrics.csv")
    assert rows[1]["missing"] == "2" and rows[1]["answered"] == "0 1" and rows[1]["clients_trained"] == "2"
    assert rows[2]["answered"] == "0 1 2"
    assert {int(r["client"]) for r in read_csv(tmp_path / "a/clients.csv") if r["round"] == "1"} == {0, 1}
    summary = json.loads((tmp_path / "a/summary.json").read_text())  # says whom its accuracies cover
    assert summary["rounds_with_missing_clients"] == {"1": [2]} and summary["evaluated_clients"]["1"] == 2
    assert "only the clients that answered" in summary["note"]

    grid = FakeGrid(cfg, {0: 101, 1: 102, 2: 103}, tmp_path / "state-b")
    grid.dead = {1: {103}}
    run = flower_run_on(grid, cfg, tmp_path / "b", min_replies=3)
    before = {}

    def keep_server(round, payloads, replies, apply=run.apply_replies):
        before[round] = run.server
        return apply(round, payloads, replies)

    run.apply_replies = keep_server
    run.run()
    rows = read_csv(tmp_path / "b/metrics.csv")
    assert rows[1]["clients_trained"] == "0" and 1 not in before  # round 1 aggregated nothing
    assert rows[0]["clients_trained"] == "3"


def test_a_resumed_server_replays_from_its_checkpoint_with_the_clients_saved_states(tmp_path, in_a_run, one_thread):
    cfg = small(clients=3, rounds=4)
    nodes = {0: 101, 1: 102, 2: 103}
    grid = FakeGrid(cfg, nodes, tmp_path / "state")
    grid.crash_in_round = 2  # the nodes have trained round 2 and saved that state; the server never aggregated it
    with pytest.raises(KeyboardInterrupt):
        flower_run_on(grid, cfg, tmp_path / "fl").run()
    assert len(read_csv(tmp_path / "fl/metrics.csv")) == 2
    flower_run_on(FakeGrid(cfg, nodes, tmp_path / "state"), cfg, tmp_path / "fl", resume=True).run()
    run_experiment(cfg, tmp_path / "sim", progress=False)
    flower_rows, sim_rows = read_csv(tmp_path / "fl/metrics.csv"), read_csv(tmp_path / "sim/metrics.csv")
    assert [[r[k] for k in COMPARED] for r in flower_rows] == [[r[k] for k in COMPARED] for r in sim_rows]
    rounds_started_from = [(int(r["round"]), int(r["state_round"])) for r in read_csv(tmp_path / "fl/replies.csv")]
    assert (2, 1) in rounds_started_from  # the replayed round 2 started from round 1's state, not the newer one


# ---------------------------------------------------------------- a real SuperLink and SuperNodes on 127.0.0.1


def started_processes_left() -> list[str]:
    """Processes this test process started (transitively) that still run."""
    import os

    from pfedkit.flower.local import descendants

    left = []
    for pid in descendants(os.getpid()):
        try:
            left.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120])
        except OSError:
            pass
    return left


def wait_rows(path: Path, count: int, proc, timeout: float) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            rows = read_csv(path)
            if len(rows) >= count:
                return rows
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"{path} did not reach {count} rows")


@pytest.mark.slow
def test_a_method_of_ones_own_runs_on_a_loopback_deployment(tmp_path, one_thread):
    """A method in a file outside the package (the guide's FedAvgM under another name), named by method.module: the
    nodes, separate processes, import it from the run's config and the rounds equal the simulation's."""
    pytest.importorskip("flwr")
    from pfedkit.flower.local import run_loopback

    module = tmp_path / "mine" / "my_fedavgm.py"
    module.parent.mkdir()
    example = Path(__file__).resolve().parents[1] / "examples" / "methods" / "fedavgm.py"
    module.write_text(example.read_text().replace('name = "fedavgm"', 'name = "my-fedavgm"'))
    raw = small(clients=2, rounds=2).to_dict()
    raw["method"] = {"name": "my-fedavgm", "module": str(module)}
    cfg = build_config(raw)
    settings = RunSettings(cfg, tmp_path / "fl", run_name="mine", round_timeout=60, connect_timeout=60)
    run_loopback(
        settings, tmp_path / "work", 2, timeout=240, node_config={"threads": 1, "state-dir": str(tmp_path / "state")}
    )
    assert started_processes_left() == []
    Simulation(cfg, tmp_path / "sim", progress=False).run()
    flower_rows, sim_rows = read_csv(tmp_path / "fl/metrics.csv"), read_csv(tmp_path / "sim/metrics.csv")
    assert [[r[k] for k in COMPARED] for r in flower_rows] == [[r[k] for k in COMPARED] for r in sim_rows]


class ReplayMissing(Simulation):
    """The simulation with the Flower run's missing clients left out of the rounds they missed."""

    def __init__(self, *args, missing: dict[int, set[int]], **kwargs):
        self.missing = missing
        super().__init__(*args, **kwargs)

    def evaluate_clients(self, round, payloads):
        return super().evaluate_clients(round, {c: p for c, p in payloads.items() if c not in self.missing[round]})

    def train_clients(self, round, payloads, evaluate_after=False):
        return super().train_clients(
            round, {c: p for c, p in payloads.items() if c not in self.missing[round]}, evaluate_after
        )


@pytest.mark.slow
def test_killed_node_is_left_out_and_resumes_its_state_from_disk_after_a_restart(tmp_path, one_thread):
    pytest.importorskip("flwr")
    from pfedkit.flower.local import LoopbackFederation

    cfg = small(clients=2, rounds=3)
    out, state = tmp_path / "fl", {cid: tmp_path / f"node-{cid}" for cid in range(2)}
    # The timeout is what the round with the dead node waits; replies later than it would be lost even from live
    # nodes (which trained anyway), so it leaves room for a loaded CI machine.
    write_app(tmp_path / "app", RunSettings(cfg, out, run_name="kill", round_timeout=45, connect_timeout=60))
    with LoopbackFederation(tmp_path / "work") as fed:
        for cid in range(2):
            fed.start_node(cid, state_dir=state[cid], threads=1)
        run = fed.run_app(tmp_path / "app")
        first = wait_rows(out / "metrics.csv", 1, run, timeout=120)  # round 0 trained: node 1 has saved its state
        assert first[0]["answered"] == "0 1", "a node missed round 0: the machine is too slow for round_timeout"
        fed.kill_node(1)
        run_key = load_checkpoint(out)["flower"]["run_key"]
        store = ClientStateStore(state[1], run_key, 1)
        saved, saved_after = store.load(99)
        fed.start_node(1, state_dir=state[1], threads=1)  # same client id, new Flower node id
        run.wait(timeout=240)
    assert started_processes_left() == []
    rows = read_csv(out / "metrics.csv")
    assert len(rows) == 4 and rows[1]["missing"] == "1" and rows[1]["clients_trained"] == "1"
    replies = read_csv(out / "replies.csv")
    back = [r for r in replies if r["client"] == "1" and int(r["round"]) > 1]
    assert back and back[0]["node"] != replies[1]["node"]  # it came back as another node
    assert saved_after == 0 and int(back[0]["state_round"]) == 0  # and started from the state saved before
    assert same_message(ClientStateStore(state[1], run_key, 1).load(1)[0], saved)
    # The whole run equals a simulation that leaves client 1 out where it was missing: had the restarted node
    # started from a fresh head instead of the saved one, its later accuracies would differ.
    missing = {int(r["round"]): {int(c) for c in r["missing"].split()} for r in rows}
    sim = ReplayMissing(cfg, tmp_path / "sim", progress=False, missing=missing)
    sim.run()
    keys = ("round", "acc", "acc_client_mean", "loss", "clients_trained")
    assert [[r[k] for k in keys] for r in rows] == [
        [r[k] for k in keys] for r in read_csv(tmp_path / "sim/metrics.csv")
    ]
    for cid in range(2):  # each node's personal head, on its disk, is the simulation's
        final, after = ClientStateStore(state[cid], run_key, cid).load(99)
        assert after == cfg.train.rounds - 1 and same_message(final, sim.clients[cid])


def test_the_core_never_imports_flwr():
    import subprocess

    code = (
        "import sys, pfedkit.cli, pfedkit.engine.simulation, pfedkit.methods, pfedkit.flower.settings, "
        "pfedkit.engine.client_states, pfedkit.flower.node_data, pfedkit.flower.local; print('flwr' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "False", result.stderr


def test_cli_writes_the_app_and_names_the_next_steps(tmp_path):
    from click.testing import CliRunner

    from pfedkit.cli import main
    from pfedkit.config import dump_toml

    config = tmp_path / "c.toml"
    config.write_text(dump_toml(small().to_dict()))
    result = CliRunner().invoke(
        main,
        [
            "flower",
            "app",
            str(config),
            "--out",
            str(tmp_path / "run"),
            "--app",
            str(tmp_path / "app"),
            "--min-replies",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "flwr run" in result.output and "client-id=K" in result.output
    run_config = tomllib.loads((tmp_path / "app/pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    settings = RunSettings.from_run_config(run_config)
    assert settings.min_replies == 2 and settings.run_name == "run" and settings.out == (tmp_path / "run").resolve()
    assert settings.config == small()
    refused = CliRunner().invoke(
        main,
        [
            "flower",
            "app",
            str(config),
            "--out",
            str(tmp_path / "gpu"),
            "--app",
            str(tmp_path / "gpu-app"),
            "--set",
            "run.device=cuda",
        ],
    )
    assert refused.exit_code != 0 and "Flower nodes train on the CPU" in refused.output
    assert not (tmp_path / "gpu-app").exists()


def test_a_node_with_another_pfedkit_version_is_refused(tmp_path, in_a_run, monkeypatch):
    import pfedkit.flower.client_app as client_app

    cfg = small(clients=2)
    grid = FakeGrid(cfg, {0: 101, 1: 102}, tmp_path / "state")
    real = client_app.describe

    def older(node):
        records = real(node)
        if node.cid == 1:
            records["pfedkit.info"]["pfedkit-version"] = "0.0.1"
        return records

    monkeypatch.setattr(client_app, "describe", older)
    with pytest.raises(PfedkitError, match="client 1 .* runs pfedkit 0.0.1"):
        flower_run_on(grid, cfg, tmp_path / "fl")


def test_a_node_that_stops_is_reported_and_takes_its_processes_with_it(tmp_path):
    import subprocess

    from pfedkit.flower.local import LoopbackFederation

    fed = LoopbackFederation(tmp_path)
    # a node process that exits at once, leaving a child (as a SuperNode leaves its app process) in its group
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & echo $! > child; exit 3"], cwd=tmp_path, start_new_session=True)
    leader.wait()
    child = int((tmp_path / "child").read_text())
    fed.nodes = {4: leader}
    assert fed.reap_dead_nodes() == [(4, 3)] and fed.nodes == {}
    deadline = time.time() + 10
    while Path(f"/proc/{child}").exists() and time.time() < deadline:
        try:  # reap it if it is ours; otherwise wait for it to vanish
            os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)
    state = (
        Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if Path(f"/proc/{child}").exists()
        else "gone"
    )
    assert state in ("gone", "Z")
    assert fed.reap_dead_nodes() == []


def test_a_run_accepts_the_work_folder_pfedkit_made_in_its_out_and_still_refuses_a_users(tmp_path):
    """`pfedkit flower local` makes OUT/flower (its app and logs) before the server writes the run into OUT: the
    run must take that folder as its own, and still refuse a folder a user left there."""
    from pfedkit.engine.store import WORK_MARKER

    cfg = small(clients=2, rounds=1)
    (tmp_path / "ok" / "flower").mkdir(parents=True)
    (tmp_path / "ok" / "flower" / WORK_MARKER).touch()
    run_experiment(cfg, tmp_path / "ok", progress=False)
    assert (tmp_path / "ok" / "summary.json").exists()
    (tmp_path / "mine" / "flower").mkdir(parents=True)
    with pytest.raises(PfedkitError, match="did not write"):
        run_experiment(cfg, tmp_path / "mine", progress=False)


@pytest.mark.slow
def test_flower_local_without_a_work_folder_finishes_and_a_failure_names_its_cause(tmp_path):
    """The command of docs/flower.md, with the work folder left at its default OUT/flower: it finishes; and a run that
    ends without results says why on the terminal, not only in run.log."""
    pytest.importorskip("flwr")
    import subprocess

    example = Path(__file__).resolve().parents[1] / "examples" / "digits.toml"
    cmd = [sys.executable, "-m", "pfedkit", "flower", "local", str(example), "--out", str(tmp_path / "fl")]
    cmd += ["--set", "partition.clients=2", "--set", "train.rounds=1", "--round-timeout", "120"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((tmp_path / "fl" / "summary.json").read_text())["last_round"] == 1
    assert (tmp_path / "fl" / "flower" / "run.log").exists()
    from pfedkit.flower.local import last_error

    log = tmp_path / "run.log"
    log.write_text("INFO starting\npfedkit.errors.PfedkitError: /x holds files pfedkit did not write (notes)\nbye\n")
    assert "holds files pfedkit did not write" in last_error(log)
    assert last_error(tmp_path / "absent.log") == ""


def test_flowers_own_processes_find_this_pythons_scripts_without_an_activated_environment(tmp_path, monkeypatch):
    """flower-superlink starts flower-superexec by name: the loopback's environment puts this Python's scripts folder
    first on PATH, so a virtual environment that is not activated still works."""
    from pfedkit.flower.local import offline_env

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    path = offline_env(tmp_path)["PATH"].split(os.pathsep)
    assert path[0] == str(Path(sys.executable).parent) and path[1:] == ["/usr/bin", "/bin"]
