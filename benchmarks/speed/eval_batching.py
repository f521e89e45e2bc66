"""CPU proxy of PGFedSplit's evaluation on the cohort path: before (one client at a time, alpha by alpha) and now.

On 2026-11-28 an H200 spent 14% of a PGFedSplit round evaluating, one client at a time: it declared
`evaluation = "model"` because a delivered head is mixed into each client's head (alpha, Eq. 13) before evaluation,
and alpha was found by evaluating Eq. 13 one alpha at a time (a 101-point grid, then SciPy's bounded search: a host
sync each). Now the mixing makes weights (`evaluation = "weights"`: the cohort evaluates all clients in one vmapped
pass) and alpha comes from grids evaluated whole (four passes, a sync each; training's alpha uses the same solver).
This script evaluates the 20 clients of cohort_overhead.py's tiny federation, in one run: a round without a delivered
head and a round with one, before and now, and reports the torch operations issued (about one kernel launch each on
a GPU, cohort_overhead.py's count), the scalar reads among them (aten._local_scalar_dense: .item(), float(), int() of
a tensor; a host sync each where the tensor is on a GPU) and the host time. "Before" runs today's objective through
the solver as it was (one alpha a call).

Usage: python3 benchmarks/speed/eval_batching.py [--repeats 5] [--out results/eval_batching.txt]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parent))  # benchmarks/: report.py, pfllib_peer.py
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
from cohort_overhead import BATCH, CountOps, federation, tiny_cnn  # noqa: E402
from report import emit  # noqa: E402
from scipy.optimize import minimize_scalar  # noqa: E402

import pfedkit.methods.pgfedsplit as pgfedsplit_module  # noqa: E402
from pfedkit.engine.cohort import Cohort  # noqa: E402
from pfedkit.engine.evaluation import evaluate_model  # noqa: E402
from pfedkit.engine.plans import local_update  # noqa: E402
from pfedkit.engine.workers import Task  # noqa: E402
from pfedkit.methods import METHODS  # noqa: E402
from pfedkit.records import MethodContext, TrainSettings  # noqa: E402


def alpha_by_alpha(objective, grid: int = 101, tol: float = 1e-7) -> float:
    """The solver before: Eq. 13 evaluated one alpha a call on a grid, then SciPy's bounded search in the best cell."""

    def one(a: float) -> float:
        return float(objective(torch.tensor([a], dtype=torch.float64))[0])

    points = np.linspace(0.0, 1.0, grid)
    values = [one(float(a)) for a in points]
    best = int(np.argmin(values))
    low, high = points[max(best - 1, 0)], points[min(best + 1, grid - 1)]
    refined = minimize_scalar(one, bounds=(low, high), method="bounded", options={"xatol": tol})
    return min([(values[best], float(points[best])), (values[0], 0.0), (values[-1], 1.0), (refined.fun, refined.x)])[1]


def pgfedsplit():
    settings = TrainSettings(1, BATCH, 0.05, momentum=0.9, weight_decay=1e-4)
    ctx = MethodContext(lambda: tiny_cnn(False), settings, num_classes=10, seed=0)
    cls = METHODS["pgfedsplit"]
    return cls(cls.validate_params({"period_init": 1}), ctx)  # heads aggregated every round: delivered the next


def eval_tasks(method, fed, delivered: bool) -> list[Task]:
    """Round 1's evaluation tasks, after round 0 played one client at a time (a head delivered) or not played."""
    server = method.init_server()
    clients = {cid: method.init_client(cid, fed.client(cid)) for cid in range(fed.num_clients)}
    if delivered:
        replies = {}
        for cid in clients:
            replies[cid], clients[cid] = local_update(
                method, method.payload(server, 0, cid), clients[cid], fed.client(cid), 0
            )
        server = method.aggregate(server, replies, 0)
    return [Task("eval", cid, 1, method.payload(server, 1, cid), clients[cid], 0) for cid in clients]


def one_at_a_time(method, fed, tasks):
    out = []
    for t in tasks:
        data = fed.client(t.cid)
        out.append(evaluate_model(method.personalized_model(t.client, t.payload, data, 1), data.test_x, data.test_y))
    return out


def batched(method, fed, tasks):
    return [result for _, result in Cohort(method, fed).evaluate(tasks)]


def measure(way, method, fed, tasks, repeats: int, solver) -> dict:
    saved, pgfedsplit_module.minimize_on_unit_interval = pgfedsplit_module.minimize_on_unit_interval, solver
    try:
        way(method, fed, tasks)  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            results = way(method, fed, tasks)
            times.append(time.perf_counter() - start)
        with CountOps() as counted:
            way(method, fed, tasks)
    finally:
        pgfedsplit_module.minimize_on_unit_interval = saved
    return {
        "ms": statistics.median(times) * 1e3,
        "ops": sum(counted.ops.values()),
        "syncs": counted.ops["aten._local_scalar_dense"],
        "results": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    fed, method = federation(), pgfedsplit()
    lines = [
        f"PGFedSplit evaluation of one round, CPU proxy ({platform.machine()}, torch {torch.__version__}, 1 thread): "
        f"{fed.num_clients} clients, tiny CNN, {sum(len(i) for i in fed.test_idx)} test samples",
        "",
        "| round | path | ops | scalar reads | host ms | correct | mean loss |",
        "|---|---|---|---|---|---|---|",
    ]
    now_solver = pgfedsplit_module.minimize_on_unit_interval
    for delivered in (False, True):
        tasks = eval_tasks(method, fed, delivered)
        label = "a head delivered (alpha per client)" if delivered else "no head delivered"
        for path, way, solver in (
            ("before: one client at a time, alpha by alpha", one_at_a_time, alpha_by_alpha),
            ("batched, alpha by alpha", batched, alpha_by_alpha),
            ("now: batched, alpha grids whole", batched, now_solver),
        ):
            m = measure(way, method, fed, tasks, args.repeats, solver)
            correct, samples = sum(r[0] for r in m["results"]), sum(r[2] for r in m["results"])
            loss = sum(r[1] for r in m["results"]) / samples
            lines.append(
                f"| {label} | {path} | {m['ops']} | {m['syncs']} | {m['ms']:.1f} | {correct} of {samples} | "
                f"{loss:.5f} |"
            )
    text = "\n".join(lines)
    emit(text, args.out)


if __name__ == "__main__":
    main()
