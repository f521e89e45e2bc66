"""Runs that cannot go silently wrong: divergence stops a run, one run per folder, workers die with their parent,
and a run's data are named by checksum, not by the directory it started in."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pfedkit.config import dump_toml
from pfedkit.engine.lifeline import descendants
from pfedkit.engine.store import OWNER
from pfedkit.errors import DataError, PfedkitError
from pfedkit.experiments import run_experiment
from pfedkit.io import read_csv
from pfedkit.methods import METHODS
from pfedkit.methods.fedavg import FedAvg
from pfedkit.registry import build_config
from tests.test_engine import synthetic_raw as synthetic

REPO = Path(__file__).resolve().parents[1]
MNIST = REPO.parent / "shared" / "data" / "mnist"


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it has exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def pfedkit(*args: str, cwd: Path = REPO) -> subprocess.Popen:
    # a suite started as a background job (`nohup ... &`) ignores SIGINT, which a child inherits: a Ctrl-C test's run
    # would then never see it; handled here, the child starts with SIGINT at its default
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # one torch thread: on a busy machine a tiny model's two spinning threads stalled a 40-round run for minutes
    return subprocess.Popen(
        [sys.executable, "-m", "pfedkit", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def wait_for(predicate, seconds: float = 60.0) -> None:
    deadline = time.time() + seconds
    while not predicate():
        if time.time() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


# ---------------------------------------------------------------- divergence


class NaNFromRound2(FedAvg):
    """FedAvg whose client 1 replies NaN from round 2 on: a run that diverges mid-way."""

    name = "test-nan-from-round-2"
    training = "code"  # its update: FedAvg's, trained by PartSharing.local_update, then spoiled

    def local_update(self, payload, client, data, round):
        reply, client = super().local_update(payload, client, data, round)
        if round >= 2 and data.cid == 1:
            key = next(k for k, v in reply.items() if isinstance(v, torch.Tensor) and v.is_floating_point())
            reply = {**reply, key: torch.full_like(reply[key], float("nan"))}
        return reply, client


@pytest.fixture
def nan_method(monkeypatch):
    monkeypatch.setitem(METHODS, NaNFromRound2.name, NaNFromRound2)
    return NaNFromRound2.name


def test_a_diverging_run_stops_naming_round_client_and_method_and_keeps_a_finite_checkpoint(tmp_path, nan_method):
    from pfedkit.engine.divergence import Diverged

    with pytest.raises(Diverged) as caught:
        run_experiment(build_config(synthetic(method={"name": nan_method})), tmp_path, progress=False)
    message = str(caught.value)
    assert "round 2" in message and "client(s) 1 " in message and nan_method in message
    assert "train.lr (now 0.1)" in message and "checkpoint.pt" in message
    assert [int(r["round"]) for r in read_csv(tmp_path / "metrics.csv")] == [0, 1]  # stops at the last finite round
    ckpt = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert ckpt["next_round"] == 2 and len(ckpt["rows"]) == 2
    tensors = [
        v
        for state in (ckpt["server"], *ckpt["clients"].values())
        for v in state.values()
        if isinstance(v, torch.Tensor) and v.is_floating_point()
    ]
    assert tensors and all(torch.isfinite(t).all() for t in tensors)
    assert {r["round"] for r in ckpt["client_rows"]} == {0, 1}  # round 2's evaluation went with the round
    assert json.loads((tmp_path / "diverged.json").read_text())["round"] == 2
    assert not (tmp_path / "summary.json").exists()


def test_a_huge_learning_rate_exits_non_zero_with_the_fix_and_a_finite_checkpoint(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(dump_toml(build_config(synthetic(train={"lr": 1e4})).to_dict()))
    proc = pfedkit("run", str(config), "--out", str(tmp_path / "run"), "--quiet")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "diverged in round 0" in err and "a smaller train.lr (now 10000.0)" in err and "best acc" not in out
    ckpt = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert all(torch.isfinite(v).all() for v in ckpt["server"].values() if isinstance(v, torch.Tensor))


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_non_finite_hyper_parameters_are_refused(value):
    from pfedkit.errors import ConfigError
    from pfedkit.registry import load_config

    with pytest.raises(ConfigError, match="train.lr.*finite"):
        load_config(None, [f"train.lr={value}"])
    with pytest.raises(ConfigError, match="method.mu.*finite"):
        load_config(None, ["method.name=fedprox", f"method.mu={value}"])


def test_a_suite_or_compare_reports_a_diverged_cell_and_does_not_run_it_again(tmp_path, nan_method):
    from pfedkit.experiments.compare import compare_configs

    lines = []
    table, _ = compare_configs(synthetic(), [nan_method, "fedavg"], [1], tmp_path, log=lines.append)
    assert f"| {nan_method} | diverged (round 2) |" in table
    assert "| fedavg | " in table and "diverged" not in table.split("| fedavg |")[1].splitlines()[0]
    started = (tmp_path / nan_method / "seed1" / "diverged.json").stat().st_mtime_ns
    table_again, _ = compare_configs(synthetic(), [nan_method, "fedavg"], [1], tmp_path, resume=True, log=lines.append)
    assert table_again == table and any("delete the folder to run it again" in line for line in lines)
    assert (tmp_path / nan_method / "seed1" / "diverged.json").stat().st_mtime_ns == started


def test_the_suite_table_shows_diverged_instead_of_a_number(tmp_path):
    from pfedkit.reports.tables import paper_table

    run = tmp_path / "col" / "fedavg" / "seed0"
    run.mkdir(parents=True)
    (run / "diverged.json").write_text(json.dumps({"round": 7}))
    lines, _ = paper_table(tmp_path, {"col": "Column"}, ["fedavg"], {})
    assert lines[-1].startswith("| fedavg | diverged (round 7) | diverged (round 7) |")


# ---------------------------------------------------------------- one run per folder


@pytest.mark.slow
def test_a_second_run_into_a_busy_folder_is_refused_and_the_first_finishes_intact(tmp_path):
    first = build_config(synthetic(train={"rounds": 40, "local_epochs": 2}, run={"checkpoint_every": 10}))
    config = tmp_path / "first.toml"
    config.write_text(dump_toml(first.to_dict()))
    out = tmp_path / "run"
    proc = pfedkit("run", str(config), "--out", str(out), "--quiet")
    wait_for(lambda: (out / OWNER).exists() or proc.poll() is not None)
    with pytest.raises(PfedkitError, match=rf"{out} is in use by process {proc.pid} on .*\(`pfedkit run "):
        run_experiment(build_config(synthetic(train={"lr": 0.5})), out, progress=False)
    with pytest.raises(PfedkitError, match="in use by process"):  # resuming it is refused too
        run_experiment(first, out, resume=True, progress=False)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert len(read_csv(out / "metrics.csv")) == 41
    assert build_config(__import__("tomllib").loads((out / "config.toml").read_text())).train.lr == 0.1
    assert not (out / OWNER).exists()  # released at the end


def test_a_lock_left_by_a_dead_process_is_taken_over_with_a_message(tmp_path, capsys):
    dead = subprocess.Popen(["true"])
    dead.wait()
    out = tmp_path / "run"
    out.mkdir()
    (out / OWNER).write_text(
        json.dumps(
            {"pid": dead.pid, "host": "here", "command": "pfedkit run old.toml", "started": "2026-01-01 00:00:00"}
        )
    )
    run_experiment(build_config(synthetic()), out, progress=False)
    assert f"left locked by process {dead.pid}" in capsys.readouterr().err
    assert (out / "summary.json").exists()


# ---------------------------------------------------------------- workers die with their parent


@pytest.mark.slow
def test_kill_9_of_a_run_leaves_no_worker_behind(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(
        dump_toml(
            build_config(
                synthetic(train={"rounds": 200, "local_epochs": 3}, run={"workers": 2, "checkpoint_every": 50})
            ).to_dict()
        )
    )
    proc = pfedkit("run", str(config), "--out", str(tmp_path / "run"), "--quiet")
    wait_for(lambda: (tmp_path / "run" / "metrics.csv").exists() and len(descendants(proc.pid)) >= 2)
    workers = descendants(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)  # the main process only, as the out-of-memory killer would
    proc.wait()
    deadline = time.time() + 5
    while time.time() < deadline and any(alive(pid) for pid in workers):
        time.sleep(0.1)
    assert not [pid for pid in workers if alive(pid)], "workers outlived their parent"


def test_the_guardian_kills_started_process_trees_when_its_owner_dies(tmp_path):
    """What `pfedkit flower local` relies on: processes in their own sessions, with children of their own."""
    script = tmp_path / "owner.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "from pfedkit.engine.lifeline import Guardian\n"
        "g = Guardian()\n"
        "for _ in range(2):\n"
        "    p = subprocess.Popen(['bash', '-c', 'sleep 300 & sleep 300'], start_new_session=True)\n"
        "    g.watch(p.pid)\n"
        "print('ready', flush=True)\n"
        "time.sleep(300)\n"
    )
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert owner.stdout.readline().strip() == "ready"
    wait_for(lambda: len(descendants(owner.pid)) >= 5, 10)  # guardian, 2 bash, 2+ sleeps
    started = descendants(owner.pid)
    guardian = [pid for pid in started if "pfedkit.engine.lifeline" in command_line(pid)]
    assert len(guardian) == 1
    owner.kill()
    owner.wait()
    # the event, not the clock: the guardian exits once it has sent its last SIGKILL (a minute only bounds a hang)
    wait_for(lambda: not alive(guardian[0]), 60)
    wait_for(lambda: not any(alive(pid) for pid in started), 60)


def test_a_guardian_closed_in_order_leaves_its_processes_to_their_owner():
    from pfedkit.engine.lifeline import Guardian

    guardian = Guardian()
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    guardian.watch(proc.pid)
    guardian.close()
    assert guardian.proc.returncode == 0 and proc.poll() is None
    proc.kill()
    proc.wait()


# ---------------------------------------------------------------- data location is not experiment identity


def test_data_that_do_not_match_the_recorded_checksum_are_refused(tmp_path):
    raw = synthetic(data={"checksum": "sha256:" + "0" * 64})
    with pytest.raises(DataError, match=r"not the data this run was made with \(expected sha256:0+, found sha256:"):
        run_experiment(build_config(raw), tmp_path / "run", progress=False)
    assert not (tmp_path / "run" / "config.toml").exists()


@pytest.mark.slow
@pytest.mark.skipif(not MNIST.is_dir(), reason="needs ../shared/data/mnist")
def test_a_run_with_a_relative_data_root_resumes_from_elsewhere_and_with_another_root(tmp_path):
    raw = synthetic(
        data={"dataset": "mnist", "fraction": 0.03},
        partition={"clients": 4},
        train={"rounds": 40, "local_epochs": 2},
        run={"checkpoint_every": 2, "workers": 1},
    )
    del raw["data"]["options"]
    config = tmp_path / "config.toml"
    config.write_text(dump_toml(build_config(raw).to_dict()))
    out = tmp_path / "run"
    proc = pfedkit("run", str(config), "--out", str(out), "--quiet", "--data-root", "../shared/data")
    wait_for(lambda: (out / "metrics.csv").exists() and len(read_csv(out / "metrics.csv")) >= 3, 120)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    saved = __import__("tomllib").loads((out / "config.toml").read_text())["data"]
    assert saved["root"] == str(MNIST.parent.resolve()) and saved["checksum"].startswith("sha256:")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    resumed = pfedkit("run", "--out", str(out), "--resume", "--quiet", cwd=elsewhere)  # the config's absolute root
    wait_for(lambda: len(read_csv(out / "metrics.csv")) >= 6 or resumed.poll() is not None, 120)
    os.killpg(resumed.pid, signal.SIGKILL)
    resumed.wait()
    assert resumed.returncode == -signal.SIGKILL, resumed.stderr.read()

    link = tmp_path / "data-moved"
    link.symlink_to(MNIST.parent.resolve())  # the same data under another absolute path
    final = pfedkit("run", "--out", str(out), "--resume", "--quiet", "--data-root", str(link), cwd=elsewhere)
    _, err = final.communicate(timeout=300)
    assert final.returncode == 0, err
    assert len(read_csv(out / "metrics.csv")) == 41


# ---------------------------------------------------------------- rough edges


def test_fedphp_takes_its_expected_participations_from_the_run_when_not_given():
    from click.testing import CliRunner

    from pfedkit.cli import main
    from pfedkit.registry import load_config

    cfg = load_config(REPO / "examples" / "digits.toml", ["method.name=fedphp", "train.join_ratio=0.5"])
    assert cfg.method_params()["expected_participations"] == 15  # round(0.5 x 30), the authors' code
    given = load_config(REPO / "examples" / "digits.toml", ["method.name=fedphp", "method.expected_participations=4"])
    assert given.method_params()["expected_participations"] == 4
    listing = CliRunner().invoke(main, ["methods"]).output
    entry = listing.split("\nfedphp:")[1].split("\n", 1)[1].split("\n" + "f", 1)[0]  # its indented lines
    assert "expected_participations = (from the run)" in entry and "round(join_ratio x rounds) of the run" in entry


def test_the_progress_bar_counts_training_rounds(tmp_path, capsys):
    run_experiment(build_config(synthetic(train={"rounds": 3})), tmp_path, progress=True)
    import re

    err = capsys.readouterr().err
    assert "3/3" in err and "4/4" not in err  # 3 training rounds; round 3, the final evaluation, is not one
    seconds = re.findall(r"(final )?acc=[0-9.]+ ([0-9.]+)s/round", err)
    assert seconds[-1][0] == "final " and seconds[-1][1] == seconds[-2][1] != "0.00"  # the last training round's time


def test_a_checkpoint_the_safe_loader_refuses_is_never_met_with_weights_only_false(tmp_path):
    from pfedkit.engine.store import load_checkpoint

    torch.save({"server": Path("/etc")}, tmp_path / "checkpoint.pt")  # a global the safe loader does not allow
    with pytest.raises(PfedkitError) as caught:
        load_checkpoint(tmp_path)
    assert "cannot be read safely" in str(caught.value) and "weights_only" not in str(caught.value)


def test_curves_are_drawn_in_percent_as_the_tables(tmp_path, monkeypatch):
    import matplotlib.axes

    from pfedkit.reports.plots import save_curves

    drawn = []
    original = matplotlib.axes.Axes.plot
    monkeypatch.setattr(
        matplotlib.axes.Axes, "plot", lambda ax, xs, ys, **kw: drawn.append(ys) or original(ax, xs, ys, **kw)
    )
    save_curves({"a": [{"round": 0, "acc": 0.5}, {"round": 1, "acc": "0.75"}]}, tmp_path / "c.png")
    assert list(drawn[0]) == [50.0, 75.0]


def test_the_lock_owner_record_hides_secret_options():
    from pfedkit.engine.store import shown_command

    shown = shown_command(
        [
            "/usr/bin/flwr-serverapp",
            "--runtime-api-address",
            "127.0.0.1:1",
            "--token",
            "abc123",
            "--api-key=xyz",
            "--insecure",
        ]
    )
    assert shown == "flwr-serverapp --runtime-api-address 127.0.0.1:1 --token *** --api-key=*** --insecure"


def test_the_divergence_hint_names_every_step_size_of_the_method():
    from pfedkit.engine.divergence import likely_fix

    params = METHODS["per-fedavg"].Params  # alpha and beta: step sizes by their descriptions, not their names
    assert set(params.step_sizes()) >= {"alpha", "beta"}
    hint = likely_fix(0.1, {"alpha": 0.01, "beta": 0.001, "first_order": True}, params.step_sizes())
    assert "method.alpha (now 0.01)" in hint and "method.beta (now 0.001)" in hint and "first_order" not in hint
    assert "eta" in METHODS["fedala"].Params.step_sizes()
    assert "mu_init" not in METHODS["fedafk"].Params.step_sizes()


def test_ctrl_c_of_a_run_with_workers_ends_even_when_a_thread_is_left_waiting(tmp_path):
    """Ctrl-C of `pfedkit run` with 2 workers hung in 3 of 38 tries: concurrent.futures' exit hook joined the pool's
    manager thread, left waiting on a reply a stopped worker cut short. Here a method module leaves such a waiting
    thread on purpose: the interrupted run still ends at once, with its message and exit code 130."""
    module = tmp_path / "waits.py"
    example = REPO / "examples" / "methods" / "fedavgm.py"
    module.write_text(
        example.read_text().replace('"fedavgm"', '"waits-fedavgm"')
        + "\nimport threading  # noqa: E402\n"
        + "threading.Thread(target=threading.Event().wait, name='left waiting').start()  # never set, not a daemon\n"
    )
    raw = synthetic(train={"rounds": 200, "local_epochs": 3}, run={"workers": 2, "checkpoint_every": 1})
    raw["method"] = {"name": "waits-fedavgm", "module": str(module)}
    config = tmp_path / "config.toml"
    config.write_text(dump_toml(raw))  # not built here: importing the module would leave the thread in this process
    proc = pfedkit("run", str(config), "--out", str(tmp_path / "run"), "--quiet")
    wait_for(lambda: (tmp_path / "run" / "checkpoint.pt").exists())
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the interrupted run did not end")
    assert proc.returncode == 130 and "interrupted" in err
