"""A client's persistent state on its own disk, keyed by (run, stable client id), one file per version.

Versions are named by the round they follow (`after-<round>.pt`). A client training round r starts from the
newest version older than r, so a server that resumes from its checkpoint replays rounds exactly, and a
restarted node continues from what it saved. Versions the server can no longer ask for are deleted.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

import torch

from pfedkit.errors import PfedkitError
from pfedkit.io import atomic_write_bytes
from pfedkit.records import State

VERSION = re.compile(r"^after-(\d+)\.pt$")


def default_state_root() -> Path:
    """$PFEDKIT_FLOWER_STATE, else ~/.cache/pfedkit/flower-state."""
    return Path(os.environ.get("PFEDKIT_FLOWER_STATE") or Path.home() / ".cache" / "pfedkit" / "flower-state").expanduser()


class ClientStateStore:
    def __init__(self, root: str | Path, run_key: str, cid: int):
        if not re.fullmatch(r"[A-Za-z0-9._-]+", run_key):
            raise PfedkitError(f"run key {run_key!r} must be letters, digits, '.', '_' or '-' (it names a folder)")
        self.folder = Path(root).expanduser() / run_key / f"client-{cid}"

    def versions(self) -> list[int]:
        if not self.folder.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.folder.iterdir() if (m := VERSION.match(p.name)))

    def path(self, after_round: int) -> Path:
        return self.folder / f"after-{after_round}.pt"

    def load(self, before_round: int) -> tuple[Optional[State], int]:
        """(state, the round it follows) of the newest version older than `before_round`; (None, -1) if none."""
        older = [v for v in self.versions() if v < before_round]
        if not older:
            return None, -1
        path = self.path(older[-1])
        try:
            return torch.load(path, weights_only=True), older[-1]
        except Exception as err:  # files are only ever replaced whole, so this is outside damage
            raise PfedkitError(f"client state {path} cannot be read ({err}); delete it to start this client afresh") from None

    def save(self, state: State, after_round: int, keep_from: int) -> Path:
        """Write atomically, then drop versions older than the newest one a resume from `keep_from` could need."""
        import io

        buf = io.BytesIO()
        torch.save(state, buf)
        path = self.path(after_round)
        atomic_write_bytes(path, buf.getvalue())
        older = [v for v in self.versions() if v < keep_from]
        for v in older[:-1]:
            self.path(v).unlink(missing_ok=True)
        return path
