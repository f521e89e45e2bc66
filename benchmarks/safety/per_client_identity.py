"""Per-client numbers of every registered method over a fixed 3-round run, as digests: run before and after a change
to the engine or to how methods describe their training, and compare line by line (issue 58: one description of a
client's work; the per-client path must give bit-identical numbers wherever its arithmetic did not change).

Each line: the method, a sha256 of metrics.csv's numbers (every column but the seconds) and of clients.csv, and the
last round's loss written out in full. Settings: benchmarks/speed/broadcast_bytes.py's small runs (4 clients, 3
rounds), with momentum 0.5 and weight decay 1e-4 so that every term of the update is exercised, one client at a time.
Usage: python benchmarks/safety/per_client_identity.py [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "speed"))  # broadcast_bytes.py
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from broadcast_bytes import config, every_method  # noqa: E402

from pfedkit.io import read_csv  # noqa: E402

TIMES = ("train_s", "eval_s")


def digest(rows: list[dict]) -> str:
    text = "\n".join(",".join(f"{k}={v}" for k, v in row.items() if k not in TIMES) for row in rows)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def per_client(name: str):
    """broadcast_bytes' run of `name`, with momentum and weight decay, one client at a time."""
    cfg = config(name)
    return cfg.model_copy(
        update={
            "train": cfg.train.model_copy(update={"momentum": 0.5, "weight_decay": 1e-4}),
            "run": cfg.run.model_copy(update={"cohort": "off"}),
        }
    )


def digests(name: str, folder: Path) -> str:
    metrics, clients = read_csv(folder / "metrics.csv"), read_csv(folder / "clients.csv")
    return f"metrics {digest(metrics)} clients {digest(clients)} last loss {metrics[-1]['loss']}"


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--out", default=None)
    every_method(per_client, digests, args.parse_args().out)


if __name__ == "__main__":
    main()
