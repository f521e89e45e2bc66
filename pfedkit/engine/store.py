"""Run state on disk: atomic writes, checkpoints, resume."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable

import filelock
import torch

from pfedkit.errors import PfedkitError
from pfedkit.io import atomic_write, atomic_write_json

CHECKPOINT = "checkpoint.pt"


def save_checkpoint(out: Path, state: dict[str, Any]) -> Path:
    path = Path(out) / CHECKPOINT
    atomic_write(path, lambda f: torch.save(state, f))
    return path


def load_checkpoint(out: Path) -> dict[str, Any] | None:
    path = Path(out) / CHECKPOINT
    if not path.exists():
        return None
    return safe_load(path, "checkpoint", "delete it to start the run again, or start a new --out")


def safe_load(path: Path, what: str, fix: str) -> Any:
    """torch.load with weights_only: tensors and plain data, never code. A file it refuses is reported in our words:
    torch's own message goes on to suggest weights_only=False, which would run whatever the file holds."""
    import pickle

    try:
        return torch.load(path, weights_only=True)
    except pickle.UnpicklingError:
        reason = (
            "it holds Python objects that a safe load does not run "
            "(a file pfedkit did not write, perhaps made to run code)"
        )
    except Exception as err:  # files are only ever replaced whole, so this is outside damage
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        reason = "it is damaged" if "weights_only" in first else f"it is damaged ({first})"
    raise PfedkitError(f"{what} {path} cannot be read safely: {reason}; {fix}") from None


LOCK = ".pfedkit.lock"
OWNER = ".pfedkit-owner.json"


SECRET_FLAGS = ("token", "key", "password", "secret")


def shown_command(argv: list[str], limit: int = 300) -> str:
    """The command line for a person to recognise, with the values of secret-looking options (Flower's --token)
    hidden."""
    shown, hide = [], False
    for arg in argv:
        if hide:
            shown.append("***")
            hide = False
            continue
        flag, eq, _ = arg.partition("=")
        secret = flag.startswith("-") and any(word in flag.lower() for word in SECRET_FLAGS)
        shown.append(f"{flag}=***" if secret and eq else arg)
        hide = secret and not eq
    if shown:  # `python -m pfedkit` runs pfedkit/__main__.py
        program = Path(shown[0])
        shown[0] = program.parent.name if program.name == "__main__.py" else program.name
    text = " ".join(shown)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class RunLock:
    """One run per output folder: an exclusive lock on `out` held until `release()` (or this process ends).

    The kernel drops the lock of a process that dies, so a folder left by a killed run is taken over, with a
    message naming the process that left it."""

    def __init__(self, out: Path, log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)):
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.lock = filelock.FileLock(str(self.out / LOCK), timeout=0, is_singleton=False)
        try:
            self.lock.acquire()
        except filelock.Timeout:
            raise PfedkitError(
                f"{self.out} is in use by {self._describe(self._owner())}; wait for that run to finish "
                "or stop it, or choose another --out"
            ) from None
        previous = self._owner()
        if previous and previous.get("pid") != os.getpid():
            log(
                f"note: {self.out} was left locked by {self._describe(previous)}, which is no longer running; "
                "taking it over"
            )
        atomic_write_json(
            self.out / OWNER,
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "command": shown_command(sys.argv),
                "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            },
        )

    def _owner(self) -> dict[str, Any]:
        try:
            return json.loads((self.out / OWNER).read_text())
        except (OSError, ValueError):
            return {}

    @staticmethod
    def _describe(owner: dict[str, Any]) -> str:
        if not owner:
            return "another process"
        return (
            f"process {owner.get('pid')} on {owner.get('host')} (`{owner.get('command')}`, started "
            f"{owner.get('started')})"
        )

    def release(self) -> None:
        if self.lock.is_locked:
            (self.out / OWNER).unlink(missing_ok=True)
            self.lock.release(force=True)
