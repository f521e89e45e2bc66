"""The Ray backend: the same run ends with the same metrics as on the local backend, also when an actor dies."""

from __future__ import annotations

import gc
import json
import threading

import pytest

from pfedkit.engine.simulation import Simulation, simulate
from pfedkit.errors import PfedkitError
from pfedkit.io import read_csv
from tests.test_engine import COMPARED, synthetic

ray = pytest.importorskip("ray")


def test_an_unreachable_cluster_fails_before_round_0_naming_the_fix(tmp_path):
    if ray.is_initialized():  # first in this file, before the module's Ray starts
        pytest.skip("a Ray is already running in this process")
    config = synthetic(run={"backend": "ray", "ray_address": "127.0.0.1:1"})
    with pytest.raises(PfedkitError, match=r"cannot reach the Ray cluster at '127.0.0.1:1'.*ray start --head"):
        simulate(config, tmp_path, progress=False)
    assert not (tmp_path / "metrics.csv").exists()


@pytest.fixture(scope="module")
def local_ray():
    """One Ray for the module (starting one costs seconds), two CPUs as this project's machine."""
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()
    gc.collect()  # Ray's objects finalized here, not in a later test's forked worker (a segfault in _raylet.so)


def metrics(folder):
    return [[r[k] for k in COMPARED] for r in read_csv(folder / "metrics.csv")]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fedavg", "fedper"])
def test_ray_and_local_backends_end_with_the_same_metrics(tmp_path, local_ray, method):
    for backend in ("local", "ray"):
        simulate(
            synthetic(method={"name": method}, train={"rounds": 3}, run={"workers": 2, "backend": backend}),
            tmp_path / backend,
            progress=False,
        )
    assert metrics(tmp_path / "ray") == metrics(tmp_path / "local")
    assert (tmp_path / "ray" / "checkpoint.pt").exists()
    executors = [
        json.loads((tmp_path / b / "summary.json").read_text())["training"]["executor"] for b in ("local", "ray")
    ]
    assert executors == ["2 worker processes", "Ray: 2 actors on 1 node"]  # summary.json says where they trained


class KillsAnActor(Simulation):
    """Kills one actor while round 1's local updates run (each takes about a second); Ray restarts it and retries
    the task it had. Records the actor's process before and after, to show that it did die."""

    def train_clients(self, round, payloads, evaluate_after=False):
        if round != 1:
            return super().train_clients(round, payloads, evaluate_after)
        actor = self.executor.actors[0]
        self.pids = [ray.get(actor.pid.remote())]
        threading.Timer(0.5, lambda: ray.kill(actor, no_restart=False)).start()
        result = super().train_clients(round, payloads, evaluate_after)
        self.pids.append(ray.get(actor.pid.remote()))
        return result


@pytest.mark.slow
def test_a_killed_actor_is_restarted_and_the_run_ends_as_it_would_have(tmp_path, local_ray):
    config = synthetic(train={"rounds": 3, "local_epochs": 100}, run={"workers": 2, "backend": "ray"})
    killed = KillsAnActor(config, tmp_path / "killed", progress=False)
    killed.run()
    assert killed.pids[0] != killed.pids[1]  # the actor died and was restarted
    simulate(config, tmp_path / "straight", progress=False)
    assert metrics(tmp_path / "killed") == metrics(tmp_path / "straight")


def test_a_node_with_other_code_fails_before_round_0(tmp_path, local_ray, monkeypatch):
    import pfedkit.ray.executor as executor

    # the driver pretends to run another pfedkit; the actors report what they really run
    monkeypatch.setattr(executor, "software", lambda: {"pfedkit": "9.9.9 (edited)", "torch": "0.0"})
    with pytest.raises(
        PfedkitError, match=r"runs pfedkit 0\.1\.0 .* this driver pfedkit 9\.9\.9 .* install this version"
    ):
        simulate(synthetic(run={"workers": 2, "backend": "ray"}), tmp_path, progress=False)
    assert not (tmp_path / "metrics.csv").exists()


def test_a_gpu_request_the_cluster_cannot_meet_fails_before_round_0(tmp_path, local_ray):
    config = synthetic(run={"workers": 2, "backend": "ray", "gpus_per_worker": 0.5})
    with pytest.raises(PfedkitError, match=r"run.gpus_per_worker = 0.5 asks Ray for GPUs, but the cluster has none"):
        simulate(config, tmp_path, progress=False)
    assert not (tmp_path / "metrics.csv").exists()


@pytest.mark.slow
def test_a_method_of_ones_own_runs_on_ray_actors_that_do_not_have_its_file(tmp_path, local_ray):
    from pfedkit.registry import build_config
    from tests.test_plugin import fedavgm_raw

    for backend in ("local", "ray"):
        raw = fedavgm_raw()
        raw["train"]["rounds"] = 2
        raw["run"].update({"workers": 2, "backend": backend})
        simulate(build_config(raw), tmp_path / backend, progress=False)
    assert metrics(tmp_path / "ray") == metrics(tmp_path / "local")
