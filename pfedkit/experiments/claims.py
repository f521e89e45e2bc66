"""A paper's claims, stated as data in its suite file and checked on the finished runs (mean of the evaluations in
the last k rounds: the same stretch of training for a row evaluated every round and an FT row evaluated every 5).

- "above" (the default): the first of `rows` above every other in `column`, checked against the strongest of them,
  only on the seeds every row finished; with two or more, seed by seed (a seed fixes the partition and the sampled
  clients for every row), and a claim that holds on some seeds and not on others is reported as mixed. A gap (on one
  seed, or the mean gap over several) within two standard errors of the last-k means (from the spread of those k
  evaluations on each seed) is "cannot tell": the same sign on two seeds does not settle a gap inside the noise.
  Rows not run yet are left out of the judgement and named (a suite whose rows were cut still judges the rest).
- "within": `row` in `column` within `points` of the same row in the `reference` column (means over seeds).
- "margin": `row` ahead of each row in `over` by at least `at_least` points in `column` (a paper's "by N points").
A claim may name the evaluation `point` it is judged at ("start" or "after-local", for runs that measured both).
A verdict on rows whose curves are still rising (the tables' ↑) says so: it is provisional, the gap may yet change.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from pfedkit.reports.tables import cell_trend, finished_runs, headline_curve, last_evaluations, mean_of_last


def finals(out: Path, column: str, row: str, k: int, point: Optional[str] = None) -> dict[str, float]:
    """Seed folder name -> the mean accuracy (%) of the run's evaluations in its last k rounds (at `point`, else the
    run's own)."""
    return {d.name: 100 * mean_of_last(d, k, point, rounds=True) for d in finished_runs(out / column, row)}


def noise(out: Path, column: str, rows: Sequence[str], k: int, point: Optional[str], seed: str) -> float:
    """Standard error (points) of the difference of two rows' last-k means, from the spread of their last k
    evaluations (on `seed`): what one seed cannot tell apart."""
    spreads = []
    for row in rows:
        run = next(d for d in finished_runs(out / column, row) if d.name == seed)
        values = [100 * acc for _, acc in last_evaluations(headline_curve(run, point), k, rounds=True)]
        spreads.append(statistics.variance(values) / len(values) if len(values) > 1 else 0.0)
    return math.sqrt(sum(spreads))


def still_rising(out: Path, column: str, rows: Sequence[str], point: Optional[str], seeds: Sequence[str]) -> list[str]:
    """The rows whose mean curve over `seeds` in `column` is still rising (the tables' ↑)."""
    return [row for row in rows
            if cell_trend([d for d in finished_runs(out / column, row) if d.name in seeds], point) == "rising"]


def provisional(rising: Sequence[str]) -> str:
    return f"; provisional, still rising: {', '.join(rising)}" if rising else ""


def verdict(first: Mapping[str, float], other: Mapping[str, float], errors: Mapping[str, float]) -> str:
    """Holds, does not hold, mixed or cannot tell, from the per-seed last-k means of two rows and the per-seed standard
    errors of their difference (`noise`)."""
    seeds = [s for s in first if s in other]
    if len(seeds) < 2:  # one shared seed at most: compare the means, unless the gap is within two standard errors
        gap = statistics.fmean(first.values()) - statistics.fmean(other.values())
        error = errors[seeds[0]] if seeds else 0.0
        if abs(gap) < 2 * error:
            return f"cannot tell on one seed (gap {gap:+.2f}, within 2 standard errors of {error:.2f})"
        return "holds" if gap > 0 else "does not hold"
    gaps = [first[s] - other[s] for s in seeds]
    mean_gap = statistics.fmean(gaps)
    error = math.sqrt(sum(errors[s] ** 2 for s in seeds)) / len(seeds)  # of the mean gap
    if abs(mean_gap) < 2 * error:
        each = ", ".join(f"{g:+.2f}" for g in gaps)
        return (f"cannot tell on {len(seeds)} seeds (mean gap {mean_gap:+.2f}, within 2 standard errors of {error:.2f}; "
                f"per seed {each})")
    wins = [g > 0 for g in gaps]
    if all(wins) or not any(wins):
        return f"{'holds' if wins[0] else 'does not hold'} on each of {len(wins)} seeds"
    return f"mixed: holds on {sum(wins)} of {len(wins)} seeds"


def seed_noise(out: Path, column: str, rows: Sequence[str], k: int, point: Optional[str],
               seeds: Sequence[str]) -> dict[str, float]:
    """Seed -> `noise` of the two rows' difference on that seed."""
    return {seed: noise(out, column, rows, k, point, seed) for seed in seeds}


def above(claim: Mapping[str, Any], out: Path, k: int) -> str:
    first = claim["rows"][0]
    runs = {row: finals(out, claim["column"], row, k, claim.get("point")) for row in claim["rows"]}
    absent = [row for row, seeds in runs.items() if not seeds]
    if first in absent or len(absent) == len(runs) - 1:
        return f"- {claim['text']}: not run"
    others = [row for row in claim["rows"][1:] if row not in absent]
    runs = {row: seeds for row, seeds in runs.items() if seeds}
    partly = (f"; judged among the {len(runs)} of {len(claim['rows'])} rows run, not run: {', '.join(absent)}"
              if absent else "")
    # rows are compared on the seeds all of them finished: a seed fixes the partition, and means over other seeds differ
    shared = sorted(set.intersection(*(set(v) for v in runs.values())))
    if not shared:
        seeds = "; ".join(f"{row}: {', '.join(sorted(v))}" for row, v in runs.items())
        return f"- {claim['text']}: cannot tell: no seed finished for every row ({seeds})"
    some_seeds_left_out = any(len(v) > len(shared) for v in runs.values())
    pairwise = (pairwise_on_more_seeds(runs, first, others, len(shared), lambda rows, seeds: seed_noise(
        out, claim["column"], rows, k, claim.get("point"), seeds)) if some_seeds_left_out else "")
    runs = {row: {seed: v[seed] for seed in shared} for row, v in runs.items()}
    acc = {row: statistics.fmean(v.values()) for row, v in runs.items()}
    strongest = max(others, key=lambda r: acc[r])
    numbers = ", ".join(f"{r} {acc[r]:.2f}" for r in runs)
    if some_seeds_left_out:
        numbers += f"; on the {len(shared)} seed(s) every row finished: {', '.join(shared)}"
    errors = seed_noise(out, claim["column"], [first, strongest], k, claim.get("point"), shared)
    rising = provisional(still_rising(out, claim["column"], list(runs), claim.get("point"), shared))
    return f"- {claim['text']}: {verdict(runs[first], runs[strongest], errors)} ({numbers}{partly}){pairwise}{rising}"


def pairwise_on_more_seeds(runs: Mapping[str, Mapping[str, float]], first: str, others: Sequence[str], shared: int,
                           errors_of: Callable[[list[str], list[str]], Mapping[str, float]]) -> str:
    """Where the first row and another finished more seeds together than every row did: the pair judged on those
    (their mean gap and the seed-by-seed verdict), so extra seeds of the leading rows are not left unread."""
    lines = []
    for other in others:
        seeds = sorted(set(runs[first]) & set(runs[other]))
        if len(seeds) > shared:
            gap = statistics.fmean(runs[first][s] - runs[other][s] for s in seeds)
            mine, theirs = ({s: v[s] for s in seeds} for v in (runs[first], runs[other]))
            lines.append(f"over {other}: {verdict(mine, theirs, errors_of([first, other], seeds))} ({gap:+.2f})")
    return f"; pairwise on the seeds both finished, {first} " + ", ".join(lines) if lines else ""


def margin(claim: Mapping[str, Any], out: Path, k: int) -> str:
    """`row` ahead of each of `over` by at least `at_least` points (means over the seeds both finished)."""
    point, column, row = claim.get("point"), claim["column"], claim["row"]
    ours = finals(out, column, row, k, point)
    if not ours:
        return f"- {claim['text']}: not run"
    gaps, absent, judged_seeds = {}, [], set()
    for other in claim["over"]:
        theirs = finals(out, column, other, k, point)
        shared = sorted(set(ours) & set(theirs))
        if not shared:
            absent.append(other)
            continue
        gaps[other] = statistics.fmean(ours[s] - theirs[s] for s in shared), len(shared)
        judged_seeds.update(shared)
    if not gaps:
        return f"- {claim['text']}: not run"
    short = [other for other, (gap, _) in gaps.items() if gap < claim["at_least"]]
    judged = "holds" if not short else f"does not hold ({', '.join(short)} within {claim['at_least']:g} points)"
    numbers = ", ".join(f"{gap:+.2f} over {other} ({n} seed{'s' if n > 1 else ''})" for other, (gap, n) in gaps.items())
    missing = f"; not run: {', '.join(absent)}" if absent else ""
    rising = provisional(still_rising(out, column, [row, *gaps], point, sorted(judged_seeds)))
    return f"- {claim['text']}: {judged} ({numbers}{missing}){rising}"


def within(claim: Mapping[str, Any], out: Path, k: int) -> str:
    runs = finals(out, claim["column"], claim["row"], k, claim.get("point"))
    reference = finals(out, claim["reference"], claim["row"], k, claim.get("point"))
    if not runs or not reference:
        return f"- {claim['text']}: not run"
    value, base = statistics.fmean(runs.values()), statistics.fmean(reference.values())
    gap = value - base
    rising = [column for column, seeds in ((claim["column"], runs), (claim["reference"], reference))
              if still_rising(out, column, [claim["row"]], claim.get("point"), sorted(seeds))]
    note = provisional([f"{claim['row']} in {', '.join(rising)}"] if rising else [])
    return (f"- {claim['text']}: {'holds' if abs(gap) <= claim['points'] else 'does not hold'} "
            f"({claim.get('label', claim['column'])} {value:.2f} over {len(runs)} seeds, {claim['reference']} "
            f"{base:.2f}, {gap:+.2f}){note}")


KINDS = {"above": above, "within": within, "margin": margin}


def check_claims(claims: Sequence[Mapping[str, Any]], out: Path, k: int) -> list[str]:
    """One line per claim: holds, does not hold, mixed, or not run, with the numbers."""
    return [KINDS[claim.get("kind", "above")](claim, out, k) for claim in claims]
