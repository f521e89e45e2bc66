"""Several worker processes on one GPU (run.gpus_per_worker): the spawned pool they run in, checked on the CPU, the
errors a request that cannot be met gets, and on a GPU machine the run itself."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from pfedkit.data.federated import build_federated
from pfedkit.engine.placement import driver_device, placement
from pfedkit.engine.simulation import make_method, simulate
from pfedkit.engine.workers import Executor, Task
from pfedkit.errors import ConfigError
from pfedkit.io import read_csv
from tests.test_engine import REPO, synthetic


def replies_from(start_method: str) -> dict:
    config = synthetic(method={"name": "fedper"}, partition={"scheme": "iid"})
    fed = build_federated(config)
    method = make_method(config, fed)
    server = method.init_server()
    tasks = [
        Task(
            "train",
            cid,
            0,
            method.payload(server, 0, cid),
            method.init_client(cid, fed.client(cid)),
            int(fed.train_sizes()[cid]),
        )
        for cid in range(fed.num_clients)
    ]
    with Executor(method, fed, 2, start_method=start_method) as executor:
        return {cid: reply for cid, (reply, _, _) in executor.run(tasks)}


@pytest.mark.slow
def test_a_spawned_pool_as_a_gpu_uses_gives_the_forked_pool_s_replies():
    spawned, forked = replies_from("spawn"), replies_from("fork")
    assert spawned.keys() == forked.keys()
    assert all(
        torch.isfinite(v).all() for reply in forked.values() for v in reply.values() if isinstance(v, torch.Tensor)
    )
    for cid in forked:
        assert all(
            torch.equal(spawned[cid][k], forked[cid][k])
            for k in forked[cid]
            if isinstance(forked[cid][k], torch.Tensor)
        )


def test_a_pickled_method_carries_no_working_model():
    config = synthetic(method={"name": "fedper"})
    method = make_method(config, build_federated(config))
    method.model  # built here
    copy = pickle.loads(pickle.dumps(method))
    assert copy._models == {} and method._models  # the copy builds its own, on its own device
    assert all(torch.equal(copy.initial_state()[k], method.initial_state()[k]) for k in method.initial_state())


def test_gpu_shares_without_a_gpu_device_or_on_ray_without_shares_are_config_errors():
    with pytest.raises(ConfigError, match=r"run.gpus_per_worker = 0.5 shares a GPU .* set run.device = \"cuda\""):
        driver_device(synthetic(run={"gpus_per_worker": 0.5}).run)
    with pytest.raises(ConfigError, match=r"on Ray needs run.gpus_per_worker > 0"):
        driver_device(synthetic(run={"backend": "ray", "device": "cuda"}).run)
    with pytest.raises(ConfigError, match=r"run.gpus_per_worker.*less than or equal to 1"):
        synthetic(run={"gpus_per_worker": 1.5})
    assert driver_device(synthetic(run={"backend": "ray", "device": "cuda", "gpus_per_worker": 0.25}).run).type == "cpu"


def test_one_placement_says_where_each_part_of_a_run_goes():
    place = placement(synthetic(run={"workers": 3}).run)
    assert (place.driver.type, place.executor, place.workers, place.worker_device) == ("cpu", "local", 3, "cpu")
    assert not place.cohort and not place.together and place.describe() == "local executor"
    batched = placement(synthetic(run={"cohort": "on"}).run)
    assert batched.cohort and batched.together and batched.step_mode == "eager"
    assert batched.describe() == "cohort on cpu (steps eager); clients it cannot batch: local executor"
    assert not placement(synthetic(run={"cohort": "on", "together": "off"}).run).together
    ray = placement(synthetic(run={"backend": "ray", "device": "cuda", "gpus_per_worker": 0.25}).run)
    assert (ray.driver.type, ray.executor, ray.worker_device, ray.cohort) == ("cpu", "ray", "cuda", False)
    assert ray.describe() == "ray executor on cuda"
    with pytest.raises(ConfigError, match="cohort_step = 'cuda-graph' needs a CUDA device"):
        placement(synthetic(run={"cohort": "on", "cohort_step": "cuda-graph"}).run)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_four_workers_share_one_gpu_and_learn_as_one_process_does(tmp_path):
    base = dict(method={"name": "fedavg"}, train={"rounds": 4, "join_ratio": 1.0})
    simulate(synthetic(**base, run={"device": "cuda"}), tmp_path / "one", progress=False)
    simulate(synthetic(**base, run={"device": "cuda", "gpus_per_worker": 0.25}), tmp_path / "shared", progress=False)
    one, shared = (read_csv(tmp_path / run / "metrics.csv") for run in ("one", "shared"))
    assert abs(float(one[-1]["acc"]) - float(shared[-1]["acc"])) < 0.02  # GPU kernels need not be bit-identical


@pytest.mark.parametrize("name", ["fedafk-no-kt", "pgfedsplit-no-apa", "fedpac-proto"])
def test_a_built_in_variant_pickles_by_name_for_a_spawned_worker(name):
    from pfedkit.methods import METHODS

    cls = METHODS[name]
    params = cls.Params()
    assert pickle.loads(pickle.dumps(cls)) is cls and pickle.loads(pickle.dumps(params)) == params


@pytest.mark.slow
def test_a_spawned_worker_that_dies_at_its_start_is_a_clear_error_not_a_hang(tmp_path):
    import subprocess
    import sys
    import textwrap

    # a worker that cannot even import (here: a folder on the path shadows the standard json); the driver used to
    # block for good writing the pickled data into the dead worker's pipe
    (tmp_path / "shadow").mkdir()
    (tmp_path / "shadow" / "json.py").write_text("raise ImportError('a shadowed standard module')\n")
    script = tmp_path / "driver.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys
        from tests.test_gpu_sharing import replies_from
        from pfedkit.errors import PfedkitError
        sys.path.insert(0, {str(tmp_path / "shadow")!r})
        try:
            replies_from("spawn")
        except PfedkitError as err:
            print("clear error:", err)
        """)
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert "clear error: a worker process died" in done.stdout, done.stderr[-2000:]
