"""The Ray backend on a cluster of two nodes on this machine (Ray's own test cluster: a head and a second node, each
its own raylet): the work spreads over both nodes and the run ends with the local backend's metrics."""

from __future__ import annotations

import gc
import json
import os
import shutil
import socket
import subprocess
import sys
from contextlib import contextmanager
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


@contextmanager
def own_cluster(nodes: int = 2):
    """A head and `nodes` - 1 more nodes of one CPU each, started and stopped by Ray's own test cluster
    (`ray.cluster_utils.Cluster`): it ends only the processes it started, never a user's cluster or another test
    run's (`ray stop` would end every Ray process on the machine)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()


@pytest.fixture
def two_nodes(monkeypatch):
    if ray.is_initialized():
        ray.shutdown()
    # a local, short-lived cluster: no token, no usage report
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_DISABLE_USAGE_STATS", "1")
    try:
        with own_cluster() as cluster:
            yield cluster.address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        gc.collect()  # Ray's objects finalized here, not in a later test's forked worker (a segfault in _raylet.so)


def processes_of(cluster) -> list[int]:
    nodes = [cluster.head_node, *cluster.worker_nodes]
    return [p.process.pid for node in nodes for procs in node.all_processes.values() for p in procs]


@pytest.mark.slow
def test_the_tests_cluster_stops_its_own_processes_and_leaves_another_clusters_running(monkeypatch):
    """A user's Ray cluster (or another test run's) on the same machine outlives this file's cluster."""
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_DISABLE_USAGE_STATS", "1")
    with own_cluster(nodes=1) as users:
        theirs = processes_of(users)
        with own_cluster() as ours:
            mine = processes_of(ours)
        assert theirs and all(alive(pid) for pid in theirs)
        assert not any(alive(pid) for pid in mine)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] if Path(f"/proc/{pid}").exists() else ""
    return state not in ("Z", "")


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
