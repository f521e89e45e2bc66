"""`pfedkit tune`: a validation split carved from the clients' training data, trials that never read the test split,
a study that resumes after being killed, and a best config that `pfedkit run` takes."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from pfedkit.cli import main
from pfedkit.data import federated
from pfedkit.data.federated import build_federated
from pfedkit.errors import ConfigError
from pfedkit.methods.base import search_space
from pfedkit.methods.fedprox import FedProxParams
from pfedkit.registry import build_config, load_config
from pfedkit.tune import Tuner, searched_space

pytest.importorskip("optuna")

DIGITS = Path(__file__).resolve().parents[1] / "examples" / "digits.toml"
SYNTHETIC = {
    "data": {"dataset": "synthetic", "options": {"samples": 600, "test_samples": 300}},
    "partition": {"scheme": "dirichlet", "beta": 0.5, "clients": 4, "min_samples": 10},
    "model": {"name": "mlp"},
    "method": {"name": "fedprox"},
    "train": {"rounds": 3, "batch_size": 20, "lr": 0.05},
    "run": {"workers": 1},
}


def config(**changes) -> dict:
    raw = {k: dict(v) for k, v in SYNTHETIC.items()}
    for section, values in changes.items():
        raw[section] = {**raw.get(section, {}), **values}
    return raw


@pytest.mark.parametrize("protocol", ["pfllib", "official-test"])
def test_the_validation_split_is_carved_from_training_data_and_the_same_for_every_trial(protocol):
    plain = build_federated(build_config(config(eval={"protocol": protocol})))
    tuning = build_config(config(eval={"protocol": protocol, "validation": 0.25}))
    first, again = build_federated(tuning), build_federated(tuning)
    for cid in range(plain.num_clients):
        train, val = first.train_idx[cid], first.test_idx[cid]
        assert len(val) > 0 and not set(train) & set(val)
        assert sorted([*train, *val]) == sorted(plain.train_idx[cid])  # all of it was training data
        if protocol == "pfllib":  # one pool: the test indices are other samples of it
            assert not set(val) & set(plain.test_idx[cid])
        np.testing.assert_array_equal(val, again.test_idx[cid])
        assert abs(len(val) - 0.25 * len(plain.train_idx[cid])) <= 1
    if protocol == "official-test":  # the official test tensors are not even kept
        assert first.test_x is first.train_x


def test_a_trial_never_reads_the_test_split(tmp_path, monkeypatch):
    """The official test split's labels are made impossible: a run that evaluated on it would fail."""
    load = federated.load_dataset

    def poisoned(*args, **kwargs):
        source = load(*args, **kwargs)
        return replace(source, test_y=source.test_y + 1000)

    monkeypatch.setattr(federated, "load_dataset", poisoned)
    raw = config(eval={"protocol": "official-test"})
    with pytest.raises(Exception):  # the control: reading the test split does fail
        from pfedkit.experiments import run_experiment

        run_experiment(build_config(raw), tmp_path / "control", progress=False)
    result = Tuner(build_config(raw), tmp_path / "tune", trials=2, validation=0.25, progress=False).run(test_seeds=())
    assert result["trials"] == 2 and result["validation_tuned"] > 0
    with (tmp_path / "tune" / "trials.csv").open() as f:
        assert [r["state"] for r in csv.DictReader(f)] == ["complete", "complete"]


def test_search_ranges_are_declared_beside_the_defaults_and_bad_requests_are_named():
    space = search_space(FedProxParams)
    assert space["mu"]["log"] and space["mu"]["low"] < FedProxParams().mu < space["mu"]["high"]
    with pytest.raises(ConfigError, match="declares no search range.*fedprox"):
        searched_space("fedavg")
    with pytest.raises(ConfigError, match="only for mu"):
        searched_space("fedprox", ["lr"])
    with pytest.raises(ConfigError, match="between 0 and 1"):
        Tuner(build_config(config()), Path("unused"), trials=2, validation=0.0)


@pytest.mark.slow
def test_a_tune_resumes_after_being_killed_and_writes_a_config_run_accepts(tmp_path):
    out = tmp_path / "tune"
    command = [
        sys.executable,
        "-m",
        "pfedkit",
        "tune",
        str(DIGITS),
        "--method",
        "fedprox",
        "--trials",
        "4",
        "--out",
        str(out),
        "--seeds",
        "",
        "--quiet",
        "--set",
        "train.rounds=12",
        "--set",
        "run.workers=1",
        "--set",
        "run.checkpoint_every=1",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline:  # kill it inside its second trial, once a round of that trial is checkpointed
        folders = list(out.glob("trials/trial-*"))
        if len(folders) >= 2 and any(
            (f / "checkpoint.pt").exists() and not (f / "summary.json").exists() for f in folders
        ):
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    with (out / "trials.csv").open() as f:
        rows = list(csv.DictReader(f))
    done = [r for r in rows if r["state"] in ("complete", "pruned")]
    assert len(done) == 4 and rows[0]["defaults"] == "True" and float(rows[0]["mu"]) == 0.01
    cut = [r for r in rows if r["state"] == "fail"]
    assert len(cut) == 1  # the trial the kill cut off, tried again with its values in its own folder
    retried = [r for r in rows if r["run_dir"] == cut[0]["run_dir"] and r["state"] != "fail"]
    assert len(retried) == 1 and retried[0]["mu"] == cut[0]["mu"]
    assert len({r["mu"] for r in done}) == len(done)  # the resumed sampler drew new values, not the first ones again
    whole = out.parent / "uninterrupted"  # the same tune never killed draws the same values, trial by trial
    at_once = subprocess.run(
        [*command[: command.index("--out") + 1], str(whole), *command[command.index("--out") + 2 :]],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert at_once.returncode == 0, at_once.stdout + at_once.stderr
    with (whole / "trials.csv").open() as f:
        uninterrupted = [r for r in csv.DictReader(f) if r["state"] in ("complete", "pruned")]
    assert [r["mu"] for r in uninterrupted] == [r["mu"] for r in done]
    body = [(f / "best.toml").read_text().split("\n", 1)[1] for f in (whole, out)]  # the header counts the cut trial
    assert body[0] == body[1]
    best = load_config(out / "best.toml")
    assert best.method.name == "fedprox" and best.eval.validation == 0 and best.train.rounds == 12
    assert best.method_params()["mu"] in {float(r["mu"]) for r in done}
    ran = CliRunner().invoke(
        main,
        [
            "run",
            str(out / "best.toml"),
            "--out",
            str(tmp_path / "best"),
            "--quiet",
            "--set",
            "train.rounds=1",
            "--set",
            "run.workers=1",
        ],
    )
    assert ran.exit_code == 0, ran.output
    assert (out / "search.png").exists() and "| tuned |" in (out / "tune.md").read_text()


def test_a_tune_of_another_setup_in_the_same_folder_is_refused(tmp_path):
    Tuner(build_config(config()), tmp_path, trials=1, validation=0.25, progress=False).run(test_seeds=())
    with pytest.raises(ConfigError, match="another setup"):
        Tuner(build_config(config()), tmp_path, trials=1, validation=0.3, progress=False).run(test_seeds=())


def test_a_pruned_trial_is_never_the_best_and_has_no_score():
    """Optuna gives a pruned trial a value (its accuracy when stopped); that is no score, however high."""
    import optuna

    from pfedkit.tune import _best, trial_rows

    mu = optuna.distributions.FloatDistribution(0.001, 1.0, log=True)
    study = optuna.create_study(direction="maximize")
    study.add_trial(
        optuna.trial.create_trial(
            params={"mu": 0.01}, distributions={"mu": mu}, value=0.90, intermediate_values={19: 0.90}
        )
    )
    study.add_trial(
        optuna.trial.create_trial(
            params={"mu": 0.5},
            distributions={"mu": mu},
            value=0.95,
            intermediate_values={4: 0.95},
            state=optuna.trial.TrialState.PRUNED,
        )
    )
    assert _best(study).params == {"mu": 0.01}
    complete, pruned = trial_rows(study, {"mu": {}})
    assert complete["validation_acc"] == 0.90 and complete["acc_when_stopped"] is None
    assert pruned["validation_acc"] is None and pruned["acc_when_stopped"] == 0.95 and pruned["rounds_run"] == 4


def test_a_full_disk_during_a_tune_is_one_line_that_names_how_tune_continues(tmp_path, monkeypatch):
    """No Optuna warnings and traceback, and no advice to use --resume, which tune does not have."""
    import errno

    from pfedkit import tune as tune_module
    from pfedkit.config import dump_toml

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "tune" / "trials" / "x.pt"))

    monkeypatch.setattr(tune_module, "run_experiment", full)
    path = tmp_path / "c.toml"
    path.write_text(dump_toml(build_config(SYNTHETIC).to_dict()))
    result = CliRunner().invoke(main, ["tune", str(path), "--trials", "2", "--out", str(tmp_path / "tune"), "--quiet"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "disk is full" in lines[0], result.output
    assert "run the same command again to continue the study" in lines[0] and "--resume" not in lines[0]


def test_the_tune_report_says_the_data_share_only_when_a_share_was_taken_and_plots_in_percent(tmp_path, monkeypatch):
    from pfedkit import tune as tune_module

    labels = []
    searched = []
    for fraction in (1.0, 0.5):
        out = tmp_path / f"share{fraction}"
        result = Tuner(build_config(config(data={"fraction": fraction})), out, trials=1, progress=False).run()
        searched.append(result["tuned_on"])
    assert searched[0].startswith("synthetic, 4 clients") and "of it" not in searched[0]
    assert searched[1].startswith("synthetic (50% of it), 4 clients")
    rows = [{"trial": 0, "validation_acc": 0.5, "mu": 0.01}, {"trial": 1, "validation_acc": 0.75, "mu": 0.1}]
    space = {"mu": {"log": True}}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setattr(plt, "close", lambda fig: labels.append(fig.axes[0]))
    tune_module.plot_search(rows, space, tmp_path / "search.png", "t")
    ax = labels[-1]
    assert ax.get_ylabel().startswith("validation accuracy, %")
    assert max(y for _, y in ax.collections[0].get_offsets()) == 75.0
    assert all(float(t).is_integer() for t in ax.get_xticks())


def batched(out: Path, trials: int = 4, batch: int = 2) -> Tuner:
    cfg = build_config(config(run={"cohort": "on", "checkpoint_every": 1}, train={"rounds": 3, "momentum": 0.5}))
    return Tuner(cfg, out, trials=trials, batch=batch, progress=False)


def outcomes(out: Path) -> list[tuple[float, str, str, str]]:
    """Each finished trial's value, state and score, by value: a retried trial comes back at a later number."""
    with (out / "trials.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["state"] != "fail"]
    return sorted((float(r["mu"]), r["state"], r["validation_acc"], r["acc_when_stopped"]) for r in rows)


def test_a_batched_tune_trains_each_batch_as_one_cohort_and_each_trial_scores_as_its_run_alone(tmp_path, monkeypatch):
    """Issue 92: `--batch 2` draws two trials at a time and trains them as one stacked computation (FedProx's mu is
    packable); each trial's score and curve are those of its run alone."""
    from pfedkit.engine import together
    from pfedkit.experiments import run_experiment
    from pfedkit.io import read_csv
    from pfedkit.reports.tables import mean_of_last

    sizes = []
    original = together.train_together
    monkeypatch.setattr(
        together, "train_together", lambda runs, lead=None: sizes.append(len(runs)) or original(runs, lead)
    )
    tuner = batched(tmp_path / "tune")
    tuner.run()
    assert sizes.count(2) >= 6, f"each batch's rounds trained as one: {sizes}"  # 2 batches x 3 rounds, unless pruned
    with (tmp_path / "tune" / "trials.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["state"] == "complete"]
    assert len(rows) >= 3 and rows[0]["defaults"] == "True"
    for row in rows:
        values = {"mu": float(row["mu"])}
        alone = tmp_path / "alone" / row["run_dir"]
        cfg = tuner.trial_config(values)
        run_experiment(
            cfg.model_copy(update={"run": cfg.run.model_copy(update={"together": "off"})}), alone, progress=False
        )
        assert mean_of_last(alone, 5) == pytest.approx(float(row["validation_acc"]), abs=1e-6)
        packed = read_csv(tmp_path / "tune" / row["run_dir"] / "metrics.csv")
        assert [r["loss"] for r in packed] == pytest.approx([r["loss"] for r in read_csv(alone / "metrics.csv")])


class _Stop(BaseException):
    """A kill: not an error of the trial's, so the trial is left running (as a killed process leaves it)."""


def test_a_batched_tune_killed_mid_batch_resumes_to_the_trials_and_scores_of_an_uninterrupted_one(
    tmp_path, monkeypatch
):
    from pfedkit import tune as tune_module

    batched(tmp_path / "whole", trials=6).run()
    calls = []
    plain = tune_module.run_experiment

    def killed_in_second_batch(config, out, **options):
        calls.append(out)
        if len(calls) == 4:  # a trial of the second batch (whichever thread calls last) dies in round 2

            def stop(row):
                if row["round"] == 2:
                    raise _Stop

            options["observers"] = [*options["observers"], stop]
        return plain(config, out, **options)

    monkeypatch.setattr(tune_module, "run_experiment", killed_in_second_batch)
    with pytest.raises(_Stop):
        batched(tmp_path / "killed", trials=6).run()
    monkeypatch.setattr(tune_module, "run_experiment", plain)
    batched(tmp_path / "killed", trials=6).run()
    with (tmp_path / "killed" / "trials.csv").open() as f:
        states = [r["state"] for r in csv.DictReader(f)]
    assert states.count("fail") == 1 and len(states) == 7  # the cut trial, then tried again with its values
    assert outcomes(tmp_path / "killed") == outcomes(tmp_path / "whole")


def test_a_trial_is_judged_for_pruning_only_against_trials_complete_before_its_batch():
    """A retried trial runs alone after its batch-mates finished: judged against them it would be pruned where its
    first try (with 2 trials complete, under median pruning's 3 startup trials) could not be."""
    import optuna

    from pfedkit.tune import batch_pruner

    mu = optuna.distributions.FloatDistribution(0.001, 1.0, log=True)
    study = optuna.create_study(direction="maximize")
    for number in range(3):
        study.add_trial(
            optuna.trial.create_trial(
                params={"mu": 0.01 * (number + 1)},
                distributions={"mu": mu},
                value=0.9,
                intermediate_values={1: 0.8, 2: 0.9},
            )
        )
    inner = optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=1)
    low = optuna.trial.create_trial(
        params={"mu": 0.5}, distributions={"mu": mu}, value=0.1, intermediate_values={1: 0.1, 2: 0.1}
    )
    assert inner.prune(study, low)  # against all three complete trials: pruned
    retried = optuna.trial.create_trial(
        params={"mu": 0.5},
        distributions={"mu": mu},
        value=0.1,
        intermediate_values={1: 0.1, 2: 0.1},
        user_attrs={"batch_start": 2},
    )
    pruner = batch_pruner(optuna)(inner)
    assert not pruner.prune(study, retried)  # only trials 0 and 1 were complete when its batch was drawn
    assert pruner.prune(study, low)  # no batch recorded: every complete trial
