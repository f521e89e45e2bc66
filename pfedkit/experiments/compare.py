"""`compare` and `demo`: many methods x seeds on one config, a markdown table of mean ± std, one plot."""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from pfedkit.config import Config, apply_overrides, config_differences, merge, tomllib
from pfedkit.data.federated import build_federated
from pfedkit.engine.divergence import DIVERGED, Diverged
from pfedkit.engine.store import CHECKPOINT
from pfedkit.errors import ConfigError
from pfedkit.experiments.runs import run_experiment
from pfedkit.io import atomic_write_csv, atomic_write_text, read_csv
from pfedkit.registry import build_config, read_saved_config
from pfedkit.reports.plots import save_curves
from pfedkit.reports.tables import mean_std

DEMO = {
    "data": {"dataset": "digits"},
    # PFLlib's minimum (40 samples) is out of reach for 1,797 digits over 20 clients at beta 0.1; 20 is reached.
    "partition": {"scheme": "dirichlet", "clients": 20, "beta": 0.1, "min_samples": 20},
    "model": {"name": "smallcnn"},
    "train": {"rounds": 30, "local_epochs": 1, "batch_size": 10, "lr": 0.05},
    "eval": {"protocol": "pfllib", "every": 1},
    "run": {"seed": 0, "checkpoint_every": 10},
}
DEMO_METHODS = ("local", "fedavg", "fedper", "fedrep")
TABLE_KEYS = (("best_acc", "best acc"), ("last_acc", "last acc"),
              ("best_acc_client_mean", "best client-mean"), ("last_acc_client_mean", "last client-mean"))


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
    return config_differences(old, config)


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


def format_table(results: dict[str, list[dict[str, Any]]], protocol: str) -> str:
    lines = [
        "| method | " + " | ".join(label for _, label in TABLE_KEYS) + " | seeds |",
        "|---|" + "---|" * (len(TABLE_KEYS) + 1),
    ]
    for method, runs in results.items():
        summaries = [s for s in runs if "diverged" not in s]
        diverged = [s["diverged"]["round"] for s in runs if "diverged" in s]
        cells = []
        for key, _ in TABLE_KEYS:
            values = [100 * s[key] for s in summaries]
            cells.append(mean_std(values) if values else f"diverged (round {min(diverged)})")
        seeds = f"{len(summaries)}" + (f" ({len(diverged)} diverged)" if diverged and summaries else "")
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {seeds} |")
    lines.append("")
    lines.append(f"Test accuracy (%), {protocol} protocol; best = max over evaluated rounds, last = final round; "
                 "mean ± sample std over seeds.")
    return "\n".join(lines)


def mean_curve(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per-round mean accuracy over seeds."""
    by_round: dict[int, list[float]] = {}
    for rows in runs:
        for r in rows:
            if r.get("acc") not in (None, ""):
                by_round.setdefault(int(r["round"]), []).append(float(r["acc"]))
    return [{"round": k, "acc": statistics.fmean(v)} for k, v in sorted(by_round.items())]


def data_identity(config: Config) -> str:
    """What a run's FederatedDataset depends on: runs that agree on it share one (the partition is seeded)."""
    return json.dumps([config.data.model_dump(mode="json", exclude={"checksum"}), config.partition.model_dump(mode="json"),
                       config.eval.protocol, config.proxy.model_dump(mode="json"), config.run.seed,
                       config.train.batch_size], sort_keys=True)  # the batch size sets PFLlib's minimum client size


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


def compare_configs(base: dict[str, Any], methods: list[str], seeds: list[int], out: Path, *,
                    resume: bool = False, progress: bool = True, title: str = "",
                    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> tuple[str, Path]:
    """Run every method x seed into out/<method>/seed<N>, then write the table, results.csv and a plot into out."""
    if not methods:
        raise ConfigError("no methods given; e.g. --methods fedavg,fedper,fedrep")
    # Every config is validated, and every run folder checked, before any training starts.
    runs = {run_folder(out, m, s): method_config(base, m, s) for m in methods for s in seeds}
    check_run_folders(runs, resume)
    summaries = run_configs(runs, resume=resume, progress=progress, log=log)
    results = {m: [summaries[run_folder(out, m, s)] for s in seeds] for m in methods}
    curves = {m: [read_csv(run_folder(out, m, s) / "metrics.csv") for s in seeds
                  if "diverged" not in summaries[run_folder(out, m, s)]] for m in methods}
    table = format_table(results, next(iter(runs.values())).eval.protocol)
    atomic_write_text(out / "table.md", table + "\n")
    atomic_write_csv(out / "results.csv", [s for m in methods for s in results[m] if "diverged" not in s],
                     ["method", "seed", "best_acc", "best_round", "last_acc", "best_acc_client_mean",
                      "last_acc_client_mean", "train_s", "eval_s", "bytes_down", "bytes_up", "protocol"])
    plot = save_curves({m: mean_curve(curves[m]) for m in methods if curves[m]}, out / "curves.png", title=title)
    return table, plot


def run_comparison(config_path: str, methods: list[str], seeds: list[int], out: Path, overrides: list[str],
                   *, resume: bool = False, progress: bool = True) -> tuple[str, Path]:
    path = Path(config_path)
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path} is not valid TOML: {err}") from None
    raw = apply_overrides(raw, overrides)
    return compare_configs(raw, methods, seeds, out, resume=resume, progress=progress, title=path.stem)


def run_demo(out: Path, rounds: Optional[int] = None, progress: bool = True) -> tuple[str, Path]:
    import shutil

    marker = out / ".pfedkit-demo"
    if marker.exists():  # a folder an earlier demo made: start it afresh
        shutil.rmtree(out)
    elif out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} exists and was not made by `pfedkit demo`; pass another --out")
    out.mkdir(parents=True, exist_ok=True)
    marker.touch()
    base = {k: dict(v) for k, v in DEMO.items()}
    if rounds is not None:
        base["train"]["rounds"] = rounds
    return compare_configs(base, list(DEMO_METHODS), [0], out, progress=progress,
                           title="demo: digits, 20 clients, Dirichlet 0.1")
