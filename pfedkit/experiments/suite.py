"""A paper's table as data: its columns (settings), rows (methods and variants), scales (how far it runs here) and
claims. The suites themselves are TOML files read by suites.py; reproduce.py runs them and judges their claims."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence


@dataclass(frozen=True)
class Column:
    label: str
    changes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # config sections merged into the base
    paper: Mapping[str, float] = field(default_factory=dict)  # row -> the paper's accuracy (%)
    rows: Optional[tuple[str, ...]] = None  # rows run in this column; None = every row
    row_changes: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)  # rows' changes here only
    source: str = ""  # where in the paper its numbers are


@dataclass(frozen=True)
class Scale:
    changes: Mapping[str, Mapping[str, Any]]  # config sections merged into base and column (rounds, data share, ...)
    round_s: float  # seconds per round of a typical row, measured on this project's 2-core machine (0 = unknown)
    about: str  # one line: how this scale differs from the paper's
    row_changes: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(
        default_factory=dict
    )  # rows kept apart, e.g. at full rounds
    pretrain: Mapping[str, Any] = field(
        default_factory=dict
    )  # keys replacing the suite's [pretrain] ones at this scale


@dataclass(frozen=True)
class Suite:
    name: str
    paper: str  # which paper and table
    base: Mapping[str, Any]  # the run config every cell starts from
    columns: Mapping[str, Column]
    rows: tuple[str, ...]
    scales: Mapping[str, Scale]
    row_changes: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)
    pretrain: Optional[Mapping[str, Any]] = (
        None  # a backbone to pretrain before the first cell (pretrain_backbone's arguments)
    )
    claims: tuple[Mapping[str, Any], ...] = ()  # the paper's claims, checked on the finished runs (experiments.claims)
    threads: Optional[int] = None  # torch threads of the suite's own process (server-side training)
    last_k: Optional[int] = None  # also show (and judge claims on) the mean of the evaluations in the last k rounds
    cost_column: Optional[str] = None
    notes: str = ""
    paper_point: Optional[str] = None  # the evaluation point the paper's numbers are read at, for runs measured at both
    # {column, rows}: repeats of one config (run.repeat) whose spread is the noise floor a one-seed verdict must clear
    noise: Optional[Mapping[str, Any]] = None

    def method_of(self, row: str) -> str:
        """The registered method a row runs: the row itself, or the one its row_changes name (a variant row,
        e.g. one value of a hyper-parameter sweep)."""
        return self.row_changes.get(row, {}).get("method", {}).get("name", row)

    def pretrain_at(self, scale: str) -> Optional[Mapping[str, Any]]:
        """The backbone to pretrain at `scale`: the suite's [pretrain] with the scale's keys in place of its own
        (another model with its own options, more epochs)."""
        return {**self.pretrain, **self.scales[scale].pretrain} if self.pretrain else None

    def cells(self, columns: Sequence[str], rows: Sequence[str]) -> list[tuple[str, str]]:
        return [(c, r) for c in columns for r in rows if self.columns[c].rows is None or r in self.columns[c].rows]
