"""Issue 61's mutants of the claim rules: each weakens one rule of pfedkit/papers/claims.py (or of the code that
reads the floors and checks the suites' claims) the way the issue's holes did, or removes it, and the unit tests of
tests/test_claims.py must catch it. For each mutant the script copies the package to a scratch folder, applies the
change there, runs the rule tests against that copy and prints which tests failed; a mutant no test catches is
reported as missed (the script then exits 1).

The tests that compare docs/REPRODUCTION.md with the committed runs are left out: the issue's holes change no
committed verdict, so only the rule tests can catch them.

Usage: python benchmarks/safety/claim_mutants.py [--out results/claim_mutants.txt] [--only M45,M67] [--jobs 2]
       (--only: those mutants alone, e.g. the ones a change added, where the whole list takes too long beside a
       training; the output names them)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
RULES = "pfedkit/papers/claims.py"
NOT_RULE_TESTS = "not document and not prose and not claims_command"

# name -> (what the mutant does, the text it replaces, what it puts there[, the file, claims.py unless named])
MUTANTS = {
    "M1": (
        "above: the claimant judged against the strongest other row only (hole 1)",
        "    for other in others:  # every pair: the claimant against each other row, each by rules 2-4\n",
        "    for other in sorted(others, key=lambda o: -mean[o])[:1]:\n",
    ),
    "M2": (
        "rule 2 on the first shared seed only (hole 2)",
        "    for seed in seeds:\n        configs, unused = {}, set(allowed)\n",
        "    for seed in seeds[:1]:\n        configs, unused = {}, set(allowed)\n",
    ),
    "M3": (
        "rule 2 on train.rounds, data.* and partition.* only (hole 2)",
        "            if key in skipped or own or repr(first.get(key)) == repr(theirs.get(key)):\n",
        "            if not key.startswith(('train.rounds', 'data.', 'partition.')) or key in skipped or own "
        "or repr(first.get(key)) == repr(theirs.get(key)):\n",
    ),
    "M4": (
        "rule 4 not applied to number claims (hole 3)",
        "    if verdict != UNSURE and rising and (towards or verdict == HOLDS):\n",
        "    if False:\n",
    ),
    "M5": (
        "rule 3: several seeds decide without a noise floor (hole 4)",
        "    if floor is None:\n        return UNSURE,",
        "    if floor is None and len(excess) < 2:\n        return UNSURE,",
    ),
    "M6": (
        "rule 2: partition.* keys dropped from the checked keys",
        "            if key in skipped or own or repr(first.get(key)) == repr(theirs.get(key)):\n",
        "            if key.startswith('partition.') or key in skipped or own "
        "or repr(first.get(key)) == repr(theirs.get(key)):\n",
    ),
    "M7": (
        "rule 2 removed from margin claims",
        "        unlike = like_with_like(evidence, [(column, row), (column, other)], shared, claim.get(",
        "        unlike = [] and len((0,",
    ),
    "M8": (
        "rule 2 removed from within claims",
        '    if unlike:\n        return Judgement(UNSURE, judges, f"{numbers}; the runs differ in',
        '    if False:\n        return Judgement(UNSURE, judges, f"{numbers}; the runs differ in',
    ),
    "M9": (
        "number claims decided without a noise floor",
        "    own_floor = None if floor is None else floor / math.sqrt(2)  # one run",
        "    own_floor = 1e-9 if floor is None else floor / math.sqrt(2)  # one run",
    ),
    "M10": (
        "rule 3: a floor measured far from the rows' accuracy applies (FLOOR_REACH ignored)",
        "FLOOR_REACH = 15.0",
        "FLOOR_REACH = 1e9",
    ),
    "M11": (
        "rule 4 removed from direction claims",
        "    if verdict == UNSURE or not still_closing(excess, claimant, other):\n",
        "    if True:\n",
    ),
    "M12": (
        "rule 3: a floor from noise runs that differ in more than run.repeat",
        "        if unlike:\n            return None, f\"not measured: the noise rows' runs",
        "        if False:\n            return None, f\"not measured: the noise rows' runs",
    ),
    "M13": (
        "rule 3: the standard error from the spread of the gaps ignored when the floor is smaller",
        "    return max(between, from_floor or 0.0)\n",
        "    return from_floor if from_floor is not None else between\n",
    ),
    "M14": (
        "above: every pair cut down to the seeds all the claim's rows share",
        "    shared = {o: sorted(set(results[first]) & set(results.get(o, {}))) for o in others}\n",
        "    shared = dict.fromkeys(others, sorted(set.intersection(*(set(v) for v in results.values()))))\n",
    ),
    "M15": (
        "count: the paper's rounding ignored",
        "    ours = round(trainable / 1e6, decimals)\n",
        "    ours = trainable / 1e6\n",
    ),
    "M16": (
        "rule 2: every hyper-parameter compared, also one a run's other values leave unused",
        "                unused |= unused_keys(runs[0])\n",
        "",
    ),
    "M17": (
        "rule 2: a hyper-parameter unused in one run excuses every other key too (too lenient)",
        " for u in unlike_runs(configs, unused) if u not in found]\n",
        " for u in unlike_runs(configs, unused) if u not in found and not unused - set(allowed)]\n",
    ),
    "M18": (
        "above: a pair that cannot be judged (unlike configs) decides the whole line",
        "            pairs[other] = (UNSURE, f\"not judged: the runs differ in {'; '.join(unlike[:3])}\", [], None)\n",
        '            return Judgement(UNSURE, "direction", f"{numbers}; the runs differ in {unlike[0]}")\n',
    ),
    "M19": (
        "margin: a row run on other seeds only is left out as not run",
        "        if not theirs:\n",
        "        if not shared:\n",
    ),
    "M20": (
        "within and number: the per-seed distance |gap| judged instead of the signed gaps",
        "    return [points - side * gap for gap in gaps]\n",
        "    return [points - abs(gap) for gap in gaps]\n",
    ),
    "M21": (
        "within: a trailing curve climbing through the leader ignored",
        "    if verdict == HOLDS and closing(trailer, leader) is not False:",
        "    if False:",
    ),
    "M22": (
        "rule 4: a curve too short for the tables' mark never counts as rising",
        "        return Trend(gain, gain > RISE_POINTS, rate, tuple(rates))\n",
        "        return Trend(gain, False, rate, tuple(rates))\n",
    ),
    "M23": (
        "rule 3: the floor's reach measured from the pair's mean accuracy",
        "        for accuracy in accuracies:\n",
        "        for accuracy in [statistics.fmean(accuracies)]:\n",
    ),
    "M24": (
        "rule 3: a floor of unknown level preferred to one measured near the rows",
        "if f[1] is not None else math.inf)",
        "if f[1] is not None else 0.0)",
    ),
    "M25": (
        "rule 2: runs without a config.toml compared as equal (two empty configs)",
        '                    found.append(f"config.toml ({name}\'s run has none, {seed})")\n',
        "                    pass\n",
    ),
    "M26": (
        "rule 1: a finished run with no evaluation at the point read anyway (crashes the table)",
        '    if not curve:\n        return None, f"finished, but never evaluated{at}"\n',
        "",
    ),
    "M27": (
        "rule 4: a row's mean curve over the rounds any seed evaluated (past the rounds all reached, or between "
        "seed sets)",
        "    shared = set.intersection(*(set(c) for c in curves)) if curves else set()",
        "    shared = set.union(*(set(c) for c in curves)) if curves else set()",
    ),
    "M28": (
        "rule 3: a floor read at the paper's point bounds a claim judged at another point",
        "        if point == self.paper_point:\n",
        "        if True:\n",
    ),
    "M29": (
        "rule 3: noise rows of two methods measured as repeats of one",
        "    if len(set(names.values())) > 1:\n",
        "    if False:\n",
    ),
    "M30": (
        "rule 3: two runs with the same run.repeat (the same draws) measured as repeats",
        "    if len(set(repeats.values())) < len(repeats):\n",
        "    if False:\n",
    ),
    "M31": (
        "rule 3: noise runs of another scale (rounds, data) give the floor",
        "        if elsewhere:\n",
        "        if False:\n",
    ),
    "M32": (
        "rule 2: two variants of one method compared as two methods (their shared hyper-parameters skipped)",
        "    return bool((set(pa.__mro__) & set(pb.__mro__)) - set(HyperParams.__mro__))\n",
        "    return issubclass(pa, pb) or issubclass(pb, pa)\n",
    ),
    "M33": (
        "rule 2: a run filed under another seed's folder counted as that seed (a seed twice)",
        '        if stated is not None and f"seed{stated}" != run.name:\n',
        "        if False:\n",
    ),
    "M34": (
        "rule 1: noise runs never evaluated at the point read anyway (crashes the table)",
        "                    if value is None:  # never evaluated at this point (or not to its end): no result there\n"
        "                        continue\n",
        "",
    ),
    "M35": (
        "rule 3: a non-finite result decides",
        "    if not all(math.isfinite(e) for e in excess) or",
        "    if False and not all(math.isfinite(e) for e in excess) or",
    ),
    "M36": (
        "count: the paper's precision read from the number as a float (trailing zeros lost)",
        "    written = str(given) if isinstance(given, (str, int)) else repr(float(given))",
        "    written = repr(float(given))",
    ),
    "M37": (
        "rule 4: a run whose evaluations stop before its last rounds read at the stretch it evaluated",
        "    if final is not None and curve[-1][0] < final - early:",
        "    if False:",
    ),
    "M38": (
        "rule 1: a claimant that diverged on seeds its rival finished holds on the seeds it survived",
        "    if verdict != capped or not lost:\n",
        "    if True:\n",
    ),
    "M39": (
        "rule 3: noise repeats that gave one result measured as a floor of 0 (any gap decides)",
        "        if measured and not spreads:  # it would let any gap decide\n",
        "        if False:\n",
    ),
    "M40": (
        "rule 3: a gap exactly on the bar decides",
        "    if abs(mean) <= quantile * error:",
        "    if abs(mean) < quantile * error:",
    ),
    "M41": (
        "rule 1: a finished row with no result at the point left out of an above claim as if not run",
        "    unread = {row: why for row, (values, why) in read.items() if not values and why}",
        "    unread = {}",
    ),
    "M42": (
        "owed seeds: a line that does not hold owes seeds on every failing pair, not the best-supported one",
        "    if verdict == FAILS and bases:\n",
        "    if False:\n",
    ),
    "M43": (
        "owed seeds: a line without a floor counted part of the way to a bar it does not have",
        "    finite = floor is not None and all(",
        "    finite = all(",
    ),
    "M44": (
        "rule 1: runs read at their own points take a floor read at another point",
        "        if point is None and self.floor_point is not None and set(read_at) - {self.floor_point}:\n",
        "        if False:\n",
    ),
    "M45": (
        "rule 3: a borrowed floor bounds a suite of another setting",
        '    unlike = borrowed_differences(suite, source, scale) if source is not suite else ""\n',
        '    unlike = ""\n',
        "pfedkit/papers/reproduce.py",
    ),
    "M46": (
        "rule 3: a floor's runs compared with the suite on the keys it states only (a changed default passes)",
        '        if key.split(".")[0] in SETTING_SECTIONS and (key not in PLACEMENT_KEYS or key == PRETRAINED)\n',
        '        if key.split(".")[0] in SETTING_SECTIONS and (key not in PLACEMENT_KEYS or key == PRETRAINED)'
        " and key in flat(raw)\n",
        "pfedkit/papers/reproduce.py",
    ),
    "M47": (
        "the table: one misfiled or unreadable run stops every line (no per-claim error line)",
        "    except PfedkitError as err:\n        return Judgement(UNSURE,",
        "    except ZeroDivisionError as err:\n        return Judgement(UNSURE,",
    ),
    "M48": (
        "suites: a claim that judges nothing (a row against itself, a margin of 0, a row outside the suite) accepted",
        "        problem = claim_problem(claim, kind, columns, rows)\n",
        '        problem = ""\n',
        "pfedkit/papers/suites.py",
    ),
    "M49": (
        "rule 3: a judged run made at another setting than its cell's (another scale, column) is read",
        "            if off:  # rule 3's floor",
        "            if False:  # rule 3's floor",
    ),
    "M50": (
        "rule 1: a number claim leaves out its unread seeds without naming them",
        "        + read_notes(evidence, column, {row: (runs, unread)}),",
        '        + "",',
    ),
    "M51": (
        "rule 2: a within claim leaves out the seeds one column alone finished without naming them",
        "        if set(mine) - set(shared)\n",
        "        if False\n",
    ),
    "M52": (
        "the numbers shown: means over unlike seed sets side by side when no seed is common to every row",
        "    if not common:  # each pair on its own seeds",
        "    if False:  # each pair on its own seeds",
    ),
    "M53": (
        "rule 3: a noise run that cannot be read stops the table (no floor, no line)",
        '        except PfedkitError as err:\n            return None, f"not measured: {err}", None\n',
        '        except ZeroDivisionError as err:\n            return None, f"not measured: {err}", None\n',
    ),
    "M54": (
        "rule 2: a folder set aside (seed0-old) that diverged counted as a seed's divergence",
        "    return [d for d in seed_folders(column_dir, method) if (d / DIVERGED).is_file()]",
        '    return [d for d in (column_dir / method).glob("seed*") if (d / DIVERGED).is_file()]',
        "pfedkit/reports/tables.py",
    ),
    "M55": (
        "the table: a margin or number whose claimant diverged said to be not run, its divergence unnamed",
        "        return Judgement(NOT_RUN, judges, said)",
        "        return Judgement(NOT_RUN, judges)",
    ),
    "M56": (
        "rule 1: a run whose summary and config.toml disagree on its rounds (carried on, unfinished) read",
        "    if configured is not None and final != configured:",
        "    if False:",
    ),
    "M57": (
        "rule 4: gains compared in points over unequal stretches, not per round",
        "    return closer.rate - held.rate, None",
        "    return closer.gain - held.gain, None",
    ),
    "M58": (
        "the table: a not-run line asks to run rows that finished or diverged",
        "if not ended_by_diverging(judged_on, c, r) and not finished_runs(judged_on.out / c, r)",
        "if True",
        "pfedkit/papers/reproduce.py",
    ),
    "M59": (
        "owed seeds: a command printed where every seed has ended (diverged runs are not run again)",
        '        if ended and all({f"seed{n}" for n in range(target)} <= seeds for seeds in ended.values()):',
        "        if False:",
        "pfedkit/papers/reproduce.py",
    ),
    "M60": (
        "the table: a damaged file the floor reads (a noise run's summary, any run's config) stops the table",
        "    except PfedkitError as err:\n        return Evidence(",
        "    except ZeroDivisionError as err:\n        return Evidence(",
        "pfedkit/papers/reproduce.py",
    ),
    "M61": (
        "rule 3: a floor borrowed from a suite that borrows its own (a chain, or itself) read as if measured",
        '        if source is suite or (source.noise and "suite" in source.noise):',
        "        if False:",
        "pfedkit/papers/reproduce.py",
    ),
    "M62": (
        "within: columns that ran on other seeds only reported as not run",
        "        if runs and base:  # both ran",
        "        if False:  # both ran",
    ),
    "M63": (
        "the table: a not-run line lists every row of the claim, also those that ran (the cells missing aside)",
        "    cells = claim_cells(claim) if missing is None else list(missing)",
        "    cells = claim_cells(claim)",
        "pfedkit/papers/reproduce.py",
    ),
    "M64": (
        "rule 2: a run without a config.toml called misfiled under seed 0 (or compared as an empty config)",
        '            return "it has no config.toml to compare"',
        '            return ""',
    ),
    "M65": (
        "rule 1: a rival that diverged where the claimant finished leaves does not hold standing",
        "        beaten = sorted(evidence.diverged(column, other) & set(results[first]))",
        "        beaten = []",
    ),
    "M66": (
        "suites: a claim on a row its column does not run accepted (never judged, its command runs nothing)",
        "        elsewhere = [r for r in named_rows if runs_here is not None and r not in runs_here]",
        "        elsewhere = []",
        "pfedkit/papers/suites.py",
    ),
    "M67": (
        "rule 3: a noise repeat that diverged dropped, the floor taken from the repeats that survived",
        "        lost = [\n"
        '            f"{row} on {run.name}" for row in noise["rows"] for run in diverged_seed_runs('
        'folder / noise["column"], row)\n'
        "        ]",
        "        lost = []",
    ),
    "M68": (
        "rule 2: a run of another method in a row's folder taken as that row's result (and as a noise repeat)",
        '            "method.name": suite.method_of(row),\n',
        "",
        "pfedkit/papers/reproduce.py",
    ),
    "M69": (
        "a floor borrowed at a scale its source lacks measured anyway (the claims table crashed)",
        "    entries = [] if unlike else noise_entries(source.noise)",
        "    entries = noise_entries(source.noise)",
        "pfedkit/papers/reproduce.py",
    ),
    "M70": (
        "a suite's own table.md not written when its floor cannot be read (noise.suite mis-stated, a file damaged)",
        "        evidence, floor_text = evidence_or_why(suite, out, scale, on_gpu)",
        "        evidence, floor_text = suite_evidence(suite, out, scale, on_gpu)",
        "pfedkit/papers/reproduce.py",
    ),
    "M71": (
        "a summary.json that is not an object read (a TypeError stopped the table)",
        "    if not isinstance(summary, dict):",
        "    if False:",
        "pfedkit/reports/tables.py",
    ),
    "M72": (
        "a metrics.csv row without a whole round read (a ValueError stopped the table, 2.5 read as round 2)",
        '                if key == "round" and (value in (None, "") or not float(value).is_integer()):',
        "                if False:",
        "pfedkit/reports/tables.py",
    ),
    "M73": (
        "rule 2: a summary's seed that is not a whole number read (a ValueError stopped the table)",
        '        if type(summary["seed"]) is not int:  # a seed is a whole number (not a bool, a string, a float)',
        "        if False:",
    ),
    "M74": (
        "suites: claim values of the wrong type accepted (a number as a string, one row where a list goes)",
        "    mistyped = value_problem(claim)",
        '    mistyped = ""',
        "pfedkit/papers/suites.py",
    ),
    "M75": (
        "suites: a count claim on a model not built here accepted (its line then says only not judged)",
        '        if claim["model"] not in MODEL_NAMES:',
        "        if False:",
        "pfedkit/papers/suites.py",
    ),
    "M76": (
        "suites: a count claim with a fractional num_classes accepted (build_model refuses it when the line is judged)",
        '    if "num_classes" in claim and not is_positive_int(claim["num_classes"]):',
        "    if False:",
        "pfedkit/papers/suites.py",
    ),
    "M77": (
        "rule 3: a seed whose repeats gave one result pooled into the floor (a spread of 0 pulls it down)",
        "        spreads = {seed: spread for seed, spread in measured.items() if spread}  # 0: no floor\n",
        "        spreads = dict(measured)\n",
    ),
    "M78": (
        "rule 2: a diverged run filed under another seed's folder taken as that seed's result",
        "    return filed_by_seed(diverged_runs(column_dir, row))\n",
        "    return diverged_runs(column_dir, row)\n",
    ),
    "M79": (
        "a damaged config.toml section read as it is (a traceback instead of a line that cannot tell)",
        "    if not isinstance(section, dict):\n",
        "    if False:\n",
        "pfedkit/reports/tables.py",
    ),
    "M80": (
        "rule 2: runs on other data (data.checksum) compared as like with like",
        '    if "data.checksum" not in allowed and all(checksums) and checksums[0] != checksums[1]:\n',
        "    if False:\n",
    ),
    "M81": (
        "rule 2: a pretrained backbone against none compared as like with like",
        '    if "model.options.pretrained" not in allowed and pretrained[0] != pretrained[1]:\n',
        "    if False:\n",
    ),
    "M82": (
        "rule 2: built-in methods of other pfedkit code compared as like with like",
        '    if "method.source" not in allowed and built_in and sources[0] != sources[1]:\n',
        "    if False:\n",
    ),
    "M83": (
        "rule 1: a curve stopping up to k - 1 rounds short read over the rounds before its stop (hole 5 of sitting 40)",
        "    if final is not None and curve[-1][0] < final - early:",
        "    if final is not None and curve[-1][0] < final - max(k - 1, 1):\n",
    ),
    "M84": (
        "rule 3: a floor of unknown level refused once a far-off measured floor exists (hole 8 of sitting 40)",
        "        unknown = [f for f, at in floors if at is None]  # of unknown level: where none measured is near\n",
        "        unknown = []\n",
    ),
    "M85": (
        "table: a folder's diverged line dropped when another folder judged the claim (hole 7 of sitting 40)",
        '                lines += [line("-", "not run", detail, "-", label) for label, detail in diverged.items()]\n',
        "                pass\n",
        "pfedkit/papers/reproduce.py",
    ),
    "M86": (
        "owed seeds: an above line that cannot tell rests on the two pairs shown only (hole 6 of sitting 40)",
        "    basis = resting_on({o: (v, b) for o, (v, _, _, b) in pairs.items()}, verdict)\n",
        "    basis = resting_on({o: (v, b) for o, (v, _, _, b) in pairs.items() if verdict != UNSURE or o in deciding},"
        " verdict)\n",
    ),
    "M87": (
        "near: the band's sign flipped (at least `points` ahead, not at most `points` behind)",
        '    return margin({**claim, "at_least": -claim["points"]}, evidence)\n',
        '    return margin({**claim, "at_least": claim["points"]}, evidence)\n',
    ),
    "M88": (
        "rule 3: a run's setting compared on the keys the cell states only (a [proxy] or an option left unsaid passes)",
        "    keys = set(setting) | stated\n",
        "    keys = set(setting)\n",
    ),
    "M89": (
        "rules 2-3: a model option stated at its default by one side and left unsaid by the other read as a difference",
        '            stated.setdefault(f"model.options.{option}", list(default) if isinstance(default, tuple) else'
        " default)\n",
        "            pass\n",
    ),
    "M90": (
        "rule 3: a pretrained backbone compared by where its file lies, not by whether there is one",
        "    stated[PRETRAINED] = bool(stated.get(PRETRAINED))\n",
        "    stated[PRETRAINED] = stated.get(PRETRAINED) or False\n",
    ),
    "M91": (
        "rule 3: a floor whose noise repeat diverged dropped, so a floor measured elsewhere stands in for it",
        "        + [(f, lv) for f, _, lv in m if f is None and lv is not None]\n",
        "        + []\n",
        "pfedkit/papers/reproduce.py",
    ),
    "M92": (
        "a metrics.csv in percent (an accuracy above 1) judged as a run's",
        '                if key != "round" and value not in (None, "") and not 0 <= float(value) <= 1:\n',
        "                if False:\n",
        "pfedkit/reports/tables.py",
    ),
    "M93": (
        "owed seeds: the share of the way rounded to nearest (99.6% printed as 100%, a bar it has not reached)",
        'f", {math.floor(100 * furthest + 1e-9)}% of the way"',
        'f", {furthest:.0%} of the way"',
        "pfedkit/papers/reproduce.py",
    ),
    "M94": (
        "rule 3: a sibling row's run (one method, another value the suite gives a row) read as the row's result",
        "            **row_method_values(suite, scale, column, row, tuned.get(row, ())),\n",
        "",
        "pfedkit/papers/reproduce.py",
    ),
    "M96": (
        "every pair (above, below, margin): a line decided by any pair that holds",
        "    return FAILS if FAILS in verdicts else (HOLDS if set(verdicts) == {HOLDS} else UNSURE)\n",
        "    return HOLDS if HOLDS in verdicts else (FAILS if FAILS in verdicts else UNSURE)\n",
    ),
    "M95": (
        "rule 3: a row run at tuned values (--tuned) refused as of another setting than its cell's",
        "    setting = cell_setting(suite, scale, tuned_keys(out))\n",
        "    setting = cell_setting(suite, scale)\n",
        "pfedkit/papers/reproduce.py",
    ),
    "M97": (
        "owed seeds: a gap past the bar held open by rule 4 left off the list (rounds owed, not seeds: sitting 45)",
        "(decided or OWED_SHARE <= (b.share or 0))]",
        "(decided or OWED_SHARE <= (b.share or 0) < 1)]",
        "pfedkit/papers/reproduce.py",
    ),
    "M98": (
        "shown pairs (above, below): a line that cannot tell shows the closest, hiding a pair held open past the bar",
        "    return not past, past and gap >= 0, closeness\n",
        "    return False, False, closeness\n",
    ),
    "M99": (
        "shown pairs (above, below): of the pairs past the bar held open, a shortfall not shown before a lead",
        "    return not past, past and gap >= 0, closeness\n",
        "    return not past, False, closeness\n",
    ),
    "M100": (
        "shown pairs (above, below): a pair's gap unsigned, so no shortfall is shown before a lead",
        "        return cls(tuple(cells), tuple(seeds), share_of_bar(excess, floor), statistics.fmean(excess))\n",
        "        return cls(tuple(cells), tuple(seeds), share_of_bar(excess, floor), abs(statistics.fmean(excess)))\n",
    ),
    "M101": (
        "shown pairs (above, below): a line that does not hold shows the closest failure, not the one it rests on",
        "        return -seeds, -share, closeness\n",
        "        return 0, 0, closeness\n",
    ),
    "M102": (
        "shown pairs (above): the closest pair read from the rows' means, not the pair's gap on its shared seeds",
        "abs(basis.gap if basis else mean[first] - mean.get(other, mean[first]))",
        "abs(mean[first] - mean.get(other, mean[first]))",
    ),
    "M103": (
        "rule 3: the bar at 2 standard errors whatever the seeds (the normal approximation, not a t-test; issue 96)",
        '        return t_quantile(seeds - 1), f"t, {seeds - 1} df"\n',
        '        return 2.0, "normal"\n',
    ),
    "M104": (
        "rule 3: a floor from two runs decides one seed alone (issue 96)",
        '    if df < 2:\n        return None, "floor from 2 runs"\n',
        '    if False:\n        return None, "floor from 2 runs"\n',
    ),
    "M105": (
        "rule 3: one seed judged at the normal 1.96, not at t with the floor's degrees of freedom (issue 96)",
        '    return t_quantile(df), f"t, the floor\'s {df} df"\n',
        '    return 1.96, "normal"\n',
    ),
    "M106": (
        "rule 3: a pooled floor's degrees of freedom count every run, not each seed's repeats less one (issue 96)",
        "            df = sum(len(by_seed[seed]) - 1 for seed in spreads)",
        "            df = sum(len(by_seed[seed]) for seed in spreads)",
    ),
    "M107": (
        "rule 4: paces within their noise read as not closing (the mean paces compared as they are; issue 96)",
        "    if abs(gap) <= error:\n        return None\n",
        "    if False:\n        return None\n",
    ),
    "M108": (
        "the owed list: a line 3 seeds leave halfway to the t-test's bar owes nothing more (issue 96)",
        "    target = MORE_SEEDS if more else LEADING_SEEDS\n    short += more\n",
        "    target = LEADING_SEEDS\n",
        "pfedkit/papers/reproduce.py",
    ),
    "M109": (
        "equal: judged one way only (the first row at most points behind the second), not either way (issue 96)",
        " for a, b in ((first, second), (second, first))]\n",
        " for a, b in ((first, second),)]\n",
    ),
    "M110": (
        "converged: a row still rising on runs shorter than the paper's rounds does not hold (issue 96)",
        "        held = verdict == FAILS and paper_rounds is not None and ran < paper_rounds\n",
        "        held = False\n",
    ),
    "M111": (
        "converged: the limit half a point whatever the fifths' distance, not the ↑ mark's per 100 rounds (issue 96)",
        "        limit = RISE_POINTS * (1.0 if short else min(1.0, gains[0][1] / PER_ROUNDS))\n",
        "        limit = RISE_POINTS\n",
    ),
    "M112": (
        "converged: a gain's error never below a floor of final results (the review's H1: nothing could hold)",
        "    error, quantile = statistics.stdev(excess) / math.sqrt(n), t_quantile(n - 1)\n",
        "    error, quantile = max(statistics.stdev(excess) / math.sqrt(n), 0.5), t_quantile(n - 1)\n",
    ),
    "M113": (
        "converged: a row that diverged on a seed holds on the seeds it survived",
        "        if diverged and verdict == HOLDS:\n",
        "        if False:\n",
    ),
    "M114": (
        "equal: an open line rests on both ways, the one already decided too",
        " for b in way.basis))\n",
        " or True for b in way.basis))\n",
    ),
    "M115": (
        "waits_on: an unlike or unread pair beside one within its bar counted as waiting on seeds",
        '    if any(said in detail for said in UNDECIDABLE):\n        return "other"\n',
        "",
    ),
    "M116": (
        "converged: runs judged long enough by their longest seed, not their shortest",
        "        ran = min((configured_rounds(run) or rounds[-1]) for run in runs)",
        "        ran = max((configured_rounds(run) or rounds[-1]) for run in runs)",
    ),
}


def run_rule_tests(package_root: Path) -> tuple[int, list[str]]:
    """Run the copy of tests/test_claims.py's rule tests beside the package copy under package_root, from there (so
    that the copy, not the installed package, is imported); (exit code, failed tests)."""
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", NOT_RULE_TESTS, "tests/test_claims.py"],
        cwd=package_root,
        env=env,
        capture_output=True,
        text=True,
    )
    failed = list(dict.fromkeys(re.findall(r"FAILED tests/test_claims\.py::(\w+)", done.stdout)))  # parametrized: once
    return done.returncode, failed


def package_copy(scratch: Path) -> Path:
    """A copy of the package and the rule tests under `scratch`, checked to be what the tests there import."""
    shutil.copytree(REPOSITORY / "pfedkit", scratch / "pfedkit")
    (scratch / "tests").mkdir()
    for name in ("tests/test_claims.py", "tests/conftest.py", "pyproject.toml"):
        if (REPOSITORY / name).exists():
            shutil.copy(REPOSITORY / name, scratch / name)
    probe = subprocess.run(
        [sys.executable, "-c", "import pfedkit; print(pfedkit.__file__)"],
        env={**os.environ, "PYTHONPATH": str(scratch)},
        capture_output=True,
        text=True,
        cwd=scratch.parent,
    )
    if not probe.stdout.startswith(str(scratch)):  # the copy must be the package the tests import
        sys.exit(f"the scratch copy is not the imported package ({probe.stdout.strip()}); cannot test mutants")
    return scratch


def try_mutant(root: Path, name: str) -> tuple[str, bool]:
    """Apply mutant `name` to the copy under root, run the rule tests, restore the file: (its line, caught)."""
    about, old, new, *where = MUTANTS[name]
    target = root / (where[0] if where else RULES)
    original = target.read_text()
    if original.count(old) != 1:
        sys.exit(f"{name}: its text is not found once in {target.relative_to(root)} (the code changed): update it")
    target.write_text(original.replace(old, new))
    try:
        code, failed = run_rule_tests(root)
    finally:
        target.write_text(original)
    caught = code != 0 and bool(failed)
    return f"{name} {about}: {'caught by ' + ', '.join(failed) if caught else 'MISSED'}", caught


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--only", default=None, help="comma-separated mutant names (default: every one)")
    parser.add_argument("--jobs", type=int, default=1, help="mutants tried at once, each on its own copy (one a core)")
    args = parser.parse_args()
    chosen = [m.strip() for m in args.only.split(",")] if args.only else list(MUTANTS)
    unknown = [m for m in chosen if m not in MUTANTS]
    if unknown:
        sys.exit(f"--only: no mutant {unknown[0]!r}; they are {', '.join(MUTANTS)}")
    if args.jobs < 1:
        sys.exit(f"--jobs {args.jobs}: give 1 or more")
    lines = [] if args.only is None else [f"only {', '.join(chosen)} of the {len(MUTANTS)} mutants run"]
    with tempfile.TemporaryDirectory() as scratch:
        copies = [package_copy(Path(scratch) / f"copy{j}") for j in range(args.jobs)]
        code, failed = run_rule_tests(copies[0])
        lines.append(f"unmutated: exit {code}, {len(failed)} rule tests failed")
        if code != 0:
            sys.exit("\n".join(lines))
        share = [chosen[j :: args.jobs] for j in range(args.jobs)]  # each copy its own mutants, one after another
        with ThreadPoolExecutor(args.jobs) as pool:
            done = pool.map(lambda j: {m: try_mutant(copies[j], m) for m in share[j]}, range(args.jobs))
            results = {m: r for part in done for m, r in part.items()}
    lines += [results[m][0] for m in chosen]
    missed = [m for m in chosen if not results[m][1]]
    lines.append(f"\n{len(chosen) - len(missed)} of {len(chosen)} mutants caught")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
