"""The Ray backend on a cluster of two nodes on this machine (`ray start --head`, then `ray start --address`): the
work spreads over both nodes and the run ends with the local backend's metrics."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import pytest

from pfedkit.engine.simulation import simulate
from tests.test_engine import synthetic
from tests.test_ray import metrics

ray = pytest.importorskip("ray")
START_S = 120


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ray_cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    command = [shutil.which("ray")] if shutil.which("ray") else [sys.executable, "-m", "ray.scripts.scripts"]
    return subprocess.run([*command, *args], env=env, timeout=START_S, capture_output=True, text=True)


@pytest.fixture
def two_nodes(monkeypatch):
    """A head and a second node of one CPU each, stopped afterwards (`ray stop` ends every Ray process here)."""
    if ray.is_initialized():
        ray.shutdown()
    # a cluster started by `ray start` asks for a token unless told not to; this one is local and short-lived
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_DISABLE_USAGE_STATS", "1")
    env = dict(os.environ)
    address = f"127.0.0.1:{free_port()}"
    try:
        head = ray_cli("start", "--head", f"--port={address.split(':')[1]}", "--num-cpus=1", "--include-dashboard=false",
                       "--disable-usage-stats", env=env)
        assert head.returncode == 0, head.stderr[-2000:]
        node = ray_cli("start", f"--address={address}", "--num-cpus=1", env=env)
        assert node.returncode == 0, node.stderr[-2000:]
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        ray_cli("stop", "--force", env=env)


@pytest.mark.slow
def test_two_nodes_spread_the_work_and_end_with_the_local_metrics(tmp_path, two_nodes):
    from pfedkit.ray.executor import RayExecutor

    for method in ("fedavg", "fedper"):
        local = synthetic(method={"name": method}, train={"rounds": 3}, run={"workers": 2})
        simulate(local, tmp_path / method / "local", progress=False)
        on_cluster = synthetic(method={"name": method}, train={"rounds": 3},
                               run={"workers": 2, "backend": "ray", "ray_address": two_nodes})
        simulate(on_cluster, tmp_path / method / "cluster", progress=False)
        assert metrics(tmp_path / method / "cluster") == metrics(tmp_path / method / "local"), method
    ray.init(address=two_nodes, logging_level="ERROR", log_to_driver=False)
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    from pfedkit.data.federated import build_federated
    from pfedkit.engine.simulation import make_method
    fed = build_federated(local)
    with RayExecutor(make_method(local, fed), fed, 2, address=two_nodes) as executor:
        assert len({where["node"] for where in executor.placement}) == 2  # one actor on each node
