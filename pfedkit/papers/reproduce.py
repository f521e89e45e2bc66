"""`pfedkit reproduce`: one command per paper table.

A suite is a base config, columns (config changes, the paper's numbers), rows (methods, with per-row changes) and
scales ("full": the paper's setting; "small": what finishes here in about two hours). Running a suite runs every
cell it can (a column whose data set is missing is reported with the command that fetches it), skips finished
runs, resumes unfinished ones, and writes `table.md`, `table.csv` and `curves_<column>.png` into the output folder.
The suites themselves are data: one TOML file per paper table in `pfedkit/papers/tables/` (read by suites.py);
the grid of runs under a suite is `pfedkit/experiments/cells.py`.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from pfedkit.config import flat, merge
from pfedkit.errors import ConfigError, PfedkitError
from pfedkit.experiments.cells import cell_config, datasets_of, has_runs, run_cells
from pfedkit.experiments.pipeline import (
    CONTINUED,
    REUSED,
    method_config,
)
from pfedkit.experiments.suite import Suite
from pfedkit.io import atomic_write_csv, atomic_write_text
from pfedkit.papers.claims import (
    FAILS,
    HOLDS,
    NOT_RUN,
    PRETRAINED,
    SETTING_SECTIONS,
    UNSURE,
    WAITS_ON,
    Evidence,
    Judgement,
    as_setting,
    check_claims,
    judge,
    measured_floor,
    unlike_runs,
    waits_on,
)
from pfedkit.papers.suites import SUITES, claim_rows
from pfedkit.reports.tables import (
    TREND_NOTE,
    cell_trend,
    cost_table,
    distillation_lines,
    finished_runs,
    mean_curve,
    mean_of_last,
    own_point,
    paper_table,
    run_devices,
    run_facts,
    summary_of,
)


def claim_differences(suite: Suite, claim: Mapping[str, Any], scale: str = "small") -> list[str]:
    """How the rows an "above" or "margin" claim compares differ beyond what it names (`differ_in`), as the claims
    table's rule 2 judges runs (`claims.unlike_runs`), here on the cells' configs before anything runs."""
    from pfedkit.registry import with_method_values

    if claim.get("kind") == "converged":  # each row judged on its own curve: nothing compared across rows
        return []
    configs = {
        r: flat(
            with_method_values(
                method_config(cell_config(suite, scale, claim["column"], r), suite.method_of(r), 0)
            ).to_dict()
        )
        for r in claim_rows(claim)
    }
    return unlike_runs(configs, tuple(claim.get("differ_in", ())))


def run_suite(
    suite: Suite,
    *,
    scale: str = "small",
    seeds: Sequence[int] = (0,),
    out: Path,
    overrides: Sequence[str] = (),
    rows: Optional[Sequence[str]] = None,
    columns: Optional[Sequence[str]] = None,
    data_root: Optional[str] = None,
    workers: Optional[int] = None,
    table_only: bool = False,
    progress: bool = True,
    tuned: Optional[Path] = None,
    reuse_from: Optional[Path] = None,
    log: Callable[[str], None] = print,
) -> str:
    """Run the suite's cells (skipping finished runs), then write its table; returns the table's markdown. With
    `tuned`, rows that have a `pfedkit tune` folder there (<tuned>/<row>/tune.json) run at their tuned values. With
    `reuse_from`, a cell that a finished run under that folder already ran (another suite's, say) is copied from it
    instead of trained (pipeline.reuse_identical_runs)."""
    tuned_rows = read_tuned(Path(tuned), suite, rows) if tuned is not None else {}
    if tuned_rows and not table_only:
        record_tuned(Path(out), tuned_rows)
    missing, _ = run_cells(
        suite,
        scale=scale,
        seeds=seeds,
        out=out,
        overrides=overrides,
        rows=rows,
        columns=columns,
        data_root=data_root,
        workers=workers,
        train=not table_only,
        progress=progress,
        log=log,
        tuned={r: t["values"] for r, t in tuned_rows.items()},
        reuse_from=reuse_from,
    )
    if table_only and not has_runs(Path(out)):  # a table of nothing would only leave a folder behind
        return ""
    return write_suite_outputs(suite, Path(out), missing, scale)


TUNED = "tuned.json"  # in a suite's folder: the rows that ran at tuned values, the values and what they were tuned on


def read_tuned(folder: Path, suite: Suite, rows: Optional[Sequence[str]]) -> dict[str, dict[str, Any]]:
    """The tuned values of the suite's rows that have a tune in `folder` (<folder>/<row>/tune.json)."""
    if not folder.is_dir():
        raise ConfigError(f"--tuned {folder}: no such folder; give the folder holding one `pfedkit tune --out` per row")
    found = {}
    for row in rows or suite.rows:
        record = folder / row / "tune.json"
        if record.exists():
            result = json.loads(record.read_text())
            if result["method"] != suite.method_of(row):
                raise ConfigError(f"{record} tuned {result['method']}, but row {row} runs {suite.method_of(row)}")
            found[row] = {"values": result["tuned"], "about": result.get("tuned_on", "")}
    if not found:
        raise ConfigError(f"--tuned {folder}: no <row>/tune.json for any row of {suite.name} ({', '.join(suite.rows)})")
    return found


def record_tuned(out: Path, tuned_rows: Mapping[str, Mapping[str, Any]]) -> None:
    saved = json.loads((out / TUNED).read_text()) if (out / TUNED).exists() else {}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / TUNED, json.dumps({**saved, **tuned_rows}, indent=2, sort_keys=True))


def tuned_keys(out: Path) -> dict[str, list[str]]:
    """row -> the method keys the suite folder's rows ran at tuned values (`record_tuned`), none where none did."""
    if not (out / TUNED).is_file():
        return {}
    try:
        record = json.loads((out / TUNED).read_text())
    except ValueError as err:
        raise ConfigError(f"{out / TUNED} is not valid JSON ({err}): restore it, or tune and run again") from None
    return {row: list(entry.get("values", {})) for row, entry in record.items() if isinstance(entry, dict)}


def tuned_lines(out: Path) -> list[str]:
    if not (out / TUNED).exists():
        return []
    lines = ["", "Rows run at tuned values (pfedkit tune, scored on validation splits, never the test split):", ""]
    for row, record in sorted(json.loads((out / TUNED).read_text()).items()):
        values = ", ".join(
            f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}" for k, v in record["values"].items()
        )
        lines.append(f"- {row}: {values}" + (f" (tuned on {record['about']})" if record["about"] else ""))
    return lines


COPY_NOTES = {  # record file in a cell -> the table's heading for such cells, and how a line links cell to source
    REUSED: (
        "Cells copied from finished runs with the same config at its values (not trained again; "
        f"{REUSED} in each names the source):",
        "=",
    ),
    CONTINUED: (
        "Cells that carried on a finished shorter run with the same config (its rounds copied, the rest "
        f"trained here; {CONTINUED} in each names the source):",
        "continues",
    ),
}


def copied_lines(out: Path, record_name: str) -> list[str]:
    """The table's note on the finished cells that came from other runs (REUSED or CONTINUED names the kind)."""
    records = sorted(r for r in out.rglob(record_name) if (r.parent / "summary.json").exists())
    if not records:
        return []
    heading, link = COPY_NOTES[record_name]
    return ["", heading, ""] + [
        f"- {r.parent.relative_to(out)} {link} {json.loads(r.read_text())['from']}" for r in records
    ]


def write_suite_outputs(suite: Suite, out: Path, missing: Mapping[str, str], scale: str) -> str:
    from pfedkit.reports.plots import save_curves

    labels = {c: col.label for c, col in suite.columns.items()}
    paper = {r: {c: col.paper[r] for c, col in suite.columns.items() if r in col.paper} for r in suite.rows}
    finished = [run for c in suite.columns for r in suite.rows for run in finished_runs(out / c, r)]
    lines, rounds = paper_table(
        out,
        labels,
        suite.rows,
        paper,
        last_k=suite.last_k,
        column_rows={c: col.rows for c, col in suite.columns.items()},
        paper_point=suite.paper_point,
    )
    lines = [
        f"# {suite.paper}",
        "",
        *lines,
        "",
        f"Rounds run: {sorted(rounds) or 'none yet'}. Accuracy in %; mean ± sample std over the seeds that finished "
        f"(n); best = the best evaluated round, last = the final round"
        + ("; n/a = the row is not part of that column" if any(col.rows for col in suite.columns.values()) else "")
        + f". Scale {scale}: {suite.scales[scale].about}",
        "",
        *run_facts(finished),
        f"Curves: {TREND_NOTE}.",
    ]
    if suite.notes:
        lines += ["", suite.notes]
    lines += tuned_lines(out) + copied_lines(out, REUSED) + copied_lines(out, CONTINUED) + distillation_lines(out)
    if suite.claims:
        on_gpu = any(device != "cpu" for device in run_devices(finished))  # a GPU's runs: a GPU's floor
        evidence, floor_text = evidence_or_why(suite, out, scale, on_gpu)  # a damaged run: its lines cannot tell
        lines += ["", f"The paper's claims on these runs (the rules: {CLAIM_RULES}). Noise floor: {floor_text}.", ""]
        for claim, line in zip(suite.claims, check_claims(suite.claims, evidence)):
            unlike = claim_differences(suite, claim, scale)  # a claim is only as good as the likeness of its rows
            lines.append(line + (f" [not like with like: {'; '.join(unlike[:3])}]" if unlike else ""))
    for c, problem in missing.items():
        lines += ["", f"Column {c} not run: {problem}"]
    if suite.cost_column and (out / suite.cost_column).is_dir():
        lines += ["", f"Cost per round ({labels[suite.cost_column]}, seed 0, the machine that ran it):", ""]
        lines += cost_table(out, suite.cost_column, 0, suite.rows, suite.base["partition"].get("clients", 20))
    table = "\n".join(lines) + "\n"
    atomic_write_text(out / "table.md", table)
    records = []
    for c in suite.columns:
        curves = {}
        for r in suite.rows:
            for run in finished_runs(out / c, r):
                summary = summary_of(run)
                record = {
                    "column": c,
                    "method": r,
                    "seed": run.name.removeprefix("seed"),
                    "rounds": summary["rounds"],
                    "best_acc": summary["best_acc"],
                    "last_acc": summary["last_acc"],
                    "eval_point": summary.get("eval_point", "start"),
                    "curve": cell_trend([run]),
                    "paper": suite.columns[c].paper.get(r, ""),
                }
                if suite.last_k:
                    record[f"mean_last_{suite.last_k}"] = mean_of_last(run, suite.last_k, rounds=True)
                record.update({k: summary[k] for k in ("best_acc_after", "last_acc_after") if k in summary})
                records.append(record)
            if runs := finished_runs(out / c, r):
                curves[r] = mean_curve(runs)
        if curves:
            save_curves(curves, out / f"curves_{c}.png", title=f"{suite.paper}, {suite.columns[c].label}")
    fields = (
        ["column", "method", "seed", "rounds", "best_acc", "last_acc", "eval_point", "curve"]
        + ([f"mean_last_{suite.last_k}"] if suite.last_k else [])
        + ["paper"]
        + (["best_acc_after", "last_acc_after"] if any("best_acc_after" in r for r in records) else [])
    )
    atomic_write_csv(out / "table.csv", records, fields)
    return table


CLAIM_RULES = "pfedkit.papers.claims; docs/REPRODUCTION.md, how a claim is judged"


GPU_FOLDER_SUFFIX = "_gpu"  # a scale's runs on a lent GPU (benchmarks/device_suite.sh), judged apart from the CPU's


def results_folder(suite: str, scale: str) -> str:
    """<suite> for the small scale, <suite>_<scale> for another (dashes as underscores): each folder holds one scale."""
    return suite.replace("-", "_") + ("" if scale == "small" else f"_{scale}")


def suite_evidence(suite: Suite, out: Path, scale: str, on_gpu: bool) -> tuple[Evidence, str]:
    """How the suite's runs in `out` (of `scale`, on a GPU or not) are judged, with its noise floor: measured in `out`,
    or borrowed from the same scale and device of the suite `noise.suite` names (the same setting), in the folder
    beside `out` that the claims table reads; and the keys each column changes."""
    k = suite.last_k or 1
    source, folder = suite, out
    if suite.noise and "suite" in suite.noise:  # the floor of another suite of the same setting
        if suite.noise["suite"] not in SUITES:
            raise ConfigError(f"suite {suite.name}: noise.suite {suite.noise['suite']!r} is not a suite")
        source = SUITES[suite.noise["suite"]]
        if source is suite or (source.noise and "suite" in source.noise):
            raise ConfigError(
                f"suite {suite.name}: noise.suite {source.name!r} must measure its own floor (not borrow one itself)"
            )
        folder = out.parent / (results_folder(source.name, scale) + (GPU_FOLDER_SUFFIX if on_gpu else ""))
    # rule 3: a floor is read at the point its claims are judged, the paper's and any other a claim names
    points = [suite.paper_point] + sorted(
        {c["point"] for c in suite.claims if c.get("point", suite.paper_point) != suite.paper_point}
    )
    unlike = borrowed_differences(suite, source, scale) if source is not suite else ""
    entries = [] if unlike else noise_entries(source.noise)  # a floor of another setting (or scale) is not read
    measured = {
        p: [measured_floor(n, [folder], k, p, noise_setting(source, scale, n["column"])) for n in entries]
        for p in points
    }
    # the floors measured, then where a repeat diverged (no floor, at its level: no other floor stands in there)
    found = {
        p: [(f, level) for f, _, level in m if f is not None]
        + [(f, lv) for f, _, lv in m if f is None and lv is not None]
        for p, m in measured.items()
    }
    at_paper = measured[suite.paper_point]
    text = "; ".join(t for _, t, _ in at_paper) if at_paper else "no noise rows in the suite"
    judged = [run for c in suite.columns for r in suite.rows for run in finished_runs(out / c, r)]
    repeats = [run for n in entries for r in n["rows"] for run in finished_runs(folder / n["column"], r)]
    floor_point = None
    if suite.paper_point is None:  # runs read at their own points: the floor's runs must share one (rule 1)
        own = sorted({own_point(run) for run in repeats})
        if len(own) > 1:
            found[None] = []
            text = (
                f"not used for claims read at each run's own point: the noise rows' runs measure at "
                f"{' and '.join(own)} (one point, or set paper_point)"
            )
        floor_point = own[0] if len(own) == 1 else None
    if unlike:  # a borrowed floor bounds this suite's runs only if its setting is theirs
        found = {p: [] for p in points}
        text = f"not used: suite {source.name}'s floor is of another setting ({unlike})"
    for runs, name in ((judged, out.name), (repeats, folder.name)):  # a floor bounds the runs of its own device only
        devices = run_devices(runs)
        if any((device == "cpu") == on_gpu for device in devices):
            found = {p: [] for p in points}
            text = f"not used: {name} holds runs with run.device {', '.join(devices)} (a GPU's go in <folder>_gpu)"
    at_paper_floors = found[suite.paper_point]
    measured_first = bool(at_paper_floors) and at_paper_floors[0][0] is not None
    floor, level = at_paper_floors[0] if measured_first else (None, None)
    if source is not suite and not text.startswith("not used"):
        text += f", borrowed from suite {source.name} (the same setting)"
    column_keys = {name: frozenset(flat(dict(column.changes))) for name, column in suite.columns.items()}
    elsewhere = {p: tuple(found[p]) for p in points[1:] if found[p]}
    more = tuple(at_paper_floors[1:] if measured_first else at_paper_floors)
    setting = cell_setting(suite, scale, tuned_keys(out))
    return Evidence(out, k, suite.paper_point, floor, level, column_keys, more, elsewhere, floor_point, setting), text


def cell_setting(
    suite: Suite, scale: str, tuned: Mapping[str, Iterable[str]] = {}
) -> Callable[[str, str], dict[str, Any]]:
    """(column, row) -> the setting (`noise_setting`: the method's name and the values the suite states for the row,
    less those a `--tuned` run took, `tuned`) the suite gives that cell at `scale`: what the judged runs must have for
    the scale's floor to bound them."""
    known: dict[tuple[str, str], dict[str, Any]] = {}

    def setting(column: str, row: str) -> dict[str, Any]:
        if (column, row) not in known:
            known[column, row] = noise_setting(suite, scale, column, tuned)(row) if column in suite.columns else {}
        return known[column, row]

    return setting


def borrowed_differences(suite: Suite, source: Suite, scale: str) -> str:
    """How `suite`'s columns at `scale` differ in setting (SETTING_SECTIONS) from the noise rows' cells of `source`,
    whose floor it borrows: the first difference, "" if none."""
    if scale not in source.scales:
        return f"it has no {scale} scale"
    for noise in noise_entries(source.noise):
        row = noise["rows"][0]
        theirs = scale_setting(source, scale, noise["column"], row)
        for column in suite.columns:
            ours = scale_setting(suite, scale, column, row)
            for key in sorted(set(ours) | set(theirs)):
                if repr(ours.get(key)) != repr(theirs.get(key)):
                    return f"{key} {ours.get(key)!r} in column {column}, {theirs.get(key)!r} in its {noise['column']}"
    return ""


def scale_setting(suite: Suite, scale: str, column: str, row: str) -> dict[str, Any]:
    """The setting of a cell at `scale`: its config's SETTING_SECTIONS as flat keys, every one stated (where runs are
    kept aside)."""
    from pfedkit.config import PLACEMENT_KEYS, parse_config

    raw = cell_config(suite, scale, column, row)
    # every value as a run's config states it (1 -> 1.0, ...), the defaults the suite leaves unsaid included: a
    # run made under another default is of another setting
    stated = as_setting(flat(parse_config(raw).to_dict()))
    return {
        key: value
        for key, value in stated.items()
        if key.split(".")[0] in SETTING_SECTIONS and (key not in PLACEMENT_KEYS or key == PRETRAINED)
    }


def noise_setting(
    suite: Suite, scale: str, column: str, tuned: Mapping[str, Iterable[str]] = {}
) -> Callable[[str], dict[str, Any]]:
    """row -> the setting a noise row's run must have to bound this scale's runs: its cell's `scale_setting`, the
    method the row runs (a run of another method in its folder is not that row's result) and the method values the
    suite gives the row (a sibling row's run, another value of one method, is not its result either), less those
    `tuned` names for it (a row run at tuned values)."""

    def expected(row: str) -> dict[str, Any]:
        return {
            **scale_setting(suite, scale, column, row),
            "method.name": suite.method_of(row),
            **row_method_values(suite, scale, column, row, tuned.get(row, ())),
        }

    return expected


def row_method_values(suite: Suite, scale: str, column: str, row: str, tuned: Iterable[str] = ()) -> dict[str, Any]:
    """The method values the suite states for a row's cell (its row changes at every level, `name` aside), flat and as
    a run saves them, less the `tuned` keys."""
    from pfedkit.registry import with_method_values

    raw = cell_config(suite, scale, column, row)
    stated = {f"method.{key}" for key in raw.get("method", {}) if key != "name" and key not in set(tuned)}
    if not stated:
        return {}
    values = flat(with_method_values(method_config(raw, suite.method_of(row), 0)).to_dict())
    return {key: value for key, value in values.items() if key in stated or key.rpartition(".")[0] in stated}


def noise_entries(noise: Any) -> list[Mapping[str, Any]]:
    """A suite's noise rows: one {column, rows}, or a list of them (floors at several accuracies)."""
    if not noise:
        return []
    return list(noise) if isinstance(noise, (list, tuple)) else [noise]


def evidence_folders(suite: Suite, root: Path) -> dict[str, tuple[str, bool, Path]]:
    """label -> (scale, on a GPU, folder): each scale's results folder, and beside it the same scale's runs on a GPU
    (label "gpu", or "<scale>-gpu"): a GPU's numbers differ from a CPU's (TF32, other kernels), so they are compared
    only among themselves, with a floor measured there."""
    folders = {}
    for scale in suite.scales:
        folder = root / results_folder(suite.name, scale)
        folders[scale] = (scale, False, folder)
        folders["gpu" if scale == "small" else f"{scale}-gpu"] = (
            scale,
            True,
            folder.with_name(folder.name + GPU_FOLDER_SUFFIX),
        )
    return folders


def evidence_or_why(suite: Suite, out: Path, scale: str, on_gpu: bool) -> tuple[Evidence, str]:
    """`suite_evidence`, or, where a file it reads is damaged or the suite's noise is mis-stated, the runs without a
    floor and why: one bad file leaves the folder's lines without a verdict, not the table unwritten."""
    try:
        return suite_evidence(suite, out, scale, on_gpu)
    except PfedkitError as err:
        return Evidence(out, suite.last_k or 1, suite.paper_point, setting=cell_setting(suite, scale)), (
            f"not measured: {err}"
        )


def claims_table(root: Path, suites: Sequence[Suite], repo_script: bool = False) -> list[str]:
    """The generated table of where each paper's claims stand: one line per claim and scale whose results folder
    under `root` holds runs (`results_folder`), judged by the rules of `experiments.claims`. The commands it
    suggests run into `root` (`pfedkit reproduce ... --out`), or, with `repo_script`, are this repository's
    benchmarks/reproduce.py, which runs into its committed results."""
    runs_root = None if repo_script else root
    lines = [
        "| paper | claim | judges | verdict | numbers and the rule that decided | scale, rounds | id |",
        "|---|---|---|---|---|---|---|",
    ]
    floors, owed = [], []
    tally: dict[str, Counter[str]] = {}  # paper -> lines per verdict, for the summary under the table
    waiting: dict[str, Counter[str]] = {}  # paper -> lines that cannot tell, per what would decide them
    for suite in suites:
        if not suite.claims:
            continue
        folders = evidence_folders(suite, root)
        evidence = {
            label: (scale, on_gpu, *evidence_or_why(suite, out, scale, on_gpu))
            for label, (scale, on_gpu, out) in folders.items()
            if has_runs(out)
        }
        for label, (_, _, _, text) in evidence.items():  # each folder's own floor
            floors.append(f"- {suite.name}" + ("" if label == "small" else f" ({label})") + f": {text}")
        paper = suite.paper.split()[0]
        for number, claim in enumerate(suite.claims, 1):

            def line(judges: str, verdict: str, detail: str, where: str, label: str = "small") -> str:
                tally.setdefault(paper, Counter())[verdict.strip("*")] += 1
                if verdict.strip("*") == UNSURE:
                    waiting.setdefault(paper, Counter())[waits_on(detail)] += 1
                return (
                    f"| {paper} | {claim['text']} | {judges} | {verdict} | "
                    f"{detail.replace('|', '/')} | {where} | `{claim_id(suite, number, label)}` |"
                )

            if claim.get("kind") == "count":  # of a model, not of runs: one line whatever has run
                judgement = judge(claim, None)
                lines.append(line("count", f"**{judgement.verdict}**", judgement.detail, "-"))
                continue
            judged, diverged, missing = 0, {}, None  # missing: the cells the small folder has no run of
            for label, (scale, on_gpu, judged_on, _) in evidence.items():
                if "not_run" in claim:
                    break
                judgement = judge(claim, judged_on)  # a run misfiled or unreadable: this line cannot tell
                if judgement.verdict not in (HOLDS, FAILS, UNSURE):
                    if "diverged" in judgement.detail:
                        diverged[label] = judgement.detail
                    if label == "small":  # the folder a not-run line's command runs into (a diverged run is a result)
                        missing = list(
                            dict.fromkeys(
                                (c, r)
                                for c, r in claim_cells(claim)
                                if not ended_by_diverging(judged_on, c, r) and not finished_runs(judged_on.out / c, r)
                            )
                        )
                    continue
                judged += 1
                rounds = merge(suite.base, suite.scales[scale].changes)["train"]["rounds"]
                where = scale + (" (GPU)" if on_gpu else "")
                verdict = f"**{judgement.verdict}**"
                lines.append(line(judgement.judges, verdict, judgement.detail, f"{where}, {rounds}", label))
                owed += seeds_owed(
                    suite,
                    claim_id(suite, number, label),
                    scale,
                    on_gpu,
                    judgement,
                    judged_on,
                    judged_on.point(claim),
                    runs_root,
                )
            if not judged:  # every claim of the papers has a line: one not run says why (and which runs diverged)
                # the command it suggests runs the small scale on a CPU: name what that folder lacks, not another's
                reason = not_run_reason(suite, claim, missing, runs_root)
                lines.append(line("-", "not run", "; ".join([r for r in (reason, *diverged.values()) if r]), "-"))
            else:  # a folder whose runs diverged is a result too, beside the folders that judged the claim
                lines += [line("-", "not run", detail, "-", label) for label, detail in diverged.items()]
    lines += verdicts_by_paper(tally) + waiting_by_paper(waiting)
    lines += ["", "Noise floors (rule 3), per suite:", "", *floors] if floors else []
    judged_any = any(counts[HOLDS] + counts[FAILS] + counts[UNSURE] for counts in tally.values())
    # an empty list is said, not left out: a reader should not wonder whether the section was dropped
    return lines + (["", OWED_HEADING, "", *(owed or [NOTHING_OWED])] if judged_any else [])


VERDICT_COUNTS_HEADING = "Lines per paper and verdict:"


def counts_by_paper(heading: str, kinds: Sequence[str], tally: Mapping[str, Counter[str]]) -> list[str]:
    """A table under the claims table: lines counted per paper and kind, with a row for all papers."""
    if not tally:
        return []
    lines = ["", heading, "", f"| paper | {' | '.join(kinds)} | lines |", "|---" * (len(kinds) + 2) + "|"]
    for paper, counts in [*tally.items(), ("all", sum(tally.values(), Counter()))]:
        lines.append(f"| {paper} | {' | '.join(str(counts[k]) for k in kinds)} | {sum(counts.values())} |")
    return lines


def verdicts_by_paper(tally: Mapping[str, Counter[str]]) -> list[str]:
    """The claims table's lines counted per paper and verdict (a count claim's verdict is one of the four)."""
    return counts_by_paper(VERDICT_COUNTS_HEADING, (HOLDS, FAILS, UNSURE, NOT_RUN), tally)


WAITING_HEADING = (
    "Lines that cannot tell, by what would decide them first: rounds (a gap past the bar held open by rule 4, or a "
    "curve on runs shorter than the paper's still rising), seeds (a gap within its bar), a floor (none measured near "
    "the rows), other (runs unlike or unread: the line names them):"
)


def waiting_by_paper(waiting: Mapping[str, Counter[str]]) -> list[str]:
    """The lines that cannot tell counted per paper and what would decide them (`claims.waits_on`)."""
    return counts_by_paper(WAITING_HEADING, WAITS_ON, waiting)


def ended_by_diverging(evidence: Evidence, column: str, row: str) -> bool:
    """Whether a cell's runs diverged in this folder (a result, not a run owed); a misfiled one is no result here."""
    try:
        return bool(evidence.diverged(column, row))
    except PfedkitError:
        return False


LEADING_SEEDS = 3  # issue 61: a verdict, or a gap halfway to one, is shown on this many seeds
OWED_SHARE = 0.5  # a cannot-tell gap at least this share of the way to the bar is owed seeds
MORE_SEEDS = 5  # issue 96: where 3 seeds leave a gap halfway to the t-test's bar, the seeds that would decide it
OWED_HEADING = (
    f"Lines owed seeds: decided, or with a gap at least halfway to rule 3's bar (past it, but held open by rule 4, "
    f"included), on fewer than {LEADING_SEEDS} seeds; or on {LEADING_SEEDS} seeds, cannot tell, at least halfway to "
    f"the bar and short of it (the t-test's bar is wide on {LEADING_SEEDS}: {MORE_SEEDS} seeds); each with the "
    "command that runs the rest (finished cells are skipped; a line without a noise floor owes a floor first, not "
    "seeds):"
)

NOTHING_OWED = f"- none: every line decided, or at least halfway to deciding, rests on {LEADING_SEEDS} seeds"


def seeds_owed(
    suite: Suite,
    name: str,
    scale: str,
    on_gpu: bool,
    judgement: Judgement,
    evidence: Optional[Evidence] = None,
    point: Optional[str] = None,
    runs_root: Optional[Path] = None,
) -> list[str]:
    """The owed-seeds entry of a judged line (none when it rests on LEADING_SEEDS seeds, or is far from deciding):
    the comparisons that decide it and the command that runs their other seeds; where every one of those seeds has
    a result in `evidence` (read at `point`) or diverged (a result, not run again), it says nothing is left to run."""
    decided = judgement.verdict in (HOLDS, FAILS)
    # a gap past the bar held open by rule 4 (a rising curve) is owed seeds too: they move the mean curve as well
    short = [b for b in judgement.basis if len(b.seeds) < LEADING_SEEDS and (decided or OWED_SHARE <= (b.share or 0))]
    # on 3 seeds the t-test's bar is 4.30 standard errors: a gap at least halfway there, short of it, owes 5 seeds
    # (t(4) = 2.78, and the mean's error shrinks by sqrt(5/3)); one past the bar that rule 4 holds open owes rounds
    more = [
        b
        for b in judgement.basis
        if not decided and LEADING_SEEDS <= len(b.seeds) < MORE_SEEDS and OWED_SHARE <= (b.share or 0) < 1
    ]
    target = MORE_SEEDS if more else LEADING_SEEDS
    short += more
    if not short:
        return []
    columns = dict.fromkeys(column for b in short for column, _ in b.cells)
    rows = dict.fromkeys(row for b in short for _, row in b.cells)
    seeds = min(len(b.seeds) for b in short)
    pairs = "; ".join(
        " vs ".join(row if len({c for c, _ in b.cells}) == 1 else f"{row} in {column}" for column, row in b.cells)
        for b in short
    )
    # rounded down (a gap 99.6% of the way has not reached the bar, and "100%" would say it had), float error aside
    furthest = max(b.share or 0 for b in short)
    way = "" if decided else f", {math.floor(100 * furthest + 1e-9)}% of the way" if furthest < 1 else ", past the bar"
    seeds_to_run = f" --seeds {','.join(map(str, range(target)))}"
    command = suite_command(suite, columns, rows, scale, on_gpu, runs_root) + seeds_to_run
    said = f"- `{name}`: {judgement.verdict} on {seeds} seed{'s' if seeds > 1 else ''}{way} ({pairs}): "
    if evidence is not None:  # each cell's seeds that ended: read, or diverged (a result, not run again)
        cells = dict.fromkeys(cell for b in short for cell in b.cells)
        try:
            lost = {(c, r): evidence.diverged(c, r) for c, r in cells}
            ended = {(c, r): lost[c, r] | set(evidence.read(c, r, point)[0]) for c, r in cells}
        except PfedkitError:  # a misfiled or damaged run: its line says so; the command stands
            ended = {}
        if ended and all({f"seed{n}" for n in range(target)} <= seeds for seeds in ended.values()):
            diverged = "; ".join(f"{r} in {c} on {', '.join(sorted(lost[c, r]))}" for c, r in cells if lost[c, r])
            return [said + f"seeds 0-{target - 1} have all ended, nothing left to run (diverged: {diverged})"]
    return [said + f"`{command}`"]


def claim_cells(claim: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The (column, row) cells a judged claim reads."""
    columns = [c for c in (claim.get("column"), claim.get("reference")) if c]
    return [(c, r) for c in columns for r in claim_rows(claim)]


def not_run_reason(
    suite: Suite,
    claim: Mapping[str, Any],
    missing: Optional[Sequence[tuple[str, str]]] = None,
    runs_root: Optional[Path] = None,
) -> str:
    """Why a claim has no verdict yet: its own `not_run` reason, else the runs it waits for and the command (into
    `runs_root`, see suite_command): the `missing` (column, row) cells, those a results folder has no finished or
    diverged run of (None: every cell)."""
    if "not_run" in claim:
        return str(claim["not_run"]).replace("|", "/")
    cells = claim_cells(claim) if missing is None else list(missing)
    if not cells:
        return ""
    rows, columns = list(dict.fromkeys(r for _, r in cells)), list(dict.fromkeys(c for c, _ in cells))
    return (
        f"no finished runs of {', '.join(rows)} in column {' and '.join(columns)}; "
        f"`{suite_command(suite, columns, rows, runs_root=runs_root)}` runs them"
    )


def suite_command(
    suite: Suite,
    columns: Iterable[str],
    rows: Iterable[str],
    scale: str = "small",
    on_gpu: bool = False,
    runs_root: Optional[Path] = None,
) -> str:
    """The command that runs these cells of a suite into the results folder that the claims table reads under
    `runs_root` (a GPU's runs into its own folder, on CUDA); without one, this repository's scripts, which fill
    in its committed results (on the lent GPU through device_suite.sh)."""
    at_scale = f" --scale {scale}" if scale != "small" else ""
    cells = f"{suite.name}{at_scale} --columns {','.join(columns)} --rows {','.join(rows)}"
    if runs_root is None:
        runner = "bash benchmarks/device_suite.sh SECONDS" if on_gpu else "python benchmarks/reproduce.py"
        return f"{runner} {cells}"
    folder = runs_root / (results_folder(suite.name, scale) + (GPU_FOLDER_SUFFIX if on_gpu else ""))
    return f"pfedkit reproduce {cells} --out {folder}" + (" --set run.device=cuda" if on_gpu else "")


def claim_id(suite: Suite, number: int, scale: str) -> str:
    """A claim's name in the generated table and in prose that cites it: suite#N, with /scale beyond the small one."""
    return f"{suite.name}#{number}" + ("" if scale == "small" else f"/{scale}")


CLAIMS_BEGIN = "<!-- claims table: generated by `python benchmarks/reproduce.py --claims`; do not edit by hand -->"
CLAIMS_END = "<!-- end of the generated claims table -->"


def claim_verdicts(table: Iterable[str]) -> dict[str, str]:
    """Each line of a generated claims table by its id: {'suite#N': verdict}, the verdict without its bold."""
    verdicts = {}
    for line in table:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 7 and cells[-1].startswith("`") and cells[-1].endswith("`"):
            verdicts[cells[-1].strip("`")] = cells[3].strip("*")
    return verdicts


def verdict_changes(before: Iterable[str], after: Iterable[str]) -> list[str]:
    """The lines whose verdict differs between two claims tables, 'suite#N: old -> new', and lines new to `after`
    or gone from it (an id is a claim's place in its suite: a claim inserted before others renumbers them)."""
    old, new = claim_verdicts(before), claim_verdicts(after)
    changed = [f"{key}: {old[key]} -> {verdict}" for key, verdict in new.items() if old.get(key, verdict) != verdict]
    changed += [f"{key}: new line, {verdict}" for key, verdict in new.items() if key not in old]
    return changed + [f"{key}: line gone (was {verdict})" for key, verdict in old.items() if key not in new]


def update_claims(document: Path, table: Sequence[str]) -> Optional[list[str]]:
    """Replace the generated block of `document` (between CLAIMS_BEGIN and CLAIMS_END) with `table`; returns the
    lines it replaced, or None (writing nothing) when the document lacks the markers."""
    text = document.read_text()
    if CLAIMS_BEGIN not in text or CLAIMS_END not in text:
        return None
    head, rest = text.split(CLAIMS_BEGIN, 1)
    replaced, tail = rest.split(CLAIMS_END, 1)
    atomic_write_text(document, head + CLAIMS_BEGIN + "\n" + "\n".join(table) + "\n" + CLAIMS_END + tail)
    return replaced.splitlines()


def describe(suite: Suite) -> str:
    """The `--list` entry: paper and table, rows, columns, data, and time at each scale on this machine."""
    data = sorted(
        {d for c in suite.columns for d in datasets_of(cell_config(suite, next(iter(suite.scales)), c, suite.rows[0]))}
    )
    lines = [
        f"{suite.name}: {suite.paper}",
        f"  rows:    {', '.join(suite.rows)}",
        "  columns: " + "; ".join(f"{c} ({col.label})" for c, col in suite.columns.items()),
        f"  data:    {', '.join(data)}",
    ]
    cells = suite.cells(list(suite.columns), list(suite.rows))
    for name, scale in suite.scales.items():
        rounds = merge(suite.base, scale.changes)["train"]["rounds"]
        total_rounds = sum(cell_config(suite, name, c, r)["train"]["rounds"] for c, r in cells)
        runs = f"{len(cells)} runs of {rounds} rounds" + (
            " (some rows more)" if total_rounds > len(cells) * rounds else ""
        )
        if scale.round_s:
            hours = total_rounds * scale.round_s / 3600
            estimate = f"~{scale.round_s:.0f} s/round per row here, ~{hours:.1f} h for {runs} per seed"
        else:
            estimate = f"{runs} per seed; not timed here (needs a GPU or days on 2 cores)"
        lines.append(f"  {name:>5}: {estimate}; {scale.about}")
    return "\n".join(lines)
