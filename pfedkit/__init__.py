"""pfedkit: personalized federated learning, faithful methods over one round loop.

From Python (a notebook), the same runs as the command line:

    import pfedkit
    summary = pfedkit.run("examples/digits.toml", out="runs/fedper", method={"name": "fedper"}, train={"rounds": 20})
    results = pfedkit.load_run("runs/fedper")
    results.column("acc")          # accuracy per evaluated round
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

API = ("run", "load_run", "RunResults")  # in pfedkit.api, imported on first use: `import pfedkit` stays light


def __getattr__(name: str) -> Any:
    if name in API:
        return getattr(importlib.import_module("pfedkit.api"), name)
    raise AttributeError(f"module 'pfedkit' has no attribute {name!r}")
