"""What a new user's fault probe met, each refused with a message that names the problem and the fix, or said, not
left silent: one test per finding."""

from __future__ import annotations

import os

import pytest

import pfedkit
from pfedkit.errors import ConfigError, PfedkitError
from pfedkit.experiments import run_experiment
from tests.test_engine import synthetic, synthetic_raw


@pytest.mark.parametrize("out", [None, 123, ""])
def test_the_python_run_refuses_an_out_that_is_not_a_path(out):
    with pytest.raises(ConfigError, match="must be a folder's path"):
        pfedkit.run(synthetic_raw(train={"rounds": 1}), out=out, progress=False)


def test_an_out_that_is_a_file_a_device_or_a_dangling_link_is_refused_by_name(tmp_path):
    cfg = synthetic(train={"rounds": 1})
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(PfedkitError, match="is a file: choose a folder"):
        run_experiment(cfg, notes, progress=False)
    assert notes.read_text() == "mine"  # nothing lost
    with pytest.raises(PfedkitError, match="not a folder"):
        run_experiment(cfg, "/dev/null", progress=False)
    link = tmp_path / "link"
    os.symlink(tmp_path / "gone", link)
    with pytest.raises(PfedkitError, match="does not exist: remove the link"):
        run_experiment(cfg, link, progress=False)


def test_a_nan_in_the_data_is_named_with_its_sample_before_any_training():
    import torch

    from pfedkit.data.federated import build_federated
    from pfedkit.data.sources import DataSource
    from pfedkit.errors import DataError

    x, y = torch.zeros(60, 1, 4, 4), torch.arange(60) % 3
    x[17, 0, 2, 1] = float("nan")
    x[40, 0, 0, 0] = float("inf")
    source = DataSource("mine", x, y, torch.zeros(12, 1, 4, 4), torch.arange(12) % 3, 3)
    with pytest.raises(DataError, match=r"mine: training sample 17 holds a NaN .*\(also 40\); fix or drop"):
        build_federated(synthetic(partition={"clients": 3}), source)
    x[17, 0, 2, 1], x[40, 0, 0, 0] = 0.0, 0.0
    assert build_federated(synthetic(partition={"clients": 3}), source).num_clients == 3


def test_compare_resume_refuses_finished_runs_whose_data_were_replaced_since(tmp_path, monkeypatch):
    """Data replaced between `compare` and `compare --resume` adding a seed: the finished seed ran on the old data
    and is refused by name instead of being averaged with a seed on the new data."""
    import dataclasses

    from pfedkit.data import sources
    from pfedkit.experiments.compare import compare_configs

    base = synthetic_raw(train={"rounds": 1})
    compare_configs(base, ["fedavg"], [0], tmp_path, progress=False)
    compare_configs(base, ["fedavg"], [0, 1], tmp_path, resume=True, progress=False)  # same data: reused
    original = sources.LOADERS["synthetic"]

    def replaced(root, samples: int = 2000, test_samples: int = 500):
        source = original(root, samples=samples, test_samples=test_samples)
        return dataclasses.replace(source, train_x=source.train_x + 1)

    monkeypatch.setitem(sources.LOADERS, "synthetic", replaced)
    with pytest.raises(ConfigError, match=r"seed0 finished on other data than synthetic holds now"):
        compare_configs(base, ["fedavg"], [0, 1, 2], tmp_path, resume=True, progress=False)
    assert not (tmp_path / "fedavg" / "seed2").exists() or not (tmp_path / "fedavg" / "seed2" / "summary.json").exists()


def test_a_longer_runs_checkpoint_copied_in_is_refused_not_reported_as_this_runs_rounds(tmp_path):
    """Another run's checkpoint of the same config but more rounds, copied into a 3-round run's folder: resuming
    refuses it by name instead of reporting a best round 5 and last_round 6 for a 3-round run."""
    import shutil

    run_experiment(synthetic(train={"rounds": 6}), tmp_path / "long", progress=False)
    short = synthetic(train={"rounds": 3})
    run_experiment(short, tmp_path / "short", progress=False)
    shutil.copy(tmp_path / "long" / "checkpoint.pt", tmp_path / "short" / "checkpoint.pt")
    with pytest.raises(PfedkitError, match=r"is at round 6, past this run's last round 3: .*train.rounds=6"):
        run_experiment(short, tmp_path / "short", resume=True, progress=False)
    summary = run_experiment(synthetic(train={"rounds": 6}), tmp_path / "short", resume=True, progress=False)
    assert summary["last_round"] == 6  # the fix the message names works


def test_a_moved_method_file_resumes_with_the_guides_fix_naming_its_new_place(tmp_path):
    """The guide's fix for a moved method file, `--set method.module=NEW`, is taken (the code is still checked by
    its digest), instead of refused naming the old path; other code in the new place is still refused."""
    from pathlib import Path

    from pfedkit.registry import build_config

    example = Path(__file__).resolve().parents[1] / "examples" / "methods" / "fedavgm.py"
    code = example.read_text().replace('name = "fedavgm"', 'name = "moved-fedavgm"')
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "mine.py").write_text(code)
    raw = synthetic_raw(train={"rounds": 2}, run={"checkpoint_every": 1})
    raw["method"] = {"name": "moved-fedavgm", "module": str(tmp_path / "a" / "mine.py")}
    run_experiment(build_config(raw), tmp_path / "run", progress=False)
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "mine.py").rename(tmp_path / "b" / "mine.py")
    raw["method"]["module"] = str(tmp_path / "b" / "mine.py")
    raw["train"]["rounds"] = 3
    summary = run_experiment(build_config(raw), tmp_path / "run", resume=True, progress=False)
    assert summary["last_round"] == 3
    (tmp_path / "b" / "mine.py").write_text(code + "\n# edited\n")
    raw["train"]["rounds"] = 4
    with pytest.raises(PfedkitError, match="the method's code changed"):
        run_experiment(build_config(raw), tmp_path / "run", resume=True, progress=False)


def test_the_numbers_do_not_depend_on_the_worker_count_or_the_drivers_threads(tmp_path):
    """Killed with run.workers=2 and resumed with 1 (or another thread count): the same numbers, because clients
    train on one thread in the driver as in a worker process (on 2 threads a convolution's sums round otherwise)."""
    import torch

    from pfedkit.io import read_csv

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for workers in (1, 2):
            raw = synthetic_raw(train={"rounds": 2}, run={"workers": workers})
            raw["data"] = {"dataset": "digits"}
            raw["model"] = {"name": "smallcnn"}
            raw["partition"] = {"clients": 4, "min_samples": 20}
            pfedkit.run(raw, out=tmp_path / f"workers{workers}", progress=False)
    finally:
        torch.set_num_threads(threads)
    one, two = read_csv(tmp_path / "workers1" / "metrics.csv"), read_csv(tmp_path / "workers2" / "metrics.csv")
    assert [r["loss"] for r in one] == [r["loss"] for r in two]


def test_clients_without_test_samples_are_said_and_a_round_that_measured_nothing_has_no_accuracy(
    tmp_path, monkeypatch, capsys
):
    """Clients with no test samples count in neither accuracy: a note says which; and a round whose evaluated
    clients hold no test sample (eval.clients small) records no accuracy, not acc 0.0 and loss 0.0."""
    import dataclasses

    import numpy as np

    from pfedkit.data import federated
    from pfedkit.io import read_csv

    whole = federated.partitioned

    def five_untested(config, source=None):
        fed = whole(config, source)
        empty = [np.zeros(0, dtype=np.int64)] * 5
        return dataclasses.replace(fed, test_idx=empty + list(fed.test_idx[5:]))

    monkeypatch.setattr(federated, "partitioned", five_untested)
    run_experiment(synthetic(train={"rounds": 6}, eval={"clients": 1}), tmp_path, progress=False)
    assert "5 of 6 clients have no test samples (clients 0, 1, 2, 3, 4)" in capsys.readouterr().err
    rows = read_csv(tmp_path / "metrics.csv")
    clients = read_csv(tmp_path / "clients.csv")
    untested_rounds = {int(r["round"]) for r in clients if r["n_test"] == "0"}
    assert untested_rounds, "the seeded draw of one client per round should pick an untested client sometime"
    for row in rows:
        if int(row["round"]) in untested_rounds:
            assert row["acc"] == "" and row["loss"] == "", row
        else:
            assert row["acc"] != ""


def test_an_edited_helper_the_method_file_imports_from_its_folder_is_other_code(tmp_path):
    """A helper module beside the method's file, imported by it, edited before --resume: refused as other code, as
    an edit of the method's own file is; a method file without helpers keeps its own file's digest."""
    from pathlib import Path

    from pfedkit.registry import build_config, file_digest, method_source

    example = Path(__file__).resolve().parents[1] / "examples" / "methods" / "fedavgm.py"
    code = example.read_text().replace('name = "fedavgm"', 'name = "helped-fedavgm"')
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "mine.py").write_text(code + "\nimport my_helpers  # noqa: E402\n")
    (tmp_path / "m" / "my_helpers.py").write_text("SCALE = 1.0\n")
    raw = synthetic_raw(train={"rounds": 2}, run={"checkpoint_every": 1})
    raw["method"] = {"name": "helped-fedavgm", "module": str(tmp_path / "m" / "mine.py")}
    run_experiment(build_config(raw), tmp_path / "run", progress=False)
    (tmp_path / "m" / "my_helpers.py").write_text("SCALE = 2.0\n")
    raw["train"]["rounds"] = 3
    with pytest.raises(PfedkitError, match="the method's code changed"):
        run_experiment(build_config(raw), tmp_path / "run", resume=True, progress=False)
    (tmp_path / "alone").mkdir()
    (tmp_path / "alone" / "mine.py").write_text(code.replace("helped-fedavgm", "lone-fedavgm"))
    raw["method"] = {"name": "lone-fedavgm", "module": str(tmp_path / "alone" / "mine.py")}
    assert method_source(build_config(raw)) == f"sha256:{file_digest(tmp_path / 'alone' / 'mine.py')}"


def test_a_method_file_named_like_a_standard_module_runs_with_python_m_from_its_folder(tmp_path):
    """`python3 -m pfedkit` from the folder of a method file named json.py: the standard json is not replaced by it
    (was a 42-line circular-import traceback); the file is still found as the method's module."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    code = (repo / "examples" / "methods" / "fedavgm.py").read_text().replace('"fedavgm"', '"json-fedavgm"')
    (tmp_path / "json.py").write_text(code)
    (tmp_path / "c.toml").write_text(
        '[data]\ndataset = "digits"\n[partition]\nclients = 4\nmin_samples = 20\n'
        '[method]\nname = "json-fedavgm"\nmodule = "json.py"\n[train]\nrounds = 1\n[run]\nworkers = 1\n'
    )
    env = {**os.environ, "PYTHONPATH": str(repo)}
    done = subprocess.run(
        [sys.executable, "-m", "pfedkit", "run", "c.toml", "--out", "r", "--quiet"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "json-fedavgm: best acc" in done.stdout


def test_a_method_module_that_sets_a_float64_default_dtype_is_refused_by_name(tmp_path):
    from pathlib import Path

    import torch

    from pfedkit.registry import build_config

    example = Path(__file__).resolve().parents[1] / "examples" / "methods" / "fedavgm.py"
    code = example.read_text().replace('"fedavgm"', '"double-fedavgm"')
    (tmp_path / "double.py").write_text(code + "\nimport torch  # noqa: E402\ntorch.set_default_dtype(torch.float64)\n")
    raw = synthetic_raw(train={"rounds": 1})
    raw["method"] = {"name": "double-fedavgm", "module": str(tmp_path / "double.py")}
    for _ in range(2):  # refused every time, not only at the first import
        with pytest.raises(ConfigError, match=r"sets torch's default dtype to torch.float64 .* remove the torch.set_d"):
            build_config(raw)
    assert torch.get_default_dtype() == torch.float32  # put back for everything after


def test_compare_resume_clears_a_killed_table_writes_leftovers_and_its_plot_says_what_it_shows(tmp_path, monkeypatch):
    """kill -9 during compare's table write, then --resume: no .pfedkit-partial file stays beside the table; the
    plot's title says it is a mean of N seeds with a band of one standard deviation."""
    from pfedkit.experiments import compare
    from pfedkit.experiments.compare import compare_configs

    base = synthetic_raw(train={"rounds": 1})
    compare_configs(base, ["fedavg"], [0, 1], tmp_path, progress=False, title="mine")
    leftover = tmp_path / ".table.md.Ab3dE5gH.pfedkit-partial"
    leftover.write_text("half a table")
    titles = []
    shown = compare.save_curves
    monkeypatch.setattr(
        compare,
        "save_curves",
        lambda runs, path, title="", band=False: titles.append((title, band)) or shown(runs, path),
    )
    compare_configs(base, ["fedavg"], [0, 1], tmp_path, resume=True, progress=False, title="mine")
    assert not leftover.exists() and (tmp_path / "table.md").exists()
    assert titles == [("mine: mean of 2 seeds, band ± 1 std", True)]
