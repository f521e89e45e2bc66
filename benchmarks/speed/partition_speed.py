"""Seconds to build a Dirichlet partition at scale: 500 clients over 50,000 CIFAR-100-shaped labels, beta 0.3.

Labels are 100 classes x 500 samples in a seeded random order (the shape of CIFAR-100's training set).
`min_samples` is left at its default, PFLlib's min(batch / (1 - 0.75), N / n / 2) = min(40, 50) = 40, which
this setting meets on the first draw: clients already holding N/n samples take no more, so the smallest client
lands near 60, not near the raw Dirichlet tail. Also checks 20 seeds and times the DataError that replaces
PFLlib's endless redraw when the minimum is out of reach (beta 0.05). Target: best of 3 under 5 s.

Usage: python benchmarks/speed/partition_speed.py [--out results/partition_speed.txt]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import time
from pathlib import Path

import numpy as np

from pfedkit.data.partition import partition_labels, pfllib_min_samples
from pfedkit.errors import DataError

CLIENTS, CLASSES, PER_CLASS, BETA, TARGET_S = 500, 100, 500, 0.3, 5.0


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="also write the report to this file")
    args = parser.parse_args()

    labels = np.random.default_rng(0).permutation(np.repeat(np.arange(CLASSES), PER_CLASS))
    min_samples = pfllib_min_samples(len(labels), CLIENTS)
    runs = [timed(lambda: partition_labels(labels, "dirichlet", CLIENTS, 0, beta=BETA)) for _ in range(3)]
    best = min(seconds for seconds, _ in runs)
    sizes = np.array([len(p) for p in runs[0][1]])
    first_draw = []  # seeds whose very first Dirichlet draw already meets min_samples (max_redraws=1 succeeds)
    for seed in range(20):
        try:
            parts = partition_labels(labels, "dirichlet", CLIENTS, seed, beta=BETA, max_redraws=1)
            first_draw.append(min(len(p) for p in parts))
        except DataError:
            pass
    start = time.perf_counter()
    try:
        partition_labels(labels, "dirichlet", CLIENTS, 0, beta=0.05)
        fail = f"succeeded in {time.perf_counter() - start:.2f} s"
    except DataError as err:
        reached = re.search(r"best smallest client: \d+", str(err)).group(0)
        fail = f"DataError after 1000 draws in {time.perf_counter() - start:.2f} s ({reached})"

    lines = [
        f"partition_speed: dirichlet, {CLIENTS} clients, {len(labels)} labels ({CLASSES} classes x {PER_CLASS}), "
        f"beta {BETA}, seed 0",
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, numpy {np.__version__}",
        f"min_samples: {min_samples} (default: PFLlib's min(10 / (1 - 0.75), N / n / 2) = min(40, 50))",
        f"seconds (best of 3): {best:.3f}   all: {', '.join(f'{s:.3f}' for s, _ in runs)}",
        f"client size: min {sizes.min()}  median {int(np.median(sizes))}  max {sizes.max()}",
        f"seeds 0-19: {len(first_draw)}/20 meet min_samples on the first draw; their smallest client: "
        f"min {min(first_draw, default=0)}  median {int(np.median(first_draw or [0]))}  "
        f"max {max(first_draw, default=0)}",
        f"beta 0.05 (default minimum out of reach; PFLlib keeps redrawing): {fail}",
        f"{'PASS' if best < TARGET_S and sizes.min() >= min_samples else 'FAIL'}: target < {TARGET_S:.0f} s",
    ]
    report = "\n".join(lines)
    print(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report + "\n")


if __name__ == "__main__":
    main()
