"""How far a client's first SGD step is from the round loop, and where one idea is written: for a maintainer, counted
the same way before and after a change (issue 95).

- From `train_clients` to the first optimizer step of a FedAvg round (torch.optim.SGD.step one client at a time, in
  this process; the cohort's functional `sgd_step` with run.cohort "on"): the pfedkit functions called on the way (in
  order, repeats counted), the changes of layer between consecutive calls (a layer: the pfedkit subpackage or top
  module a function is in), and the frames on the stack at the step.
- Places that decide placement: functions that read run.device, run.backend, run.cohort, run.gpus_per_worker or
  run.together (by their source text).
- Lines of Python per folder of the package.
Usage: python benchmarks/safety/code_paths.py [--root CHECKOUT] [--out FILE]   (--root: the code to count, e.g. a
git worktree of an older commit; its package is imported from there)
"""

from __future__ import annotations

import argparse
import ast
import sys
import tempfile
import threading
import traceback
from collections import Counter
from pathlib import Path

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--root", default=str(Path(__file__).resolve().parents[2]), help="the checkout to count")
parser.add_argument("--out", default="", help="also write the lines here")
args = parser.parse_args()
ROOT = Path(args.root).resolve()
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: report.py

import torch  # noqa: E402
from report import emit  # noqa: E402

import pfedkit.engine.cohort as cohort_module  # noqa: E402
from pfedkit.engine.simulation import Simulation  # noqa: E402
from pfedkit.registry import build_config  # noqa: E402

PLACEMENT_READS = ("run.device", "run.backend", "run.cohort", "run.gpus_per_worker", "run.together")


class FirstStep(Exception):
    """Raised at the first optimizer step, with the stack that reached it."""

    def __init__(self, stack: list[traceback.FrameSummary]):
        self.stack = stack


def layer_of(filename: str) -> str:
    path = Path(filename)
    if "pfedkit" in path.parts:
        inner = path.parts[path.parts.index("pfedkit") + 1 :]
        return "pfedkit." + (inner[0] if len(inner) > 1 else Path(inner[0]).stem)
    if "torch" in path.parts:
        return "torch"
    return "python"


def chain_to_first_step(cohort: str) -> tuple[int, int, int, list[str]]:
    """From train_clients to the round's first SGD step: (pfedkit functions called on the way, in order, with
    repeats; changes of layer between consecutive ones; frames on the stack at the step; each call's layer)."""
    calls: list[str] = []

    def trace(frame, event, arg):
        if event == "call" and (calls or frame.f_code.co_name == "train_clients"):
            layer = layer_of(frame.f_code.co_filename)
            if layer.startswith("pfedkit"):
                calls.append(layer)

    def stop(*args, **kwargs):
        raise FirstStep(traceback.extract_stack()[:-1])

    saved = torch.optim.SGD.step, cohort_module.sgd_step
    torch.optim.SGD.step, cohort_module.sgd_step = stop, stop
    config = build_config(
        {
            "data": {"dataset": "synthetic", "options": {"samples": 200, "test_samples": 50}},
            "partition": {"scheme": "dirichlet", "clients": 3, "beta": 0.5},
            "model": {"name": "mlp", "options": {"hidden": 8}},
            "method": {"name": "fedavg"},
            "train": {"rounds": 1, "batch_size": 16, "lr": 0.05},
            "run": {"seed": 0, "workers": 1, "cohort": cohort},
        }
    )
    try:
        with tempfile.TemporaryDirectory() as out:
            simulation = Simulation(config, out, progress=False)
            sys.setprofile(trace)
            threading.setprofile(trace)
            simulation.run()
    except FirstStep as reached:
        stack = reached.stack
    else:
        raise RuntimeError("the round ended without an SGD step")
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        torch.optim.SGD.step, cohort_module.sgd_step = saved
    start = next(i for i, frame in enumerate(stack) if frame.name == "train_clients")
    changes = sum(a != b for a, b in zip(calls, calls[1:]))
    return len(calls), changes, len(stack) - start, calls


def placement_deciders() -> list[str]:
    """Functions of the package whose source reads a placement key of the run section."""
    found = []
    for path in sorted((ROOT / "pfedkit").rglob("*.py")):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                source = ast.get_source_segment(text, node) or ""
                if any(key in source for key in PLACEMENT_READS):
                    found.append(f"{path.relative_to(ROOT)}:{node.name}")
    return found


def lines_per_folder() -> Counter:
    counts: Counter = Counter()
    for path in (ROOT / "pfedkit").rglob("*.py"):
        folder = path.parent.relative_to(ROOT).as_posix()
        counts[folder] += len(path.read_text().splitlines())
    return counts


def main() -> None:
    lines = [f"# code paths of {ROOT}"]
    for cohort in ("off", "on"):
        functions, changes, depth, calls = chain_to_first_step(cohort)
        path = "one client at a time" if cohort == "off" else "cohort"
        lines.append(
            f"train_clients to the first SGD step, {path}: {functions} pfedkit function calls, {changes} changes of "
            f"layer between them, {depth} frames deep at the step"
        )
        lines.append("  calls per layer: " + ", ".join(f"{layer} {n}" for layer, n in sorted(Counter(calls).items())))
    deciders = placement_deciders()
    lines.append(f"functions reading a placement key ({', '.join(PLACEMENT_READS)}): {len(deciders)}")
    lines += [f"  {name}" for name in deciders]
    lines.append("lines of Python per folder:")
    lines += [f"  {folder}: {n}" for folder, n in sorted(lines_per_folder().items())]
    emit("\n".join(lines), args.out or None)


if __name__ == "__main__":
    main()
