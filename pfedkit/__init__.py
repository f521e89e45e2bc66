"""pfedkit: personalized federated learning, faithful methods over one round loop.

From Python (a notebook), the same runs as the command line:

    import pfedkit
    summary = pfedkit.run("examples/digits.toml", out="runs/fedper", method={"name": "fedper"}, train={"rounds": 20})
    results = pfedkit.load_run("runs/fedper")
    results.column("acc")          # accuracy per evaluated round
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

# `python3 -m pfedkit` puts the current folder first on the path, so a method file there named like a standard module
# (json.py) would replace that module for every import; it goes last, where a method's own folder goes
if sys.argv[:1] == ["-m"] and sys.path and sys.path[0] in ("", os.getcwd()):
    sys.path.append(sys.path.pop(0))

__version__ = "0.1.0"

API = ("run", "load_run", "RunResults")  # in pfedkit.api, imported on first use: `import pfedkit` stays light


def __getattr__(name: str) -> Any:
    if name in API:
        return getattr(importlib.import_module("pfedkit.api"), name)
    raise AttributeError(f"module 'pfedkit' has no attribute {name!r}")
