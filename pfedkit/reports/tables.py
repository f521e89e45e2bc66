"""Paper-table suites: many methods x columns x seeds, run in any order (even on other machines), one table.

A suite's output folder holds `<column>/<method>/seed<N>/` run folders; the table reads every finished one,
so an interrupted suite, or one whose parts ran separately, still gives a table, and a cell says how many
seeds it averages and "not run" where none finished.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path
from typing import Mapping, Optional, Sequence

from pfedkit.config import EvalSection, read_toml, tomllib
from pfedkit.io import read_csv, read_json
from pfedkit.records import AFTER, DIVERGED, accuracy_column

# A cell's curve (the mean over its seeds) is "rising" when the mean of its last fifth of evaluations is above the
# mean of the fifth before by more than RISE_POINTS, or, where those fifths' centres are under PER_ROUNDS rounds apart,
# by more than RISE_POINTS per PER_ROUNDS rounds (a short run must be flat at the rate a long one would be); "peaked"
# when the best of its last fifth is more than PEAK_POINTS below its best; else "flat". Means of fifths rather than a
# fitted slope, so that round-to-round noise does not decide it.
RISE_POINTS, PER_ROUNDS, PEAK_POINTS, MIN_EVALUATIONS = 0.5, 100, 1.0, 10
SEED_FOLDER = re.compile(r"seed(0|[1-9][0-9]*)")  # a run folder of one seed: seed0, seed1, ... (not seed01)
TREND_MARKS = {"rising": " ↑", "peaked": " ↓", "short": " ?", "flat": ""}
TREND_NOTE = (
    f"↑ = still rising (the mean curve over seeds gained more than {RISE_POINTS} points from the fourth fifth "
    f"of its evaluations to the last, or more than {RISE_POINTS} points per {PER_ROUNDS} rounds where the "
    f"fifths are shorter), ↓ = peaked earlier (the best of the last fifth is more than {PEAK_POINTS} points "
    f"below the best), ? = fewer than {MIN_EVALUATIONS} evaluations; unmarked = flat"
)


def mean_std(values: list[float], count: bool = False) -> str:
    """Mean ± sample std (the mean alone for one value), 2 decimals; with `count`, "(n=k)" after a spread."""
    mean = statistics.fmean(values)
    if len(values) == 1:
        return f"{mean:.2f}"
    return f"{mean:.2f} ± {statistics.stdev(values):.2f}" + (f" (n={len(values)})" if count else "")


def cell(values: list[float]) -> str:
    """A suite table's cell: "not run", or the mean ± std with the number of seeds."""
    return mean_std(values, count=True) if values else "not run"


def seed_folders(column_dir: Path, method: str) -> list[Path]:
    """A cell's folders of one seed each, seed<N>, in seed order (a copy set aside beside them, seed0-old, is none)."""
    folders = [d for d in (column_dir / method).glob("seed*") if SEED_FOLDER.fullmatch(d.name) and d.is_dir()]
    return sorted(folders, key=lambda d: int(d.name.removeprefix("seed")))


def finished_runs(column_dir: Path, method: str) -> list[Path]:
    """Run folders of one cell that finished (have a summary), any seed, in seed order (`seed_folders`)."""
    return [d for d in seed_folders(column_dir, method) if (d / "summary.json").is_file()]


def diverged_runs(column_dir: Path, method: str) -> list[Path]:
    """Run folders of one cell whose run diverged (its record beside the last checkpoint), in seed order."""
    return [d for d in seed_folders(column_dir, method) if (d / DIVERGED).is_file()]


def diverged_rounds(column_dir: Path, method: str) -> list[int]:
    """The rounds in which a cell's runs diverged (any seed), where they did."""
    return [json.loads((d / DIVERGED).read_text())["round"] for d in diverged_runs(column_dir, method)]


def summary_of(run_dir: Path) -> dict:
    """A run's summary.json, checked to be an object (a damaged one is refused, named, not misread)."""
    from pfedkit.errors import PfedkitError

    summary = read_json(run_dir / "summary.json", "summary")
    if not isinstance(summary, dict):
        raise PfedkitError(
            f"summary {run_dir / 'summary.json'} is damaged (a {type(summary).__name__}, not an object); delete it (it "
            "is written again when the run is resumed with --resume) or restore it"
        )
    return summary


def headline_curve(run_dir: Path, point: Optional[str] = None) -> list[tuple[int, float]]:
    """(round, accuracy) of every evaluated round, at `point` ("start" or "after-local"; a run measured at both has
    both), else at the run's own evaluation point (a run before eval.point: start)."""
    column = accuracy_column(point or own_point(run_dir))
    rows = run_metrics(run_dir)
    return [(int(float(r["round"])), float(r[column])) for r in rows if r.get(column) not in (None, "")]


def own_point(run_dir: Path) -> str:
    """Where the run's headline accuracy is read: "after-local" for a run measuring only there, else "start" (eval.point
    "both" headlines the start), from its summary, else (still training) its config (a run before eval.point: start)."""
    if (run_dir / "summary.json").exists():
        point = summary_of(run_dir).get("eval_point", "start")
    else:
        config = tomllib.loads((run_dir / "config.toml").read_text())
        point = config.get("eval", {}).get("point", EvalSection.model_fields["point"].default)
    return "after-local" if point == "after-local" else "start"


def run_metrics(run_dir: Path) -> list[dict[str, str]]:
    """A run's metrics.csv rows, checked: every round and accuracy a number, and in a finished run (summary.json) one
    row for each round 0..R that summary.json says it ran; a file cut short or replaced is refused, not read."""
    from pfedkit.errors import PfedkitError

    path = run_dir / "metrics.csv"
    if not path.is_file():
        raise PfedkitError(f"{run_dir} has no metrics.csv: restore it, or run the run again")
    rows = read_csv(path)
    for row in rows:
        for key in ("round", "acc", "acc_after"):
            value = row.get(key)
            try:
                if value not in (None, "") and not math.isfinite(float(value)):
                    raise ValueError(value)  # nan or inf: no accuracy a run can have
                if key != "round" and value not in (None, "") and not 0 <= float(value) <= 1:
                    raise PfedkitError(
                        f"{path}: {key} {value!r} in the row of round {row.get('round')!r} is not a share between 0 "
                        "and 1 (a percentage?); the file is not a run's: restore it, or run the run again"
                    )
                if key == "round" and (value in (None, "") or not float(value).is_integer()):
                    raise ValueError(value)  # every row is a round's: a whole number
            except ValueError:
                raise PfedkitError(
                    f"{path}: {key} {value!r} in the row of round {row.get('round')!r} is not a "
                    f"{'whole ' if key == 'round' else ''}number; the file is "
                    "damaged: restore it, or run the run again"
                ) from None
    if (run_dir / "summary.json").exists():
        rounds = summary_of(run_dir).get("rounds")
        ran = [int(float(r["round"])) for r in rows]
        if isinstance(rounds, int) and ran != list(range(rounds + 1)):
            last = ran[-1] if ran else "no row"
            raise PfedkitError(
                f"{path} holds rounds 0..{last} ({len(ran)} rows) but {run_dir / 'summary.json'} says the run finished "
                f"{rounds} rounds: the file was cut short or replaced; restore it, or run the run again"
            )
    return rows


def window_means(curve: Sequence[tuple[int, float]], window: int) -> list[tuple[int, int, float]]:
    """(first round, last round, mean accuracy) of the evaluations in each block of `window` rounds from round 1 (round
    0, before any training, is left out); the last block may be shorter."""
    blocks: dict[int, list[tuple[int, float]]] = {}
    for round, acc in curve:
        if round > 0:
            blocks.setdefault((round - 1) // window, []).append((round, acc))
    return [
        (b * window + 1, b * window + window, statistics.fmean(a for _, a in points))
        for b, points in sorted(blocks.items())
    ]


def last_evaluations(curve: Sequence[tuple[int, float]], k: int, *, rounds: bool = False) -> list[tuple[int, float]]:
    """The last k evaluations of a (round, accuracy) curve, or with `rounds` those within its last k rounds: rows
    evaluated at different intervals (an FT row every 5 rounds) are then compared over the same stretch of training."""
    if not rounds:
        return list(curve[-k:])
    end = curve[-1][0]
    return [(r, acc) for r, acc in curve if r > end - k]


def mean_of_last(run_dir: Path, k: int, point: Optional[str] = None, *, rounds: bool = False) -> float:
    """Mean sample-weighted accuracy over the last k evaluations, or with `rounds` over the evaluations of the last k
    rounds (FedPAC's "final accuracy", docs/methods.md 4.4; what suites report), at `point` or the run's own."""
    return statistics.fmean(acc for _, acc in last_evaluations(headline_curve(run_dir, point), k, rounds=rounds))


def mean_curve(runs: Sequence[Path], point: Optional[str] = None) -> list[dict[str, float]]:
    """Per-round mean accuracy over the runs (seeds), at `point` or each run's own evaluation point."""
    by_round: dict[int, list[float]] = {}
    for run in runs:
        for round, acc in headline_curve(run, point):
            by_round.setdefault(round, []).append(acc)
    return [
        {"round": k, "acc": statistics.fmean(v), **({"std": statistics.stdev(v)} if len(v) > 1 else {})}
        for k, v in sorted(by_round.items())
    ]


def curve_gain(curve: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """(gain, rounds apart): the mean of the last fifth of (round, accuracy) points less the mean of the fifth before,
    and how many rounds apart those fifths' centres are."""
    fifth = max(1, len(curve) // 5)
    last, before = curve[-fifth:], curve[-2 * fifth : -fifth] or curve[:1]
    gain = statistics.fmean(a for _, a in last) - statistics.fmean(a for _, a in before)
    return gain, statistics.fmean(r for r, _ in last) - statistics.fmean(r for r, _ in before)


def curve_trend(curve: Sequence[tuple[int, float]]) -> str:
    """ "flat", "rising", "peaked" or "short" (too few evaluations to tell) for (round, accuracy in %) points, by the
    rule above."""
    if len(curve) < MIN_EVALUATIONS:
        return "short"
    gain, apart = curve_gain(curve)
    if gain > RISE_POINTS * min(1.0, apart / PER_ROUNDS):
        return "rising"
    last = curve[-(len(curve) // 5) :]
    return "peaked" if max(a for _, a in last) < max(a for _, a in curve) - PEAK_POINTS else "flat"


def cell_trend(runs: Sequence[Path], point: Optional[str] = None) -> str:
    return curve_trend([(p["round"], 100 * p["acc"]) for p in mean_curve(runs, point)]) if runs else ""


POINT_TEXT = {
    "start": "at the start of each round (each client's personalized model after the broadcast, before local "
    "training: PFLlib's point)",
    "after-local": "right after each trained client's local update (FedPAC's released code, FL-bench)",
    "both": "at the start of each round (the headline) and after local training",
}


def run_facts(runs: Sequence[Path]) -> list[str]:
    """Caption lines naming what the finished runs have in common or not: evaluation point and data copy."""
    summaries = [summary_of(run) for run in runs]
    points = sorted({s.get("eval_point", "start") for s in summaries})
    origins = sorted(
        {f"{s['data_origin']} (sha256 {s['data_file_sha256'][:12]}…)" for s in summaries if s.get("data_origin")}
    )
    lines = (
        [
            f"Evaluated {POINT_TEXT[p]}" + (f" in the runs with eval.point = {p}" if len(points) > 1 else "") + "."
            for p in points
        ]
        if summaries
        else []
    )
    if origins:
        lines.append(f"Data: {'; '.join(origins)}.")
    devices = run_devices(runs)
    if any(device != "cpu" for device in devices):  # a GPU rounds differently from a CPU
        lines.append(f"Ran on: {', '.join(devices)} (run.device).")
    return lines


def run_devices(runs: Sequence[Path]) -> list[str]:
    """The run.device values of the runs' configs, sorted and distinct."""
    return sorted(
        {
            config_section(run, run_config_toml(run), "run").get("device", "cpu")
            for run in runs
            if (run / "config.toml").is_file()
        }
    )


def run_config_toml(run: Path) -> dict:
    """The run's config.toml as saved ({} where there is none); a damaged one is an error naming it."""
    return read_toml(run / "config.toml") if (run / "config.toml").is_file() else {}


def config_section(run: Path, config: dict, name: str) -> dict:
    """A section of the run's saved config ({} where it has none); a damaged file is an error naming it."""
    from pfedkit.errors import PfedkitError

    section = config.get(name, {})
    if not isinstance(section, dict):
        raise PfedkitError(
            f"{run / 'config.toml'} has {name} = {section!r} where a [{name}] section belongs: the file is damaged; "
            "restore it"
        )
    return section


def point_cells(
    runs: Sequence[Path], summaries: Sequence[dict], last_k: Optional[int], point: Optional[str] = None
) -> list[str]:
    """One evaluation point's cells of a table cell: best (with its trend mark), last, and the mean of the last k
    rounds if asked; at `point` ("after-local": the summaries' keys ending in _after), else each run's own."""
    suffix = AFTER if point == "after-local" else ""
    trend = TREND_MARKS[cell_trend(runs, point)] if runs else ""
    cells = [
        cell([100 * s["best_acc" + suffix] for s in summaries]) + trend,
        cell([100 * s["last_acc" + suffix] for s in summaries]),
    ]
    if last_k:
        cells.append(cell([100 * mean_of_last(d, last_k, point, rounds=True) for d in runs]))
    return cells


def paper_table(
    out: Path,
    columns: Mapping[str, str],
    rows: Sequence[str],
    paper: Mapping[str, Mapping[str, float]],
    *,
    last_k: Optional[int] = None,
    column_rows: Optional[Mapping[str, Optional[Sequence[str]]]] = None,
    paper_point: Optional[str] = None,
) -> tuple[list[str], set[int]]:
    """Markdown lines: per column ours (best, last, and the mean of the last k rounds if asked) beside the paper's
    number; and the set of round counts the finished runs used. A row outside a column's `column_rows` shows
    "n/a" there (not part of that column), where "not run" means a cell still to run. Runs measured at both points
    show the after-local point's columns too; `paper_point` "after-local" takes the gap to the paper there."""
    both = any(
        summary_of(d).get("eval_point") == "both" for c in columns for m in rows for d in finished_runs(out / c, m)
    )
    after_gap = both and paper_point == "after-local"
    last_k_label = [f"mean of last {last_k} rounds"] if last_k else []
    per_column = (
        ["ours (best)", "last"]
        + last_k_label
        + (["after local: best", "last"] + last_k_label if both else [])
        + ["paper", "after local: best - paper" if after_gap else "best - paper"]
    )
    header = (
        "| method | "
        + " | ".join(f"{columns[c]} {h}" if i == 0 else h for c in columns for i, h in enumerate(per_column))
        + " |"
    )
    lines = [header, "|---|" + "---|" * (len(per_column) * len(columns))]
    row_rounds: dict[str, set[int]] = {}
    row_cells: dict[str, list[str]] = {}
    for method in rows:
        cells = row_cells[method] = []
        row_rounds[method] = set()  # stays empty for a row no column runs
        for col in columns:
            if (column_rows or {}).get(col) is not None and method not in column_rows[col]:
                cells += ["n/a"] * len(per_column)
                continue
            runs = finished_runs(out / col, method)
            summaries = [summary_of(d) for d in runs]
            row_rounds[method].update(s["rounds"] for s in summaries)
            if not runs and (diverged := diverged_rounds(out / col, method)):
                cells += [f"diverged (round {min(diverged)})"] * (2 + bool(last_k)) * (1 + both)
            else:
                cells += point_cells(runs, summaries, last_k)
                if both:  # the after-local point of the runs that measured it
                    measured = [(d, s) for d, s in zip(runs, summaries) if "best_acc" + AFTER in s]
                    cells += point_cells([d for d, _ in measured], [s for _, s in measured], last_k, "after-local")
            number = paper.get(method, {}).get(col)
            cells.append("-" if number is None else f"{number:.2f}")
            gap_key = "best_acc" + (AFTER if after_gap else "")
            best = [100 * s[gap_key] for s in summaries if gap_key in s]
            cells.append("-" if number is None or not best else f"{statistics.fmean(best) - number:+.2f}")
    rounds = set().union(*row_rounds.values())
    for method in rows:
        label = method
        if len(rounds) > 1 and row_rounds[method]:  # rows ran for different lengths: say which ran how long
            label += f" ({', '.join(str(r) for r in sorted(row_rounds[method]))} rounds)"
        lines.append(f"| {label} | " + " | ".join(row_cells[method]) + " |")
    return lines, rounds


def cost_table(out: Path, column: str, seed: int, rows: Sequence[str], clients: int) -> list[str]:
    """Training seconds and traffic per round from one column and seed (one machine's timings)."""
    lines = ["| method | train s/round | MB per client per round (down + up) |", "|---|---|---|"]
    for method in rows:
        run = out / column / method / f"seed{seed}"
        if not (run / "summary.json").exists():  # a run still training may share its cores with another
            continue
        metrics = run / "metrics.csv"
        trained = [r for r in read_csv(metrics) if float(r["train_s"]) > 0]
        seconds = statistics.fmean(float(r["train_s"]) for r in trained)
        traffic = statistics.fmean((int(r["bytes_down"]) + int(r["bytes_up"])) / clients for r in trained)
        lines.append(f"| {method} | {seconds:.1f} | {traffic / 1e6:.3f} |")
    return lines


def distillation_lines(out: Path) -> list[str]:
    """The table's note on server distillation (PerAda, HEART-PFL: metrics.csv's kd_accepted and kd_val_gain): per
    finished run, in how many of the rounds that distilled the distilled model was kept, and its mean validation
    gain."""
    lines = []
    for summary in sorted(out.rglob("summary.json")):
        rows = [r for r in read_csv(summary.parent / "metrics.csv") if r.get("kd_accepted") not in (None, "")]
        distilled = [r for r in rows if float(r["kd_accepted"]) >= 0]
        if not distilled:
            continue
        kept = [float(r["kd_val_gain"]) for r in distilled if float(r["kd_accepted"]) == 1]
        gain = f", validation {statistics.fmean(kept):+.2f} points on average when kept" if kept else ""
        lines.append(
            f"- {summary.parent.relative_to(out)}: kept in {len(kept)} of {len(distilled)} distillation rounds "
            f"(rounds {int(distilled[0]['round'])}-{int(distilled[-1]['round'])}){gain}"
        )
    if not lines:
        return []
    return [
        "",
        'Server distillation (with method.kd_keep = "validated", the distilled global adapter is kept only if it '
        'beats the plain average on the server\'s validation split; with "last", always):',
        "",
    ] + lines
