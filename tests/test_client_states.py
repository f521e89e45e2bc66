"""Client state off the driver (run.client_state = "disk"): the same run, resumable, old versions pruned."""

from __future__ import annotations

import pytest
import torch

from pfedkit.engine.simulation import simulate
from pfedkit.io import read_csv
from tests.test_engine import COMPARED, synthetic
from tests.test_eval_point import StopsOnce


@pytest.mark.parametrize("method", ["fedper", "ditto"])
def test_client_state_on_disk_gives_the_same_run_and_resumes_to_it(tmp_path, method):
    base = dict(method={"name": method}, train={"rounds": 5, "join_ratio": 0.5}, run={"checkpoint_every": 2})
    simulate(synthetic(**base), tmp_path / "memory", progress=False)
    disk = synthetic(**{**base, "run": {"checkpoint_every": 2, "client_state": "disk", "state_memory_mb": 0.001}})
    with pytest.raises(KeyboardInterrupt):
        StopsOnce(disk, tmp_path / "disk", progress=False).run()  # cut in round 3, after the checkpoint of round 2
    resumed = StopsOnce(disk, tmp_path / "disk", resume=True, progress=False)
    resumed.resumed = True
    resumed.run()
    got, want = read_csv(tmp_path / "disk" / "metrics.csv"), read_csv(tmp_path / "memory" / "metrics.csv")
    assert [[r[k] for k in COMPARED] for r in got] == [[r[k] for k in COMPARED] for r in want]
    ckpt = torch.load(tmp_path / "disk" / "checkpoint.pt", weights_only=True)
    assert "clients" not in ckpt  # the states are in their files, not in the checkpoint
    versions = sorted((tmp_path / "disk" / "client-state").glob("client-*/after-*.pt"))
    assert versions and all(int(p.stem.split("-")[1]) >= 0 for p in versions)
    per_client = {}
    for p in versions:
        per_client.setdefault(p.parent.name, []).append(int(p.stem.split("-")[1]))
    assert all(len(v) <= 2 for v in per_client.values())  # older versions pruned once a checkpoint no longer needs them
