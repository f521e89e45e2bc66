"""The experiment pipeline: a set of run folders with their validated configs, checked, then run to their ends.

`reproduce` (a paper's table) and `compare` (a one-column suite of the given config) both expand into run folders
and configs (reproduce.run_cells) and run them here (run_configs).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

from pfedkit.config import Config, merge
from pfedkit.data.federated import build_federated
from pfedkit.engine.divergence import DIVERGED, Diverged
from pfedkit.engine.store import CHECKPOINT
from pfedkit.errors import ConfigError
from pfedkit.experiments.runs import run_experiment
from pfedkit.registry import build_config, read_saved_config, run_differences


def method_config(base: dict[str, Any], method: str, seed: int) -> Config:
    """The base config with `method.name` set; the base's hyper-parameters apply only to the method it names."""
    given = base.get("method", {})
    section = {**given, "name": method} if given.get("name") == method else {"name": method}
    return build_config(merge({k: v for k, v in base.items() if k != "method"}, {"method": section, "run": {"seed": seed}}))


def config_changes(saved: Path, config: Config) -> list[str]:
    """What differs between the config a run folder was made with and `config` ("key: old -> new")."""
    try:
        old = read_saved_config(saved)
    except ConfigError as err:
        return [f"its config.toml no longer loads ({str(err).splitlines()[0]})"]
    return run_differences(old, config)


def run_folder(out: Path, folder: str, seed: int) -> Path:
    return out / folder / f"seed{seed}"


def check_run_folders(runs: dict[Path, Config], resume: bool) -> None:
    """Before anything trains: with resume, every run folder already there must hold this very config (a finished
    run is reused, an unfinished one continued); without resume, none may hold a run."""
    problems = []
    for run_dir, config in runs.items():
        saved = run_dir / "config.toml"
        if not saved.exists():
            continue
        if not resume:
            problems.append(f"{run_dir} already holds a run")
        elif changes := config_changes(saved, config):
            problems.append(f"{run_dir} was run with another config ({'; '.join(changes[:4])}"
                            f"{'; ...' if len(changes) > 4 else ''})")
    if problems:
        fix = ("delete these folders to run them afresh, or pass another --out" if resume
               else "pass --resume to continue them, or choose another --out")
        shown = "\n  ".join(problems[:10]) + (f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else "")
        raise ConfigError(f"{len(problems)} run folder(s) do not match this run:\n  {shown}\n{fix}")


def data_identity(config: Config) -> str:
    """What a run's FederatedDataset depends on: runs that agree on it share one (the partition is seeded)."""
    return json.dumps([config.data.model_dump(mode="json", exclude={"checksum"}), config.partition.model_dump(mode="json"),
                       config.eval.protocol, config.eval.validation, config.proxy.model_dump(mode="json"),
                       config.run.seed, config.train.batch_size], sort_keys=True)  # the batch size sets PFLlib's minimum client size


def run_configs(runs: dict[Path, Config], *, resume: bool, progress: bool = True,
                log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> dict[Path, dict[str, Any]]:
    """The one place runs are carried out, for `compare` and `reproduce`: each folder's (already validated) config run
    in order, a finished run's summary reused and an unfinished one resumed (with `resume`), a diverged one reported
    as {"diverged": ...} and not run again; consecutive runs on the same data share it."""
    summaries: dict[Path, dict[str, Any]] = {}
    fed, fed_key = None, None
    for run_dir, cfg in runs.items():
        if resume and (run_dir / "summary.json").exists():
            summaries[run_dir] = json.loads((run_dir / "summary.json").read_text())
            continue
        if resume and (run_dir / DIVERGED).exists():  # the same config diverges the same way again
            summaries[run_dir] = {"diverged": json.loads((run_dir / DIVERGED).read_text())}
            log(f"{run_dir} diverged in round {summaries[run_dir]['diverged']['round']} (delete the folder to run it again)")
            continue
        if data_identity(cfg) != fed_key:
            fed, fed_key = build_federated(cfg), data_identity(cfg)
        try:
            summaries[run_dir] = run_experiment(cfg, run_dir, resume=resume and (run_dir / CHECKPOINT).exists(),
                                                progress=progress, fed=fed)
        except Diverged as err:  # one cell's divergence is its result; the other cells still run
            log(f"{run_dir}: {err}")
            summaries[run_dir] = {"diverged": err.record()}
    return summaries
