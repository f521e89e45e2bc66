"""The experiment pipeline: a set of run folders with their validated configs, checked, then run to their ends.

`reproduce` (a paper's table) and `compare` (a one-column suite of the given config) both expand into run folders
and configs (reproduce.run_cells) and run them here (run_configs).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from pfedkit.config import Config, merge, parse_override
from pfedkit.data.federated import build_federated
from pfedkit.data.sources import content_checksum, load_dataset
from pfedkit.engine.divergence import Diverged
from pfedkit.engine.placement import placement
from pfedkit.engine.store import CHECKPOINT
from pfedkit.errors import ConfigError, DataError
from pfedkit.experiments.runs import run_experiment
from pfedkit.io import read_json
from pfedkit.records import DIVERGED
from pfedkit.registry import (
    build_config,
    continues,
    method_class,
    method_source,
    read_saved_config,
    run_differences,
)


def method_config(base: dict[str, Any], method: str, seed: int) -> Config:
    """The base config with `method.name` set; the base's hyper-parameters apply only to the method it names, its
    method.module to every row (the module may define several of the methods compared)."""
    given = base.get("method", {})
    module = {"module": given["module"]} if given.get("module") else {}
    section = {**given, "name": method} if given.get("name") == method else {"name": method, **module}
    return build_config(
        merge({k: v for k, v in base.items() if k != "method"}, {"method": section, "run": {"seed": seed}})
    )


def check_method_overrides(raw: dict[str, Any], overrides: Sequence[str], methods: Sequence[str]) -> None:
    """A `--set method.KEY=...` reaches only the config's own method (method_config): refuse one that no method of
    this command runs, rather than train without it."""
    named = raw.get("method", {}).get("name")
    paths = [parse_override(o)[0] for o in overrides]  # the overrides' own parser: keys as apply_overrides sees them
    lost = [".".join(p) for p in paths if p[0] == "method" and p[1] not in ("name", "module", "source")]
    if lost and named not in methods:
        raise ConfigError(
            f"--set {', '.join(lost)} sets the hyper-parameters of the config's method ({named or 'none named'}), "
            f"which is not among those run ({', '.join(methods)}); add --set method.name=<the method they are for>"
        )


def config_changes(saved: Path, config: Config) -> list[str]:
    """What differs between the config a run folder was made with and `config` ("key: old -> new"), nothing when
    `config` only carries that run on for more rounds (it resumes into it)."""
    try:
        old = read_saved_config(saved)
    except ConfigError as err:
        return [f"its config.toml no longer loads ({str(err).splitlines()[0]})"]
    changes = run_differences(old, with_source(config))
    return [] if continues(old, config, changes) else changes


def with_source(config: Config) -> Config:
    """A copy stating the method's code as it is now (method_source), unless the config states it: the code a run
    would resume or be reused with, compared with the code a saved run recorded."""
    current = config.model_copy(deep=True)
    current.method.source = config.method.source or method_source(config)
    return current


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
            problems.append(
                f"{run_dir} was run with another config ({'; '.join(changes[:4])}{'; ...' if len(changes) > 4 else ''})"
            )
    if problems:
        fix = (
            "delete these folders to run them afresh, or pass another --out"
            if resume
            else "pass --resume to continue them, or choose another --out"
        )
        shown = "\n  ".join(problems[:10]) + (f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else "")
        raise ConfigError(f"{len(problems)} run folder(s) do not match this run:\n  {shown}\n{fix}")


def data_identity(config: Config) -> str:
    """What a run's FederatedDataset depends on: runs that agree on it share one (the partition is seeded)."""
    return json.dumps(
        [
            config.data.model_dump(mode="json", exclude={"checksum"}),
            config.partition.model_dump(mode="json"),
            config.eval.protocol,
            config.eval.validation,
            config.proxy.model_dump(mode="json"),
            config.run.seed,
            config.train.batch_size,
        ],
        sort_keys=True,
    )  # the batch size sets PFLlib's minimum client size


def run_configs(
    runs: dict[Path, Config],
    *,
    resume: bool,
    progress: bool = True,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> dict[Path, dict[str, Any]]:
    """The one place runs are carried out, for `compare` and `reproduce`: each folder's (already validated) config run
    in order, a finished run's summary reused and an unfinished one resumed (with `resume`), a diverged one reported
    as {"diverged": ...} and not run again; consecutive runs on the same data share it. Runs that differ only in seed,
    repeat, train.lr or packable hyper-parameters and take the cohort path train as one cohort (`run.together`), each
    still a run of its own."""
    summaries: dict[Path, dict[str, Any]] = {}
    todo: dict[Path, Config] = {}
    checksums: dict[str, Optional[str]] = {}  # the data as they are now, by what loads them
    for run_dir, cfg in runs.items():
        if resume and (run_dir / "summary.json").exists():
            summaries[run_dir] = read_json(run_dir / "summary.json", "summary")
            check_reused_data(run_dir, cfg, summaries[run_dir], checksums, log)
            continue
        if resume and (run_dir / DIVERGED).exists():  # the same config diverges the same way again
            summaries[run_dir] = {"diverged": json.loads((run_dir / DIVERGED).read_text())}
            log(
                f"{run_dir} diverged in round {summaries[run_dir]['diverged']['round']} "
                "(delete the folder to run it again)"
            )
            continue
        if resume and not (run_dir / CHECKPOINT).exists() and (run_dir / "metrics.csv").exists():
            log(f"{run_dir} was cut off before its first checkpoint; running it again from round 0")
            (run_dir / CONTINUED).unlink(missing_ok=True)  # without the checkpoint it no longer carries anything on
        todo[run_dir] = cfg
    fed, fed_key = None, None
    for batch in together_batches(todo):
        if len(batch) > 1:
            log(f"training {len(batch)} runs as one cohort: {', '.join(str(d) for d in batch)}")
            summaries.update(run_group(batch, resume=resume, progress=progress, log=log))
            continue
        [(run_dir, cfg)] = batch.items()
        if data_identity(cfg) != fed_key:
            fed, fed_key = build_federated(cfg), data_identity(cfg)
        try:  # resuming a folder without a checkpoint starts it afresh (its config was checked to be this one)
            summaries[run_dir] = run_experiment(cfg, run_dir, resume=resume, progress=progress, fed=fed)
        except Diverged as err:  # one cell's divergence is its result; the other cells still run
            log(f"{run_dir}: {err}")
            summaries[run_dir] = {"diverged": err.record()}
    return {run_dir: summaries[run_dir] for run_dir in runs}


def check_reused_data(
    run_dir: Path,
    config: Config,
    summary: dict[str, Any],
    checksums: dict[str, Optional[str]],
    log: Callable[[str], None],
) -> None:
    """A finished run is reused only on the data it ran on: averaged beside a new seed on replaced data, its number
    would mix two data sets without a word. Data that cannot be loaded here leave the run unverified, said once."""
    ran_on = summary.get("data_checksum")
    if not ran_on:
        return
    key = json.dumps(config.data.model_dump(mode="json", include={"dataset", "root", "options"}), sort_keys=True)
    if key not in checksums:
        try:
            source = load_dataset(config.data.dataset, config.data.root, **config.data.options)
            checksums[key] = content_checksum(source)
        except DataError as err:
            checksums[key] = None
            log(f"the finished runs on {config.data.dataset} are reused unverified: {err}")
    now = checksums[key]
    if now is not None and now != ran_on:
        raise ConfigError(
            f"{run_dir} finished on other data than {config.data.dataset} holds now (it ran on {ran_on}, the data "
            f"here are {now}); point --data-root at the data it ran on, or delete that folder (or choose another "
            "--out) to run it on these"
        )


def together_key(config: Config) -> Optional[str]:
    """Runs with the same key train as one cohort: the same config but the seed, the repeat, train.lr (each client
    steps at its run's rate) and the method's packable hyper-parameters, on the cohort path; None for a run that
    trains alone."""
    if not placement(config.run).together:
        return None
    method = method_class(config.method.name, config.method.module)
    if not method.capabilities().plan:  # one client at a time
        return None
    raw = config.to_dict()
    for key in ("seed", "repeat", "log_to"):
        raw["run"].pop(key, None)
    raw.get("train", {}).pop("lr", None)
    for name in method.packable:
        raw["method"].pop(name, None)
    raw["pack_key"] = repr(method.pack_key(method.validate_params(config.method_params())))
    return json.dumps(raw, sort_keys=True, default=str)


def together_batches(runs: dict[Path, Config]) -> list[dict[Path, Config]]:
    """The runs in order, those with one together_key gathered where the first of them stands."""
    batches: list[dict[Path, Config]] = []
    by_key: dict[str, dict[Path, Config]] = {}
    for run_dir, cfg in runs.items():
        key = together_key(cfg)
        if key is not None and key in by_key:
            by_key[key][run_dir] = cfg
            continue
        batch = {run_dir: cfg}
        batches.append(batch)
        if key is not None:
            by_key[key] = batch
    return batches


def run_group(
    runs: dict[Path, Config], *, resume: bool, progress: bool, log: Callable[[str], None]
) -> dict[Path, dict[str, Any]]:
    """Runs with one together_key as one cohort (engine/together.py); a diverged one is its result, as alone."""
    from pfedkit.engine.together import run_together

    feds = {run_dir: build_federated(cfg) for run_dir, cfg in runs.items()}  # each seed partitions its own

    def start(run_dir: Path, cfg: Config, member: Any) -> dict[str, Any]:
        return run_experiment(cfg, run_dir, resume=resume, progress=progress, fed=feds[run_dir], together=member)

    summaries: dict[Path, dict[str, Any]] = {}
    failure: Optional[BaseException] = None
    for run_dir, outcome in run_together(runs, start).items():
        if isinstance(outcome, Diverged):
            log(f"{run_dir}: {outcome}")
            summaries[run_dir] = {"diverged": outcome.record()}
        elif isinstance(outcome, BaseException):
            failure = failure or outcome
        else:
            summaries[run_dir] = outcome
    if failure is not None:
        raise failure
    return summaries


REUSED = "reused.json"  # in a run folder copied from an identical finished run: where it came from
CONTINUED = "continued.json"  # in a run folder that carries on a copy of a shorter finished run: where it came from
NOT_COPIED = (CHECKPOINT, ".pfedkit.lock", ".pfedkit-owner.json")  # a finished run's leftovers, not its results
# what a carried-on run redoes: its ending (summary and clients.csv rewritten at the new end), the copies' records
NOT_CARRIED_ON = (
    ".pfedkit.lock",
    ".pfedkit-owner.json",
    "summary.json",
    "clients.csv",
    "curves.png",
    REUSED,
    CONTINUED,
)


def _quick_key(config: Config) -> tuple:
    """Keys that rule most candidates out before the full comparison (the rounds are compared there)."""
    return config.data.dataset, config.run.seed, config.method.name


RUN_DEPTHS = ("*/seed*", "*/*/seed*", "*/*/*/seed*")  # <row>/seedN under a column, a suite, or a folder of suites


def finished_runs_under(root: Path) -> dict[tuple, list[tuple[Path, Config]]]:
    """Every finished run folder (summary.json beside a config.toml that loads) at a suite's depths under `root`,
    with its config, by _quick_key; the walk stays shallow, so any folder can be searched."""
    index: dict[tuple, list[tuple[Path, Config]]] = {}
    for summary in sorted(s for depth in RUN_DEPTHS for s in root.glob(f"{depth}/summary.json")):
        try:
            saved = read_saved_config(summary.parent / "config.toml")
        except (ConfigError, OSError):  # no config, or one that no longer loads: not a candidate
            continue
        index.setdefault(_quick_key(saved), []).append((summary.parent, saved))
    return index


def reuse_identical_runs(
    runs: dict[Path, Config], search: Path, log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
) -> list[Path]:
    """Each run folder not yet started whose config a finished run under `search` already ran (the same config at
    its values, as resume judges it: placement such as data.root or workers aside) gets a copy of that run instead
    of training it again, with reused.json naming the source. Failing that, a finished run of the same config for
    fewer rounds that kept its checkpoint is copied with it, and the run carries it on (continued.json names it).
    Runs are seeded and deterministic, so either copy is what training from round 0 would give (with the same build:
    another can differ in float rounding, about 0.04 points on a 100-round CIFAR-10 cell). Returns the folders
    filled."""
    todo = {d: c for d, c in runs.items() if not (d / "config.toml").exists() and not (d / DIVERGED).exists()}
    if not todo or not Path(search).is_dir():
        return []
    index = finished_runs_under(Path(search))
    filled = []
    for run_dir, config in todo.items():
        if run_dir.exists() and any(run_dir.iterdir()):  # something else is there: leave it to the run
            continue
        stated = with_source(config)  # a finished run of other method code is no copy of this one
        candidates = [(d, saved, run_differences(saved, stated)) for d, saved in index.get(_quick_key(config), [])]
        source = next((d for d, _, changes in candidates if not changes), None)
        if source is not None:
            record, leave_out = REUSED, NOT_COPIED
            why = (
                "a finished run with the same config at its values; runs are seeded, so training again gives it "
                "(another build may differ in float rounding, which moves a cell by a few hundredths of a point)"
            )
        else:
            shorter = [
                (saved.train.rounds, d)
                for d, saved, changes in candidates
                if (d / CHECKPOINT).exists() and continues(saved, config, changes)
            ]
            if not shorter:
                continue
            rounds, source = max(shorter)
            record, leave_out = CONTINUED, NOT_CARRIED_ON
            why = (
                f"its first {rounds} rounds are a finished {rounds}-round run with the same config otherwise; "
                "runs are seeded, so this run carries that one on from its checkpoint"
            )
        staging = run_dir.with_name(run_dir.name + ".copying")  # a copy cut off half-way is never a finished run
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(source, staging, ignore=shutil.ignore_patterns(*leave_out))
        (staging / record).write_text(
            json.dumps(
                {
                    "from": str(source.resolve().relative_to(Path(search).resolve())),
                    "summary_sha256": hashlib.sha256((source / "summary.json").read_bytes()).hexdigest(),
                    "why": why,
                },
                indent=2,
            )
            + "\n"
        )
        if run_dir.exists():
            run_dir.rmdir()  # an empty folder (a config.toml would have excluded it)
        os.replace(staging, run_dir)
        filled.append(run_dir)
        log(f"{run_dir}: copied from {source} ({'the same config, already finished' if record == REUSED else why})")
    return filled
