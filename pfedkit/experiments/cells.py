"""A grid of runs: the cells of a suite (columns by rows, each on several seeds) configured, checked and run into
out/<column>/<row>/seed<N>, resuming what ran. `pfedkit compare` runs a grid of one column; `pfedkit reproduce`
(pfedkit/papers/) runs a paper's table and judges its claims on the runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from pfedkit.config import apply_overrides, merge
from pfedkit.errors import ConfigError, DataError
from pfedkit.experiments.pipeline import check_run_folders, method_config, reuse_identical_runs, run_configs, run_folder
from pfedkit.experiments.suite import Suite


def cell_config(
    suite: Suite,
    scale: str,
    column: str,
    row: str,
    overrides: Sequence[str] = (),
    data_root: Optional[str] = None,
    workers: Optional[int] = None,
    out: Path = Path("."),
) -> dict[str, Any]:
    raw = merge(merge(suite.base, suite.scales[scale].changes), suite.columns[column].changes)
    raw = merge(raw, {"method": {"name": row}})
    raw = merge(raw, suite.row_changes.get(row, {}))
    raw = merge(raw, suite.scales[scale].row_changes.get(row, {}))
    raw = with_out(merge(raw, suite.columns[column].row_changes.get(row, {})), Path(out))
    if data_root is not None:
        raw["data"]["root"] = data_root
    if workers is not None:
        raw.setdefault("run", {})["workers"] = workers
    return apply_overrides(raw, list(overrides))


OUT = "{out}/"  # a string value starting so names a file in the suite's output folder


def with_out(value: Any, out: Path) -> Any:
    """`value` with every "{out}/NAME" string made the path of NAME in the suite's output folder. ".." is resolved
    by name: the OS cannot resolve "{out}/../x" while the folder {out} does not exist yet."""
    if isinstance(value, dict):
        return {k: with_out(v, out) for k, v in value.items()}
    if isinstance(value, str) and value.startswith(OUT):
        return os.path.normpath(out / value[len(OUT) :])
    return value


def pretrain_once(
    spec: Mapping[str, Any], out: Path, root: Optional[str], log: Callable[[str], None], device: str = "cpu"
) -> None:
    """The suite's [pretrain] backbone, unless its file is already in the output folder; on the cells' device."""
    from pfedkit.experiments.pretrain import pretrain_backbone

    path = Path(with_out(spec["path"], out))
    if path.exists():
        return
    log(f"pretraining a {spec['model']} backbone on {spec['dataset']} -> {path}")
    result = pretrain_backbone(
        spec["dataset"],
        spec["model"],
        path,
        options=dict(spec.get("options", {})),
        epochs=spec.get("epochs", 2),
        root=root,
        device=device,
    )
    log(f"{spec['dataset']} test accuracy {result['test_acc']:.4f} in {result['seconds']:.0f} s")


def datasets_of(raw: Mapping[str, Any]) -> list[str]:
    proxy = raw.get("proxy", {}).get("dataset")
    return [raw["data"]["dataset"]] + ([proxy] if proxy else [])


def missing_data(raw: Mapping[str, Any]) -> Optional[str]:
    """None when the cell's data sets are on this machine, else what is missing and how to get it."""
    from pfedkit.data.sources import check_dataset

    for name in datasets_of(raw):
        try:
            check_dataset(name, raw["data"].get("root"))
        except DataError as err:
            root = f" --data-root {raw['data']['root']}" if raw["data"].get("root") else ""
            return (
                f"{name} is missing or corrupt ({str(err).splitlines()[0]}); "
                f"get it with `pfedkit data fetch {name}{root}`"
            )
    return None


def missing_by_column(configs: Mapping[tuple[str, str], Mapping[str, Any]]) -> dict[str, str]:
    """Column -> what is missing, for the columns whose cells need data this machine lacks (each column's data
    sets checked once)."""
    missing: dict[str, str] = {}
    checked: set[tuple] = set()
    for (column, _), raw in configs.items():
        key = (column, tuple(datasets_of(raw)), raw["data"].get("root"))
        if column in missing or key in checked:
            continue
        checked.add(key)
        if problem := missing_data(raw):
            missing[column] = problem
    return missing


def has_runs(out: Path) -> bool:
    """Whether `out` holds any run folder (finished, diverged or under way)."""
    return out.is_dir() and any(out.rglob("metrics.csv"))


def run_cells(
    suite: Suite,
    *,
    scale: str,
    seeds: Sequence[int],
    out: Path,
    overrides: Sequence[str] = (),
    rows: Optional[Sequence[str]] = None,
    columns: Optional[Sequence[str]] = None,
    data_root: Optional[str] = None,
    workers: Optional[int] = None,
    train: bool = True,
    resume: bool = True,
    skip_missing: bool = True,
    progress: bool = True,
    tuned: Mapping[str, Mapping[str, Any]] = {},
    reuse_from: Optional[Path] = None,
    log: Callable[[str], None] = print,
) -> tuple[dict[str, str], dict[Path, dict[str, Any]]]:
    """Every (column, row, seed) of the suite run into out/<column>/<row>/seed<N> (a column "." is `out` itself):
    every config validated once and every run folder checked before anything trains, then `run_configs`. A column
    whose data are missing is skipped with a message, or with `skip_missing=False` is an error. Returns the missing
    columns (and what they lack) and each run folder's summary."""
    if scale not in suite.scales:
        raise ConfigError(f"suite {suite.name} has no scale {scale!r}; scales: {', '.join(suite.scales)}")
    rows = list(rows or suite.rows)
    columns = list(columns or suite.columns)
    for given, known, what in ((rows, suite.rows, "rows"), (columns, suite.columns, "columns")):
        unknown = [x for x in given if x not in known]
        if unknown:
            raise ConfigError(f"suite {suite.name} has no {what} {', '.join(unknown)}; its {what}: {', '.join(known)}")
    out = Path(out)
    every_cell = {
        (c, r): merge(
            cell_config(suite, scale, c, r, overrides, data_root, workers, out), {"method": dict(tuned.get(r, {}))}
        )
        for c, r in suite.cells(list(suite.columns), list(suite.rows))
    }
    missing = missing_by_column(every_cell)  # for the table too, whichever columns this call runs
    if not train:  # a table of finished runs: a column whose runs are here ran, whatever data this machine has
        return {c: problem for c, problem in missing.items() if not has_runs(out / c)}, {}
    cells = suite.cells(columns, rows)
    runs = {
        (c, run_folder(out / c, r, seed)): method_config(every_cell[c, r], suite.method_of(r), seed)
        for c, r in cells
        for seed in seeds
    }  # every config validated once, here
    check_run_folders({run_dir: config for (_, run_dir), config in runs.items()}, resume)  # before any training
    for c in columns:
        if c in missing:
            if not skip_missing:
                raise DataError(missing[c])
            log(f"column {c} skipped: {missing[c]}")
    todo = {run_dir: config for (c, run_dir), config in runs.items() if c not in missing}
    if suite.threads:
        import torch

        torch.set_num_threads(suite.threads)
    if reuse_from is not None:
        reuse_identical_runs(todo, Path(reuse_from), log)
    if todo and suite.pretrain:
        first = next(iter(todo.values()))
        pretrain_once(suite.pretrain_at(scale), out, first.data.root, log, first.run.device)
    return missing, run_configs(todo, resume=resume, progress=progress, log=log)
