"""Where a run's work goes, decided once from its `run` section (`placement(run)`), and read from here by the
simulation, the pipeline and the summary:

- the **driver device**: where the data live, the server aggregates and a cohort trains (`run.device` when the whole
  run is in this process; the CPU when GPU-sharing worker processes or Ray actors compute);
- the **executor**: what trains the clients a cohort does not (`run.backend`: "local", this machine's worker
  processes, or "ray", a cluster's actors), with how many workers and on which device;
- the **cohort**: whether a round's clients train batched in this process (`run.cohort`), and how its steps run;
- **together**: whether runs that differ only in seed, repeat, train.lr or a method's packable hyper-parameters may
  share one cohort (`run.together`).

"Backend" is the executor's key in the config (`run.backend`); Flower nodes are a deployment of their own
(`pfedkit.flower`), not an executor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from pfedkit.errors import ConfigError


@dataclass(frozen=True)
class Placement:
    driver: torch.device  # the data, the aggregation, a cohort
    executor: str  # run.backend: "local" or "ray"
    workers: int  # the executor's processes asked for (0: one per core, or as many as fit on a GPU)
    worker_device: str  # where the executor's workers compute
    gpus_per_worker: float
    cohort: bool  # a round's clients trained (and evaluated) batched in this process
    step_mode: str  # how a cohort runs its steps: "eager", "cuda-graph"
    together: bool  # runs differing only in seed may train as one cohort

    def describe(self) -> str:
        """One line for a run's record: the path a run's clients take, and where."""
        executor = f"{self.executor} executor" + (f" on {self.worker_device}" if self.worker_device != "cpu" else "")
        if self.cohort:
            return f"cohort on {self.driver} (steps {self.step_mode}); clients it cannot batch: {executor}"
        return executor


def placement(run: Any) -> Placement:
    """The placement `run` (a config's run section) asks for; a combination that cannot work is a ConfigError."""
    driver = driver_device(run)
    cohort = cohort_path(run, driver)
    return Placement(
        driver=driver,
        executor=run.backend,
        # the whole run on one GPU in this process: one worker, as processes cannot share its CUDA context
        workers=run.workers if driver.type == "cpu" else 1,
        worker_device=run.device if run.gpus_per_worker or run.backend == "ray" else "cpu",
        gpus_per_worker=run.gpus_per_worker,
        cohort=cohort,
        step_mode=cohort_step_mode(run, driver) if cohort else "eager",
        together=cohort and run.together != "off",
    )


def run_device(name: str) -> torch.device:
    """The run's device; a GPU this torch cannot use is a configuration error, raised before any training."""
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"run.device = {name!r}, but this torch ({torch.__version__}) sees no CUDA device; run on a "
                'machine with an NVIDIA GPU and a CUDA build of torch, or set run.device = "cpu"'
            )
        if (device.index or 0) >= torch.cuda.device_count():
            raise ConfigError(
                f"run.device = {name!r}, but this machine has {torch.cuda.device_count()} CUDA device(s); "
                f"use cuda:0 to cuda:{torch.cuda.device_count() - 1}"
            )
    return device


def driver_device(run: Any) -> torch.device:
    """Where the driver keeps the data and aggregates: run.device when the whole simulation runs in this process on one
    GPU; else the CPU, and the workers (GPU-sharing processes or Ray actors) compute on run.device."""
    on_gpu = run.device != "cpu"
    if run.backend == "ray":
        if on_gpu and not run.gpus_per_worker:
            raise ConfigError(
                f"run.device = {run.device!r} on Ray needs run.gpus_per_worker > 0 (e.g. 0.25), so that Ray "
                'gives each actor a share of a GPU; or set run.device = "cpu"'
            )
        return torch.device("cpu")
    device = run_device(run.device)
    if run.gpus_per_worker:
        if not on_gpu:
            raise ConfigError(
                f"run.gpus_per_worker = {run.gpus_per_worker} shares a GPU among worker processes, but "
                'run.device = "cpu"; set run.device = "cuda", or leave run.gpus_per_worker at 0'
            )
        return torch.device("cpu")
    return device


def cohort_path(run: Any, device: torch.device) -> bool:
    """Whether a run trains in cohorts: run.cohort "on", or "auto" on a GPU with the simulation in one process."""
    if run.cohort == "auto":
        return device.type == "cuda" and run.backend == "local" and not run.gpus_per_worker
    return run.cohort == "on"


def cohort_step_mode(run: Any, device: torch.device) -> str:
    """How the cohort runs its steps (run.cohort_step): "auto" captures them as CUDA graphs on a GPU."""
    if run.cohort_step == "auto":
        return "cuda-graph" if device.type == "cuda" else "eager"
    if run.cohort_step == "cuda-graph" and device.type != "cuda":
        raise ConfigError(
            f"run.cohort_step = 'cuda-graph' needs a CUDA device, and run.device is {run.device!r}; "
            "use 'auto' (graphs on a GPU, eager elsewhere) or 'eager'"
        )
    return run.cohort_step
