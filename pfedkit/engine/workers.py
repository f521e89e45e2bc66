"""Client work (local updates, evaluations) in-process or over a pool of single-threaded worker processes.

On a CPU, one process per core with one thread each beats one process with many threads at small batches:
per-step overhead runs in parallel and no thread sits idle on a 10-sample convolution.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import pickle
import signal
import sys
import tempfile
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Optional

import numpy as np
import torch

from pfedkit.engine.client_step import evaluate_client
from pfedkit.engine.lifeline import die_with_parent
from pfedkit.engine.plans import train_client
from pfedkit.errors import PfedkitError
from pfedkit.methods.base import Method
from pfedkit.records import State

IN_FLIGHT_PER_WORKER = 2  # tasks out per worker: one running, one queued behind it

# Set in the parent just before the pool forks, so workers inherit the method and the data without copies.
_SHARED: Optional[tuple[Method, Any]] = None
_DEVICE = torch.device("cpu")  # where a worker process computes


@dataclass
class Task:
    kind: str  # "train" or "eval"
    cid: int
    round: int
    payload: State
    client: State | Callable[[], State]  # or a function that reads it when the task goes out (state on disk)
    cost: int  # samples it touches, to hand out the largest first
    evaluate_after: bool = False  # a training task also evaluates the model it leaves (eval.point = "after-local")


def pack(state: State) -> dict[str, Any]:
    """Tensors as numpy arrays (from the GPU too), so they travel by plain pickling rather than torch's shared-memory
    handles."""
    return {k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v for k, v in state.items()}


def unpack(state: dict[str, Any], device: Optional[torch.device] = None) -> State:
    """Tensors again, on the device of the process that takes them."""
    return {k: torch.from_numpy(v).to(device) if isinstance(v, np.ndarray) else v for k, v in state.items()}


def prepared(task: Task, packed: bool = True) -> Task:
    """A copy of the task with its client state read (if it was left to be read late) and, to travel, packed; the
    caller's task list keeps only the reader, so a state read for one task is freed once that task is done."""
    client = task.client() if callable(task.client) else task.client
    if packed:
        return replace(task, payload=pack(task.payload), client=pack(client))
    return replace(task, client=client)


def run_task(method: Method, fed: Any, task: Task) -> tuple[int, Any]:
    """(cid, evaluation) for an "eval" task; (cid, (reply, new state, evaluation after the update or None)) for
    a "train" task: the client step of engine/client_step.py."""
    data = fed.client(task.cid)
    if task.kind == "train":
        return task.cid, train_client(method, data, task.client, task.payload, task.round, task.evaluate_after)
    return task.cid, evaluate_client(method, data, task.client, task.payload, task.round)


def settle_on(device: torch.device, fed: Any) -> Any:
    """Make `device` where this worker process computes: the models the method builds here go there, and the data."""
    if device.type != "cpu":
        torch.set_default_device(device)
    return fed.to(device)


def method_files(method: Method) -> list[str]:
    """The file of a method of your own (imported from method.module under a name of its own), which a process
    started afresh imports the same way before it reads the pickled method; none for pfedkit's own."""
    module = sys.modules.get(type(method).__module__)
    file = getattr(module, "__file__", None)
    return [file] if getattr(module, "__pfedkit_digest__", None) and file else []


@contextmanager
def one_thread() -> Iterator[None]:
    """torch on one CPU thread inside, as every worker process runs: a sum split over threads rounds otherwise."""
    before = torch.get_num_threads()
    if before != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if before != 1:
            torch.set_num_threads(before)


def _worker_init(parent_pid: int, shared: Optional[str] = None, device: str = "cpu", files: list[str] = ()) -> None:
    """A forked worker finds the method and data inherited; a spawned one (a GPU's) reads them pickled, on the CPU,
    from the file `shared`, and puts the data and every model it builds on its device."""
    global _SHARED, _DEVICE
    die_with_parent(parent_pid)  # a killed run leaves no worker behind
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle: it stops the workers
    torch.set_num_threads(1)
    if shared is not None:
        from pfedkit.registry import import_method_module

        for file in files:  # the method's own module, under the name it was pickled with
            import_method_module(file)
        _DEVICE = torch.device(device)
        with open(shared, "rb") as file:
            method, fed = pickle.load(file)
        _SHARED = (method, settle_on(_DEVICE, fed))


def _worker_run(task: Task) -> tuple[int, Any, float]:
    method, fed = _SHARED
    start = time.perf_counter()
    task.payload, task.client = unpack(task.payload, _DEVICE), unpack(task.client, _DEVICE)
    cid, result = run_task(method, fed, task)
    if task.kind == "train":
        result = (pack(result[0]), pack(result[1]), result[2])
    return cid, result, time.perf_counter() - start


# Executors by run.backend; an optional backend's package registers itself here when imported (pfedkit.ray).
BACKENDS: dict[str, Callable[..., "Executor"]] = {}
OPTIONAL_BACKENDS = {"ray": ("pfedkit.ray", "ray")}  # backend -> (its module, the pip extra it needs)


def make_executor(backend: str, method: Method, fed: Any, workers: int, **options: Any) -> "Executor":
    """The executor run.backend names; an optional one is imported only when a run asks for it (the core never
    imports Ray)."""
    if backend not in BACKENDS and backend in OPTIONAL_BACKENDS:
        module, extra = OPTIONAL_BACKENDS[backend]
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise PfedkitError(
                f"run.backend = {backend!r} needs the {extra} extra ({err}); install it with "
                f'pip install -e ".[{extra}]", or set run.backend = "local"'
            ) from None
    return BACKENDS[backend](method, fed, workers, **options)


def submission_order(tasks: list[Task], in_order: bool) -> list[Task]:
    """Client order, or largest first (which balances the workers)."""
    return sorted(tasks, key=(lambda t: t.cid) if in_order else (lambda t: (-t.cost, t.cid)))


def default_workers(requested: int) -> int:
    return requested if requested > 0 else max(1, min(os.cpu_count() or 1, 8))


def workers_per_gpu(requested: int, gpus_per_worker: float) -> int:
    """run.workers, else as many as fit on one GPU at gpus_per_worker each (0.25: four)."""
    return requested if requested > 0 else max(1, int(1 / gpus_per_worker + 1e-9))


class Executor:
    """Runs tasks and yields (cid, result) as they finish; the order of results never changes a number.

    On the CPU, `workers` forked processes. With a `worker_device` other than the CPU (run.gpus_per_worker > 0),
    processes started afresh ("spawn": CUDA does not survive a fork) that share that GPU, each with its own copy of the
    data.
    """

    def __init__(
        self,
        method: Method,
        fed: Any,
        workers: int,
        worker_device: str = "cpu",
        gpus_per_worker: float = 0.0,
        start_method: str = "",
        **options: Any,
    ):
        global _SHARED
        self.method, self.fed = method, fed
        on_gpu = torch.device(worker_device).type != "cpu"
        self.workers = workers_per_gpu(workers, gpus_per_worker) if on_gpu else default_workers(workers)
        self.pool, self.shared_file, self.worker_device = None, None, worker_device
        start_method = start_method or ("spawn" if on_gpu else "fork")
        if self.workers > 1 or on_gpu:
            if start_method == "fork":
                _SHARED = (method, fed)
                initargs: tuple = (os.getpid(),)
            else:
                # as plain bytes: handed over as objects, their tensors would be moved into shared memory under the
                # feet of tasks already packed from them (seen: NaN replies); in a file, not the spawn pipe, which
                # CPython keeps open while it writes: a worker dying before it read them all left the driver hung
                with tempfile.NamedTemporaryFile("wb", prefix="pfedkit-workers-", suffix=".pkl", delete=False) as file:
                    try:
                        pickle.dump((method, fed), file)
                    except BaseException:  # (an unpicklable method) no file left behind
                        os.unlink(file.name)
                        raise
                self.shared_file = file.name
                initargs = (os.getpid(), file.name, worker_device, method_files(method))
            self.pool = ProcessPoolExecutor(
                self.workers, mp_context=mp.get_context(start_method), initializer=_worker_init, initargs=initargs
            )

    def describe(self) -> str:
        """Where client work runs, for summary.json and the run's last line."""
        if self.pool is None:
            return "this process (run.workers 1)"
        return f"{self.workers} worker processes" + (f" on {self.worker_device}" if self.worker_device != "cpu" else "")

    def run(self, tasks: list[Task], in_order: bool = False) -> Iterator[tuple[int, Any]]:
        """With `in_order`, tasks go out in client order (for a reply fold), else largest first. A few tasks per
        worker are out at a time, so the driver reads and holds only their client states."""
        waiting = deque(submission_order(tasks, in_order))
        if self.pool is None:
            while waiting:
                with one_thread():  # as in a worker process: the numbers must not depend on run.workers or threads
                    done = run_task(self.method, self.fed, prepared(waiting.popleft(), packed=False))
                yield done
            return
        kinds = {t.kind for t in tasks}
        assert len(kinds) <= 1, "one kind of task per call"
        first = waiting[0] if waiting else None
        out: set = set()
        try:
            while waiting or out:
                while waiting and len(out) < IN_FLIGHT_PER_WORKER * self.workers:
                    out.add(self.pool.submit(_worker_run, prepared(waiting.popleft())))
                done, out = wait(out, return_when=FIRST_COMPLETED)
                for future in done:
                    cid, result, _ = future.result()
                    if kinds == {"train"}:
                        result = (unpack(result[0]), unpack(result[1]), result[2])
                    yield cid, result
        except BrokenProcessPool:  # a worker was killed (often by the out-of-memory killer), not a Python error
            raise PfedkitError(
                f"a worker process died during round {first.round} ({first.kind}); its error, if it had one, is "
                "printed above; resume the run with --resume, and lower run.workers if memory is short"
            ) from None

    def close(self, abandon: bool = False) -> None:
        """Shut the pool down: waiting for its workers, or (`abandon`: an interrupt, Ctrl-C) stopping them at once,
        as waiting on a pool an interrupt cut off mid-submit can wait forever."""
        if self.pool is not None:
            pool, self.pool = self.pool, None
            if abandon:
                for process in list(getattr(pool, "_processes", {}).values()):
                    process.terminate()
                pool.shutdown(wait=False, cancel_futures=True)
            else:
                pool.shutdown(wait=True, cancel_futures=True)
        if self.shared_file is not None:  # every worker read it at its start
            os.unlink(self.shared_file)
            self.shared_file = None

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        self.close(abandon=kind is not None and not issubclass(kind, Exception))  # KeyboardInterrupt, SystemExit


BACKENDS["local"] = Executor
