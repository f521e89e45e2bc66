"""bytes_down of every registered method over a 3-round run on small data: what each method's broadcast sends.

Run before and after a change to broadcasting and compare (issue 52: server-only state declared in one place, a
part-sharing method sending its shared parts and declared keys); the output is per method, one line each.
Usage: python benchmarks/speed/broadcast_bytes.py [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

from pfedkit.engine.simulation import simulate
from pfedkit.errors import PfedkitError
from pfedkit.io import read_csv
from pfedkit.methods import METHODS
from pfedkit.registry import build_config

ADAPTERS = {"perada", "heart-pfl", "heart-pfl-no-hda", "heart-pfl-no-akt", "heart-pfl-no-both"}


def config(name: str):
    images = name in ADAPTERS
    data = (
        {"dataset": "synthetic", "options": {"samples": 600, "test_samples": 200}}
        if not images
        else {"dataset": "digits", "fraction": 0.3}
    )
    model = (
        {"name": "mlp", "options": {"hidden": 16}}
        if not images
        else {"name": "small-resnet-adapter", "options": {"widths": [4, 8], "blocks": 1, "stem_stride": 2}}
    )
    method = {
        "name": name,
        **({"kd_rounds": 1, "kd_steps": 1, "kd_batch": 16} if images else {}),
        **({"pgd_steps": 1} if name.startswith("heart") else {}),
    }
    return build_config(
        {
            "data": data,
            "partition": {"scheme": "dirichlet", "clients": 4, "beta": 0.5},
            "model": model,
            "method": method,
            "proxy": {"holdout": 0.1} if images else {},
            "train": {"rounds": 3, "batch_size": 16, "lr": 0.05, "join_ratio": 1.0},
            "run": {"seed": 0, "workers": 1, "checkpoint_every": 3},
        }
    )


def every_method(run_config: Callable[[str], Any], line: Callable[[str, Path], str], out: Optional[str]) -> None:
    """Each registered method's 3-round run (`run_config(name)`), one line each from its run folder (`line(name,
    folder)`), or why it did not run; the lines printed and written to `out`."""
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(METHODS):
            try:
                simulate(run_config(name), Path(tmp) / name, progress=False)
            except PfedkitError as err:
                lines.append(f"{name}: not run ({' '.join(str(err).split())[:100]})")
                continue
            lines.append(f"{name}: {line(name, Path(tmp) / name)}")
            print(lines[-1], file=sys.stderr)
    text = "\n".join(lines) + "\n"
    if out:
        Path(out).write_text(text)
    print(text, end="")


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--out", default=None)

    def bytes_down(name: str, folder: Path) -> str:
        return f"bytes_down per round {' '.join(row['bytes_down'] for row in read_csv(folder / 'metrics.csv'))}"

    every_method(config, bytes_down, args.parse_args().out)


if __name__ == "__main__":
    main()
