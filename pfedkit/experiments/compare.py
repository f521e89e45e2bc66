"""`compare` and `demo`: many methods x seeds on one config, a markdown table of mean ± std, one plot."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Optional

from pfedkit.config import EvalSection, apply_overrides
from pfedkit.errors import ConfigError
from pfedkit.experiments.cells import run_cells
from pfedkit.experiments.pipeline import check_method_overrides, run_folder
from pfedkit.experiments.suite import Column, Scale, Suite
from pfedkit.io import atomic_write_csv, atomic_write_text, output_folder, remove_stale_temporaries
from pfedkit.registry import read_config_file
from pfedkit.reports.plots import save_curves
from pfedkit.reports.tables import mean_curve, mean_std

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
TABLE_KEYS = (
    ("best_acc", "best acc"),
    ("last_acc", "last acc"),
    ("best_acc_client_mean", "best client-mean"),
    ("last_acc_client_mean", "last client-mean"),
)


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
    lines.append(
        f"Test accuracy (%), {protocol} protocol; best = max over evaluated rounds, last = final round; "
        "mean ± sample std over seeds."
    )
    return "\n".join(lines)


def compare_configs(
    base: dict[str, Any],
    methods: list[str],
    seeds: list[int],
    out: Path,
    *,
    resume: bool = False,
    progress: bool = True,
    title: str = "",
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> tuple[str, Path]:
    """Every method x seed on `base` as a one-column suite run into out/<method>/seed<N>, then the table,
    results.csv and a plot in out. The base's hyper-parameters apply only to the method it names."""
    if not methods:
        raise ConfigError("no methods given; e.g. --methods fedavg,fedper,fedrep")
    out = output_folder(out)
    given = base.get("method", {})
    suite = Suite(
        name="compare",
        paper=title,
        base={  # the method's module in every row (it may define several of the methods compared)
            **{k: v for k, v in base.items() if k != "method"},
            **({"method": {"module": given["module"]}} if given.get("module") else {}),
        },
        columns={".": Column(title or "compare")},
        rows=tuple(methods),
        scales={"given": Scale({}, 0, "the config as given")},
        row_changes={given["name"]: {"method": given}} if given.get("name") in methods else {},
    )
    _, summaries = run_cells(
        suite, scale="given", seeds=seeds, out=out, resume=resume, skip_missing=False, progress=progress, log=log
    )
    results = {m: [summaries[run_folder(out, m, s)] for s in seeds] for m in methods}
    curves = {
        m: [run_folder(out, m, s) for s in seeds if "diverged" not in summaries[run_folder(out, m, s)]] for m in methods
    }
    table = format_table(results, base.get("eval", {}).get("protocol", EvalSection().protocol))
    remove_stale_temporaries(out, recursive=False)  # a killed table write's leftovers (each run folder cleans its own)
    atomic_write_text(out / "table.md", table + "\n")
    atomic_write_csv(
        out / "results.csv",
        [s for m in methods for s in results[m] if "diverged" not in s],
        [
            "method",
            "seed",
            "best_acc",
            "best_round",
            "last_acc",
            "best_acc_client_mean",
            "last_acc_client_mean",
            "train_s",
            "eval_s",
            "bytes_down",
            "bytes_up",
            "protocol",
        ],
    )
    shown = f"{title}: " if title else ""
    seeds_said = f"mean of {len(seeds)} seeds, band ± 1 std" if len(seeds) > 1 else f"seed {seeds[0]}"
    plot = save_curves(
        {m: mean_curve(curves[m]) for m in methods if curves[m]},
        out / "curves.png",
        title=shown + seeds_said,
        band=True,
    )
    return table, plot


def run_comparison(
    config_path: str,
    methods: list[str],
    seeds: list[int],
    out: Path,
    overrides: list[str],
    *,
    resume: bool = False,
    progress: bool = True,
) -> tuple[str, Path]:
    raw = apply_overrides(read_config_file(config_path), overrides)  # method.module beside the config file
    check_method_overrides(raw, overrides, methods)
    path = Path(config_path)
    return compare_configs(raw, methods, seeds, out, resume=resume, progress=progress, title=path.stem)


def run_demo(out: Path, rounds: Optional[int] = None, progress: bool = True) -> tuple[str, Path]:
    import shutil

    marker = out / ".pfedkit-demo"
    if marker.exists():  # a folder an earlier demo made: start it afresh
        shutil.rmtree(out)
    elif out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} exists and was not made by `pfedkit demo`; pass another --out")
    out = output_folder(out)
    marker.touch()
    base = {k: dict(v) for k, v in DEMO.items()}
    if rounds is not None:
        base["train"]["rounds"] = rounds
    return compare_configs(
        base, list(DEMO_METHODS), [0], out, progress=progress, title="demo: digits, 20 clients, Dirichlet 0.1"
    )
