"""Several methods' packs on one GPU at once: one after another, in one process on CUDA streams of their own (a thread
per pack), or as processes of their own (issue 92: which shares the GPU better).

A pack is one method's runs trained as one cohort (run.together): by default FedAvg and PGFedSplit, seeds 0-2 each,
on gpu_speed.py's cifar10-20 setting (CIFAR-10, 20 clients, Dir(0.1), FedAvgCNN, batch 10). Every run stamps the
wall-clock time at the end of each round. Per mode:
  window         from the moment every pack has finished its first round (data, models and captured steps are
                 ready: the warm-up) to the moment the first pack finishes its last round ("one after another":
                 each pack's own rounds after its first)
  rounds/s       each pack's rounds finished inside the window (interpolated between round ends), per second
  combined       the sum over packs of (its rounds/s here / its rounds/s alone, from "one after another"): 1.0 is
                 no better than taking turns, 2.0 is two packs each at full speed
Usage:
  python3 benchmarks/speed/gpu_streams.py --data-root DIR [--modes sequential,streams,processes] [--out DIR]
  python3 benchmarks/speed/gpu_streams.py --check      tiny data, on the CPU (threads without streams), every path
Writes streams.md and streams.json under --out (default results/gpu_speed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

from gpu_speed import METHODS, SETTINGS  # noqa: E402

from pfedkit.engine.together import run_together  # noqa: E402
from pfedkit.experiments import run_experiment  # noqa: E402

PACKS = {"fedavg": 8, "pgfedsplit": 5}  # method -> rounds (about the same seconds on an H200's earlier timings)
SEEDS = (0, 1, 2)
MODES = ("sequential", "streams", "processes")


def pack_configs(method: str, rounds: int, args: argparse.Namespace, out: Path) -> dict[Path, Any]:
    setting = SETTINGS["cifar10-20"]
    configs = {}
    for seed in SEEDS:
        cfg = setting.config(args.data_root, method, rounds, args.device, "on", METHODS[method][1])
        configs[out / method / f"seed{seed}"] = cfg.model_copy(
            update={"run": cfg.run.model_copy(update={"seed": seed})}
        )
    return configs


def run_pack(
    method: str, rounds: int, args: argparse.Namespace, out: Path, stream: Any = None
) -> list[tuple[float, int]]:
    """The pack trained as one cohort, on `stream` if given; (wall-clock time, round) at the end of each round of each
    of its runs."""
    stamps: list[tuple[float, int]] = []

    def start(run_dir: Path, cfg: Any, member: Any) -> dict[str, Any]:
        def stamp(row: dict) -> None:
            stamps.append((time.time(), int(row["round"])))

        # a thread's current stream is its own: each run's thread (whichever trains the pack's round) enters it
        with torch.cuda.stream(stream) if stream is not None else nullcontext():
            return run_experiment(cfg, run_dir, progress=False, observers=[stamp], together=member)

    outcomes = run_together(pack_configs(method, rounds, args, out), start)
    failed = [str(o) for o in outcomes.values() if isinstance(o, BaseException)]
    if failed:
        raise RuntimeError(f"{method}: {failed[0]}")
    return stamps


def round_ends(stamps: list[tuple[float, int]]) -> dict[int, float]:
    """When each round ended for the whole pack (its slowest run)."""
    ends: dict[int, float] = {}
    for at, round_ in stamps:
        ends[round_] = max(ends.get(round_, 0.0), at)
    return ends


def measure(packs: dict[str, list[tuple[float, int]]]) -> dict[str, Any]:
    """The window and each pack's rounds per second inside it (rounds finished by a time interpolated between round
    ends, so a window shorter than a round still measures)."""
    ends = {method: sorted(round_ends(stamps).items()) for method, stamps in packs.items()}
    start = max(e[min(1, len(e) - 1)][1] for e in ends.values())  # the first round (and round 0's evaluation) done
    stop = min(e[-1][1] for e in ends.values())
    window = stop - start

    def done_by(e: list[tuple[int, float]], t: float) -> float:
        return float(np.interp(t, [at for _, at in e], [r for r, _ in e]))

    rates = {m: (done_by(e, stop) - done_by(e, start)) / window if window > 0 else None for m, e in ends.items()}
    return {"window_s": window, "rounds_per_s": rates}


def in_processes(args: argparse.Namespace, out: Path) -> dict[str, list[tuple[float, int]]]:
    procs = {}
    for method, rounds in PACKS.items():
        stamps = out / f"{method}.stamps.json"
        command = [sys.executable, __file__, "--one", method, "--stamps", str(stamps), "--out", str(out)]
        command += ["--data-root", args.data_root, "--device", args.device] + (["--check"] if args.check else [])
        procs[method] = (subprocess.Popen(command), stamps)
    for method, (proc, _) in procs.items():
        if proc.wait() != 0:
            raise RuntimeError(f"the {method} process failed (exit {proc.returncode})")
    return {method: [tuple(s) for s in json.loads(path.read_text())] for method, (_, path) in procs.items()}


def in_threads(args: argparse.Namespace, out: Path) -> dict[str, list[tuple[float, int]]]:
    results: dict[str, Any] = {}

    def go(method: str, rounds: int) -> None:
        stream = torch.cuda.Stream() if args.device.startswith("cuda") else None
        try:
            results[method] = run_pack(method, rounds, args, out, stream)
        except BaseException as err:  # raised in the main thread below
            results[method] = err

    threads = [threading.Thread(target=go, args=item) for item in PACKS.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for method, result in results.items():
        if isinstance(result, BaseException):
            raise RuntimeError(f"{method} on its own stream: {result}") from result
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=str(HERE.parents[2] / "shared" / "data"))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--out", default=str(HERE.parents[1] / "results" / "gpu_speed"))
    parser.add_argument("--check", action="store_true", help="tiny data on the CPU: every path, quickly")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a pack of its own, in "processes"
    parser.add_argument("--stamps", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.check:
        SETTINGS["cifar10-20"].fraction, SETTINGS["cifar10-20"].clients = 0.02, 5
        PACKS.update({m: 3 for m in PACKS})
    if args.one:
        with tempfile.TemporaryDirectory() as runs:
            stamps = run_pack(args.one, PACKS[args.one], args, Path(runs))
        Path(args.stamps).write_text(json.dumps(stamps))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"--modes {','.join(unknown)}: choose among {', '.join(MODES)}")
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU ({os.cpu_count()} cores)"
    results: dict[str, Any] = {}
    for mode in modes:
        with tempfile.TemporaryDirectory() as runs:
            began = time.time()
            if mode == "sequential":
                packs = {m: run_pack(m, r, args, Path(runs)) for m, r in PACKS.items()}
            elif mode == "streams":
                packs = in_threads(args, Path(runs))
            else:
                packs = in_processes(args, Path(runs))
            results[mode] = {"wall_s": time.time() - began, "packs": packs}
        if mode == "sequential":  # each pack alone: its rate over its own rounds after the first
            alone = {m: measure({m: s})["rounds_per_s"][m] for m, s in packs.items()}
            results[mode].update({"window_s": None, "rounds_per_s": alone})
        else:
            results[mode].update(measure(packs))
        print(json.dumps({mode: {k: v for k, v in results[mode].items() if k != "packs"}}), flush=True)
    alone = results.get("sequential", {}).get("rounds_per_s", {})
    lines = [
        f"# Packs of several methods at once: {name}, torch {torch.__version__}"
        + (" (--check: tiny data, on the CPU)" if args.check else ""),
        "",
        f"Packs: {', '.join(f'{m} seeds {SEEDS[0]}-{SEEDS[-1]}, {r} rounds' for m, r in PACKS.items())}; "
        "cifar10-20 (benchmarks/speed/gpu_streams.py explains the columns).",
        "",
        "| mode | wall s | window s | " + " | ".join(f"{m} rounds/s" for m in PACKS) + " | combined |",
        "|---|---|---|" + "---|" * len(PACKS) + "---|",
    ]
    for mode, result in results.items():
        rates = result["rounds_per_s"]
        combined = (
            sum(rates[m] / alone[m] for m in PACKS) if mode != "sequential" and alone and all(rates.values()) else None
        )
        window = "-" if result["window_s"] is None else f"{result['window_s']:.1f}"
        lines.append(
            f"| {mode} | {result['wall_s']:.1f} | {window} | "
            + " | ".join("-" if rates[m] is None else f"{rates[m]:.3f}" for m in PACKS)
            + f" | {'-' if combined is None else f'{combined:.2f}'} |"
        )
    (out / "streams.md").write_text("\n".join(lines) + "\n")
    (out / "streams.json").write_text(json.dumps(results, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
