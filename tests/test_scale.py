"""A large federation's driver: with client state on disk its memory does not grow with the clients."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROUNDS = 6

# One FedPer run in a fresh process, which prints its peak resident memory. Each client's head has 1024 x 100 weights
# (400 KiB), so 1,000 clients' states are 400 MiB and 6 rounds at join ratio 0.1 train about 470 of them.
PROBE = """
import json, sys
sys.path.insert(0, {repo!r})
from tests.test_engine import synthetic
from pfedkit.engine.simulation import simulate
def peak_mb():  # VmHWM is this process's own peak; ru_maxrss carries the parent's over fork and exec
    line = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024
clients, state, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
config = synthetic(data={{"options": {{"samples": 20 * clients, "test_samples": 5 * clients, "num_classes": 100}}}},
                   partition={{"scheme": "iid", "clients": clients}}, model={{"options": {{"hidden": 1024}}}},
                   method={{"name": "fedper"}}, train={{"rounds": {rounds}, "join_ratio": 0.1, "batch_size": 20}},
                   run={{"workers": 1, "client_state": state, "state_memory_mb": 16}})
simulate(config, out, progress=False)
print(json.dumps(peak_mb()))
"""


def driver_peak_mb(clients: int, state: str, out: Path) -> float:
    code = PROBE.format(repo=str(REPO), rounds=ROUNDS)
    done = subprocess.run(
        [sys.executable, "-c", code, str(clients), state, str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_1000_client_driver_with_state_on_disk_stays_as_small_as_a_100_client_one(tmp_path):
    on_disk_100 = driver_peak_mb(100, "disk", tmp_path / "disk-100")
    on_disk_1000 = driver_peak_mb(1000, "disk", tmp_path / "disk-1000")
    in_memory_1000 = driver_peak_mb(1000, "memory", tmp_path / "memory-1000")
    # the bound: ten times the clients cost the driver at most 48 MiB (their data and per-client records)
    assert on_disk_1000 <= on_disk_100 + 48, (on_disk_100, on_disk_1000)
    # and the states really are that large: kept in memory, the trained clients' heads show
    assert in_memory_1000 >= on_disk_1000 + 100, (on_disk_1000, in_memory_1000)
    assert len(list((tmp_path / "disk-1000" / "client-state").glob("client-*"))) > 300
