"""A paper's claims, stated as data in its suite file and judged on the finished runs by the rules below, each a
function here, so that no verdict can contradict them. docs/REPRODUCTION.md's claims table is generated from them
(`pfedkit reproduce --claims`).

Kinds: "above" (the default) judges a direction: the first of `rows` above every other in `column`, each pair on its
own; "below" the first of `rows` below every other (a paper's "performs poorly"), each pair as "above". "margin"
judges the paper's margin: `row` ahead of each of `over` by at least `at_least` points; "near" judges a paper's "on
par" or "near-highest": `row` at most `points` behind each of `over` (a margin of -points). "within" judges
closeness: `row` in `column` within `points` of the same row in the `reference` column; "number" judges a match:
`row` within `points` of a paper's number `value` (one run against a constant: the floor counts once); "count" a
parameter count: the trainable parameters of a `model` built here against the paper's `millions`, at the paper's
precision (no runs and no noise: rules 1-4 do not apply); "equal" judges a paper's "turns into": the two `rows` within
`points` of each other either way ("near" both ways); "converged" a paper's "all methods converge": every one of
`rows` gains in its last fifth no more than the tables' ↑ mark allows, judged per row by a t-test on its per-seed
gains alone (a gain is within one run: no floor; a row still rising on runs shorter than the paper's `rounds`, or that
diverged on a seed, cannot tell).
Every kind compares the mean accuracy of the evaluations in each run's last k rounds (the same stretch of training
for a row evaluated every round and an FT row evaluated every 5). The rules:

1. Point: a claim is judged at the evaluation point it names, else at the one its suite declares for the paper's
   numbers (`paper_point`), else at each run's own. A finished run never evaluated there, or whose evaluations there
   end before its last round (an after-local curve: the round before it), gives no result: the line names it, and a
   row with no other result cannot tell.
2. Like with like: two rows are compared on the seeds both finished (folders seed<N>; a seed fixes the partition and
   the sampled clients, and its runs must state that seed: a run filed under another's leaves its lines "cannot
   tell", named), and only if their runs agree, on every one of those seeds, on every config key beyond what
   `differ_in` names (where a run is kept, two different methods' own hyper-parameters (a method's variants share
   theirs), and a hyper-parameter that either run's other values leave unused, aside; a "within" claim's two columns
   may differ in what the columns change). Of where a run is kept, what says what it ran is compared where both runs
   record it: the data's checksum, a pretrained backbone or none, pfedkit's version for built-in methods.
3. Noise: the standard error of the mean gap comes from the spread of the per-seed gaps (between seeds), and is never
   below what a noise floor gives: the spread of repeated runs of one config (the suite's `noise` rows: one method, a
   run.repeat each and nothing else different; one that diverged: no floor, and no floor measured elsewhere stands in
   for it near its accuracy), measured at the claim's scale (its runs as the suite sets them there, every setting
   key, defaults included (every model option, a [proxy] section, a pretrained backbone or none), and the judged runs
   likewise at their cells', of their rows' methods and at the method values the suite gives their rows (less those a
   `--tuned` run took); a floor bounds every row near its accuracy, whatever the row's own changes; a suite's floor
   bounds all its columns, which differ only in what the columns change, while a borrowed floor bounds only columns
   of its setting), device and evaluation point (runs read at their own points: where the floor's runs were read):
   each compared row takes the floor measured nearest its accuracy, within FLOOR_REACH points, and a pair the root
   mean square of its two. Without such a floor, no verdict, however many seeds; nor on a non-finite result; repeats
   that gave one result (a spread of 0) are no floor. The bar is a paired t-test's (95%, two-sided): t at n - 1
   degrees of freedom for n seeds times the standard error; on one seed, t at the floor's degrees of freedom (a floor
   from two runs cannot decide alone). A gap within the bar of its boundary, or exactly on it: cannot tell.
   "Within" and a paper's number are judged on the signed gaps, not their distances.
4. Provisional: while the curve that could close the gap is still rising (the tables' ↑, and gaining faster per round
   than the curve it is closing on, or at a pace within the noise of the other's: the per-seed differences' standard
   error over seeds, on two seeds or more), a verdict is at most "cannot tell"; for a paper's number, while the row's
   curve still rises at all (but away from a number it already fails); for "within", while either curve rises faster
   than the other (a band held while the trailer climbs, a miss while the trailer closes on the leader). A curve too
   short for the mark rises when its last fifth gains more than half a point; a row's seeds are read at the rounds all
   of them evaluated.
"Above every other" is every pair: the claimant against each other row, each pair by rules 2-4; it holds when every
pair holds, does not hold when any does not. A row with no finished run (or whose runs diverged) is not a pair: the
line names it ("not run: ..."), and its verdict is of the rows that ran; likewise a margin's. A claimant that diverged
on seeds its rival finished holds, at most, on the seeds it survived: cannot tell (a divergence is its worst result);
likewise a rival that diverged where the claimant finished leaves "does not hold" at cannot tell.
"""

from __future__ import annotations

import functools
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence

from pfedkit.config import PLACEMENT_KEYS, RunSection, flat, read_toml
from pfedkit.errors import PfedkitError
from pfedkit.registry import inert_keys, read_saved_config, with_method_values
from pfedkit.reports.tables import (
    MIN_EVALUATIONS,
    PER_ROUNDS,
    RISE_POINTS,
    config_section,
    curve_gain,
    curve_trend,
    diverged_runs,
    finished_runs,
    headline_curve,
    last_evaluations,
    own_point,
    run_config_toml,
    summary_of,
)

HOLDS, FAILS, UNSURE, NOT_RUN = "holds", "does not hold", "cannot tell", "not run"
FLOOR_REACH = 15.0  # points: a floor measured this far from the compared rows' accuracy does not apply to them
# the config sections a scale and a column fix, the method aside: what rule 3's setting check compares
SETTING_SECTIONS = ("train", "data", "partition", "model", "eval", "proxy")


@dataclass(frozen=True)
class Basis:
    """What one comparison behind a verdict rests on: its (column, row) cells, the seeds they share, how far the
    mean gap has come towards deciding (|mean| over rule 3's bar: 1 or more decides; None without a bar),
    and that mean gap, signed (the mean excess over the boundary on those seeds: below 0, a shortfall)."""

    cells: tuple[tuple[str, str], ...]
    seeds: tuple[str, ...]
    share: Optional[float]
    gap: float
    error: Optional[float] = None  # the mean gap's standard error by rule 3 (None without a floor on one seed)

    @classmethod
    def of(
        cls, cells: Sequence[tuple[str, str]], seeds: Sequence[str], excess: Sequence[float], floor: Optional[float]
    ) -> Basis:
        """The comparison from its per-seed excess over the boundary and the noise floor that sets its bar."""
        finite = all(math.isfinite(e) for e in excess) and (floor is None or math.isfinite(floor))
        error = gap_error(excess, floor) if finite else None
        return cls(tuple(cells), tuple(seeds), share_of_bar(excess, floor), statistics.fmean(excess), error)


@dataclass(frozen=True)
class Judgement:
    verdict: str  # HOLDS, FAILS, UNSURE or NOT_RUN
    judges: str  # "direction", "margin of N points", "at most N points behind" or "within N points"
    detail: str = ""  # the numbers, and which rule decided
    basis: tuple[Basis, ...] = ()  # the comparisons shown as deciding it (the seeds a verdict still owes)

    def line(self, text: str) -> str:
        return f"- {text}: {self.verdict}" + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True)
class Evidence:
    """Where a suite's runs are and how to read them: its output folder, k, the point and the noise floor."""

    out: Path
    k: int
    paper_point: Optional[str] = None
    floor: Optional[float] = None  # standard deviation (points) of one config's result over repeats
    floor_at: Optional[float] = None  # the accuracy (%) of the runs the floor was measured on; None: not known
    column_keys: Mapping[str, frozenset] = field(default_factory=dict)  # config keys each column changes
    # further (floor, accuracy) pairs, measured at other levels; a floor of None: a repeat there diverged (no floor)
    more_floors: tuple[tuple[Optional[float], float], ...] = ()
    # the floors above are measured at paper_point; these, as (floor, accuracy) pairs, at the other points claims name
    floors_at_points: Mapping[str, tuple[tuple[float, Optional[float]], ...]] = field(default_factory=dict)
    # without a paper_point each run is read at its own point: the one the floor's runs were read at (None: unknown)
    floor_point: Optional[str] = None
    # (column, row) -> the setting its runs must have (flat keys: the scale's and column's, the row's method's name)
    # for the floor measured at that scale to bound them; None: unchecked
    setting: Optional[Callable[[str, str], Mapping[str, Any]]] = None
    # (column, row, point) -> `read`'s answer: a table reads each cell for several claims and pairs, its runs unchanged
    known: dict = field(default_factory=dict, compare=False, repr=False)

    def floor_for(
        self, accuracies: Sequence[float], point: Optional[str], read_at: Sequence[str] = ()
    ) -> tuple[Optional[float], str]:
        """Rule 3: each compared row's noise from the floor measured at the claim's evaluation point nearest its
        accuracy, where near enough (FLOOR_REACH), as one floor for the pair (the root mean square: a gap's variance
        is the sum of its two rows'); else None and why. A floor of unknown level (none recorded) applies where no
        measured one is near enough. Runs read at their own points (`point` None) take a floor only if all of them
        (`read_at`) were read where the floor's runs were."""
        if point is None and self.floor_point is not None and set(read_at) - {self.floor_point}:
            others = ", ".join(sorted(set(read_at) - {self.floor_point}))
            return None, f"the floor's runs were read at {self.floor_point}, these at {others} (rule 1)"
        if point == self.paper_point:
            floors = ([(self.floor, self.floor_at)] if self.floor is not None else []) + list(self.more_floors)
        else:  # a floor read at one point does not bound results read at another (after local training, say)
            floors = list(self.floors_at_points.get(point, ()))
            if not floors:
                return None, f"none measured at the evaluation point {point or 'of each run'} at this scale"
        if not floors:
            return None, "none measured at this scale"
        chosen = []
        unknown = [f for f, at in floors if at is None]  # of unknown level: where none measured is near
        for accuracy in accuracies:
            floor, at = min(floors, key=lambda f: abs(accuracy - f[1]) if f[1] is not None else math.inf)
            if at is not None and abs(accuracy - at) > FLOOR_REACH:
                if not unknown:
                    return None, f"the suite's nearest was measured at {at:.1f}%, far from a row at {accuracy:.1f}%"
                floor = unknown[0]
            if floor is None:  # a floor whose repeat diverged: a floor measured elsewhere must not stand in for it
                return None, f"the one nearest a row at {accuracy:.1f}% was not measured: a noise repeat diverged"
            chosen.append(floor)
        pooled = math.sqrt(statistics.fmean(f**2 for f in chosen))
        known = [floor_df(f) for f in chosen]
        return (Floor(pooled, min(known)) if None not in known else pooled), ""  # the scarcer floor's df

    def point(self, claim: Mapping[str, Any]) -> Optional[str]:
        """Rule 1: the claim's own point, else the paper's as the suite declares it, else each run's own."""
        return claim.get("point") or self.paper_point

    def results(self, column: str, row: str, point: Optional[str]) -> dict[str, float]:
        """Seed folder name -> the run's mean accuracy (%) over its last k rounds (`read`'s results)."""
        return self.read(column, row, point)[0]

    def read(self, column: str, row: str, point: Optional[str]) -> tuple[dict[str, float], dict[str, str]]:
        """(seed -> the run's mean accuracy (%) over its last k rounds, seed -> why a finished run has no result at
        `point`: it never evaluated there, or its evaluations there stop short of its last rounds)."""
        if (column, row, point) in self.known:
            return self.known[column, row, point]
        values, unread = {}, {}
        for run in seed_runs(self.out / column, row):
            value, why = read_run(run, self.k, point)
            off = self.off_setting(column, row, run)
            if off:  # rule 3's floor bounds the runs of its setting: a run made at another is no result here
                value, why = None, f"is not of the setting the suite gives its cell here ({off})"
            if value is None:
                unread[run.name] = why
            else:
                values[run.name] = value
        self.known[column, row, point] = values, unread
        return values, unread

    def off_setting(self, column: str, row: str, run: Path) -> str:
        """How the run differs from the setting its cell has here (its first differing key), "" if it does not."""
        if self.setting is None:
            return ""
        if not (run / "config.toml").is_file():
            return "it has no config.toml to compare"
        found = setting_differences(saved_config(run), self.setting(column, row))
        return found[0] if found else ""

    def runs(self, column: str, row: str, seeds: Sequence[str]) -> list[Path]:
        return [d for d in seed_runs(self.out / column, row) if d.name in seeds]

    def points_read(self, cells: Sequence[tuple[str, str]], point: Optional[str], seeds: Sequence[str]) -> list[str]:
        """The evaluation points the cells' runs on `seeds` are read at: `point`, else each run's own."""
        if point is not None:
            return [point]
        return sorted({own_point(run) for column, row in cells for run in self.runs(column, row, seeds)})

    def diverged(self, column: str, row: str) -> set[str]:
        """The seeds on which the cell's runs diverged (their result: no accuracy)."""
        return {d.name for d in diverged_seed_runs(self.out / column, row)}

    def not_run(self, judges: str, column: str, rows: Sequence[str], other_column: str = "") -> Judgement:
        """A line with nothing to judge, naming the rows whose runs diverged (their result, not a run owed)."""
        said = "; ".join(
            self.absent(c, [r for r in rows if self.diverged(c, r)]).removeprefix("; ")
            for c in (column, other_column)
            if c and any(self.diverged(c, r) for r in rows)
        )
        return Judgement(NOT_RUN, judges, said)

    def absent(self, column: str, rows: Sequence[str]) -> str:
        """ "; not run: ..." for rows without a finished run, naming those whose runs diverged (their result)."""
        if not rows:
            return ""
        diverged = {r: [d.name for d in diverged_seed_runs(self.out / column, r)] for r in rows}
        said = [f"{r} (diverged: {', '.join(diverged[r])})" if diverged[r] else r for r in rows]
        return f"; not run: {', '.join(said)}"


def seed_runs(column_dir: Path, row: str) -> list[Path]:
    """Rule 2: a cell's finished runs, each in the folder seed<N> of the seed its run states (summary.json, else its
    config's run.seed); a run filed under another seed's folder is refused: counted there it would be a seed twice."""
    return filed_by_seed(finished_runs(column_dir, row))


def diverged_seed_runs(column_dir: Path, row: str) -> list[Path]:
    """A cell's diverged runs (a result: no accuracy), each checked to be filed under the seed it states, as
    seed_runs checks the finished ones."""
    return filed_by_seed(diverged_runs(column_dir, row))


def filed_by_seed(runs: list[Path]) -> list[Path]:
    for run in runs:
        stated = stated_seed(run)
        if stated is not None and f"seed{stated}" != run.name:
            raise PfedkitError(
                f"{run} is filed as {run.name} but its run states seed {stated}: move it to seed{stated} (or aside, "
                f"as {run.name}-old), or run {run.name} again"
            )
    return runs


def stated_seed(run: Path) -> Optional[int]:
    """The seed the run states: its summary's, else its config's run.seed; None where neither says (rule 2 then
    finds no config to compare)."""
    summary = summary_of(run) if (run / "summary.json").is_file() else {}  # a diverged run has none
    if "seed" in summary:
        if type(summary["seed"]) is not int:  # a seed is a whole number (not a bool, a string, a float)
            raise PfedkitError(
                f"{run / 'summary.json'} states seed {summary['seed']!r}, not a whole number: the file is damaged; "
                "restore it, or run the run again"
            )
        return summary["seed"]
    config = run_config_toml(run)
    seed = config_section(run, config, "run").get("seed")
    if seed is None and config:  # a saved config leaves nothing unstated; an older one: the default seed
        seed = RunSection.model_fields["seed"].default
    if seed is not None and type(seed) is not int:
        raise PfedkitError(
            f"{run / 'config.toml'} states run.seed {seed!r}, not a whole number: the file is damaged; restore it"
        )
    return seed


def configured_rounds(run: Path) -> Optional[int]:
    rounds = config_section(run, run_config_toml(run), "train").get("rounds")
    if rounds is not None and type(rounds) is not int:
        raise PfedkitError(
            f"{run / 'config.toml'} states train.rounds {rounds!r}, not a whole number: the file is damaged; restore it"
        )
    return rounds


def read_run(run: Path, k: int, point: Optional[str]) -> tuple[Optional[float], str]:
    """(the run's mean accuracy (%) over the evaluations of its last k rounds at `point`, "") or (None, why none):
    never evaluated there, or its evaluations there end before its last round (an after-local curve may end a round
    early): a mean read earlier would compare another stretch of training."""
    curve = headline_curve(run, point)
    at = f" at {point}" if point else ""
    if not curve:
        return None, f"finished, but never evaluated{at}"
    configured = configured_rounds(run)
    final = summary_of(run).get("rounds")  # the rounds it finished, else (an older summary) those it was set to run
    final = final if isinstance(final, int) else configured
    if configured is not None and final != configured:  # a run carried on (config rewritten) and not yet finished
        return None, f"its summary says {final} rounds but its config.toml {configured}: let it finish, or restore it"
    early = 1 if (point or own_point(run)) == "after-local" else 0  # the last round evaluates at the start only
    if final is not None and curve[-1][0] < final - early:  # else its last k rounds would be read from earlier ones
        return None, f"its last evaluation{at} is at round {curve[-1][0]} of {final}"
    return 100 * statistics.fmean(a for _, a in last_evaluations(curve, k, rounds=True)), ""


# ---- the rules, on numbers ----


class Floor(float):
    """A noise floor (points) that knows its degrees of freedom: repeats less one, summed over the seeds it pools
    (a floor from two runs has one). A plain float stands for a floor whose repeats are not known (hand-made
    evidence): rule 3 then takes the normal approximation's bar of 2 for it."""

    df: int

    def __new__(cls, value: float, df: int) -> "Floor":
        made = super().__new__(cls, value)
        made.df = int(df)
        return made


def noise_floor(results: Sequence[float]) -> Optional[Floor]:
    """Rule 3's floor: the standard deviation of one config's result over its repeats (None under two)."""
    return Floor(statistics.stdev(results), len(results) - 1) if len(results) >= 2 else None


def floor_df(floor: Optional[float]) -> Optional[int]:
    """The floor's degrees of freedom; None where they are not known (a plain float)."""
    return floor.df if isinstance(floor, Floor) else None


@functools.lru_cache(maxsize=None)
def t_quantile(df: int) -> float:
    """Student's t at 97.5% (a 95% two-sided test) with `df` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(0.975, df))


def bar(seeds: int, floor: Optional[float]) -> tuple[Optional[float], str]:
    """Rule 3's bar in standard errors, and the test it comes from: a paired t-test on the seeds (n - 1 degrees of
    freedom); on one seed the floor's own degrees of freedom (a floor from two runs cannot decide alone: None); a
    floor of unknown degrees of freedom on one seed, the normal approximation's 2."""
    if seeds >= 2:
        return t_quantile(seeds - 1), f"t, {seeds - 1} df"
    df = floor_df(floor)
    if df is None:
        return 2.0, "normal"
    if df < 2:
        return None, "floor from 2 runs"
    return t_quantile(df), f"t, the floor's {df} df"


def gap_error(gaps: Sequence[float], floor: Optional[float]) -> Optional[float]:
    """Rule 3: the standard error of the mean of per-seed gaps, from their spread between seeds and never below the
    floor's (a gap of two runs varies by floor * sqrt 2, its mean over n seeds by that over sqrt n); None for one
    seed without a floor."""
    from_floor = floor * math.sqrt(2 / len(gaps)) if floor is not None else None
    if len(gaps) < 2:
        return from_floor
    between = statistics.stdev(gaps) / math.sqrt(len(gaps))
    return max(between, from_floor or 0.0)


def share_of_bar(excess: Sequence[float], floor: Optional[float]) -> Optional[float]:
    """How far the mean excess has come towards rule 3's bar (its t quantile times the standard error; 1 or more
    decides); None without a floor (no bar: seeds cannot decide it, a floor must be measured first), or with one seed
    on a floor from two runs (more seeds would decide it)."""
    finite = floor is not None and all(math.isfinite(e) for e in excess)
    error = gap_error(excess, floor) if finite else None
    quantile, _ = bar(len(excess), floor)
    if not error or quantile is None:
        return None
    return abs(statistics.fmean(excess)) / (quantile * error)


def decide(excess: Sequence[float], floor: Optional[float], no_floor: str = "") -> tuple[str, str]:
    """(verdict, why) from the per-seed excess of the judged quantity over its boundary (positive where the claim
    holds): holds or does not hold only beyond two standard errors, which a noise floor bounds from below (without
    one, no verdict: two seeds that happen to agree would otherwise decide anything)."""
    mean = statistics.fmean(excess)
    seeds = f"{len(excess)} seeds" if len(excess) > 1 else "one seed"
    if not all(math.isfinite(e) for e in excess) or (floor is not None and not math.isfinite(floor)):
        return UNSURE, f"no verdict on a non-finite result ({', '.join(f'{e:g}' for e in excess)} on {seeds})"
    if floor is None:
        return UNSURE, f"{mean:+.2f} on {seeds}; no verdict without a noise floor ({no_floor or 'none measured'})"
    error = gap_error(excess, floor)
    quantile, test = bar(len(excess), floor)
    if quantile is None:
        return UNSURE, f"{mean:+.2f} on one seed; no verdict from one seed on a floor from 2 runs (more seeds decide)"
    said = f"{quantile:.2f} standard errors of {error:.2f} ({test}" + (
        "; floor from 2 runs)" if floor_df(floor) == 1 else ")"
    )
    if abs(mean) <= quantile * error:  # a tie is no verdict, even against a floor of 0
        return UNSURE, f"{mean:+.2f} on {seeds}, within {said}"
    return (HOLDS if mean > 0 else FAILS), f"{mean:+.2f} on {seeds}, beyond {said}"


def slope_gap(closer: Trend, held: Trend) -> tuple[float, Optional[float]]:
    """The closing curve's pace less the other's (points a round), and its standard error over the seeds (the
    per-seed differences' spread; None under two seeds)."""
    if len(closer.rates) >= 2 and len(closer.rates) == len(held.rates):
        diffs = [a - b for a, b in zip(closer.rates, held.rates)]
        return statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))
    return closer.rate - held.rate, None


def closing(closer: Trend, held: Trend) -> Optional[bool]:
    """Rule 4 on two curves: does `closer` still gain on `held`? True where it rises faster by more than the slopes'
    own noise (their difference's standard error over seeds), False where it does not rise or rises slower by more
    than that, None where the slopes are within their noise (cannot tell: both still rising). On one seed, no noise
    is known: the paces are compared as they are."""
    if not closer.rising:
        return False
    gap, error = slope_gap(closer, held)
    if error is None:
        return gap > 0
    if abs(gap) <= error:
        return None
    return gap > 0


def still_closing(excess: float, claimant: Trend, other: Trend) -> bool:
    """Rule 4: can the verdict still flip? The trends of the claimant and of the row it is judged against: a lead
    closes while the other rises faster (per round), a shortfall while the claimant does; slopes within their noise
    may still close it."""
    closer, held = (other, claimant) if excess > 0 else (claimant, other)
    return closing(closer, held) is not False


def unlike_runs(configs: Mapping[str, Mapping[str, Any]], allowed: Sequence[str] = ()) -> list[str]:
    """Rule 2: the config keys on which each compared run differs from the first (row -> flat config, every value
    stated), less the keys a claim allows, where runs are kept (PLACEMENT_KEYS), the method's name and code,
    and two different methods' own hyper-parameters (a method and its variant share theirs: those must agree)."""
    from pfedkit.config import PLACEMENT_KEYS

    rows = list(configs)
    skipped = set(PLACEMENT_KEYS) | {"method.name", "method.source"} | set(allowed)
    found = []
    first = configs[rows[0]] if rows else {}
    for other in rows[1:]:
        theirs = configs[other]
        related = related_methods(
            first.get("method.name"), theirs.get("method.name"), first.get("method.module"), theirs.get("method.module")
        )
        for key in sorted(first.keys() | theirs.keys()):
            own = key.startswith("method.") and (not related or key not in first or key not in theirs)
            if key in skipped or own or repr(first.get(key)) == repr(theirs.get(key)):
                continue
            found.append(f"{key} {rows[0]} {first.get(key)!r}, {other} {theirs.get(key)!r}")
        found += unlike_placement(first, theirs, rows[0], other, set(allowed))
    return found


def unlike_placement(first: Mapping[str, Any], theirs: Mapping[str, Any], a: str, b: str, allowed: set) -> list[str]:
    """Rule 2 on the keys that say where a run was kept but also what it ran, compared where both runs record them:
    the data's content (data.checksum), a pretrained backbone or none (model.options.pretrained, wherever the file
    lies), and pfedkit's version for built-in methods (method.source; a method of one's own has other code anyway)."""
    found = []
    checksums = first.get("data.checksum"), theirs.get("data.checksum")
    if "data.checksum" not in allowed and all(checksums) and checksums[0] != checksums[1]:
        found.append(f"data.checksum {a} {checksums[0]!r}, {b} {checksums[1]!r} (other data)")
    pretrained = bool(first.get("model.options.pretrained")), bool(theirs.get("model.options.pretrained"))
    if "model.options.pretrained" not in allowed and pretrained[0] != pretrained[1]:
        with_it, without = (a, b) if pretrained[0] else (b, a)
        found.append(f"model.options.pretrained: {with_it} starts from a pretrained backbone, {without} does not")
    sources = str(first.get("method.source") or ""), str(theirs.get("method.source") or "")
    built_in = all(x.startswith("pfedkit ") for x in sources)
    if "method.source" not in allowed and built_in and sources[0] != sources[1]:
        found.append(f"method.source {a} {sources[0]!r}, {b} {sources[1]!r} (other pfedkit code)")
    return found


def related_methods(a: Optional[str], b: Optional[str], module_a: Any = None, module_b: Any = None) -> bool:
    """One method a variant or subclass of the other, or both variants of one: their hyper-parameters are one set,
    compared key by key. A method of one's own is looked up in its `method.module`."""
    from pfedkit.errors import ConfigError
    from pfedkit.registry import method_class

    if a is None or b is None:
        return a == b
    try:
        return related_params(method_class(a, module_a or None).Params, method_class(b, module_b or None).Params)
    except ConfigError:
        return a == b


def related_params(pa: type, pb: type) -> bool:
    """Two methods' hyper-parameter classes are one set: one a subclass of the other, or two variants of one method
    (pgfedsplit-no-apa, pgfedsplit-no-gau), i.e. a shared ancestor below the hyper-parameters every method has."""
    from pfedkit.methods.base import HyperParams

    return bool((set(pa.__mro__) & set(pb.__mro__)) - set(HyperParams.__mro__))


# ---- gathering the numbers ----


class Trend(NamedTuple):
    gain: float  # points gained by the last fifth of the evaluations over the fifth before
    rising: bool
    rate: float  # that gain per round: curves evaluated at other intervals are compared at one pace (rule 4)
    rates: tuple[float, ...] = ()  # each seed's own pace at the same rounds, in the seeds' order (the slopes' noise)


def trend(evidence: Evidence, column: str, row: str, seeds: Sequence[str], point: Optional[str]) -> Trend:
    """(gain of the last fifth in points, still rising, gain per round) of the row's mean curve over these seeds, at
    the rounds every
    seed evaluated (past the last round one reached, or where their evaluations fall apart, a mean of some seeds alone
    would jump between seed sets). A curve too short for the tables' mark (an FT
    row evaluated every 5 rounds of 20) counts as rising when its last fifth gains more than RISE_POINTS."""
    curves = [dict(headline_curve(run, point)) for run in evidence.runs(column, row, seeds)]
    shared = set.intersection(*(set(c) for c in curves)) if curves else set()  # no round read from some seeds only
    curve = [(r, 100 * statistics.fmean(c[r] for c in curves)) for r in sorted(shared)]
    if len(curve) < 2:
        return Trend(0.0, False, 0.0)
    gain, apart = curve_gain(curve)
    rate = gain / apart if apart > 0 else 0.0
    rates = []
    for c in curves:  # each seed's pace at the same rounds: what the slopes' noise is measured from
        seed_gain, seed_apart = curve_gain([(r, 100 * c[r]) for r in sorted(shared)])
        rates.append(seed_gain / seed_apart if seed_apart > 0 else 0.0)
    shape = curve_trend(curve)
    if shape == "short":  # too few points to scale by rounds: a gain of more than RISE_POINTS outright
        return Trend(gain, gain > RISE_POINTS, rate, tuple(rates))
    return Trend(gain, shape == "rising", rate, tuple(rates))


PRETRAINED = "model.options.pretrained"


def with_model_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    """A flat config with every option of its model stated, the default where it says none (a run that leaves dropout
    unsaid ran at its default: the same as one stating it)."""
    from pfedkit.models import MODEL_NAMES, model_options

    stated = dict(config)
    name = stated.get("model.name")
    if name in MODEL_NAMES:
        for option, default in model_options(name).items():  # a default tuple as a saved config reads it: a list
            stated.setdefault(f"model.options.{option}", list(default) if isinstance(default, tuple) else default)
    if stated.get("model.options") == {}:  # no options stated: a flat leaf, where options stated are keys of their own
        del stated["model.options"]
    return stated


def as_setting(config: Mapping[str, Any]) -> dict[str, Any]:
    """A flat config as rule 3's setting check reads it: every model option stated (`with_model_defaults`), and a
    pretrained backbone as whether there is one (where its file lies is placement, that it was used is not)."""
    stated = with_model_defaults(config)
    stated[PRETRAINED] = bool(stated.get(PRETRAINED))
    return stated


def setting_differences(config: Mapping[str, Any], setting: Mapping[str, Any]) -> list[str]:
    """Rule 3: how a run's flat config differs from the setting its cell has ("key run's, cell's"), every key of
    SETTING_SECTIONS either states (one the cell leaves unsaid that the run sets, a [proxy] say, differs too), method
    values aside unless the setting names them."""
    theirs = as_setting(config)
    stated = {k for k in theirs if k.split(".")[0] in SETTING_SECTIONS and (k not in PLACEMENT_KEYS or k == PRETRAINED)}
    keys = set(setting) | stated
    return [
        f"{key} {theirs.get(key)!r}, the cell's {setting.get(key)!r}"
        for key in sorted(keys)
        if repr(theirs.get(key)) != repr(setting.get(key))
    ]


def saved_config(run: Path) -> dict[str, Any]:
    """The run's config.toml as flat keys, every value stated: the defaults of keys added since it ran, of its
    method's hyper-parameters and of its model's options (absent: the default)."""
    if not (run / "config.toml").exists():
        return {}
    try:
        return with_model_defaults(flat(with_method_values(read_saved_config(run / "config.toml")).to_dict()))
    except PfedkitError:  # a config this version no longer reads: compare what it says
        return flat(read_toml(run / "config.toml"))


def like_with_like(
    evidence: Evidence, pairs: Sequence[tuple[str, str]], seeds: Sequence[str], allowed: Sequence[str]
) -> list[str]:
    """Rule 2 on the runs themselves: each (column, row)'s runs, seed by seed on every judged seed. A hyper-parameter
    unused in either run (FedAFK's KT form where its KT weight is 0) is no difference: that run is the same whatever
    its value."""
    found: list[str] = []
    for seed in seeds:
        configs, unused = {}, set(allowed)
        for column, row in pairs:
            runs = evidence.runs(column, row, [seed])
            if runs:
                name = f"{row} ({column})" if len({c for c, _ in pairs}) > 1 else row
                if not (runs[0] / "config.toml").is_file():  # nothing to compare is no likeness shown
                    found.append(f"config.toml ({name}'s run has none, {seed})")
                configs[name] = saved_config(runs[0])
                unused |= unused_keys(runs[0])
        found += [f"{u} ({seed})" if len(seeds) > 1 else u for u in unlike_runs(configs, unused) if u not in found]
    return list(dict.fromkeys(found))


def unused_keys(run: Path) -> set[str]:
    """The method hyper-parameters the run's other values leave unused (HyperParams.inert), as dotted keys."""
    try:
        return set(inert_keys(read_saved_config(run / "config.toml")))
    except (PfedkitError, OSError):  # no config, or one this version no longer reads: nothing known to be unused
        return set()


def provisional(
    verdict: str,
    why: str,
    excess: float,
    claimant: Trend,
    other: Trend,
    names: tuple[str, str],
) -> tuple[str, str]:
    if verdict == UNSURE or not still_closing(excess, claimant, other):
        return verdict, why
    mover, held = (names[1], names[0]) if excess > 0 else names
    closer, steady = (other, claimant) if excess > 0 else (claimant, other)
    if closing(closer, steady) is None:
        pace, error = slope_gap(closer, steady)
        return (
            UNSURE,
            f"{why}, but {mover} is still rising ({closer.gain:+.2f} in the last fifth) at a pace within the noise "
            f"of {held}'s ({pace:+.3f} ± {error:.3f} a round over seeds): both still rising, provisional, {verdict}",
        )
    rising = f"{mover} is still rising ({closer.gain:+.2f} in the last fifth)"
    return UNSURE, f"{why}, but {rising} and closing: provisional, {verdict}"


def judge_pair(
    evidence: Evidence,
    column: str,
    point: Optional[str],
    rows: tuple[str, str],
    seeds: Sequence[str],
    excess: Sequence[float],
) -> tuple[str, str, Basis]:
    """Rules 3 and 4 for a claimant and the row it is judged against, from the per-seed excess over the boundary: the
    verdict, why, and what it rests on."""
    accuracies = [statistics.fmean(evidence.results(column, row, point)[s] for s in seeds) for row in rows]
    read_at = evidence.points_read([(column, row) for row in rows], point, seeds)
    floor, no_floor = evidence.floor_for(accuracies, point, read_at)
    verdict, why = decide(excess, floor, no_floor)
    claimant, other = (trend(evidence, column, row, seeds, point) for row in rows)
    basis = Basis.of([(column, row) for row in rows], seeds, excess, floor)
    return (*provisional(verdict, why, basis.gap, claimant, other, rows), basis)


def means_shown(results: Mapping[str, Mapping[str, float]]) -> str:
    """Each row's mean on the seeds every row finished, then, for rows with more, on all of theirs (means over unlike
    seed sets side by side would mislead: a seed fixes the partition)."""
    common = sorted(set.intersection(*(set(v) for v in results.values())))
    if not common:  # each pair on its own seeds, the claimant (first) beside each other row
        (first, ours), *others = results.items()
        shown = []
        for row, theirs in others:
            both = sorted(set(ours) & set(theirs))
            shown.append(
                f"on {', '.join(both)}: {first} {statistics.fmean(ours[s] for s in both):.2f}, "
                f"{row} {statistics.fmean(theirs[s] for s in both):.2f}"
                if both
                else f"{row} {statistics.fmean(theirs.values()):.2f} (on {', '.join(sorted(theirs))}: not {first}'s)"
            )
        return "; ".join(shown)
    label = "" if all(len(v) == len(common) for v in results.values()) else f"on {', '.join(common)}: "
    shown = label + ", ".join(f"{r} {statistics.fmean(v[s] for s in common):.2f}" for r, v in results.items())
    more = [(r, v) for r, v in results.items() if len(v) > len(common)]
    if more:
        shown += "; on all their seeds: " + ", ".join(
            f"{r} {statistics.fmean(v.values()):.2f} ({len(v)})" for r, v in more
        )
    return shown


def unread_note(unread: Mapping[str, str]) -> str:
    """Why a row's finished runs give no result: "seed0 finished, but never evaluated at start"."""
    return "; ".join(f"{seed} {why}" for seed, why in sorted(unread.items()))


def read_notes(
    evidence: Evidence, column: str, read: Mapping[str, tuple[dict[str, float], dict[str, str]]], where: str = ""
) -> str:
    """ "; ..." naming, of rows with results, the finished seeds without one and the seeds that diverged (rule 1: a
    row with runs is never silently cut down to the seeds that suit it); `where`: after each row's name (" in col")."""
    notes = [f"{row}{where} {unread_note(why)}" for row, (values, why) in read.items() if values and why]
    diverged = {row: sorted(evidence.diverged(column, row)) for row, (values, _) in read.items() if values}
    notes += [f"{row}{where} diverged on {', '.join(seeds)}" for row, seeds in diverged.items() if seeds]
    return f"; not read: {'; '.join(notes)}" if notes else ""


def survived_only(
    verdict: str, why: str, lost: Sequence[str], name: str, other: str = "", capped: str = HOLDS
) -> tuple[str, str]:
    """A row that diverged on seeds its comparison finished is beaten there (a run that diverged is a result, the
    worst one): the claimant's divergence caps "holds", its rival's "does not hold" (`capped`), at cannot tell."""
    if verdict != capped or not lost:
        return verdict, why
    where = f", which {other} finished" if other else ""
    return UNSURE, f"{why}, but {name} diverged on {', '.join(lost)}{where}: {capped} only on the seeds it survived"


def every_pair(verdicts: Sequence[str]) -> str:
    """A line judged pair by pair: does not hold when any pair does not, holds when every pair holds, else cannot
    tell."""
    return FAILS if FAILS in verdicts else (HOLDS if set(verdicts) == {HOLDS} else UNSURE)


def other_pairs(verdicts: Sequence[str]) -> str:
    """ "; the other pairs: N holds, ..." for the pairs a line does not show ("" when it shows them all)."""
    counts = ", ".join(f"{verdicts.count(v)} {v}" for v in (HOLDS, UNSURE, FAILS) if v in verdicts)
    return f"; the other pairs: {counts}" if verdicts else ""


def resting_on(verdicts: Mapping[str, tuple[str, Optional[Basis]]], verdict: str) -> tuple[Basis, ...]:
    """The comparisons a line's verdict rests on: every pair for holds (each had to), the best-supported failing pair
    for does not hold (one suffices), else the given ones."""
    bases = [b for v, b in verdicts.values() if v == verdict and b is not None]
    if verdict == FAILS and bases:
        return (max(bases, key=support),)
    return tuple(bases)


def support(basis: Basis) -> tuple[int, float]:
    """How well a comparison is supported: its seeds, then how far past the bar it is."""
    return len(basis.seeds), basis.share or 0.0


def show_order(verdict: str, basis: Optional[Basis], closeness: float) -> tuple[float, float, float]:
    """Which of a line's pairs it shows first: when it does not hold, the best-supported failure (the one the verdict
    rests on); when it cannot tell, those past the bar but held open by rule 4 (the line waits on them), a shortfall
    (the pair's own gap below 0) before a lead; then the closest (`closeness`, least first). `basis`: the pair's
    comparison (None: not judged)."""
    if verdict == FAILS:
        seeds, share = support(basis) if basis else (0, 0.0)
        return -seeds, -share, closeness
    past = verdict == UNSURE and basis is not None and basis.share is not None and basis.share >= 1
    gap = basis.gap if basis else 0.0
    return not past, past and gap >= 0, closeness


def above(claim: Mapping[str, Any], evidence: Evidence) -> Judgement:
    """Every pair, the claimant against each other row, on the seeds both finished (a pair is its own comparison:
    the leading rows' extra seeds count without waiting for every baseline's)."""
    column, point, first = claim["column"], evidence.point(claim), claim["rows"][0]
    read = {row: evidence.read(column, row, point) for row in claim["rows"]}
    results = {row: values for row, (values, _) in read.items()}
    unread = {row: why for row, (values, why) in read.items() if not values and why}  # finished, no result here
    absent = [row for row, seeds in results.items() if not seeds and row not in unread]
    if first in absent or len(absent) >= len(results) - 1:
        said = evidence.absent(column, absent).removeprefix("; ")
        return Judgement(NOT_RUN, "direction", said if "diverged" in said else "")  # the runs that ended so, named
    partly = evidence.absent(column, absent) + read_notes(evidence, column, read)
    if first in unread:
        return Judgement(UNSURE, "direction", f"{first} not judged: {unread_note(unread[first])}{partly}")
    results = {row: seeds for row, seeds in results.items() if seeds}
    others = [row for row in claim["rows"][1:] if row in results or row in unread]
    shared = {o: sorted(set(results[first]) & set(results.get(o, {}))) for o in others}
    mean = {row: statistics.fmean(v.values()) for row, v in results.items()}
    numbers = means_shown(results)
    pairs: dict[str, tuple[str, str, list[float], Optional[Basis]]] = {}
    for other in others:  # every pair: the claimant against each other row, each by rules 2-4
        if other in unread:
            pairs[other] = (UNSURE, f"not judged: {unread_note(unread[other])}", [], None)
            continue
        if not shared[other]:
            seeds = "; ".join(f"{row}: {', '.join(sorted(results[row]))}" for row in (first, other))
            pairs[other] = (UNSURE, f"not judged: no seed finished for both rows of a pair ({seeds})", [], None)
            continue
        unlike = like_with_like(evidence, [(column, first), (column, other)], shared[other], claim.get("differ_in", ()))
        if unlike:
            pairs[other] = (UNSURE, f"not judged: the runs differ in {'; '.join(unlike[:3])}", [], None)
            continue
        excess = [results[first][s] - results[other][s] for s in shared[other]]
        verdict, why, basis = judge_pair(evidence, column, point, (first, other), shared[other], excess)
        lost = sorted(evidence.diverged(column, first) & set(results[other]))
        verdict, why = survived_only(verdict, why, lost, first, other)
        beaten = sorted(evidence.diverged(column, other) & set(results[first]))
        verdict, why = survived_only(verdict, why, beaten, other, first, capped=FAILS)
        pairs[other] = (verdict, why, excess, basis)
    verdict = every_pair([v for v, *_ in pairs.values()])

    # shown: the pairs that decide (those that fail, else those that cannot tell, else the closest that holds)
    def order(other: str) -> tuple[float, float, float]:  # closest: the pair's own gap (else, not judged, the means')
        basis = pairs[other][3]
        return show_order(verdict, basis, abs(basis.gap if basis else mean[first] - mean.get(other, mean[first])))

    deciding = [o for o in sorted(others, key=order) if pairs[o][0] == verdict][: 1 if verdict == HOLDS else 2]
    shown = []
    for other in deciding:
        _, why, excess, _ = pairs[other]
        per_seed = f"; per seed {', '.join(f'{g:+.2f}' for g in excess)}" if len(excess) > 1 else ""
        shown.append(f"{other} {why}" if not excess else f"gap to {other} {why}{per_seed}")
    rest = other_pairs([pairs[o][0] for o in others if o not in deciding])
    # every pair that cannot tell, shown or not, is what a line that cannot tell rests on (the owed list reads it)
    basis = resting_on({o: (v, b) for o, (v, _, _, b) in pairs.items()}, verdict)
    return Judgement(verdict, "direction", f"{numbers}; {'; '.join(shown)}{rest}{partly}", basis)


def below(claim: Mapping[str, Any], evidence: Evidence) -> Judgement:
    """The first of `rows` below every other (a paper's "performs poorly"): each pair judged as the other row above
    it, by the rules of "above"; it holds when every pair holds and does not hold when any does not."""
    first, others = claim["rows"][0], claim["rows"][1:]
    pairs = {other: above({**claim, "rows": [other, first]}, evidence) for other in others}
    judged = {other: j for other, j in pairs.items() if j.verdict != NOT_RUN}
    if not judged:
        return evidence.not_run("direction", claim["column"], claim["rows"])
    verdict = every_pair([j.verdict for j in judged.values()])

    def order(other: str) -> tuple[float, float, float]:  # how far each pair is past (or towards) its bar: least first
        basis = judged[other].basis[0] if judged[other].basis else None  # its gap: the other row above the first
        return show_order(verdict, basis, math.inf if basis is None or basis.share is None else basis.share)

    shown = [o for o in sorted(judged, key=order) if judged[o].verdict == verdict][: 1 if verdict == HOLDS else 2]
    absent = [other for other, j in pairs.items() if j.verdict == NOT_RUN]
    detail = "; ".join(f"{other} above {first}: {judged[other].detail}" for other in shown)
    detail += other_pairs([j.verdict for other, j in judged.items() if other not in shown])
    detail += evidence.absent(claim["column"], absent)
    bases = {other: (j.verdict, j.basis[0] if j.basis else None) for other, j in judged.items()}
    return Judgement(verdict, "direction", detail, resting_on(bases, verdict))


def margin(claim: Mapping[str, Any], evidence: Evidence) -> Judgement:
    column, point, row, need = claim["column"], evidence.point(claim), claim["row"], claim["at_least"]
    judges = f"margin of {need:g} points" if need > 0 else f"at most {-need:g} points behind"
    ours, ours_unread = evidence.read(column, row, point)
    if not ours:
        return (
            Judgement(UNSURE, judges, f"{row} not judged: {unread_note(ours_unread)}")
            if ours_unread
            else evidence.not_run(judges, column, [row])
        )
    verdicts, parts, absent, bases = [], [], [], {}
    read = {row: (ours, ours_unread)}
    for other in claim["over"]:
        theirs, theirs_unread = read[other] = evidence.read(column, other, point)
        shared = sorted(set(ours) & set(theirs))
        if not theirs and theirs_unread:
            verdicts.append(UNSURE)
            parts.append(f"{other}: not judged, {unread_note(theirs_unread)}")
            continue
        if not theirs:
            absent.append(other)
            continue
        if not shared:  # it ran, but on no seed the claimant finished: a pair not judged, not a pair left out
            verdicts.append(UNSURE)
            parts.append(f"{other}: not judged, no seed finished for both ({', '.join(sorted(theirs))} only)")
            continue
        unlike = like_with_like(evidence, [(column, row), (column, other)], shared, claim.get("differ_in", ()))
        gap = statistics.fmean(ours[s] - theirs[s] for s in shared)
        if unlike:
            verdicts.append(UNSURE)
            parts.append(f"{gap:+.2f} over {other}, but the runs differ in {'; '.join(unlike[:3])}")
            continue
        excess = [ours[s] - theirs[s] - need for s in shared]
        verdict, why, basis = judge_pair(evidence, column, point, (row, other), shared, excess)
        verdict, why = survived_only(verdict, why, sorted(evidence.diverged(column, row) & set(theirs)), row, other)
        beaten = sorted(evidence.diverged(column, other) & set(ours))
        verdict, why = survived_only(verdict, why, beaten, other, row, capped=FAILS)
        verdicts.append(verdict)
        bases[other] = (verdict, basis)
        parts.append(f"{gap:+.2f} over {other}: {verdict} (excess {why})")
    if not verdicts:
        return evidence.not_run(judges, column, absent)
    verdict = every_pair(verdicts)
    missing = evidence.absent(column, absent) + read_notes(evidence, column, read)
    return Judgement(verdict, judges, "; ".join(parts) + missing, resting_on(bases, verdict))


def near(claim: Mapping[str, Any], evidence: Evidence) -> Judgement:
    """`row` at most `points` behind each of `over` (a paper's "on par", "near-highest"): a margin of -points, by the
    same rules, so a row ahead holds as surely as one a little behind."""
    return margin({**claim, "at_least": -claim["points"]}, evidence)


def within(claim: Mapping[str, Any], evidence: Evidence) -> Judgement:
    column, reference, row, point = claim["column"], claim["reference"], claim["row"], evidence.point(claim)
    judges = f"within {claim['points']:g} points"
    (runs, runs_unread), (base, base_unread) = evidence.read(column, row, point), evidence.read(reference, row, point)
    shared = sorted(set(runs) & set(base))
    if not shared:
        unread = [f"{row} in {c}: {unread_note(u)}" for c, u in ((column, runs_unread), (reference, base_unread)) if u]
        if unread:
            return Judgement(UNSURE, judges, f"not judged: {'; '.join(unread)}")
        if runs and base:  # both ran, on other seeds: a comparison not judged, not a row left out
            seeds = "; ".join(f"{c}: {', '.join(sorted(v))}" for c, v in ((column, runs), (reference, base)))
            return Judgement(UNSURE, judges, f"not judged: no seed finished in both columns ({seeds})")
        return evidence.not_run(judges, column, [row], reference)
    value, ref = statistics.fmean(runs[s] for s in shared), statistics.fmean(base[s] for s in shared)
    numbers = f"{claim.get('label', column)} {value:.2f}, {reference} {ref:.2f}, {value - ref:+.2f}"
    # the two columns differ by design (that is the claim) in what the columns change; the rest must agree
    designed = set(evidence.column_keys.get(column, ())) | set(evidence.column_keys.get(reference, ()))
    unlike = like_with_like(
        evidence, [(column, row), (reference, row)], shared, (*claim.get("differ_in", ()), *designed)
    )
    if unlike:
        return Judgement(UNSURE, judges, f"{numbers}; the runs differ in {'; '.join(unlike[:3])}")
    excess = room_left(claim["points"], [runs[s] - base[s] for s in shared])
    read_at = evidence.points_read([(column, row), (reference, row)], point, shared)
    floor, no_floor = evidence.floor_for([value, ref], point, read_at)
    verdict, why = decide(excess, floor, no_floor)
    basis = (Basis.of([(column, row), (reference, row)], shared, excess, floor),)
    mine, theirs = trend(evidence, column, row, shared, point), trend(evidence, reference, row, shared, point)
    names = (f"{row} in {column}", f"{row} in {reference}")
    leader, trailer = (mine, theirs) if value >= ref else (theirs, mine)
    names = names if value < ref else names[::-1]
    if verdict == HOLDS and closing(trailer, leader) is not False:  # in the band, the trailer may climb out
        verdict, why = (
            UNSURE,
            f"{why}, but {names[0]} is still rising ({trailer[0]:+.2f} in the last fifth) "
            + (f"faster than {names[1]}: provisional, {HOLDS}"),
        )
    verdict, why = provisional(verdict, why, statistics.fmean(excess), trailer, leader, names)
    for here, there, finished in ((column, reference, base), (reference, column, runs)):
        lost = sorted(evidence.diverged(here, row) & set(finished))
        verdict, why = survived_only(verdict, why, lost, f"{row} in {here}", f"{row} in {there}")
    # the seeds left out of the comparison, each named: read in one column only, or not read
    alone = [
        f"{row} in {c} alone on {', '.join(sorted(set(mine) - set(shared)))}"
        for c, mine in ((column, runs), (reference, base))
        if set(mine) - set(shared)
    ]
    notes = (f"; {'; '.join(alone)}" if alone else "") + "".join(
        read_notes(evidence, c, {row: r}, f" in {c}")
        for c, r in ((column, (runs, runs_unread)), (reference, (base, base_unread)))
    )
    return Judgement(verdict, judges, f"{numbers}; room left {why}{notes}", basis)


def equal(claim: Mapping[str, Any], evidence: Evidence) -> Judgement:
    """The two `rows` the same within `points` either way (a paper's "turns into", "is the same as"): "near" each way,
    by its rules; holds when both ways hold, does not hold when either does not."""
    first, second = claim["rows"]
    ways = [near({**claim, "row": a, "over": [b]}, evidence) for a, b in ((first, second), (second, first))]
    judges = f"within {claim['points']:g} points either way"
    if any(way.verdict == NOT_RUN for way in ways):
        return Judgement(NOT_RUN, judges, next(w.detail for w in ways if w.verdict == NOT_RUN))
    verdict = every_pair([way.verdict for way in ways])
    detail = "; ".join(f"{a}: {way.detail}" for a, way in zip((first, second), ways))
    # what the line rests on: the ways of its verdict (a way already decided is not what an open line waits on)
    return Judgement(verdict, judges, detail, tuple(b for way in ways if way.verdict == verdict for b in way.basis))


def gain_decision(excess: Sequence[float]) -> tuple[str, str]:
    """(verdict, why) for a row's per-seed room under the ↑ limit: a paired t-test on the seeds alone (a gain is a
    difference within one run, so its noise is its spread over seeds, as rule 4's slopes; a floor of final results
    does not bound it); one seed cannot decide."""
    mean, n = statistics.fmean(excess), len(excess)
    if not all(math.isfinite(e) for e in excess):
        return UNSURE, f"no verdict on a non-finite result ({', '.join(f'{e:g}' for e in excess)})"
    if n < 2:
        return UNSURE, f"{mean:+.2f} on one seed; a gain's noise is its spread over seeds: more seeds decide"
    error, quantile = statistics.stdev(excess) / math.sqrt(n), t_quantile(n - 1)
    said = f"{quantile:.2f} standard errors of {error:.2f} (t, {n - 1} df, over seeds)"
    if abs(mean) <= quantile * error:
        return UNSURE, f"{mean:+.2f} on {n} seeds, within {said}"
    return (HOLDS if mean > 0 else FAILS), f"{mean:+.2f} on {n} seeds, beyond {said}"


def converged(claim: Mapping[str, Any], evidence: Evidence) -> Judgement:
    """Every one of `rows` flat at the end of its runs (a paper's "all methods converge", "little or no gain with more
    rounds"): a row's last fifth may gain at most what the tables' ↑ mark allows (RISE_POINTS, per PER_ROUNDS rounds
    where the fifths are closer), judged on its per-seed gains by `gain_decision` (a falling curve gains nothing: it
    counts as flat). Holds when every row is flat beyond the bar; does not hold when a row still rises beyond it, on
    runs as long as the paper's `rounds` only (a shorter run still rising may yet settle: cannot tell). A row that
    diverged on a seed is at most cannot tell (a divergence is no convergence, nor a rise)."""
    column, point, paper_rounds = claim["column"], evidence.point(claim), claim.get("rounds")
    judges = "flat at the end"
    verdicts, shown, absent, bases, read = [], {}, [], {}, {}
    for row in claim["rows"]:
        values, unread = read[row] = evidence.read(column, row, point)
        diverged = sorted(evidence.diverged(column, row))
        if not values:
            if unread or diverged:
                why = f"not judged: {unread_note(unread) if unread else 'diverged on ' + ', '.join(diverged)}"
                verdicts.append(UNSURE)
                shown[row] = (UNSURE, why, math.inf, False)
            else:
                absent.append(row)
            continue
        seeds = sorted(values)
        runs = evidence.runs(column, row, seeds)
        curves = [dict(headline_curve(run, point)) for run in runs]
        rounds = sorted(set.intersection(*(set(c) for c in curves)))  # every seed read at the same rounds
        if len(rounds) < 2:
            verdicts.append(UNSURE)
            shown[row] = (UNSURE, "not judged: too few evaluations to see a trend", math.inf, False)
            continue
        gains = [curve_gain([(r, 100 * c[r]) for r in rounds]) for c in curves]
        short = len(rounds) < MIN_EVALUATIONS  # as the ↑ mark: too few to scale by rounds, the limit outright
        limit = RISE_POINTS * (1.0 if short else min(1.0, gains[0][1] / PER_ROUNDS))
        excess = [limit - gain for gain, _ in gains]  # above 0: flatter than the mark allows
        verdict, why = gain_decision(excess)
        ran = min((configured_rounds(run) or rounds[-1]) for run in runs)  # the shortest run's
        held = verdict == FAILS and paper_rounds is not None and ran < paper_rounds
        if held:
            verdict, why = (
                UNSURE,
                f"{why}, but its runs stop at round {ran} of the paper's {paper_rounds}: may yet settle",
            )
        if diverged and verdict == HOLDS:
            verdict, why = (
                UNSURE,
                f"{why}, but it diverged on {', '.join(diverged)}: holds only on the seeds it survived",
            )
        gain = statistics.fmean(g for g, _ in gains)
        verdicts.append(verdict)
        bases[row] = (verdict, Basis.of([(column, row)], seeds, excess, 0.0))  # no floor: the seeds' spread alone
        shown[row] = (verdict, f"{gain:+.2f} in its last fifth against a limit of {limit:.2f} ({why})", gain, held)
    if not verdicts:
        return evidence.not_run(judges, column, absent)
    verdict = every_pair(verdicts)
    # the rows shown first: for "holds" the one gaining most; else the rows of the verdict, those a longer run could
    # still settle first (the line waits on them), then the steepest
    deciding = sorted(
        (r for r, (v, *_) in shown.items() if v == verdict), key=lambda r: (not shown[r][3], -shown[r][2])
    )
    deciding = deciding[:1] if verdict == HOLDS else deciding[:2]
    detail = "; ".join(f"{row} {shown[row][1]}" for row in deciding)
    rest = [v for r, (v, *_) in shown.items() if r not in deciding]
    detail += other_pairs(rest).replace("the other pairs", "the other rows", 1)
    detail += evidence.absent(column, absent) + read_notes(evidence, column, read)
    return Judgement(verdict, judges, detail, resting_on(bases, verdict))


def room_left(points: float, gaps: Sequence[float]) -> list[float]:
    """Per seed, how far inside `points` the gap lies, the gaps taken on the side of their mean (rule 3 takes the
    spread of the signed gaps: seeds at +0.9 and -0.9 are a mean of 0 with a wide error, not two gaps of 0.9)."""
    side = 1.0 if statistics.fmean(gaps) >= 0 else -1.0
    return [points - side * gap for gap in gaps]


def number(claim: Mapping[str, Any], evidence: Evidence) -> Judgement:
    """`row` in `column` within `points` of a paper's number `value`: a replication's match, judged like "within"."""
    column, row, point, target = claim["column"], claim["row"], evidence.point(claim), claim["value"]
    judges = f"within {claim['points']:g} points of {target:g}"
    runs, unread = evidence.read(column, row, point)
    if not runs:
        return (
            Judgement(UNSURE, judges, f"{row} not judged: {unread_note(unread)}")
            if unread
            else evidence.not_run(judges, column, [row])
        )
    value = statistics.fmean(runs.values())
    excess = room_left(claim["points"], [v - target for v in runs.values()])
    floor, no_floor = evidence.floor_for([value], point, evidence.points_read([(column, row)], point, sorted(runs)))
    own_floor = None if floor is None else floor / math.sqrt(2)  # one run against a constant: the floor once
    if floor_df(floor) is not None and own_floor is not None:
        own_floor = Floor(own_floor, floor_df(floor))
    verdict, why = decide(excess, own_floor, no_floor)
    basis = (Basis.of([(column, row)], sorted(runs), excess, own_floor),)
    gain, rising, *_ = trend(evidence, column, row, sorted(runs), point)
    # the number stays put: only the row's own curve moves; a match holds only once it has stopped moving (rising, it
    # may leave the band), a miss below the number while it rises towards it
    towards = (value < target) == (gain > 0)
    if verdict != UNSURE and rising and (towards or verdict == HOLDS):
        verdict, why = (
            UNSURE,
            f"{why}, but {row} is still rising ({gain:+.2f} in the last fifth): provisional, {verdict}",
        )
    verdict, why = survived_only(verdict, why, sorted(evidence.diverged(column, row)), row)
    at = f" at {point}" if point else ""
    return Judgement(
        verdict,
        judges,
        f"{row} {value:.2f}{at} over {len(runs)} seed(s), {value - target:+.2f}; room left {why}"
        + read_notes(evidence, column, {row: (runs, unread)}),
        basis,
    )


def count(claim: Mapping[str, Any], evidence: Optional[Evidence] = None) -> Judgement:
    """The trainable parameters (requires_grad) of the model the claim names, built as a run builds it, against the
    paper's count in millions rounded as the paper rounds it (1.46 -> two decimals; "0.120", written as a string,
    three; 11 none)."""
    from pfedkit.models import build_model

    model = build_model(
        claim["model"], tuple(claim["input_shape"]), claim["num_classes"], **dict(claim.get("options", {}))
    )
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    # the paper's rounding from the number as written: a string keeps trailing zeros ("0.120": three decimals)
    given = claim["millions"]
    written = str(given) if isinstance(given, (str, int)) else repr(float(given))  # 11: none, 1.46: two
    paper = float(written)
    decimals = len(written.partition(".")[2])
    ours = round(trainable / 1e6, decimals)
    verdict = HOLDS if math.isclose(ours, paper) else FAILS
    return Judgement(
        verdict,
        "count",
        f"{trainable:,} trainable parameters ({ours:.{decimals}f}M) in {claim['model']} for {claim['num_classes']} "
        f"classes, the paper's {paper:.{decimals}f}M",
    )


KINDS: dict[str, Callable[[Mapping[str, Any], Evidence], Judgement]] = {
    "above": above,
    "below": below,
    "within": within,
    "margin": margin,
    "near": near,
    "number": number,
    "count": count,
    "equal": equal,
    "converged": converged,
}


WAITS_ON = ("rounds", "seeds", "a floor", "other")  # what a line that cannot tell waits on, costliest first


def waits_on(detail: str) -> str:
    """What would decide a "cannot tell" line first, read from its detail (the wording this module writes): "rounds"
    where a gap past the bar is held open by rule 4 or a curve on short runs may yet settle, "a floor" where none
    bounds the rows, "other" where runs are unlike, unread, too short or cut by a divergence (neither seeds nor rounds
    decide those), "seeds" where a gap is within its bar (a decided pair's "beyond" is not counted)."""
    if "provisional" in detail or "may yet settle" in detail:
        return "rounds"
    if "without a noise floor" in detail:
        return "a floor"
    if any(said in detail for said in UNDECIDABLE):
        return "other"
    if re.search(r"within [0-9.]+ standard errors", detail) or "more seeds decide" in detail:
        return "seeds"
    return "other"


UNDECIDABLE = ("the runs differ in", "not judged", "seeds it survived")


def judge(claim: Mapping[str, Any], evidence: Evidence) -> Judgement:
    """The claim's verdict; where a run it reads is misfiled or damaged, "cannot tell" naming it (the other claims
    stand)."""
    if "not_run" in claim:  # stated for the record: nothing here can judge it (its line says why)
        return Judgement(NOT_RUN, "-", str(claim["not_run"]))
    try:
        return KINDS[claim.get("kind", "above")](claim, evidence)
    except PfedkitError as err:
        return Judgement(UNSURE, claim.get("kind", "direction"), f"not judged: {err}")


def check_claims(claims: Sequence[Mapping[str, Any]], evidence: Evidence) -> list[str]:
    """One line per claim: the verdict, and the numbers and rule that decided it."""
    return [judge(claim, evidence).line(claim["text"]) for claim in claims]


def not_repeats(configs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Why the runs of one seed (row -> flat config) are not repeats of one config: another method, a key beyond
    run.repeat, or two runs with the same run.repeat (the same draws: no spread to measure)."""
    names = {row: c.get("method.name") for row, c in configs.items()}
    if len(set(names.values())) > 1:
        return [f"method.name {', '.join(f'{r} {n!r}' for r, n in names.items())}"]
    repeats = {row: c.get("run.repeat", 0) for row, c in configs.items()}
    if len(set(repeats.values())) < len(repeats):
        return [f"run.repeat {', '.join(f'{row} {r!r}' for row, r in repeats.items())}: the same draws"]
    return unlike_runs(configs, ("run.repeat",))


def surviving_level(column_dir: Path, rows: Sequence[str], k: int, point: Optional[str]) -> Optional[float]:
    """The mean accuracy (%) of the noise rows' finished runs beside one that diverged: where its floor would have
    been measured (None if none can be read)."""
    values = []
    for row in rows:
        for run in seed_runs(column_dir, row):
            try:
                value, _ = read_run(run, k, point)
            except PfedkitError:
                continue
            if value is not None:
                values.append(value)
    return statistics.fmean(values) if values else None


def measured_floor(
    noise: Optional[Mapping[str, Any]],
    folders: Sequence[Path],
    k: int,
    point: Optional[str],
    expected: Optional[Callable[[str], Mapping[str, Any]]] = None,
) -> tuple[Optional[float], str, Optional[float]]:
    """The suite's noise floor (rule 3) from its `noise` rows, in the first of `folders` where two or more of them
    finished one seed, repeats of one config, each as `expected(row)` (flat keys: what the scale fixes) says: (the
    pooled standard deviation over those seeds, where it was measured, the accuracy (%) of the runs it was measured
    on). Where a repeat diverged: no floor, at the accuracy of the repeats that finished (no other floor may stand in
    for it there)."""
    if not noise:
        return None, "no noise rows in the suite", None
    for folder in folders:
        by_seed: dict[str, list[float]] = {}
        configs: dict[str, dict[str, dict[str, Any]]] = {}
        lost = [
            f"{row} on {run.name}" for row in noise["rows"] for run in diverged_seed_runs(folder / noise["column"], row)
        ]
        if lost:  # the repeats that survived understate the spread: a divergence is a draw's worst result
            return (
                None,
                f"not measured: a noise row's run diverged ({lost[0]}); run it again, or name other rows",
                surviving_level(folder / noise["column"], noise["rows"], k, point),  # rows near it get no floor
            )
        try:  # a noise run misfiled or unreadable: no floor until it is put right
            for row in noise["rows"]:
                for run in seed_runs(folder / noise["column"], row):
                    value, _ = read_run(run, k, point)
                    if value is None:  # never evaluated at this point (or not to its end): no result there
                        continue
                    by_seed.setdefault(run.name, []).append(value)
                    configs.setdefault(run.name, {})[row] = saved_config(run)
        except PfedkitError as err:
            return None, f"not measured: {err}", None
        # repeats of one config: the runs of a seed are of one method and differ in the training draws (run.repeat,
        # a value each) and nothing else
        unlike = [u for seed in sorted(configs) for u in not_repeats(configs[seed])]
        if unlike:
            return None, f"not measured: the noise rows' runs are not repeats of one config ({unlike[0]})", None
        # measured at the scale it is applied at: each run as the suite sets its row at this scale (rounds, data, ...)
        setting = {row: expected(row) if expected else {} for row in noise["rows"]}  # once a row, not once a run
        elsewhere = [
            f"{found} in {row}'s {seed}"
            for seed in sorted(configs)
            for row, config in configs[seed].items()
            for found in (setting_differences(config, setting[row]) if expected else [])
        ]
        if elsewhere:
            return None, f"not measured: the noise rows' runs are not of this scale ({elsewhere[0]})", None
        measured = {seed: noise_floor(v) for seed, v in by_seed.items() if len(v) >= 2}
        spreads = {seed: spread for seed, spread in measured.items() if spread}  # 0: no floor
        if measured and not spreads:  # it would let any gap decide
            seed = next(iter(measured))
            return (
                None,
                f"not measured: the noise rows' runs gave one result ({by_seed[seed][0]:.2f} on {seed}; other "
                "draws would differ)",
                None,
            )
        if spreads:  # a seed whose repeats gave one result is left out: pooled in, it would pull the floor down
            df = sum(len(by_seed[seed]) - 1 for seed in spreads)  # pooled over seeds: each seed's repeats less one
            floor = Floor(math.sqrt(statistics.fmean(s**2 for s in spreads.values())), df)
            repeats = max(len(by_seed[s]) for s in spreads)
            level = statistics.fmean(v for s in spreads for v in by_seed[s])
            same = sorted(set(measured) - set(spreads))
            return (
                floor,
                f"{floor:.2f} points, the standard deviation of {noise['rows'][0]} over {repeats} repeats "
                f"of one config in column {noise['column']} ({folder.name}), at {level:.1f}%"
                + (f" ({', '.join(same)} left out: its repeats gave one result)" if same else ""),
                level,
            )
    return None, f"not measured yet (rows {', '.join(noise['rows'])} in column {noise['column']})", None
