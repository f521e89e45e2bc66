"""run.log_to: TensorBoard event files and an offline W&B run hold every metrics column of every round; a missing
extra fails before training with the install line; the core never imports a tracker."""

from __future__ import annotations

import glob
import importlib.util
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from pfedkit.errors import ConfigError
from pfedkit.experiments import run_experiment
from pfedkit.io import read_csv
from pfedkit.registry import build_config

RAW = {
    "data": {"dataset": "synthetic", "options": {"samples": 400, "test_samples": 100}},
    "partition": {"scheme": "iid", "clients": 3},
    "model": {"name": "mlp"},
    "method": {"name": "fedavg"},
    "train": {"rounds": 3, "batch_size": 20},
    "run": {"workers": 1},
}


def tracked(*trackers: str):
    return build_config({**RAW, "run": {**RAW["run"], "log_to": list(trackers)}})


def measured(out: Path) -> dict[str, dict[int, float]]:
    """metrics.csv as column -> {round: value}, the empty cells left out."""
    columns: dict[str, dict[int, float]] = {}
    for row in read_csv(out / "metrics.csv"):
        for key, value in row.items():
            if key != "round" and value not in (None, ""):
                columns.setdefault(key, {})[int(row["round"])] = float(value)
    return columns


def test_tensorboard_holds_one_scalar_per_round_per_metrics_column(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_experiment(tracked("tensorboard"), tmp_path, progress=False)
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    expected = measured(tmp_path)
    assert set(events.Tags()["scalars"]) == set(expected)
    for column, values in expected.items():
        logged = {e.step: e.value for e in events.Scalars(column)}
        assert logged.keys() == values.keys() and all(
            logged[r] == pytest.approx(v, rel=1e-6) for r, v in values.items()
        )
    assert "curves" in events.Tags()["images"] and "config/text_summary" in events.Tags()["tensors"]


def wandb_history(run_file: str) -> list[dict[str, str]]:
    """The history records of a .wandb file (a LevelDB-style log of protobuf records in 32 KiB blocks)."""
    from wandb.proto import wandb_internal_pb2

    data, pos, parts, history = Path(run_file).read_bytes(), 7, b"", []
    while pos + 7 <= len(data):
        if (left := 32768 - pos % 32768) < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            break
        parts, pos = parts + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            parts = b""
            if record.WhichOneof("record_type") == "history":
                history.append({item.key or "/".join(item.nested_key): item.value_json for item in record.history.item})
    return history


def test_an_offline_wandb_run_holds_the_history_under_the_id_kept_in_the_run_folder(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    for key in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no login from this machine's ~/.netrc
    run_experiment(tracked("wandb"), tmp_path / "run", progress=False)
    files = glob.glob(str(tmp_path / "run" / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(files) == 1
    history = {int(h["_step"]): h for h in wandb_history(files[0])}
    expected = measured(tmp_path / "run")
    for column, values in expected.items():
        for round, value in values.items():
            assert float(json.loads(history[round][column])) == pytest.approx(value, rel=1e-6)
    run_id = (tmp_path / "run" / "wandb-id.txt").read_text()
    assert Path(files[0]).name == f"run-{run_id}.wandb"


def test_a_missing_tracker_fails_before_training_naming_the_extra(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match=r'wandb.*pip install -e "\.\[tracking\]"'):
        run_experiment(tracked("tensorboard", "wandb"), tmp_path, progress=False)
    assert not (tmp_path / "metrics.csv").exists()


def test_the_core_never_imports_a_tracker_or_the_tuner(tmp_path):
    script = (
        "import sys\n"
        "from pfedkit.cli import main\n"
        "from pfedkit.experiments import run_experiment\n"
        "from pfedkit.registry import build_config\n"
        f"run_experiment(build_config({RAW!r}), {str(tmp_path)!r}, progress=False)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('optuna', 'wandb', 'tensorboard')"
        " or m == 'torch.utils.tensorboard'))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
