"""One run as a user asks for it: the engine's simulation, then the run folder's plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

from pfedkit.config import Config
from pfedkit.data.federated import FederatedDataset
from pfedkit.engine.simulation import RoundObserver, RunOptions, simulate
from pfedkit.engine.together import Member
from pfedkit.io import read_csv
from pfedkit.reports.plots import point_curves, save_curves
from pfedkit.tracking import Trackers


def run_experiment(
    config: Config,
    out: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    fed: Optional[FederatedDataset] = None,
    observers: Sequence[RoundObserver] = (),
    force: bool = False,
    together: Optional[Member] = None,
    accept_code_change: bool = False,
) -> dict[str, Any]:
    """Run `config` into `out` (resuming it with `resume`), draw `curves.png`, return the summary. `observers` see
    every round's metrics row (a tuner's pruning); the trackers `run.log_to` names see them too. `force`: write into
    an --out that holds files pfedkit did not write. `together`: its place in a group of runs trained as one cohort."""
    trackers = Trackers(config, Path(out))
    options = RunOptions(resume, progress, (trackers, *observers), force, fed, together, accept_code_change)
    summary, curves = None, None
    try:
        summary = simulate(config, out, options)
        curves = draw_run_curves(Path(out), config)
    finally:
        trackers.close(summary, curves)
    return summary


def draw_run_curves(out: Path, config: Config) -> Path:
    return save_curves(
        point_curves(config.method.name, read_csv(out / "metrics.csv"), config.eval.point),
        out / "curves.png",
        title=f"{config.method.name} on {config.data.dataset}",
    )
