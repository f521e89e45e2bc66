"""Carrying a finished run on for more rounds: the result equals a run trained that long from round 0."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pfedkit.engine.simulation import Simulation, simulate
from pfedkit.errors import PfedkitError
from pfedkit.experiments.pipeline import CONTINUED, reuse_identical_runs, run_configs
from pfedkit.io import read_csv
from pfedkit.methods import METHODS
from pfedkit.papers.reproduce import copied_lines
from tests.test_engine import synthetic
from tests.test_eval_point import StopsOnce

ON_ADAPTERS = sorted(name for name in METHODS if name.startswith("heart-pfl") or name == "perada")
ON_AN_MLP = sorted(set(METHODS) - set(ON_ADAPTERS) - {"fedphp"})  # FedPHP: see below
ADAPTER_SETTING = dict(  # a small adapter ResNet on 12x12 images, with a proxy set for HEART-PFL's transfer
    data={"dataset": "synthetic", "options": {"shape": [1, 12, 12], "samples": 400, "test_samples": 200}},
    partition={"clients": 4},
    model={"name": "small-resnet-adapter", "options": {"widths": [4, 8, 8, 16]}},
    eval={"protocol": "official-test"},
    train={"join_ratio": 0.5, "lr": 0.05},
    proxy={"holdout": 0.1, "dataset": "synthetic", "options": {"shape": [1, 12, 12], "samples": 100, "seed": 3}},
)
DISTILLATION_STEPS = {"kd_steps": 2, "kd_batch": 32}  # a short server-side distillation


def carried_on(tmp_path, short: dict, long: dict, name: str = "run"):
    """A run of `short`, copied and resumed with `long`; and `long` straight from round 0."""
    simulate(synthetic(**short), tmp_path / "short", progress=False)
    shutil.copytree(tmp_path / "short", tmp_path / name)
    simulate(synthetic(**long), tmp_path / name, resume=True, progress=False)
    simulate(synthetic(**long), tmp_path / "straight", progress=False)
    return tmp_path / name, tmp_path / "straight"


def same_files(got, want):
    for name in ("metrics.csv", "clients.csv"):
        rows, expected = read_csv(got / name), read_csv(want / name)
        drop = {"train_s", "eval_s"}  # timings
        assert [{k: v for k, v in r.items() if k not in drop} for r in rows] == [
            {k: v for k, v in r.items() if k not in drop} for r in expected
        ], name
    summary, expected = (json.loads((d / "summary.json").read_text()) for d in (got, want))
    assert {k: v for k, v in summary.items() if not k.endswith("_s")} == {
        k: v for k, v in expected.items() if not k.endswith("_s")
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", ON_AN_MLP + ON_ADAPTERS)
def test_a_finished_run_carried_on_equals_the_longer_run(tmp_path, name):
    setting = ADAPTER_SETTING if name in ON_ADAPTERS else {}
    method = {
        "name": name,
        **(DISTILLATION_STEPS if name in ON_ADAPTERS else {}),
        **({"pgd_steps": 2} if name.startswith("heart-pfl") else {}),
    }
    train = setting.get("train", {})
    got, want = carried_on(
        tmp_path,
        dict(setting, method=method, train={**train, "rounds": 2}),
        dict(setting, method=method, train={**train, "rounds": 4}),
    )
    same_files(got, want)


def test_carried_on_with_eval_every_drops_the_short_runs_final_evaluation(tmp_path):
    """Round 3 ends the 3-round run, so it was evaluated there; a 6-round run evaluating every 2nd round is not."""
    short = dict(
        method={"name": "ditto"}, train={"rounds": 3}, eval={"every": 2}, run={"checkpoint_every": 5, "seed": 1}
    )
    long = dict(short, train={"rounds": 6})
    got, want = carried_on(tmp_path, short, long)
    same_files(got, want)
    assert [int(r["round"]) for r in read_csv(got / "metrics.csv") if r["acc"]] == [0, 2, 4, 6]


def test_a_run_cut_off_while_being_carried_on_resumes_to_the_longer_run(tmp_path):
    """Cut in round 3 before any checkpoint of the longer run: config.toml says 6 rounds, the checkpoint is the
    3-round run's end, and the resume must still train round 3 rather than take its evaluation-only row."""
    short, long = (
        synthetic(train={"rounds": 3}, run={"checkpoint_every": 5, "seed": 1}),
        synthetic(train={"rounds": 6}, run={"checkpoint_every": 5, "seed": 1}),
    )
    simulate(short, tmp_path / "cut", progress=False)
    with pytest.raises(KeyboardInterrupt):
        StopsOnce(long, tmp_path / "cut", resume=True, progress=False).run()
    assert not (tmp_path / "cut" / "summary.json").exists()  # not a finished run while it is being carried on
    resumed = StopsOnce(long, tmp_path / "cut", resume=True, progress=False)
    resumed.resumed = True
    resumed.run()
    simulate(long, tmp_path / "straight", progress=False)
    same_files(tmp_path / "cut", tmp_path / "straight")


def test_only_more_rounds_carry_a_run_on(tmp_path):
    simulate(synthetic(train={"rounds": 3}), tmp_path / "run", progress=False)
    for changed in (dict(train={"rounds": 5, "lr": 0.2}), dict(train={"rounds": 2})):
        with pytest.raises(PfedkitError, match="another configuration"):
            simulate(synthetic(**changed), tmp_path / "run", resume=True, progress=False)


def test_a_method_whose_defaults_follow_the_rounds_is_not_carried_on(tmp_path):
    """FedPHP's schedule is set by the run's length (expected participations), so its first rounds differ."""
    simulate(synthetic(method={"name": "fedphp"}, train={"rounds": 2}), tmp_path / "run", progress=False)
    with pytest.raises(PfedkitError, match="expected_participations"):
        simulate(
            synthetic(method={"name": "fedphp"}, train={"rounds": 4}), tmp_path / "run", resume=True, progress=False
        )


def test_after_local_last_round_measured_only_because_it_was_last_is_refused(tmp_path):
    short = dict(train={"rounds": 4}, eval={"point": "both", "every": 2})  # round 3 measured after local: the last
    simulate(synthetic(**short), tmp_path / "run", progress=False)
    with pytest.raises(PfedkitError, match="start a new --out"):
        simulate(synthetic(**dict(short, train={"rounds": 6})), tmp_path / "run", resume=True, progress=False)
    got, want = carried_on(tmp_path, dict(short, train={"rounds": 3}), dict(short, train={"rounds": 5}), "odd")
    same_files(got, want)  # round 2, the 3-round run's last training round, is one every 2nd round measures anyway


def test_a_suite_cell_carries_on_a_shorter_finished_run_it_finds(tmp_path):
    simulate(
        synthetic(method={"name": "fedper"}, train={"rounds": 2}),
        tmp_path / "short" / "col" / "fedper" / "seed1",
        progress=False,
    )
    cell = tmp_path / "long" / "col" / "fedper" / "seed1"
    long = synthetic(method={"name": "fedper"}, train={"rounds": 4})
    assert reuse_identical_runs({cell: long}, tmp_path / "short") == [cell]
    record = json.loads((cell / CONTINUED).read_text())
    assert record["from"] == "col/fedper/seed1" and not (cell / "summary.json").exists()
    assert copied_lines(tmp_path / "long", CONTINUED) == []  # not listed in a table until it has finished
    run_configs({cell: long}, resume=True, progress=False)
    assert copied_lines(tmp_path / "long", CONTINUED)[-1] == "- col/fedper/seed1 continues col/fedper/seed1"
    simulate(long, tmp_path / "straight", progress=False)
    same_files(cell, tmp_path / "straight")
    assert len(read_csv(cell / "metrics.csv")) == 5


@pytest.mark.parametrize("suite_name", ["fedafk-cifar10", "pgfedsplit-cifar", "heart-cifar100"])
def test_a_suites_long_scale_carries_on_its_small_cells(suite_name):
    """Every cell of a `long` scale is its small cell run for more rounds and nothing else, read from the folders the
    suites write (so a long run continues the committed small cells instead of training from round 0)."""
    from pfedkit.experiments.cells import cell_config
    from pfedkit.papers.suites import SUITES
    from pfedkit.registry import build_config, continues, method_class, run_differences

    suite, results = SUITES[suite_name], Path("results")
    small_out, long_out = results / suite_name.replace("-", "_"), results / (suite_name.replace("-", "_") + "_long")
    for column, row in suite.cells(list(suite.columns), suite.rows):
        small = build_config(cell_config(suite, "small", column, row, out=small_out))
        long = build_config(cell_config(suite, "long", column, row, out=long_out))
        following = set(method_class(long.method.name).Params.run_defaults(long.train))  # e.g. FedPHP's schedule
        if not following:
            assert continues(small, long), (column, row, run_differences(small, long))
        else:  # trained afresh, rightly: its schedule stretches with the rounds
            assert {change.split(":")[0] for change in run_differences(small, long)} <= {"train.rounds"} | {
                f"method.{key}" for key in following
            }, (column, row)
    if suite.pretrain:  # the long cells load the very backbone the small ones were trained from
        backbone = {
            scale: Path(suite.pretrain_at(scale)["path"].replace("{out}", str(out))).resolve()
            for scale, out in (("small", small_out), ("long", long_out))
        }
        assert backbone["long"] == backbone["small"]


class CutOffInRoundTwo(Simulation):
    """A run stopped in round 2, before any checkpoint when checkpoint_every is above 2."""

    def train_clients(self, round, payloads, evaluate_after=False):
        if round == 2:
            raise KeyboardInterrupt
        return super().train_clients(round, payloads, evaluate_after)


def test_a_suite_cell_cut_off_before_its_first_checkpoint_runs_again_from_round_zero(tmp_path):
    """A suite re-run finds the cell's metrics.csv but no checkpoint: it trains the cell afresh (it used to refuse,
    asking for --resume, which the suite had already passed)."""
    config = synthetic(method={"name": "fedper"}, run={"checkpoint_every": 10})
    cell = tmp_path / "suite" / "col" / "fedper" / "seed1"
    with pytest.raises(KeyboardInterrupt):
        CutOffInRoundTwo(config, cell, progress=False).run()
    assert (cell / "metrics.csv").exists() and not (cell / "checkpoint.pt").exists()
    said = []
    run_configs({cell: config}, resume=True, progress=False, log=said.append)
    assert said == [f"{cell} was cut off before its first checkpoint; running it again from round 0"]
    simulate(config, tmp_path / "straight", progress=False)
    same_files(cell, tmp_path / "straight")
