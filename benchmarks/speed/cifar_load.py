"""Seconds to load CIFAR-10 (JPEG copy) and CIFAR-100 (PNG copy) from the shared archives: first and cached loads.

Each load runs in a fresh Python process, as a run would. The first load decodes the .tar.gz into an empty cache
folder (a temporary one: the user's cache is left alone); the cached loads are then repeated five times and split
into the part the cache serves (archive SHA-256, cache read, cache digest) and the conversion to normalized float32
that every data set pays (MNIST included: it allocates a 0.6 GB tensor, whose page faults make it noisy on a VM).
Target (issue 21): the cached part well under a second.

Usage: python benchmarks/speed/cifar_load.py [--data-root ../shared/data] [--out results/cifar_load.txt]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

REPEATS = 5
ONE_LOAD = """
import json, sys, time
from pathlib import Path
from pfedkit.data import archives
from pfedkit.data.sources import load_dataset, normalize
name, root = sys.argv[1], Path(sys.argv[2])
start = time.perf_counter()
arrays = archives.load_archive(name, root)
served = time.perf_counter() - start
normalize(arrays["train_x"]), normalize(arrays["test_x"])
converted = time.perf_counter() - start - served
start = time.perf_counter()
source = load_dataset(name, root)  # the public path once more, warm: what a second load in one process costs
print(json.dumps({"served": served, "converted": converted, "total": served + converted,
                  "warm_total": time.perf_counter() - start, "origin": source.origin}))
"""


def load_in_fresh_process(name: str, root: Path, cache: Path) -> dict:
    env = dict(os.environ, PFEDKIT_CACHE=str(cache))
    out = subprocess.run(
        [sys.executable, "-c", ONE_LOAD, name, str(root)], env=env, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--out", type=Path, default=None, help="also write the report to this file")
    args = parser.parse_args()
    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        f"data root: {args.data_root}; each load in a fresh process; cache in a new temporary folder",
        "",
    ]
    with tempfile.TemporaryDirectory() as cache:
        for name in ("cifar10", "cifar100"):
            first = load_in_fresh_process(name, args.data_root, Path(cache))
            lines.append(
                f"{name} ({first['origin']}): first load (decode + write cache) {first['served']:.2f} s, "
                f"then float conversion {first['converted']:.2f} s"
            )
            cached = [load_in_fresh_process(name, args.data_root, Path(cache)) for _ in range(REPEATS)]
            for key, what in (
                ("served", "served by the cache (archive sha256 + read + digest)"),
                ("converted", "conversion to normalized float32"),
                ("total", "whole cached load, fresh process"),
            ):
                values = sorted(c[key] for c in cached)
                lines.append(
                    f"  {what}: median {values[REPEATS // 2]:.2f} s, range {values[0]:.2f}-{values[-1]:.2f} s"
                    f" ({REPEATS} fresh processes)"
                )
            lines.append(
                f"  second load within one process: median "
                f"{sorted(c['warm_total'] for c in cached)[REPEATS // 2]:.2f} s"
            )
    report = "\n".join(lines)
    print(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report + "\n")


if __name__ == "__main__":
    main()
