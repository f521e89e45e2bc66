"""`pfedkit reproduce`: suites run every cell they can, skip finished runs, and report missing data."""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pfedkit.cli import main
from pfedkit.config import tomllib
from pfedkit.errors import ConfigError
from pfedkit.experiments import cells
from pfedkit.experiments.cells import cell_config
from pfedkit.experiments.pipeline import config_changes, method_config
from pfedkit.experiments.suite import Column, Scale, Suite
from pfedkit.papers import reproduce
from pfedkit.papers.reproduce import run_suite
from pfedkit.papers.suites import SUITES

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from reproduce import results_folder  # noqa: E402  (benchmarks/reproduce.py: where a suite's scale is committed)

TINY = Suite(
    name="tiny",
    paper="a tiny table",
    base={
        "data": {"dataset": "synthetic", "options": {"samples": 400, "test_samples": 100}},
        "partition": {"scheme": "iid", "clients": 3},
        "model": {"name": "mlp"},
        "train": {"rounds": 50, "batch_size": 20},
        "run": {"workers": 1},
    },
    columns={
        "a": Column("A", {}, {"fedavg": 50.0}),
        "b": Column("B", {"partition": {"clients": 4}}, rows=("fedavg",)),
        "gone": Column("needs MNIST", {"data": {"dataset": "mnist", "options": {}}}),
    },
    rows=("fedavg", "fedper", "fedper-lr0.2"),
    scales={
        "small": Scale({"train": {"rounds": 2}}, 1.0, "2 rounds", row_changes={"fedavg": {"train": {"rounds": 3}}}),
        "full": Scale({}, 0, "50 rounds"),
    },
    row_changes={
        "fedper": {"train": {"lr": 0.05}},
        "fedper-lr0.2": {"method": {"name": "fedper"}, "train": {"lr": 0.2}},
    },  # a variant row
)


def test_cell_config_layers_scale_column_row_and_user_changes():
    raw = cell_config(TINY, "small", "b", "fedper", ["train.batch_size=5"])
    assert raw["train"] == {"rounds": 2, "batch_size": 5, "lr": 0.05}
    assert raw["partition"]["clients"] == 4 and raw["method"] == {"name": "fedper"}
    assert TINY.base["train"] == {"rounds": 50, "batch_size": 20}  # the suite itself is untouched
    assert cell_config(TINY, "small", "b", "fedavg")["train"]["rounds"] == 3  # a row the scale keeps apart
    assert cell_config(TINY, "full", "b", "fedavg")["train"]["rounds"] == 50


def test_suite_runs_what_it_can_reports_missing_data_and_skips_finished_runs(tmp_path, monkeypatch):
    logs = []
    monkeypatch.setenv("PFEDKIT_DATA", str(tmp_path / "no-data-here"))
    table = run_suite(TINY, out=tmp_path, progress=False, log=logs.append)
    assert [c for c in ("a", "b") if (tmp_path / c / "fedavg" / "seed0" / "summary.json").exists()] == ["a", "b"]
    assert (tmp_path / "a" / "fedper" / "seed0" / "summary.json").exists()
    assert not (tmp_path / "b" / "fedper").exists()  # not one of column b's rows
    assert not (tmp_path / "gone").exists()
    assert any("pfedkit data fetch mnist" in line for line in logs)
    assert "Column gone not run" in table and "pfedkit data fetch mnist" in table
    assert "| fedavg (3 rounds) |" in table and "| fedper (2 rounds) |" in table  # rows of different lengths say so
    fedper_line = next(line for line in table.splitlines() if line.startswith("| fedper (2 rounds) |"))
    assert fedper_line.count("n/a") == 4 and "n/a = the row is not part of that column" in table  # b runs fedavg only
    assert (tmp_path / "curves_a.png").exists() and (tmp_path / "curves_b.png").exists()
    # no per-column table of whichever cell ran last: the suite's table.csv covers every finished run
    assert not any((tmp_path / "a" / name).exists() for name in ("table.md", "results.csv", "curves.png"))
    rows = list(csv.DictReader((tmp_path / "table.csv").open()))
    assert {(r["column"], r["method"]) for r in rows} == {
        ("a", "fedavg"),
        ("a", "fedper"),
        ("a", "fedper-lr0.2"),
        ("b", "fedavg"),
    }
    variant = tomllib.loads((tmp_path / "a" / "fedper-lr0.2" / "seed0" / "config.toml").read_text())
    assert variant["method"]["name"] == "fedper" and variant["train"]["lr"] == 0.2  # its own folder, its own setting
    best = json.loads((tmp_path / "a" / "fedavg" / "seed0" / "summary.json").read_text())["best_acc"]
    assert f"{100 * best - 50.0:+.2f}" in table  # ours beside the paper's number and the difference
    calls = []
    monkeypatch.setattr("pfedkit.experiments.runs.simulate", lambda *a, **k: calls.append(a))
    run_suite(TINY, out=tmp_path, progress=False, log=logs.append)
    assert calls == []  # every cell had finished
    for kwargs in ({"table_only": True}, {"columns": ["a"]}):  # the table names the missing data whatever ran
        assert "Column gone not run" in run_suite(TINY, out=tmp_path, progress=False, log=logs.append, **kwargs)
    # a column that ran elsewhere (its data absent here): its table, rebuilt here, does not call it not run
    shutil.copytree(tmp_path / "b" / "fedavg", tmp_path / "gone" / "fedavg")
    assert "Column gone not run" not in run_suite(TINY, out=tmp_path, progress=False, table_only=True)


def test_bad_rows_and_configs_fail_before_anything_trains(tmp_path):
    with pytest.raises(ConfigError, match="no rows fedrepp.*fedavg, fedper"):
        run_suite(TINY, out=tmp_path, rows=["fedrepp"], progress=False)
    with pytest.raises(ConfigError, match="lr"):
        run_suite(TINY, out=tmp_path, overrides=["train.lr=-1"], progress=False)
    assert not any(tmp_path.iterdir())


def test_a_finished_run_with_another_config_stops_the_suite_before_anything_trains(tmp_path, monkeypatch):
    run_suite(TINY, out=tmp_path, columns=["a"], rows=["fedper"], progress=False)
    calls = []
    monkeypatch.setattr("pfedkit.experiments.runs.simulate", lambda *a, **k: calls.append(a))
    with pytest.raises(
        ConfigError, match=r"(?s)a/fedper/seed0 was run with another config \(train\.lr: 0\.05 -> 0\.3\).*delete"
    ):
        run_suite(
            TINY, out=tmp_path, columns=["a"], rows=["fedavg", "fedper"], overrides=["train.lr=0.3"], progress=False
        )
    assert calls == [] and not (tmp_path / "a" / "fedavg").exists()  # fedavg, first in order, did not start
    # where the data lies and how many workers ran it do not change a result: the finished run is reused
    run_suite(
        TINY,
        out=tmp_path,
        columns=["a"],
        rows=["fedper"],
        data_root=str(tmp_path / "elsewhere"),
        workers=2,
        progress=False,
    )
    assert calls == []


def test_every_suite_validates_at_both_scales_and_lists_itself():
    for suite in SUITES.values():
        for scale in suite.scales:
            for column, row in suite.cells(list(suite.columns), list(suite.rows)):
                method_config(cell_config(suite, scale, column, row), suite.method_of(row), 0)
    listed = CliRunner().invoke(main, ["reproduce", "--list"])
    assert listed.exit_code == 0
    for name, suite in SUITES.items():
        assert name in listed.output and suite.paper in listed.output
    assert reproduce.describe(SUITES["fedafk-table3"]).count("rounds") >= 2


def test_heart_claims_are_checked_on_the_seeds_every_row_finished(tmp_path):
    from pfedkit.papers.claims import Evidence, check_claims

    suite = SUITES["heart-table1"]

    def heart_claims(out):
        return check_claims(suite.claims, Evidence(out, suite.last_k, floor=0.05))

    def finished(column, row, seed, acc):
        run = tmp_path / column / row / f"seed{seed}"
        run.mkdir(parents=True)
        (run / "summary.json").write_text("{}")
        (run / "metrics.csv").write_text("round,acc\n" + "".join(f"{r},{acc}\n" for r in range(5)))
        (run / "config.toml").write_text(f"[train]\nrounds = 4\n[run]\nseed = {seed}\n")  # like with like, its seed

    accs = {
        "heart-pfl": (0.92, 0.92),  # gaps alike on both seeds: on 2 seeds only the floor bounds their error
        "perada": (0.91, 0.91),
        "heart-pfl-no-hda": (0.91, 0.93),
        "heart-pfl-no-akt": (0.91, 0.87),
        "heart-pfl-no-both": (0.95, 0.95),
    }
    for row in suite.rows:
        for seed, acc in enumerate(accs.get(row, (0.80, 0.80))):
            finished("in-domain", row, seed, acc)
    lines = heart_claims(tmp_path)
    assert lines[0].startswith("- HEART-PFL above PerAda: holds (") and "+1.00 on 2 seeds" in lines[0]
    assert lines[1].startswith("- HEART-PFL above PerAda by the paper's margin") and ": cannot tell (" in lines[1]
    assert lines[2].startswith("- PerAda above the fine-tuned and split baselines: holds (")
    assert "no-hda): cannot tell (" in lines[3]  # +1 and -1 point: the mean gap is 0
    assert "no-akt): cannot tell (" in lines[4]  # +1 and +5: a mean of 3 within t(1) 12.71 x 2.0 from their spread
    assert "no-both): does not hold (" in lines[6]
    assert lines[7].endswith("not run")
    finished("ood-mnist", "heart-pfl", 0, 0.91)
    assert heart_claims(tmp_path)[7].startswith(
        "- out-of-domain proxy within a point of in-domain: cannot tell (MNIST proxy 91.00, in-domain 92.00, -1.00"
    )  # at the boundary


def test_suite_files_are_data_and_a_bad_one_is_refused_naming_the_file_and_key(tmp_path):
    from pfedkit.errors import ConfigError
    from pfedkit.papers.suites import PAPERS, suite_from_toml

    text = (PAPERS / "fedpac_table1.toml").read_text()
    assert suite_from_toml(PAPERS / "fedpac_table1.toml") == SUITES["fedpac-table1"]
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('label = "F-MNIST 20 clients"', 'label = "F-MNIST 20 clients"\nlabe = "typo"'))
    with pytest.raises(
        ConfigError, match=r"bad.toml \[columns.fmnist20\]: unknown key\(s\) labe; valid: changes, label"
    ):
        suite_from_toml(bad)
    bad.write_text(text.replace("fedpac = 91.83", "fedpac = 91.83\nfedpacc = 90.0"))
    with pytest.raises(ConfigError, match=r"rows fedpacc are not in the suite's rows"):
        suite_from_toml(bad)
    bad.write_text(text.replace('paper_point = "after-local"', 'paper_point = "after"'))
    with pytest.raises(ConfigError, match=r"paper_point = 'after'; use \"start\" or \"after-local\""):
        suite_from_toml(bad)
    bad.write_text(text.replace("[scales.small]", "[scales.gpu]"))  # the name the claims table gives GPU runs
    with pytest.raises(ConfigError, match=r"\[scales.gpu\]: a scale name ending in 'gpu' is taken"):
        suite_from_toml(bad)
    assert SUITES["heart-table1"].columns["in-domain"].source.startswith("Table 1")  # where the numbers come from


def test_a_claims_rows_that_differ_beyond_what_it_names_are_reported_by_key():
    """Before anything runs, a claim's rows are held to rule 2 as the claims table holds their runs: every config key
    (rounds a scale gives one row, a row's own lr), less what the claim names and where runs are kept."""
    from pfedkit.papers.reproduce import claim_differences

    claim = {"kind": "above", "column": "a", "row": "fedper", "over": ["fedavg", "fedper-lr0.2"]}
    found = claim_differences(TINY, claim)
    assert any(f.startswith("train.rounds fedper 2, fedavg 3") for f in found)  # the scale's own row
    assert any(f.startswith("train.lr fedper 0.05, fedper-lr0.2 0.2") for f in found)  # a variant's setting
    assert not any(f.startswith(("method.", "run.workers", "data.root")) for f in found)  # names and placement
    named = claim_differences(TINY, {**claim, "differ_in": ["train.rounds", "train.lr"]})
    assert named == [f for f in found if not f.startswith(("train.rounds", "train.lr"))]
    assert claim_differences(TINY, claim, scale="full") == [f for f in found if f.startswith("train.lr")]


def test_every_claim_compares_rows_that_differ_only_in_what_it_names():
    """Like with like: the rows a claim compares have the same data, partition, model, training, evaluation and run
    settings, and a method and its variant the same shared hyper-parameters, except the keys the claim names."""
    from pfedkit.papers.reproduce import claim_differences

    unlike = {
        f"{name} ({scale}): {claim['text']}": found
        for name, suite in SUITES.items()
        for scale in suite.scales  # at every scale: a row a scale's row changes forget differs there
        for claim in suite.claims
        if "not_run" not in claim and claim.get("kind") != "count" and (found := claim_differences(suite, claim, scale))
    }
    assert unlike == {}


def test_every_committed_run_folder_still_holds_its_suite_cell():
    """A changed default or suite row would silently change what a committed result means (and stop its suite's
    resume): every run folder under results/<suite>/ must be its cell's config at one of the scales."""
    results = Path(__file__).resolve().parents[1] / "results"
    checked, stale = 0, []
    folders = [
        (suite, scale, results / results_folder(suite.name, scale))
        for suite in SUITES.values()
        for scale in suite.scales
    ]
    for suite, scale, folder in folders:
        for saved in sorted(folder.glob("*/*/seed*/config.toml")):
            column, row, seed = saved.parts[-4], saved.parts[-3], int(saved.parent.name[4:])
            if column not in suite.columns or row not in suite.rows:
                continue
            scales = suite.scales if scale == "small" else [scale]  # the suite's own folder predates scale folders
            cells = [
                method_config(cell_config(suite, scale, column, row), suite.method_of(row), seed) for scale in scales
            ]
            found = [config_changes(saved, cell) for cell in cells]
            checked += 1
            if all(found):
                stale.append(f"{saved.parent.relative_to(results)}: {min(found, key=len)}")
    assert checked > 100
    assert not stale, "\n".join(stale)


def test_a_suite_runs_rows_at_their_tuned_values_and_its_table_says_so(tmp_path):
    suite = Suite(
        name="tiny-tuned",
        paper="a tiny tuned table",
        base=TINY.base,
        columns={"a": Column("A", {})},
        rows=("fedavg", "fedprox"),
        scales={"small": Scale({"train": {"rounds": 1}}, 1.0, "1 round")},
    )
    tunes = tmp_path / "tunes"
    (tunes / "fedprox").mkdir(parents=True)
    (tunes / "fedprox" / "tune.json").write_text(
        json.dumps(
            {"method": "fedprox", "tuned": {"mu": 0.3}, "tuned_on": "synthetic, 3 clients: a 0.2 validation split"}
        )
    )
    table = run_suite(suite, out=tmp_path / "out", progress=False, tuned=tunes, log=lambda line: None)
    saved = tomllib.loads((tmp_path / "out" / "a" / "fedprox" / "seed0" / "config.toml").read_text())
    assert saved["method"]["mu"] == 0.3
    assert (
        "mu" not in tomllib.loads((tmp_path / "out" / "a" / "fedavg" / "seed0" / "config.toml").read_text())["method"]
    )
    assert "- fedprox: mu = 0.3 (tuned on synthetic, 3 clients: a 0.2 validation split)" in table
    (tunes / "fedprox" / "tune.json").write_text(json.dumps({"method": "ditto", "tuned": {"prox_weight": 1.0}}))
    with pytest.raises(ConfigError, match="tuned ditto, but row fedprox runs fedprox"):
        run_suite(suite, out=tmp_path / "out", progress=False, tuned=tunes)
    with pytest.raises(ConfigError, match="no <row>/tune.json"):
        run_suite(suite, out=tmp_path / "out", progress=False, tuned=tmp_path / "out")


def test_a_cell_another_suite_already_ran_is_copied_not_trained(tmp_path, monkeypatch):
    """A cell whose config a finished run elsewhere already ran (at its values: a default stated or left out is the
    same run) is copied with its source named; a cell that differs in one value trains. The premise, that training
    again gives the same run, is checked too."""
    small = {"small": Scale({"train": {"rounds": 2}}, 1.0, "2 rounds")}
    first = Suite(
        name="first", paper="p", base=TINY.base, columns={"a": Column("A", {})}, rows=("fedprox",), scales=small
    )
    second = Suite(
        name="second",
        paper="q",
        base=TINY.base,
        columns={"x": Column("X", {})},
        rows=("prox-default-stated", "prox-mu0.3"),
        scales=small,
        row_changes={
            "prox-default-stated": {"method": {"name": "fedprox", "mu": 0.01}},
            "prox-mu0.3": {"method": {"name": "fedprox", "mu": 0.3}},
        },
    )
    run_suite(first, out=tmp_path / "first", progress=False, log=lambda line: None)
    source = tmp_path / "first" / "a" / "fedprox" / "seed0"
    (source / "checkpoint.pt").write_bytes(b"a leftover")  # never copied: a result, not a way to resume it
    trained = []
    real = cells.run_configs
    monkeypatch.setattr(
        cells,
        "run_configs",
        lambda todo, **kw: (trained.extend(d for d in todo if not (d / "summary.json").exists()), real(todo, **kw))[1],
    )
    logs = []
    table = run_suite(second, out=tmp_path / "second", progress=False, reuse_from=tmp_path, log=logs.append)
    copy = tmp_path / "second" / "x" / "prox-default-stated" / "seed0"
    assert trained == [tmp_path / "second" / "x" / "prox-mu0.3" / "seed0"]  # only the cell no run had made
    record = json.loads((copy / "reused.json").read_text())
    assert record["from"] == "first/a/fedprox/seed0"
    assert (copy / "metrics.csv").read_bytes() == (source / "metrics.csv").read_bytes()
    assert not (copy / "checkpoint.pt").exists() and not list((tmp_path / "second" / "x").glob("*/*.copying"))
    assert any("copied from" in line for line in logs)
    assert "- x/prox-default-stated/seed0 = first/a/fedprox/seed0" in table
    run_suite(second, out=tmp_path / "afresh", rows=["prox-default-stated"], progress=False, log=lambda line: None)
    fresh = tmp_path / "afresh" / "x" / "prox-default-stated" / "seed0"
    columns = lambda run: [(r["round"], r["acc"], r["loss"]) for r in csv.DictReader((run / "metrics.csv").open())]  # noqa: E731
    assert columns(fresh) == columns(copy)  # trained again without reuse: the same run
    assert not (fresh / "reused.json").exists()


def test_reproduce_takes_any_scale_a_suite_defines_and_names_them_for_one_it_does_not(tmp_path):
    result = CliRunner().invoke(main, ["reproduce", "fedafk-cifar10", "--scale", "huge", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "no scale 'huge'; scales: full, small, long" in result.output
    assert not any(tmp_path.iterdir())
    listed = CliRunner().invoke(main, ["reproduce", "--list"]).output
    assert "long: ~12 s/round" in listed


def test_reproduce_threads_replace_the_suites_own_for_that_run_only(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(reproduce, "run_suite", lambda suite, **kwargs: seen.append(suite.threads) or "")
    for extra in ([], ["--threads", "1"]):
        result = CliRunner().invoke(main, ["reproduce", "heart-cifar100", "--out", str(tmp_path), *extra])
        assert result.exit_code == 0, result.output
    assert seen == [SUITES["heart-cifar100"].threads, 1] and SUITES["heart-cifar100"].threads == 2
    refused = CliRunner().invoke(main, ["reproduce", "heart-cifar100", "--threads", "0", "--out", str(tmp_path)])
    assert refused.exit_code != 0 and "--threads" in refused.output and len(seen) == 2


def test_margin_claims_and_claims_on_rows_cut_from_a_suite(tmp_path):
    from pfedkit.papers.claims import Evidence, check_claims

    def finished(row, seed, acc):
        run = tmp_path / "col" / row / f"seed{seed}"
        run.mkdir(parents=True)
        (run / "summary.json").write_text("{}")
        (run / "metrics.csv").write_text("round,acc\n" + "".join(f"{r},{acc + 0.001 * (r % 2)}\n" for r in range(6)))
        (run / "config.toml").write_text(f"[train]\nrounds = 5\n[run]\nseed = {seed}\n")  # like with like, its seed

    for row, accs in {"ours": (0.60, 0.62), "near": (0.52, 0.54), "far": (0.40, 0.41)}.items():
        for seed, acc in enumerate(accs):
            finished(row, seed, acc)
    finished("one-seed", 0, 0.30)
    margin = {"kind": "margin", "text": "ours by 8", "column": "col", "row": "ours", "at_least": 8.0}
    above = {"text": "ours top", "column": "col", "rows": ["ours", "near", "far", "never-ran"]}
    lines = check_claims(
        [
            {**margin, "over": ["far", "one-seed", "never-ran"]},
            {**margin, "over": ["near", "far"], "at_least": 10.0},
            above,
            {**above, "rows": ["never-ran", "ours"]},
            {**margin, "over": ["never-ran"]},
        ],
        Evidence(tmp_path, 3, floor=0.5),
    )
    # +20.5 (2 seeds) and +30.0 (seed 0 only, the one both finished); the row that never ran is named, not judged
    assert (
        lines[0].startswith("- ours by 8: holds (+20.50 over far: holds") and "+30.00 over one-seed: holds" in lines[0]
    )
    assert lines[0].endswith("; not run: never-ran)")
    # over near: +8 on both seeds, 2 short of 10 but within the bar (t(1) 12.71 x the floor's 0.5)
    assert lines[1].startswith("- ours by 8: cannot tell (+8.00 over near: cannot tell")
    assert lines[2].startswith("- ours top: holds (ours 61.07, near 53.07, far 40.57; gap to near +8.00 on 2 seeds")
    assert lines[2].endswith("; not run: never-ran)")
    assert lines[3] == "- ours top: not run" and lines[4] == "- ours by 8: not run"


def test_the_cost_table_reads_finished_runs_only(tmp_path):
    from pfedkit.reports.tables import cost_table

    header = "round,acc,acc_client_mean,loss,train_s,eval_s,bytes_down,bytes_up,clients_trained\n"
    for method, seconds in (("done", 2.0), ("running", 9.0)):
        run = tmp_path / "col" / method / "seed0"
        run.mkdir(parents=True)
        (run / "metrics.csv").write_text(
            header + f"0,0.1,0.1,2.3,0,1,0,0,0\n1,0.5,0.5,1.0,{seconds},1,2000000,2000000,2\n"
        )
    (tmp_path / "col" / "done" / "seed0" / "summary.json").write_text("{}")
    lines = cost_table(tmp_path, "col", 0, ["done", "running"], clients=2)
    assert lines[2:] == ["| done | 2.0 | 2.000 |"]


def test_the_table_says_how_often_server_distillation_was_kept(tmp_path):
    from pfedkit.reports.tables import distillation_lines

    rows = {"heart-pfl": "0,0.1,,\n1,0.2,1,2.5\n2,0.3,0,0\n3,0.4,1,1.5\n4,0.5,-1,0\n5,0.5,,\n", "fedper": None}
    for method, body in rows.items():
        run = tmp_path / "dir0.1" / method / "seed0"
        run.mkdir(parents=True)
        (run / "summary.json").write_text("{}")
        (run / "metrics.csv").write_text("round,acc,kd_accepted,kd_val_gain\n" + body if body else "round,acc\n0,0.1\n")
    lines = distillation_lines(tmp_path)
    assert lines[-1:] == [
        "- dir0.1/heart-pfl/seed0: kept in 2 of 3 distillation rounds (rounds 1-3), "
        "validation +2.00 points on average when kept"
    ]
    assert distillation_lines(tmp_path / "dir0.1" / "fedper") == []


def test_the_repository_script_finds_the_suite_wherever_the_options_stand():
    import importlib.util

    repo = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("repo_reproduce", repo / "benchmarks" / "reproduce.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    results = repo / "results"
    for args, folder in (
        (["--seeds", "0,1", "fedafk-table3"], "fedafk_table3"),
        (["--scale", "long", "fedafk-cifar10", "--rows", "fedafk"], "fedafk_cifar10_long"),
        (["heart-cifar100", "--scale", "long"], "heart_cifar100_long"),
    ):
        built = script.repo_args(args)
        assert built[built.index("--out") + 1] == str(results / folder), args
    assert "--update" in script.repo_args(["--claims", "--scale", "long"])  # every suite's table, into the document
    assert "--update" not in script.repo_args(["--claims", "heart-table1"])
    assert "--repo-script" in script.repo_args(["--claims"])  # its table suggests this script, not `pfedkit reproduce`
    assert "--repo-script" not in script.repo_args(["heart-table1"])
