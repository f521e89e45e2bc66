"""The command line: clear errors before training, the demo, compare and methods."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from pfedkit.cli import main
from pfedkit.io import read_csv


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_methods_lists_every_method_with_defaults():
    result = invoke("methods")
    assert result.exit_code == 0
    for name in ("local", "fedavg", "fedavg-ft", "fedprox", "fedper", "fedrep", "fedbabu", "lg-fedavg"):
        assert f"{name}:" in result.output
    assert "head_epochs = 10" in result.output and "mu = 0.01" in result.output
    packs = [
        line.split(" = ")[0].strip() for line in invoke("methods", "fedafk").output.splitlines() if "[packs" in line
    ]
    assert packs == ["kt_weight", "mu_init"]  # what tune --batch and a sweep's rows may pack (issue 92)


def test_methods_lists_only_what_was_asked_a_modules_methods_or_the_names_given(tmp_path):
    module = tmp_path / "mine.py"
    example = Path(__file__).resolve().parents[1] / "examples" / "methods" / "fedavgm.py"
    module.write_text(example.read_text().replace('"fedavgm"', '"listed-fedavgm"'))
    result = invoke("methods", "--module", module)
    listed = [line.split(" ")[0].rstrip(":") for line in result.output.splitlines() if not line.startswith(" ")]
    assert result.exit_code == 0 and listed == ["listed-fedavgm"]
    named = invoke("methods", "fedper", "ditto")
    assert [line.split(":")[0] for line in named.output.splitlines() if not line.startswith(" ")] == ["fedper", "ditto"]
    unknown = CliRunner().invoke(main, ["methods", "fedpre"])
    assert unknown.exit_code == 2 and "no method 'fedpre'" in unknown.output


def test_broken_config_fails_before_training(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('[method]\nname = "fedrep"\nhead_epoch = 2\n')
    result = invoke("run", config, "--out", tmp_path / "run")
    assert result.exit_code == 2
    assert "method.head_epoch" in result.output and "head_epochs" in result.output
    assert not (tmp_path / "run").exists()


def test_bad_override_names_the_key(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("")
    result = invoke("run", config, "--out", tmp_path / "run", "--set", "train.batch_size=0")
    assert result.exit_code == 2 and "train.batch_size" in result.output


def test_compare_table_and_plot(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(
        '[data]\ndataset = "synthetic"\noptions = {samples = 600, test_samples = 200}\n'
        '[partition]\nclients = 4\nbeta = 1.0\n[model]\nname = "mlp"\n'
        "[train]\nrounds = 2\nbatch_size = 16\nlr = 0.1\n[run]\nworkers = 1\n"
    )
    result = invoke(
        "compare", config, "--methods", "fedavg,fedper", "--seeds", "0,1", "--out", tmp_path / "cmp", "--quiet"
    )
    assert result.exit_code == 0, result.output
    table = (tmp_path / "cmp" / "table.md").read_text()
    assert "| fedavg |" in table and "| fedper |" in table and "±" in table and "pfllib" in table
    assert (tmp_path / "cmp" / "curves.png").exists()
    assert len(read_csv(tmp_path / "cmp" / "results.csv")) == 4
    summary = json.loads((tmp_path / "cmp" / "fedper" / "seed1" / "summary.json").read_text())
    assert summary["method"] == "fedper" and summary["seed"] == 1


def test_demo_runs_offline_and_writes_runnable_folders(tmp_path):
    out = tmp_path / "demo"
    result = invoke("demo", "--out", out, "--rounds", "2", "--quiet")
    assert result.exit_code == 0, result.output
    for method in ("local", "fedavg", "fedper", "fedrep"):
        assert f"| {method} |" in result.output
        assert (out / method / "seed0" / "config.toml").exists()
    rerun = invoke("run", out / "fedrep" / "seed0" / "config.toml", "--out", tmp_path / "again", "--quiet")
    assert rerun.exit_code == 0, rerun.output
    again = invoke("demo", "--out", out, "--rounds", "1", "--quiet")  # a demo folder is started afresh
    assert again.exit_code == 0, again.output


def test_partition_prints_counts_and_writes_heatmap(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(
        '[data]\ndataset = "digits"\n[partition]\nscheme = "pathological"\nclients = 10\n'
        'classes_per_client = 2\n[model]\nname = "mlp"\n'
    )
    result = invoke("partition", config, "--plot", tmp_path / "p.png")
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 10 and all(int(r[3]) == 2 for r in rows)  # two classes per client
    assert sum(int(r[1]) + int(r[2]) for r in rows) == 1797  # every digit once
    assert (tmp_path / "p.png").stat().st_size > 0


def test_data_check_reports_good_files_and_missing_ones(shared_data, tmp_path):
    good = invoke("data", "check", "mnist", "--data-root", shared_data)
    assert good.exit_code == 0 and good.output.count("ok") == 4
    missing = invoke("data", "check", "mnist", "--data-root", tmp_path)
    assert missing.exit_code == 2 and "pfedkit data fetch mnist" in missing.output
    assert invoke("data", "fetch", "digits").exit_code == 0


def test_data_root_option_reaches_the_run(shared_data, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('[data]\ndataset = "mnist"\n[partition]\nclients = 3\nscheme = "iid"\n[model]\nname = "mlp"\n')
    missing = invoke("partition", config, "--data-root", tmp_path / "nowhere", "--plot", tmp_path / "p.png")
    assert missing.exit_code == 2 and "nowhere" in missing.output
    found = invoke("partition", config, "--data-root", shared_data, "--plot", tmp_path / "p.png")
    assert found.exit_code == 0 and "mnist: 3 clients" in found.output


def test_curves_gives_block_means_last_k_and_best_of_a_run_still_training(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text('[eval]\npoint = "both"\n')  # no summary yet: the config names the point
    accs = [0.10, 0.50, 0.60, 0.70, 0.90, 0.80]  # rounds 0..5
    (run / "metrics.csv").write_text(
        "round,acc,acc_after\n" + "".join(f"{r},{a},{a / 2}\n" for r, a in enumerate(accs))
    )
    result = invoke("curves", run, "--window", 2, "--last", 3)
    assert result.exit_code == 0, result.output
    header, _, row = result.output.splitlines()[:3]
    assert header.startswith("| run | 1-2 | 3-4 | 5-6 | last 3 |")
    cells = [c.strip() for c in row.split("|")[2:-1]]
    assert cells[:3] == ["55.00", "80.00", "80.00"]  # round 0 left out; the last block is shorter
    assert cells[3].startswith("80.00") and cells[4] == "90.00 (4)" and cells[5] == "5"
    after = invoke("curves", run, "--window", 2, "--point", "after-local").output.splitlines()[2]
    assert after.split("|")[2].strip() == "27.50"
    missing = invoke("curves", tmp_path)
    assert missing.exit_code == 2 and "holds no metrics.csv" in missing.output


def test_the_line_on_how_clients_trained_names_paths_steps_and_tf32():
    from pfedkit.cli import describe_training

    record = {
        "paths": {"cohort": 20},
        "step_mode": "cuda-graph",
        "steps_replayed": 90,
        "steps_eager": 10,
        "tf32": {"convolutions": True, "matmul": False},
    }
    line = describe_training(record)
    assert line == (
        "clients trained: 20 cohort; cohort steps: cuda-graph (10 eager, 90 replayed); TF32 allowed for convolutions"
    )
    assert "TF32" not in describe_training({**record, "tf32": {"convolutions": False, "matmul": False}})
    together = describe_training({**record, "trained_together": 3})
    assert "(10 eager, 90 replayed), shared by 3 runs trained as one;" in together


DIGITS = Path(__file__).resolve().parent.parent / "examples" / "digits.toml"


def test_a_method_override_no_compared_method_gets_is_refused_before_training(tmp_path):
    """compare and tune apply [method] keys to the config's own method only: a --set for it that no method run gets
    would be dropped silently, so it is an error naming the key and the fix."""
    config = DIGITS  # its method is fedper
    out = tmp_path / "c"
    result = invoke("compare", config, "--methods", "fedprox", "--set", "method.mu=0.5", "--out", out)
    assert result.exit_code == 2 and "method.mu" in result.output and "method.name=" in result.output
    assert not out.exists()
    result = invoke("tune", config, "--method", "fedprox", "--set", "method.mu=0.5", "--out", tmp_path / "t")
    assert result.exit_code == 2 and "method.mu" in result.output


def test_the_claims_table_of_a_users_folder_suggests_commands_that_run_into_it(tmp_path):
    result = invoke("reproduce", "--claims", "heart-table1", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    folder = tmp_path / "heart_table1"
    expected = f"`pfedkit reproduce heart-table1 --columns in-domain --rows heart-pfl,perada --out {folder}`"
    assert expected in result.output and "benchmarks/reproduce.py" not in result.output


def test_bad_numbers_and_folders_are_refused_naming_the_option(tmp_path):
    result = invoke("tune", DIGITS, "--last-k", "0", "--out", tmp_path / "t")
    assert result.exit_code == 2 and "--last-k" in result.output
    result = invoke("reproduce", "--claims", "--out", tmp_path / "nowhere")
    assert result.exit_code == 2 and "--out" in result.output and "not a folder" in result.output
    result = invoke("compare", DIGITS, "--methods", "fedavg,fedavg", "--out", tmp_path / "c")
    assert result.exit_code == 2 and "--methods" in result.output


def test_flower_limits_name_the_option_and_min_replies_cannot_exceed_the_clients(tmp_path):
    from pfedkit.errors import ConfigError
    from pfedkit.flower.settings import RunSettings
    from pfedkit.registry import load_config

    config = load_config(None, ["partition.clients=4"])
    for kwargs, named in (
        ({"min_replies": 0}, "min-replies=0"),
        ({"round_timeout": -1.0}, "round-timeout=-1.0"),
        ({"min_replies": 5}, "min-replies=5 exceeds partition.clients=4"),
    ):
        with pytest.raises(ConfigError, match=re.escape(named)):
            RunSettings(config, tmp_path / "out", **kwargs)


def test_pretrain_option_without_a_value_names_its_own_flag(tmp_path):
    result = invoke("pretrain", "--dataset", "digits", "--out", tmp_path / "p.pt", "--option", "widths")
    assert result.exit_code == 2 and "--option" in result.output and "--set" not in result.output
    result = invoke("pretrain", "--dataset", "digits", "--out", tmp_path / "p.pt", "--option", "widths=[8,16")
    assert result.exit_code == 2 and "--option widths=[8,16" in result.output and "not a TOML value" in result.output
    assert not (tmp_path / "p.pt").exists()
    for option, value in (("--epochs", "0"), ("--batch-size", "0"), ("--lr", "0"), ("--momentum", "1")):
        result = invoke("pretrain", "--dataset", "digits", "--out", tmp_path / "p.pt", option, value)
        assert result.exit_code == 2 and option in result.output, option


def test_every_option_of_every_command_says_what_it_does():
    import click

    from pfedkit.cli import main

    def silent(command, path):
        if isinstance(command, click.Group):
            return [x for name, sub in command.commands.items() for x in silent(sub, [*path, name])]
        return [f"{' '.join(path)} {p.opts[0]}" for p in command.params if isinstance(p, click.Option) and not p.help]

    assert silent(main, ["pfedkit"]) == []
