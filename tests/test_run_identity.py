"""A run never takes in another run's state, and a failure says what happened (issue 53): foreign checkpoints and
client-state files, missing client states, duplicate seeds, unsafe files, stale temporaries, a user's own files in
--out, damaged summaries, unwritable folders."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from pfedkit.cli import main
from pfedkit.config import dump_toml
from pfedkit.engine.simulation import simulate
from pfedkit.errors import PfedkitError
from pfedkit.io import read_csv
from tests.test_engine import COMPARED, synthetic

REPO = Path(__file__).resolve().parents[1]


def six_rounds(**run):
    return synthetic(train={"rounds": 6}, run={"checkpoint_every": 3, **run})


@pytest.mark.parametrize(
    "other",
    [
        {"run": {"seed": 2}},
        {"method": {"name": "fedper"}},
        {"data": {"options": {"samples": 1000, "test_samples": 300}}},
    ],
    ids=["seed", "method", "data"],
)
def test_a_checkpoint_of_another_run_is_refused_naming_how_the_runs_differ(tmp_path, other):
    simulate(six_rounds(), tmp_path / "a", progress=False)
    sections = {"train": {"rounds": 6}, "run": {"checkpoint_every": 3}}
    for section, values in other.items():
        sections[section] = {**sections.get(section, {}), **values}
    simulate(synthetic(**sections), tmp_path / "b", progress=False)
    shutil.copy(tmp_path / "b" / "checkpoint.pt", tmp_path / "a" / "checkpoint.pt")
    before = (tmp_path / "a" / "metrics.csv").read_text()
    with pytest.raises(PfedkitError, match="written by another run") as caught:
        simulate(
            synthetic(train={"rounds": 8}, run={"checkpoint_every": 3}), tmp_path / "a", resume=True, progress=False
        )
    key = next(iter(other)) if "data" not in other else "data"
    assert key in str(caught.value) and "new --out" in str(caught.value)
    assert (tmp_path / "a" / "metrics.csv").read_text() == before  # nothing lost


def test_a_run_carried_on_with_more_rounds_still_takes_its_own_checkpoint(tmp_path):
    simulate(six_rounds(), tmp_path, progress=False)
    simulate(synthetic(train={"rounds": 8}, run={"checkpoint_every": 3}), tmp_path, resume=True, progress=False)
    assert len(read_csv(tmp_path / "metrics.csv")) == 9


def test_a_missing_client_state_file_stops_the_resume_naming_client_and_round(tmp_path):
    cfg = six_rounds(client_state="disk")
    simulate(cfg, tmp_path, progress=False)
    state = tmp_path / "client-state" / "client-3" / "after-5.pt"
    assert state.exists()
    state.unlink()
    with pytest.raises(PfedkitError, match=r"client 3's state after round 5 is missing.*new --out"):
        simulate(
            synthetic(train={"rounds": 8}, run={"checkpoint_every": 3, "client_state": "disk"}),
            tmp_path,
            resume=True,
            progress=False,
        )


def test_a_client_state_file_of_another_run_is_refused(tmp_path):
    simulate(six_rounds(client_state="disk"), tmp_path / "a", progress=False)
    simulate(six_rounds(client_state="disk", seed=2), tmp_path / "b", progress=False)
    shutil.copy(
        tmp_path / "b" / "client-state" / "client-2" / "after-5.pt",
        tmp_path / "a" / "client-state" / "client-2" / "after-5.pt",
    )
    with pytest.raises(PfedkitError, match="client-2/after-5.pt was written by another run"):
        simulate(
            synthetic(train={"rounds": 8}, run={"checkpoint_every": 3, "client_state": "disk"}),
            tmp_path / "a",
            resume=True,
            progress=False,
        )


def test_an_unsafe_client_state_file_is_refused_without_suggesting_an_unsafe_load(tmp_path):
    simulate(six_rounds(client_state="disk"), tmp_path, progress=False)
    torch.save({"x": Path("/etc")}, tmp_path / "client-state" / "client-1" / "after-5.pt")  # not plain data
    with pytest.raises(PfedkitError) as caught:
        simulate(
            synthetic(train={"rounds": 8}, run={"checkpoint_every": 3, "client_state": "disk"}),
            tmp_path,
            resume=True,
            progress=False,
        )
    assert "cannot be read safely" in str(caught.value) and "weights_only" not in str(caught.value)


def test_a_killed_resume_on_disk_states_still_equals_an_uninterrupted_run(tmp_path):
    cfg = six_rounds(client_state="disk")
    simulate(cfg, tmp_path / "straight", progress=False)
    simulate(
        synthetic(train={"rounds": 3}, run={"checkpoint_every": 3, "client_state": "disk"}),
        tmp_path / "cut",
        progress=False,
    )
    simulate(cfg, tmp_path / "cut", resume=True, progress=False)
    got, want = read_csv(tmp_path / "cut" / "metrics.csv"), read_csv(tmp_path / "straight" / "metrics.csv")
    assert [[r[k] for k in COMPARED] for r in got] == [[r[k] for k in COMPARED] for r in want]


@pytest.mark.parametrize("seeds", ["0,0", "0,00,1"])
def test_a_seed_given_twice_is_refused(tmp_path, seeds):
    config = tmp_path / "c.toml"
    config.write_text(dump_toml(synthetic().to_dict()))
    result = CliRunner().invoke(
        main, ["compare", str(config), "--methods", "fedavg", "--seeds", seeds, "--out", str(tmp_path / "cmp")]
    )
    assert result.exit_code == 2 and "seed 0 more than once" in result.output
    assert not (tmp_path / "cmp").exists()


def test_temporaries_of_a_killed_write_are_removed_when_the_run_resumes(tmp_path):
    simulate(six_rounds(client_state="disk"), tmp_path, progress=False)
    litter = [
        tmp_path / ".checkpoint.pt.abc12_XY.pfedkit-partial",
        tmp_path / "client-state" / "client-0" / ".after-9.pt.q1w2e3r4.pfedkit-partial",
    ]
    for path in litter:
        path.write_bytes(b"half a checkpoint")
    yours = [tmp_path / ".env.template", tmp_path / ".notes.personal", tmp_path / ".metrics.csv.abcd1234"]
    for path in yours:  # named like a temporary of the old pattern, but not pfedkit's
        path.write_text("mine")
    simulate(
        synthetic(train={"rounds": 7}, run={"checkpoint_every": 3, "client_state": "disk"}),
        tmp_path,
        resume=True,
        progress=False,
    )
    assert not any(path.exists() for path in litter)
    assert all(path.read_text() == "mine" for path in yours)  # only what pfedkit began writing is removed
    assert (tmp_path / ".pfedkit-owner.json").exists() is False  # the lock's own files are not litter, and are gone


def test_a_folder_with_the_users_own_files_is_refused_unless_forced(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    with pytest.raises(PfedkitError, match=r"holds files pfedkit did not write \(notes.txt\).*--force"):
        simulate(synthetic(train={"rounds": 1}), tmp_path, progress=False)
    assert notes.read_text() == "my notes" and not (tmp_path / "metrics.csv").exists()
    simulate(synthetic(train={"rounds": 1}), tmp_path, progress=False, force=True)
    assert notes.read_text() == "my notes" and (tmp_path / "metrics.csv").exists()


def test_a_users_own_result_named_files_are_refused_unless_forced(tmp_path):
    for name in ("summary.json", "curves.png", "clients.csv"):
        folder = tmp_path / name.replace(".", "-")
        folder.mkdir()
        (folder / name).write_text("mine")
        with pytest.raises(PfedkitError, match=rf"holds files pfedkit did not write \({name}\)"):
            simulate(synthetic(train={"rounds": 1}), folder, progress=False)
        assert (folder / name).read_text() == "mine"


def test_a_run_that_died_before_its_first_round_leaves_no_foreign_files(tmp_path):
    simulate(synthetic(train={"rounds": 1}), tmp_path, progress=False)
    for name in ("metrics.csv", "checkpoint.pt", "summary.json", "clients.csv", "curves.png"):
        (tmp_path / name).unlink(missing_ok=True)  # what a run killed in round 0 had not written yet
    for tracker in ("tensorboard", "wandb"):  # run.log_to's folders, made when the run starts
        (tmp_path / tracker).mkdir()
        (tmp_path / tracker / "events").write_text("")
    simulate(synthetic(train={"rounds": 1}), tmp_path, progress=False)  # no --force needed
    assert (tmp_path / "metrics.csv").exists()


def test_the_users_config_in_out_is_never_replaced(tmp_path):
    config = tmp_path / "config.toml"
    text = "# my experiment, with my comments\n" + dump_toml(synthetic(train={"rounds": 1}).to_dict())
    config.write_text(text)
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(tmp_path), "--quiet"])
    assert result.exit_code == 2 and "would replace yours" in result.output
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(tmp_path), "--quiet", "--force"])
    assert result.exit_code == 2 and config.read_text() == text  # not even with --force
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.toml").write_text(text)  # the user's config in a folder given as --out for another config
    with pytest.raises(PfedkitError, match=r"did not write \(config.toml\)"):
        simulate(synthetic(train={"rounds": 1}), other, progress=False)
    assert (other / "config.toml").read_text() == text


def test_resume_where_there_is_no_run_says_so(tmp_path):
    for out in (tmp_path / "missing", tmp_path):
        result = CliRunner().invoke(main, ["run", "--out", str(out), "--resume"])
        assert result.exit_code == 2 and "no run in" in result.output and "to resume" in result.output


def test_a_damaged_summary_is_named_not_a_traceback(tmp_path):
    run = tmp_path / "cmp" / "fedavg" / "seed1"  # the synthetic config's seed
    simulate(synthetic(train={"rounds": 1}), run, progress=False)
    (run / "summary.json").write_text("{ half")
    result = CliRunner().invoke(main, ["curves", str(run)])
    assert result.exit_code == 2 and "summary.json is damaged" in result.output and "Traceback" not in result.output
    config = tmp_path / "c.toml"
    config.write_text(dump_toml(synthetic(train={"rounds": 1}).to_dict()))
    result = CliRunner().invoke(
        main,
        [
            "compare",
            str(config),
            "--methods",
            "fedavg",
            "--seeds",
            "1",
            "--out",
            str(tmp_path / "cmp"),
            "--resume",
            "--quiet",
        ],
    )
    assert result.exit_code == 2 and "summary.json is damaged" in result.output


def test_a_read_only_out_is_a_message_not_a_traceback(tmp_path, monkeypatch):
    import errno

    import filelock

    config = tmp_path / "c.toml"
    config.write_text(dump_toml(synthetic(train={"rounds": 1}).to_dict()))
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o555)
    if os.geteuid() == 0:  # root writes anywhere: the lock fails as it does for anyone else in a read-only folder

        def refused(self, *args, **kwargs):
            raise PermissionError(errno.EACCES, "Permission denied", str(locked / "run" / ".pfedkit.lock"))

        monkeypatch.setattr(filelock.FileLock, "acquire", refused)
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(locked / "run"), "--quiet"])
    assert result.exit_code == 2 and "cannot write" in result.output and "--out" in result.output
    assert not isinstance(result.exception, OSError)  # handled: a message, exit code 2


def test_a_full_disk_while_saving_is_a_message_not_a_traceback(tmp_path, monkeypatch):
    import errno

    from pfedkit.cli import describe_os_error
    from pfedkit.io import atomic_write

    def failing(f):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")

    monkeypatch.setattr("shutil.disk_usage", lambda path: shutil._ntuple_diskusage(100, 100, 0))
    with pytest.raises(OSError) as caught:
        atomic_write(tmp_path / "checkpoint.pt", failing)
    assert caught.value.errno == errno.ENOSPC and not list(tmp_path.iterdir())  # no half file left
    assert "disk is full" in describe_os_error(caught.value) and "--resume" in describe_os_error(caught.value)


def test_a_ctrl_c_inside_torch_save_is_an_interrupt_after_a_whole_file_not_a_failed_write(tmp_path):
    import signal

    from pfedkit.io import atomic_write

    class CtrlCOnFirstWrite:  # a file whose first write is interrupted by Ctrl-C, as a terminal sends it
        def __init__(self, f):
            self.f, self.sent = f, False

        def write(self, data):
            if not self.sent:
                self.sent = True
                os.kill(os.getpid(), signal.SIGINT)
            return self.f.write(data)

        def flush(self):
            self.f.flush()

    state = {"w": torch.arange(1000.0)}
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # a terminal's Ctrl-C, whatever ran earlier
    try:
        with pytest.raises(KeyboardInterrupt):  # not torch's RuntimeError, reported as a failed write (issue 60)
            atomic_write(tmp_path / "checkpoint.pt", lambda f: torch.save(state, CtrlCOnFirstWrite(f)))
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl-C handled as before afterwards
    finally:
        signal.signal(signal.SIGINT, before)
    assert torch.equal(torch.load(tmp_path / "checkpoint.pt", weights_only=True)["w"], state["w"])  # whole
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temporary left


# ---- smaller items of issue 53 ----
def test_the_default_config_runs_on_the_default_data_set(tmp_path, capsys):
    from pfedkit.registry import build_config

    config = build_config({"train": {"rounds": 1}})  # an empty TOML, one round
    assert config.data.dataset == "digits" and config.model.name == "smallcnn"
    summary = simulate(config, tmp_path, progress=False)
    assert summary["clients"] == 20 and "PFLlib's minimum of 40" in capsys.readouterr().err
    assert build_config({"data": {"dataset": "mnist"}}).model.name == "fedavgcnn"  # elsewhere the default stays


@pytest.mark.parametrize(
    "text, wrong",
    [
        ("train.rounds=true", "valid integer"),
        ('train.rounds="5"', "valid integer"),
        ("run.checkpoint_every=2.0", "valid integer"),
    ],
)
def test_booleans_and_strings_are_not_read_as_numbers(text, wrong):
    from pfedkit.errors import ConfigError
    from pfedkit.registry import load_config

    with pytest.raises(ConfigError, match=wrong):
        load_config(None, [text])
    assert load_config(None, ["train.lr=1"]).train.lr == 1.0  # an integer still serves for a float


def test_a_set_value_over_several_lines_is_refused():
    from pfedkit.errors import ConfigError
    from pfedkit.registry import load_config

    with pytest.raises(ConfigError, match="several lines"):
        load_config(None, ["train.lr=0.1\nrounds = 3"])


def test_a_data_fraction_that_leaves_too_few_samples_names_the_key_and_a_fix():
    from pfedkit.data.federated import build_federated
    from pfedkit.errors import ConfigError
    from pfedkit.registry import build_config

    with pytest.raises(ConfigError, match=r"data.fraction = 1e-09 keeps 0 .* at least"):
        build_federated(build_config({"data": {"fraction": 1e-9}}))


def test_clients_without_training_data_are_refused():
    from pfedkit.data.federated import build_federated
    from pfedkit.errors import ConfigError
    from pfedkit.registry import build_config

    with pytest.raises(ConfigError, match=r"clients have no training samples .*min_samples"):
        build_federated(build_config({"partition": {"clients": 300, "min_samples": 0}}))


def test_a_repeat_redraws_the_training_randomness_on_the_same_partition_and_clients(tmp_path):
    """run.repeat (the noise floor's runs): the same data, partition and sampled clients, other initial weights and
    batch orders; repeat 0 is the run as before, with the same identity."""
    from pfedkit.registry import run_identity

    base = synthetic(train={"rounds": 3, "join_ratio": 0.5}, eval={"point": "both"})
    simulate(base, tmp_path / "r0", progress=False)
    repeat = synthetic(train={"rounds": 3, "join_ratio": 0.5}, eval={"point": "both"}, run={"repeat": 1})
    simulate(repeat, tmp_path / "r1", progress=False)
    first, other = read_csv(tmp_path / "r0" / "clients.csv"), read_csv(tmp_path / "r1" / "clients.csv")
    assert [(r["round"], r["client"], r["n_test"], r["point"]) for r in first] == [
        (r["round"], r["client"], r["n_test"], r["point"]) for r in other
    ]  # the after-local rows are the trained clients: the same ones, round by round
    trained = [(r["round"], r["client"]) for r in first if r["point"] == "after-local"]
    assert 0 < len(trained) < len([r for r in first if r["point"] == "start"])  # a sample, not everyone
    assert [r["acc"] for r in first] != [r["acc"] for r in other]  # other weights from round 0 on
    again = synthetic(train={"rounds": 3, "join_ratio": 0.5}, eval={"point": "both"}, run={"repeat": 0})
    assert run_identity(base) == run_identity(again) and run_identity(base) != run_identity(repeat)


def test_seeds_outside_32_bits_are_refused_before_anything_runs(tmp_path):
    from pfedkit.errors import ConfigError

    for seed in (2**32, -1):
        with pytest.raises(ConfigError, match="run.seed"):
            synthetic(run={"seed": seed})
    result = CliRunner().invoke(
        main, ["compare", "x.toml", "--methods", "fedavg", "--seeds", "1,-1", "--out", str(tmp_path / "c")]
    )
    assert result.exit_code == 2 and not (tmp_path / "c").exists()
    for given in ("", "1,-1", str(2**32)):
        from pfedkit.cli import parse_seeds

        with pytest.raises(Exception, match="seed"):
            parse_seeds(None, None, given)


def test_a_method_named_twice_in_compare_is_refused(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(dump_toml(synthetic(train={"rounds": 1}).to_dict()))
    result = CliRunner().invoke(
        main, ["compare", str(config), "--methods", "fedavg,fedavg", "--out", str(tmp_path / "c"), "--quiet"]
    )
    assert result.exit_code == 2 and "fedavg more than once" in result.output and not (tmp_path / "c").exists()


def test_another_runs_checkpoint_without_its_config_is_refused(tmp_path):
    simulate(six_rounds(), tmp_path / "a", progress=False)
    ckpt = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)
    del ckpt["config"]
    torch.save(ckpt, tmp_path / "a" / "checkpoint.pt")
    with pytest.raises(PfedkitError, match="holds no run config"):
        simulate(six_rounds(), tmp_path / "a", resume=True, progress=False)


def test_the_api_resume_where_there_is_no_run_says_so_and_bad_arguments_are_messages(tmp_path):
    import pfedkit
    from pfedkit.errors import ConfigError

    with pytest.raises(PfedkitError, match="no run in .* to resume"):
        pfedkit.run(synthetic().to_dict(), tmp_path / "none", resume=True, progress=False)
    assert not (tmp_path / "none").exists()
    with pytest.raises(ConfigError, match="sections are dicts"):
        pfedkit.run(synthetic().to_dict(), tmp_path / "x", train=5)
    with pytest.raises(ConfigError, match="not NoneType"):
        pfedkit.run(None, tmp_path / "x")
    with pytest.raises(PfedkitError, match="run folder's path"):
        pfedkit.load_run(None)


def test_a_client_state_copied_over_another_clients_or_without_its_wrapper_is_refused(tmp_path):
    simulate(six_rounds(client_state="disk"), tmp_path, progress=False)
    longer = synthetic(train={"rounds": 8}, run={"checkpoint_every": 3, "client_state": "disk"})
    states = tmp_path / "client-state"
    shutil.copy(states / "client-2" / "after-5.pt", states / "client-3" / "after-5.pt")  # same run, another client
    with pytest.raises(PfedkitError, match="client-3/after-5.pt is client 2's, not client 3's"):
        simulate(longer, tmp_path, resume=True, progress=False)
    stored = torch.load(states / "client-2" / "after-5.pt", weights_only=True)
    torch.save(stored["state"], states / "client-3" / "after-5.pt")  # the bare state, its identity stripped
    with pytest.raises(PfedkitError, match="does not say which run and client it belongs to"):
        simulate(longer, tmp_path, resume=True, progress=False)


def test_a_finished_runs_metrics_cut_short_or_damaged_are_refused_wherever_they_are_read(tmp_path):
    import pfedkit
    from pfedkit.reports.tables import headline_curve

    simulate(six_rounds(), tmp_path / "run", progress=False)
    metrics = tmp_path / "run" / "metrics.csv"
    lines = metrics.read_text().splitlines()
    metrics.write_text("\n".join(lines[:3]) + "\n")  # a truncated copy: rounds 0 and 1 of 6
    for read in (lambda: pfedkit.load_run(tmp_path / "run"), lambda: headline_curve(tmp_path / "run")):
        with pytest.raises(PfedkitError, match=r"holds rounds 0..1 \(2 rows\) but .*summary.json says .* 6 rounds"):
            read()
    result = CliRunner().invoke(main, ["curves", str(tmp_path / "run")])
    assert result.exit_code == 2 and "cut short" in result.output
    metrics.write_text("\n".join([lines[0], lines[1].replace(lines[1].split(",")[1], "oops", 1), *lines[2:]]) + "\n")
    with pytest.raises(PfedkitError, match="acc 'oops' .* is not a number"):
        pfedkit.load_run(tmp_path / "run")


def test_misleading_advice_is_gone_more_clients_than_samples_and_a_deleted_config(tmp_path):
    from pfedkit.data.federated import build_federated
    from pfedkit.errors import ConfigError

    with pytest.raises(ConfigError, match="use fewer clients") as caught:
        build_federated(synthetic(partition={"clients": 2000}, data={"fraction": 1.0}))
    assert "data.fraction of at least" not in str(caught.value)
    simulate(six_rounds(), tmp_path, progress=False)
    (tmp_path / "config.toml").unlink()
    result = CliRunner().invoke(main, ["run", "--out", str(tmp_path), "--resume"])
    assert result.exit_code == 2 and "holds a run without its config.toml" in result.output
    assert f"pfedkit run CONFIG --out {tmp_path} --resume" in result.output
