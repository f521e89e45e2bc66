"""The Ray backend on a cluster of two nodes on this machine (`ray start --head`, then `ray start --address`): the
work spreads over both nodes and the run ends with the local backend's metrics."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
START_S = 120
REPO = Path(__file__).resolve().parents[1]


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
        head = ray_cli(
            "start",
            "--head",
            f"--port={address.split(':')[1]}",
            "--num-cpus=1",
            "--include-dashboard=false",
            "--disable-usage-stats",
            env=env,
        )
        assert head.returncode == 0, head.stderr[-2000:]
        node = ray_cli("start", f"--address={address}", "--num-cpus=1", env=env)
        assert node.returncode == 0, node.stderr[-2000:]
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        ray_cli("stop", "--force", env=env)


# The driver runs in a process of its own: Ray caches settings in a process that ran it before (test_ray.py's local
# Ray leaves RAY_AUTH_MODE=token behind), and a cluster's driver should not inherit them.
DRIVER = """
import json, sys
sys.path.insert(0, {repo!r})
import ray
from pfedkit.data.federated import build_federated
from pfedkit.engine.simulation import make_method, simulate
from pfedkit.ray.executor import RayExecutor
from tests.test_engine import synthetic
from tests.test_ray import metrics
from pathlib import Path
address, out = sys.argv[1], Path(sys.argv[2])
same = {{}}
for method in ("fedavg", "fedper"):
    local = synthetic(method={{"name": method}}, train={{"rounds": 3}}, run={{"workers": 2}})
    simulate(local, out / method / "local", progress=False)
    on_cluster = synthetic(method={{"name": method}}, train={{"rounds": 3}},
                           run={{"workers": 2, "backend": "ray", "ray_address": address}})
    simulate(on_cluster, out / method / "cluster", progress=False)
    same[method] = metrics(out / method / "cluster") == metrics(out / method / "local")
fed = build_federated(local)
with RayExecutor(make_method(local, fed), fed, 2, address=address) as executor:
    nodes = len({{where["node"] for where in executor.placement}})
    alive = len([n for n in ray.nodes() if n["Alive"]])
print(json.dumps({{"same": same, "actor_nodes": nodes, "alive_nodes": alive}}))
"""


@pytest.mark.slow
def test_two_nodes_spread_the_work_and_end_with_the_local_metrics(tmp_path, two_nodes):
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_DISABLE_USAGE_STATS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", DRIVER.format(repo=str(REPO)), two_nodes, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["same"] == {"fedavg": True, "fedper": True}  # the same metrics as the local backend
    assert got["alive_nodes"] == 2 and got["actor_nodes"] == 2  # one actor on each node
