"""The papers' tables as suites for `pfedkit reproduce`, read from one TOML file per table in `tables/`.

A suite file states everything about its table as data: the base run config, the columns (config changes, the
paper's numbers and where in the paper they are), the rows and their changes, the scales, a backbone to pretrain,
and the paper's claims. The code that runs suites (`reproduce.py`) knows no paper.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from pfedkit.config import tomllib
from pfedkit.errors import ConfigError
from pfedkit.experiments.suite import Column, Scale, Suite

PAPERS = Path(__file__).with_name("tables")
SUITE_KEYS = {
    "name",
    "paper",
    "rows",
    "base",
    "columns",
    "scales",
    "row_changes",
    "pretrain",
    "claims",
    "threads",
    "last_k",
    "cost_column",
    "notes",
    "paper_point",
    "noise",
}
COLUMN_KEYS = {"label", "changes", "paper", "rows", "row_changes", "source"}
SCALE_KEYS = {"about", "round_s", "changes", "row_changes", "pretrain"}
# point: the evaluation point judged, else each run's own; differ_in: the config keys in which the compared rows may
# differ (what the paper says differs), beyond the methods themselves
CLAIM_KEYS = {
    "above": {"text", "column", "rows", "point", "differ_in"},
    # a paper's "performs poorly": the first of rows below every other
    "below": {"kind", "text", "column", "rows", "point", "differ_in"},
    "within": {"kind", "text", "column", "row", "reference", "points", "label", "point", "differ_in"},
    "margin": {"kind", "text", "column", "row", "over", "at_least", "point", "differ_in"},
    # a paper's "on par" or "near-highest": row at most `points` behind each of over
    "near": {"kind", "text", "column", "row", "over", "points", "point", "differ_in"},
    "number": {"kind", "text", "column", "row", "value", "points", "point"},
    # a paper's "turns into" or "is the same as": the two rows within points of each other, either way
    "equal": {"kind", "text", "column", "rows", "points", "point", "differ_in"},
    # a paper's "all methods converge": every row's curve flat at the end; rounds, the paper's (shorter runs that
    # still rise may yet settle)
    "converged": {"kind", "text", "column", "rows", "rounds", "point"},
    # a trainable-parameter count of a model built here (options as a config's model.options), no runs needed
    "count": {"kind", "text", "model", "options", "input_shape", "num_classes", "millions"},
    # a claim of the paper no column here can judge (a cost, a parameter count, a setting not run): its line says why
    "unjudged": {"kind", "text", "not_run"},
}


def _check(keys: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(keys) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(allowed))}")


CLAIM_NEEDS = {  # the keys without which a kind cannot be judged
    "above": ("text", "column", "rows"),
    "below": ("text", "column", "rows"),
    "within": ("text", "column", "row", "reference", "points"),
    "margin": ("text", "column", "row", "over", "at_least"),
    "near": ("text", "column", "row", "over", "points"),
    "number": ("text", "column", "row", "value", "points"),
    "equal": ("text", "column", "rows", "points"),
    "converged": ("text", "column", "rows"),
    "count": ("text", "model", "input_shape", "num_classes", "millions"),
    "unjudged": ("text", "not_run"),
}


def claim_rows(claim: Mapping[str, Any]) -> list[str]:
    """The rows a claim names, each once, claimant first: an "above" claim's `rows`, else `row` and its `over`."""
    named = [*claim.get("rows", ()), *([claim["row"]] if "row" in claim else []), *claim.get("over", ())]
    return list(dict.fromkeys(named))


CLAIM_NUMBERS = ("points", "at_least", "value", "num_classes")
CLAIM_NAMES = ("text", "column", "row", "reference", "point", "label", "model", "not_run")
CLAIM_NAME_LISTS = ("rows", "over", "differ_in")


def value_problem(claim: Mapping[str, Any]) -> str:
    """A claim value of the wrong type (a number written as a string, one row where a list goes), named; "" if none."""
    from pfedkit.models import is_input_shape, is_positive_int  # the checks build_model makes

    for key in CLAIM_NUMBERS:
        if key in claim and (isinstance(claim[key], bool) or not isinstance(claim[key], (int, float))):
            return f"{key} = {claim[key]!r}; it must be a number (unquoted)"
    for key in CLAIM_NAMES:
        if key in claim and not isinstance(claim[key], str):
            return f"{key} = {claim[key]!r}; it must be a string"
    for key in CLAIM_NAME_LISTS:
        if key in claim and (
            not isinstance(claim[key], (list, tuple)) or not all(isinstance(v, str) for v in claim[key])
        ):
            return f"{key} = {claim[key]!r}; it must be a list of strings, e.g. [{claim[key]!r}]"
    if "millions" in claim and (isinstance(claim["millions"], bool) or not is_number(claim["millions"])):
        return f'millions = {claim["millions"]!r}; it must be a number (a string keeps its trailing zeros: "0.120")'
    if "rounds" in claim and not is_positive_int(claim["rounds"]):
        return f"rounds = {claim['rounds']!r}; it must be the paper's whole number of rounds, 1 or more (e.g. 200)"
    if "options" in claim and not isinstance(claim["options"], Mapping):
        return f"options = {claim['options']!r}; it must be a table of model options"
    if "num_classes" in claim and not is_positive_int(claim["num_classes"]):
        return f"num_classes = {claim['num_classes']!r}; it must be a whole number of classes, 1 or more (e.g. 10)"
    if "input_shape" in claim and not is_input_shape(claim["input_shape"]):
        return f"input_shape = {claim['input_shape']!r}; it must be three positive integers (C, H, W)"
    return ""


def is_number(value: Any) -> bool:
    """A number, or a string that reads as one."""
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def claim_problem(claim: Mapping[str, Any], kind: str, columns: Mapping[str, Any], rows: Sequence[str]) -> str:
    """What makes a claim unjudgeable or vacuous (a row outside the suite, a pair of a row with itself, a margin of
    no points), with the fix; "" if nothing."""
    missing = [key for key in CLAIM_NEEDS[kind] if key not in claim]
    if missing:
        return f"a {kind} claim needs {', '.join(missing)}"
    mistyped = value_problem(claim)
    if mistyped:
        return mistyped
    if kind == "count":
        from pfedkit.models import MODEL_NAMES, model_options

        if claim["model"] not in MODEL_NAMES:
            return f"model {claim['model']!r} is not one built here ({', '.join(MODEL_NAMES)})"
        unknown = sorted(set(claim.get("options", {})) - set(model_options(claim["model"])))
        if unknown:
            return f"model {claim['model']!r} has no option {unknown[0]!r}"
    named_columns = [claim[key] for key in ("column", "reference") if key in claim]
    unknown = [c for c in named_columns if c not in columns]
    if unknown:
        return f"column {unknown[0]!r} is not one of the suite's columns ({', '.join(columns)})"
    named_rows = claim_rows(claim)
    outside = [r for r in named_rows if r not in rows]
    if outside:
        return f"row {outside[0]!r} is not in the suite's rows"
    for column in named_columns:  # a column that runs some rows only: the claim's rows among them
        runs_here = columns[column].rows
        elsewhere = [r for r in named_rows if runs_here is not None and r not in runs_here]
        if elsewhere:
            return f"row {elsewhere[0]!r} does not run in column {column!r} (its rows: {', '.join(runs_here)})"
    if claim.get("point") not in (None, "start", "after-local"):
        return f'point = {claim["point"]!r}; use "start" or "after-local"'
    if kind in ("above", "below") and (len(claim["rows"]) < 2 or len(set(claim["rows"])) != len(claim["rows"])):
        return "rows must name the claimant and at least one other row, each once"
    if kind == "equal" and (len(claim["rows"]) != 2 or claim["rows"][0] == claim["rows"][1]):
        return "rows must name exactly two different rows (the two said to be the same)"
    if kind == "converged" and (not claim["rows"] or len(set(claim["rows"])) != len(claim["rows"])):
        return "rows must name at least one row, each once"
    if kind in ("margin", "near") and (not claim["over"] or claim["row"] in claim["over"]):
        return "over must name at least one row other than row"
    if kind == "within" and claim["reference"] == claim["column"]:
        return "reference must be another column than column (a row is always within 0 points of itself)"
    for key in ("at_least", "points"):
        if key in claim and not claim[key] > 0:
            return f"{key} = {claim[key]!r}; it must be above 0 (a margin or a band of no points judges nothing)"
    return ""


def suite_from_toml(path: Path) -> Suite:
    """One suite file, checked: unknown keys and rows outside the suite are errors naming the file."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path} is not valid TOML: {err}") from None
    _check(data, SUITE_KEYS, str(path))
    rows = tuple(data["rows"])
    columns = {}
    for key, col in data["columns"].items():
        _check(col, COLUMN_KEYS, f"{path} [columns.{key}]")
        outside = sorted((set(col.get("rows", ())) | set(col.get("paper", {}))) - set(rows))
        if outside:
            raise ConfigError(f"{path} [columns.{key}]: rows {', '.join(outside)} are not in the suite's rows")
        columns[key] = Column(
            col["label"],
            col.get("changes", {}),
            col.get("paper", {}),
            tuple(col["rows"]) if "rows" in col else None,
            col.get("row_changes", {}),
            col.get("source", ""),
        )
    scales = {}
    for key, scale in data["scales"].items():
        _check(scale, SCALE_KEYS, f"{path} [scales.{key}]")
        if key == "gpu" or key.endswith(("-gpu", "_gpu")):  # a scale's runs on a lent GPU are named so (claims table)
            raise ConfigError(
                f"{path} [scales.{key}]: a scale name ending in 'gpu' is taken by a scale's GPU runs; "
                "name it after what it runs (e.g. 'paper')"
            )
        scales[key] = Scale(
            scale.get("changes", {}),
            scale.get("round_s", 0),
            scale["about"],
            scale.get("row_changes", {}),
            scale.get("pretrain", {}),
        )
        if "pretrain" in scale and "pretrain" not in data:
            raise ConfigError(
                f"{path} [scales.{key}]: a scale's pretrain changes the suite's [pretrain], which it has not"
            )
    for claim in data.get("claims", ()):
        kind = claim.get("kind", "unjudged" if "not_run" in claim else "above")
        if kind not in CLAIM_KEYS:
            raise ConfigError(f"{path}: claim {claim.get('text')!r} has kind {kind!r}; kinds: {', '.join(CLAIM_KEYS)}")
        _check(claim, CLAIM_KEYS[kind] | {"kind"}, f"{path} claim {claim.get('text')!r}")
        problem = claim_problem(claim, kind, columns, rows)
        if problem:
            raise ConfigError(f"{path} claim {claim.get('text')!r}: {problem}")
    paper_point = data.get("paper_point")
    if paper_point not in (None, "start", "after-local"):
        raise ConfigError(
            f'{path}: paper_point = {paper_point!r}; use "start" or "after-local" (the evaluation point '
            "the paper's numbers are read at)"
        )
    noise = data.get("noise")
    for entry in noise if isinstance(noise, list) else [noise] if noise is not None else []:
        _check(entry, {"column", "rows", "suite"}, f"{path} noise")
        if "suite" in entry:  # measured in another suite of the same setting (checked when the floor is read)
            if set(entry) != {"suite"} or isinstance(noise, list):
                raise ConfigError(f"{path}: noise = {{suite = ...}} borrows that suite's floor; give nothing else")
        elif (
            entry.get("column") not in columns
            or len(entry.get("rows", ())) < 2
            or set(entry["rows"]) - set(rows)
            or set(entry["rows"]) - set(columns[entry["column"]].rows or rows)  # rows the column runs
        ):
            raise ConfigError(
                f"{path}: noise needs a column of the suite and two or more of its rows (repeats of one "
                "config differing only in run.repeat), a list of such (floors at several accuracies), or "
                "suite = NAME to borrow another suite's floor"
            )
    return Suite(
        name=data["name"],
        paper=data["paper"],
        base=data["base"],
        columns=columns,
        rows=rows,
        scales=scales,
        row_changes=data.get("row_changes", {}),
        pretrain=data.get("pretrain"),
        claims=tuple(data.get("claims", ())),
        threads=data.get("threads"),
        last_k=data.get("last_k"),
        cost_column=data.get("cost_column"),
        notes=data.get("notes", ""),
        paper_point=paper_point,
        noise=noise,
    )


SUITES: dict[str, Suite] = {suite.name: suite for suite in map(suite_from_toml, sorted(PAPERS.glob("*.toml")))}
