"""RayExecutor: the engine's Executor interface (run tasks, yield (cid, result) as they finish) on Ray actors."""

from __future__ import annotations

import hashlib
import os
import socket
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import ray
import torch
from ray.exceptions import RayActorError
from ray.util import ActorPool

import pfedkit
from pfedkit.engine.workers import BACKENDS, Task, pack, prepared, run_task, settle_on, submission_order, unpack
from pfedkit.errors import PfedkitError
from pfedkit.methods.base import Method

MAX_ACTORS = 64
RESTARTS = 3  # an actor lost mid-round (killed, node gone) is restarted this often, its task retried on it


@ray.remote
class ClientWorker:
    """One process of the cluster holding the method and the data for the run; it runs tasks one at a time."""

    def __init__(self, method: Method, fed: Any, threads: int, device: str = "cpu"):
        torch.set_num_threads(threads)  # as the local pool's workers: one thread each, so numbers agree
        self.device = torch.device(device)  # on a GPU: the one Ray gave this actor (CUDA_VISIBLE_DEVICES)
        self.method, self.fed = method, settle_on(self.device, fed)

    def run(self, task: Task) -> tuple[int, Any]:
        task.payload, task.client = unpack(task.payload, self.device), unpack(task.client, self.device)
        cid, result = run_task(self.method, self.fed, task)
        if task.kind == "train":
            result = (pack(result[0]), pack(result[1]), result[2])
        return cid, result

    def pid(self) -> int:
        return os.getpid()

    def where(self) -> dict[str, str]:
        """The node this actor runs on and the versions it runs with, checked against the driver's before round 0."""
        return {"node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), **software()}


def software() -> dict[str, str]:
    """pfedkit's version and a digest of its source (an edited checkout keeps its version number), torch's version."""
    digest = hashlib.sha256()
    for path in sorted(Path(pfedkit.__file__).parent.rglob("*.py")):
        digest.update(path.read_bytes())
    return {"pfedkit": f"{pfedkit.__version__} ({digest.hexdigest()[:12]})", "torch": torch.__version__.split("+")[0]}


def owned(state: dict[str, Any]) -> dict[str, Any]:
    """Tensors the driver owns: arrays from Ray's object store are read-only views, and a state may be changed in
    place."""
    return {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in state.items()}


CONNECT_S = 5.0


def reachable(address: str) -> bool:
    """Whether a "host:port" address accepts a connection (Ray itself would retry for minutes); other forms
    ("auto", "ray://...") are left to Ray."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or "://" in address:
        return True
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_S):
            return True
    except OSError:
        return False


def connect(address: str) -> bool:
    """Join the cluster at `address` (else $RAY_ADDRESS, else start a local one); True if this call started Ray."""
    if ray.is_initialized():
        return False
    target = address or os.environ.get("RAY_ADDRESS") or None
    if target and not reachable(target):
        raise PfedkitError(
            f"cannot reach the Ray cluster at {target!r} (nothing answers there within "
            f"{CONNECT_S:.0f} s); start one with `ray start --head`, fix run.ray_address (or RAY_ADDRESS), "
            "or leave both empty to start a local Ray for the run"
        )
    try:
        ray.init(address=target, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        if "uthenticat" in repr(err.__cause__) + str(err):
            raise PfedkitError(
                f"the Ray cluster at {target!r} asks for a token this process lacks; set RAY_AUTH_TOKEN "
                "(or RAY_AUTH_TOKEN_PATH) as on the cluster, or start the cluster with RAY_AUTH_MODE=disabled"
            ) from None
        raise PfedkitError(
            f"cannot reach the Ray cluster at {target!r} ({str(err).splitlines()[0]}); start one with "
            "`ray start --head`, fix run.ray_address (or RAY_ADDRESS), or leave both empty to start a "
            "local Ray for the run"
        ) from None
    return True


def by_value(cls: type) -> None:
    """A method from a user's own module (method.module) travels to the actors whole, by value, so the nodes need not
    have that module; pfedkit's own methods travel by reference as usual."""
    module = sys.modules.get(cls.__module__)
    if module is not None and not cls.__module__.startswith("pfedkit."):
        ray.cloudpickle.register_pickle_by_value(module)


def actor_count(requested: int, gpus_per_worker: float) -> int:
    """run.workers, else one actor per CPU of the cluster (and, with GPUs, as many as their shares allow); a request
    the cluster cannot meet is an error now, not actors waiting forever."""
    resources = ray.cluster_resources()
    cpus, gpus = int(resources.get("CPU", 1)), float(resources.get("GPU", 0))
    if gpus_per_worker and not gpus:
        raise PfedkitError(
            f"run.gpus_per_worker = {gpus_per_worker} asks Ray for GPUs, but the cluster has none; add "
            'nodes with GPUs (ray start --num-gpus N), or set run.gpus_per_worker = 0 and run.device = "cpu"'
        )
    fit = min(cpus, int(gpus / gpus_per_worker + 1e-9)) if gpus_per_worker else cpus
    count = requested if requested > 0 else max(1, min(fit, MAX_ACTORS))
    if count > cpus:
        raise PfedkitError(
            f"run.workers = {count} Ray actors need {count} CPUs, but the cluster has {cpus}; lower "
            "run.workers or add nodes"
        )
    if gpus_per_worker and count * gpus_per_worker > gpus + 1e-9:
        raise PfedkitError(
            f"run.workers = {count} Ray actors at run.gpus_per_worker = {gpus_per_worker} need "
            f"{count * gpus_per_worker:g} GPUs, but the cluster has {gpus:g}; lower either, or add GPUs"
        )
    return count


class RayExecutor:
    """Tasks on `workers` actors (0: one per CPU of the cluster, at most MAX_ACTORS)."""

    def __init__(
        self,
        method: Method,
        fed: Any,
        workers: int,
        address: str = "",
        worker_device: str = "cpu",
        gpus_per_worker: float = 0.0,
        **options: Any,
    ):
        self.started = connect(address)
        try:
            self.workers = actor_count(workers, gpus_per_worker)
            by_value(type(method))
            # sent once, shared by every actor on a node; held for the run so that a restarted actor finds them
            self.refs = (ray.put(method), ray.put(fed))
            worker = ClientWorker.options(
                num_cpus=1, num_gpus=gpus_per_worker, max_restarts=RESTARTS, max_task_retries=RESTARTS
            )
            self.actors = [worker.remote(*self.refs, 1, worker_device) for _ in range(self.workers)]
            self.placement = self.check_actors()  # every actor built before round 0, or a clear error here
        except BaseException:
            self.close()
            raise

    def describe(self) -> str:
        """Where client work runs, for summary.json and the run's last line."""
        nodes = len({where["node"] for where in self.placement})
        return f"Ray: {self.workers} actors on {nodes} node{'s' if nodes > 1 else ''}"

    def check_actors(self) -> list[dict[str, str]]:
        """Where each actor runs; a node without pfedkit, or with another pfedkit or torch than the driver's, is an
        error."""
        try:
            placement = ray.get([a.where.remote() for a in self.actors])
        except (RayActorError, ray.exceptions.RayTaskError) as err:
            raise PfedkitError(
                f"a Ray actor could not be started on the cluster ({str(err).splitlines()[0]}); every node "
                f"needs pfedkit {pfedkit.__version__} and torch {software()['torch']} installed, as on "
                'this machine (pip install -e ".[ray]" there)'
            ) from None
        mine = software()
        for where in placement:
            if {k: where[k] for k in mine} != mine:
                raise PfedkitError(
                    f"node {where['host']} runs pfedkit {where['pfedkit']} with torch {where['torch']}, "
                    f"this driver pfedkit {mine['pfedkit']} with torch {mine['torch']}; the same run "
                    "needs the same code on every node: install this version there"
                )
        return placement

    def run(self, tasks: list[Task], in_order: bool = False) -> Iterator[tuple[int, Any]]:
        ordered = submission_order(tasks, in_order)
        train = bool(ordered) and ordered[0].kind == "train"
        pool = ActorPool(self.actors)
        try:  # a task's client state is read when an actor takes it
            for cid, result in pool.map_unordered(lambda actor, task: actor.run.remote(prepared(task)), ordered):
                yield cid, ((owned(result[0]), owned(result[1]), result[2]) if train else result)
        except RayActorError as err:
            raise PfedkitError(
                f"a Ray actor was lost during round {ordered[0].round} and could not be restarted "
                f"({str(err).splitlines()[0]}); resume the run with --resume"
            ) from None

    def close(self) -> None:
        for actor in getattr(self, "actors", []):
            ray.kill(actor)
        self.actors = []
        if self.started and ray.is_initialized():
            ray.shutdown()
            self.started = False

    def __enter__(self) -> "RayExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


BACKENDS["ray"] = RayExecutor
