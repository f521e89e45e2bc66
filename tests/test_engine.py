"""The round loop end to end on the synthetic set: outputs, determinism, bytes, kill-and-resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pfedkit.config import dump_toml
from pfedkit.engine.simulation import METRIC_COLUMNS, Simulation, sample_clients
from pfedkit.errors import ConfigError, PfedkitError
from pfedkit.experiments import run_experiment
from pfedkit.io import read_csv
from pfedkit.registry import build_config, load_config, run_differences

REPO = Path(__file__).resolve().parents[1]
COMPARED = ("round", "acc", "acc_client_mean", "loss", "bytes_down", "bytes_up", "clients_trained")


def synthetic_raw(**sections) -> dict:
    raw = {
        "data": {"dataset": "synthetic", "options": {"samples": 1200, "test_samples": 300}},
        "partition": {"scheme": "dirichlet", "clients": 6, "beta": 0.5},
        "model": {"name": "mlp", "options": {"hidden": 32}},
        "method": {"name": "fedavg"},
        "train": {"rounds": 4, "batch_size": 16, "lr": 0.1},
        "run": {"seed": 1, "checkpoint_every": 2, "workers": 1},
    }
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    return raw


def synthetic(**sections):
    return build_config(synthetic_raw(**sections))


def test_run_writes_every_output_and_learns(tmp_path):
    summary = run_experiment(synthetic(train={"rounds": 6}), tmp_path, progress=False)
    rows = read_csv(tmp_path / "metrics.csv")
    assert list(rows[0]) == list(METRIC_COLUMNS)
    assert [int(r["round"]) for r in rows] == list(range(7))
    for name in ("config.toml", "summary.json", "curves.png", "clients.csv", "checkpoint.pt"):
        assert (tmp_path / name).exists(), name
    assert {"best_acc", "best_round", "last_acc", "protocol", "method"} <= set(summary)
    assert summary["protocol"] == "pfllib" and summary["method"] == "fedavg"
    assert float(rows[-1]["acc"]) > float(rows[0]["acc"]) + 0.2  # trained well above the untrained model
    assert len(read_csv(tmp_path / "clients.csv")) == 7 * 6  # each client's accuracy every round
    # the saved config is runnable as it is; it records the data's absolute root and checksum
    saved = load_config(tmp_path / "config.toml")
    assert run_differences(saved, synthetic(train={"rounds": 6})) == []  # the same run: its values, its code
    assert saved.method.source.startswith("pfedkit ")
    assert Path(saved.data.root).is_absolute() and saved.data.checksum.startswith("sha256:")


def test_sampling_count_and_seeding():
    assert len(sample_clients(20, 0.1, 0, 0)) == 2
    assert len(sample_clients(20, 0.01, 0, 0)) == 1  # max(round(n * ratio), 1)
    assert len(sample_clients(100, 0.3, 0, 0)) == 30
    assert sample_clients(100, 0.3, 0, 5) == sample_clients(100, 0.3, 0, 5)
    assert sample_clients(100, 0.3, 0, 5) != sample_clients(100, 0.3, 0, 6)


def test_partial_participation_trains_only_sampled_clients(tmp_path):
    run_experiment(synthetic(train={"join_ratio": 0.5}), tmp_path, progress=False)
    rows = read_csv(tmp_path / "metrics.csv")
    assert {int(r["clients_trained"]) for r in rows[:-1]} == {3}


def test_bytes_are_measured_from_messages(tmp_path):
    cfg = synthetic(method={"name": "fedper"})
    sim = Simulation(cfg, tmp_path, progress=False)
    body = sum(v.numel() * v.element_size() for k, v in sim.method.initial_state().items() if k.startswith("body."))
    sim.run()
    row = read_csv(tmp_path / "metrics.csv")[0]
    assert int(row["bytes_down"]) == 6 * body  # the head never travels
    assert int(row["bytes_up"]) == 6 * (body + 8)  # body + the sample count


def test_pool_of_workers_is_deterministic(tmp_path):
    a = run_experiment(synthetic(run={"workers": 2}), tmp_path / "a", progress=False)
    b = run_experiment(synthetic(run={"workers": 2}), tmp_path / "b", progress=False)
    assert a["best_acc"] == b["best_acc"] and a["last_acc"] == b["last_acc"]
    rows_a, rows_b = read_csv(tmp_path / "a/metrics.csv"), read_csv(tmp_path / "b/metrics.csv")
    assert [[r[k] for k in COMPARED] for r in rows_a] == [[r[k] for k in COMPARED] for r in rows_b]


def test_eval_every_skips_rounds_but_always_evaluates_the_last(tmp_path):
    run_experiment(synthetic(train={"rounds": 5}, eval={"every": 2}), tmp_path, progress=False)
    evaluated = [int(r["round"]) for r in read_csv(tmp_path / "metrics.csv") if r["acc"]]
    assert evaluated == [0, 2, 4, 5]


def test_existing_run_needs_resume_and_resume_needs_the_same_config(tmp_path):
    run_experiment(synthetic(), tmp_path, progress=False)
    with pytest.raises(PfedkitError, match="--resume"):
        run_experiment(synthetic(), tmp_path, progress=False)
    with pytest.raises(PfedkitError, match=r"another configuration \(train.lr: 0.1 -> 0.2\)"):
        run_experiment(synthetic(train={"lr": 0.2}), tmp_path, resume=True, progress=False)


def test_resume_of_a_finished_run_changes_nothing(tmp_path):
    run_experiment(synthetic(), tmp_path, progress=False)
    before = (tmp_path / "metrics.csv").read_text()
    run_experiment(synthetic(), tmp_path, resume=True, progress=False)
    assert (tmp_path / "metrics.csv").read_text() == before


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_numbers(tmp_path):
    overrides = {"train": {"rounds": 30, "local_epochs": 3}, "run": {"checkpoint_every": 4, "workers": 2}}
    cfg = synthetic(**overrides)
    config_path = tmp_path / "config.toml"
    config_path.write_text(dump_toml(cfg.to_dict()))
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "pfedkit", "run", str(config_path), "--out", str(killed), "--quiet"]
    proc = subprocess.Popen(cmd, cwd=REPO, start_new_session=True)
    metrics = killed / "metrics.csv"
    deadline = time.time() + 120
    while time.time() < deadline:  # kill between checkpoints: rows 10-11 are lost and must be recomputed
        if metrics.exists() and len(metrics.read_text().splitlines()) - 1 >= 11:
            break
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = len(read_csv(metrics))
    assert 11 <= done < 31, f"the kill came too late ({done} rows)"
    resumed = subprocess.run(
        [sys.executable, "-m", "pfedkit", "run", "--out", str(killed), "--resume", "--quiet"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr
    run_experiment(cfg, tmp_path / "straight", progress=False)
    got, want = read_csv(killed / "metrics.csv"), read_csv(tmp_path / "straight" / "metrics.csv")
    assert len(got) == len(want) == 31
    assert [[r[k] for k in COMPARED] for r in got] == [[r[k] for k in COMPARED] for r in want]
    ckpt = torch.load(killed / "checkpoint.pt", weights_only=True)
    assert ckpt["next_round"] == 31


class _DyingMethod:
    """Stands in for a method whose worker is killed mid-update (as the out-of-memory killer would)."""

    training = "code"

    def forget_draws(self):
        pass

    def local_update(self, payload, client, data, round):
        os._exit(9)


class _Clients:
    def client(self, cid):
        return cid


def test_a_killed_worker_is_a_clear_error_not_a_hang():
    from pfedkit.engine.workers import Executor, Task

    with Executor(_DyingMethod(), _Clients(), workers=2) as executor:
        with pytest.raises(PfedkitError, match="worker process died during round 3.*--resume"):
            list(executor.run([Task("train", cid, 3, {}, {}, 1) for cid in range(4)]))


class _SlowMethod:
    """Stands in for a method whose update takes long: a worker busy when Ctrl-C comes."""

    training = "code"

    def forget_draws(self):
        pass

    def local_update(self, payload, client, data, round):
        time.sleep(60)


def test_ctrl_c_stops_the_workers_at_once_and_they_leave_it_to_the_driver():
    from concurrent.futures import wait

    from pfedkit.engine.workers import Executor, Task, prepared

    executor = Executor(_SlowMethod(), _Clients(), workers=2)
    from pfedkit.engine.workers import _worker_run

    busy = [executor.pool.submit(_worker_run, prepared(Task("train", cid, 0, {}, {}, 1))) for cid in range(2)]
    wait(busy, timeout=1.0)  # both workers started, each asleep in its update
    processes = list(executor.pool._processes.values())
    assert processes and all(p.is_alive() for p in processes)
    pids = [p.pid for p in processes]
    start = time.monotonic()
    executor.__exit__(KeyboardInterrupt, KeyboardInterrupt(), None)  # as a `with` block left by Ctrl-C
    # asked of the system, not of Process.is_alive: the pool's own thread reaps the workers too, and a second waitpid
    # racing it makes is_alive answer True for a process already gone
    while time.monotonic() - start < 5 and not all(map(exited, pids)):
        time.sleep(0.05)
    assert all(map(exited, pids)), "a worker outlived the Ctrl-C by 5 s"
    import multiprocessing as mp

    answers = mp.get_context("fork").Queue()
    child = mp.get_context("fork").Process(target=_reports_sigint_ignored, args=(answers,))
    child.start()
    assert answers.get(timeout=30)  # a worker leaves Ctrl-C to the driver
    child.join(timeout=10)


def exited(pid: int) -> bool:
    """Whether the process has ended (gone, or a zombie awaiting its parent's wait)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _reports_sigint_ignored(answers) -> None:
    from pfedkit.engine.workers import _worker_init

    _worker_init(os.getppid())
    answers.put(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)


def test_ctrl_c_is_a_message_and_exit_130_not_a_traceback(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from pfedkit.cli import main
    from pfedkit.experiments import compare

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(compare, "run_comparison", interrupted)
    config = tmp_path / "c.toml"
    config.write_text(dump_toml(synthetic().to_dict()))
    result = CliRunner().invoke(main, ["compare", str(config), "--methods", "fedavg", "--out", str(tmp_path / "c")])
    assert result.exit_code == 130 and "interrupted" in result.output and "--resume" in result.output
    from pfedkit.papers import reproduce

    monkeypatch.setattr(reproduce, "run_suite", interrupted)  # reproduce has no --resume: it goes on when run again
    result = CliRunner().invoke(main, ["reproduce", "heart-table1", "--out", str(tmp_path / "r")])
    assert result.exit_code == 130 and "same command again" in result.output and "--resume" not in result.output


def test_official_test_protocol_draws_test_sets_with_each_clients_label_mix(tmp_path):
    import numpy as np

    from pfedkit.data.federated import build_federated

    cfg = synthetic(eval={"protocol": "official-test"}, partition={"test_per_client": 40})
    fed = build_federated(cfg)
    assert fed.protocol == "official-test" and len(fed.test_y) == 300 and len(fed.train_y) == 1200
    train_mix, test_counts = fed.label_counts("train"), fed.label_counts("test")
    for cid in range(fed.num_clients):
        assert test_counts[cid].sum() == 40
        expected = 40 * train_mix[cid] / train_mix[cid].sum()
        assert np.all(np.abs(test_counts[cid] - expected) < 1)  # largest-remainder rounding
    summary = run_experiment(cfg, tmp_path, progress=False, fed=fed)
    assert summary["protocol"] == "official-test"


def test_official_test_protocol_needs_an_official_test_split():
    from pfedkit.data.federated import build_federated
    from pfedkit.errors import ConfigError

    cfg = build_config({"data": {"dataset": "digits"}, "eval": {"protocol": "official-test"}, "model": {"name": "mlp"}})
    with pytest.raises(ConfigError, match='protocol = "pfllib"'):
        build_federated(cfg)


def test_device_is_checked_before_the_run_folder_is_made(tmp_path):
    with pytest.raises(ConfigError, match="run.device"):
        synthetic(run={"device": "gpu"})
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; the missing-GPU error cannot show here")
    with pytest.raises(ConfigError, match=r"sees no CUDA device.*run\.device = \"cpu\""):
        Simulation(synthetic(run={"device": "cuda"}), tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_moving_a_data_set_moves_every_tensor_and_keeps_the_pooled_split():
    from pfedkit.data.federated import build_federated

    fed = build_federated(synthetic(proxy={"holdout": 0.1}))  # pfllib protocol: train and test share one pool
    moved = fed.to(torch.device("meta"))
    assert moved.test_x is moved.train_x and moved.test_y is moved.train_y
    tensors = [
        moved.train_x,
        moved.train_y,
        moved.server.val_x,
        moved.server.val_y,
        moved.server.proxy_x,
        moved.server.proxy_y,
    ]
    assert all(t.device.type == "meta" for t in tensors) and fed.train_x.device.type == "cpu"
    assert moved.server.val_x.shape == fed.server.val_x.shape and moved.train_idx is fed.train_idx
    official = build_federated(synthetic(eval={"protocol": "official-test"}))
    assert official.to(torch.device("meta")).test_x.shape == official.test_x.shape
