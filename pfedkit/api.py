"""pfedkit from Python (a notebook): the same runs as the command line. `pfedkit.run` and `pfedkit.load_run` are
these, reached through the package (`import pfedkit`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional


def run(
    config: "str | Path | Mapping[str, Any]",
    out: "str | Path",
    *,
    resume: bool = False,
    progress: bool = True,
    data_root: Optional[str] = None,
    force: bool = False,
    accept_code_change: bool = False,
    **sections: Mapping[str, Any],
) -> dict[str, Any]:
    """Run one experiment, as `pfedkit run`, in this process; its summary (summary.json) is returned.

    `config`: a TOML file (a method.module .py path in it is relative to the file) or a dict of sections; `sections`
    override them section by section (`train={"rounds": 5}`), as `--set train.rounds=5` does; `data_root` as
    `--data-root`; `accept_code_change` as `--accept-code-change`."""
    from pfedkit.config import merge
    from pfedkit.errors import ConfigError, PfedkitError
    from pfedkit.experiments import run_experiment
    from pfedkit.io import output_folder
    from pfedkit.registry import build_config, read_config_file

    if not isinstance(config, (str, Path, Mapping)):
        raise ConfigError(f"config must be a TOML file's path or a dict of sections, not {type(config).__name__}")
    bad = [name for name, values in sections.items() if not isinstance(values, Mapping)]
    if bad:
        raise ConfigError(
            f"{', '.join(bad)}={sections[bad[0]]!r}: sections are dicts of keys, e.g. train={{'rounds': 5}}"
        )
    if resume and not (Path(out) / "config.toml").exists():
        raise PfedkitError(f"there is no run in {out} to resume (no config.toml there); start one without resume=True")
    output_folder(out, "out")  # a wrong type or a file named here fails before any data is read
    raw = read_config_file(config) if isinstance(config, (str, Path)) else dict(config)
    raw = merge(raw, {name: dict(values) for name, values in sections.items()})
    if data_root is not None:
        raw = merge(raw, {"data": {"root": str(data_root)}})
    return run_experiment(
        build_config(raw), out, resume=resume, progress=progress, force=force, accept_code_change=accept_code_change
    )


@dataclass
class RunResults:
    """A run folder read back: its config, summary (None while it runs) and metrics, one dict per round."""

    folder: Path
    config: dict[str, Any]
    summary: Optional[dict[str, Any]]
    metrics: list[dict[str, Optional[float]]]

    def column(self, name: str) -> list[tuple[int, float]]:
        """(round, value) of every round where the column has a value (accuracies only where evaluated)."""
        return [(int(row["round"]), row[name]) for row in self.metrics if row.get(name) is not None]

    def to_pandas(self) -> Any:
        import pandas  # optional: only for those who want a DataFrame

        return pandas.DataFrame(self.metrics)


def load_run(folder: "str | Path") -> RunResults:
    """The run in `folder` (finished or still training): config.toml, summary.json and metrics.csv as numbers."""
    from pfedkit.config import read_toml
    from pfedkit.errors import PfedkitError
    from pfedkit.io import read_json
    from pfedkit.reports.tables import run_metrics

    if not isinstance(folder, (str, Path)):
        raise PfedkitError(f"load_run takes a run folder's path, not {type(folder).__name__}")
    folder = Path(folder)
    if not (folder / "metrics.csv").exists():
        raise PfedkitError(f"there is no run in {folder} (no metrics.csv); run one with pfedkit.run(config, out=...)")

    def number(value: str) -> Optional[float]:
        return None if value in ("", None) else float(value)

    metrics = [{k: number(v) for k, v in row.items()} for row in run_metrics(folder)]
    summary = read_json(folder / "summary.json", "summary") if (folder / "summary.json").exists() else None
    return RunResults(folder, read_toml(folder / "config.toml"), summary, metrics)
