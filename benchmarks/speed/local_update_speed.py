"""Seconds of one client's local update, one client at a time on the CPU, for the methods named: run here and in a
worktree of other code (--root) to compare the per-client path before and after a change (issue 58: FedAFK's update,
once code of its own, now its plan run as a cohort of one).

One client of 400 random CIFAR-shaped samples, FedAvgCNN, batch 10, lr 0.005, momentum 0.9, 1 thread; 4 updates, the
median of the last 3.
Usage: python benchmarks/speed/local_update_speed.py [--root DIR] fedafk fedafk-no-both ...
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--root", default=str(Path(__file__).resolve().parents[2]), help="the code to time")
parser.add_argument("methods", nargs="+")
args = parser.parse_args()
sys.path.insert(0, args.root)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from pfedkit.data.federated import FederatedDataset  # noqa: E402
from pfedkit.methods import METHODS  # noqa: E402
from pfedkit.models.cnn import fedavgcnn  # noqa: E402
from pfedkit.records import MethodContext, TrainSettings  # noqa: E402

try:  # the engine runs every local update (issue 58); before, the method did
    from pfedkit.engine import local_update
except ImportError:

    def local_update(method, *args):
        return method.local_update(*args)


torch.set_num_threads(1)
n = 400
g = torch.Generator().manual_seed(0)
x, y = torch.randn(2 * n, 3, 32, 32, generator=g), torch.randint(0, 10, (2 * n,), generator=g)
fed = FederatedDataset("toy", "official-test", 10, (3, 32, 32), x, y, x, y, [np.arange(n)], [np.arange(n, 2 * n)])
print(f"code: {args.root}")
for name in args.methods:
    cls = METHODS[name]
    settings = TrainSettings(1, 10, 0.005, momentum=0.9)
    method = cls(cls.validate_params({}), MethodContext(lambda: fedavgcnn((3, 32, 32), 10), settings, 10, 0))
    server, data = method.init_server(), fed.client(0)
    client, payload = method.init_client(0, data), method.payload(server, 0, 0)
    times = []
    for round in range(4):
        method.forget_draws()
        start = time.perf_counter()
        local_update(method, payload, client, data, round)
        times.append(time.perf_counter() - start)
    print(f"{name}: {statistics.median(times[1:]):.3f} s per local update ({' '.join(f'{t:.3f}' for t in times)})")
