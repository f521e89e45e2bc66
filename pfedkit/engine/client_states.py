"""Client state on disk, one file per client and version: on a Flower node (its own client), and in a simulation
whose client states are kept off the driver (`run.client_state = "disk"`).

Versions are named by the round they follow (`after-<round>.pt`). A client training round r starts from the
newest version older than r, so a run that resumes from its checkpoint replays rounds exactly, and a restarted
node continues from what it saved. Versions a resume can no longer ask for are deleted.
"""

from __future__ import annotations

import gc
import re
from collections import OrderedDict
from pathlib import Path
from typing import Optional

import torch

from pfedkit.engine.store import safe_load
from pfedkit.errors import PfedkitError
from pfedkit.io import atomic_write_bytes
from pfedkit.records import State

VERSION = re.compile(r"^after-(\d+)\.pt$")


# a saved version: {"run": the run's identity, "client": whose state it is, "state": the client's state}
RUN, CLIENT, STATE = "run", "client", "state"


class ClientStateStore:
    def __init__(self, root: str | Path, run_key: str, cid: int, run_id: str = ""):
        if not re.fullmatch(r"[A-Za-z0-9._-]+", run_key):
            raise PfedkitError(f"run key {run_key!r} must be letters, digits, '.', '_' or '-' (it names a folder)")
        self.folder = Path(root).expanduser() / run_key / f"client-{cid}"
        self.cid = cid
        self.run_id = run_id  # checked on every read when given: a file of another run, or client, is refused

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
        stored = read_state(path)
        wrapped = set(stored) in ({RUN, STATE}, {RUN, CLIENT, STATE})  # written with the identity of its run
        if self.run_id and not wrapped:
            raise PfedkitError(
                f"client state {path} does not say which run and client it belongs to (every state this run writes "
                "does): restore this run's own client-state folder, or start a new --out"
            )
        if wrapped:
            if self.run_id and stored[RUN] != self.run_id:
                raise PfedkitError(
                    f"client state {path} was written by another run (run identity {stored[RUN]}, this "
                    f"run's {self.run_id}): it does not belong here; restore this run's own client-state "
                    "folder, or start a new --out"
                )
            if stored.get(CLIENT, self.cid) != self.cid:
                raise PfedkitError(
                    f"client state {path} is client {stored[CLIENT]}'s, not client {self.cid}'s (a file copied over "
                    "another): restore this run's own client-state folder, or start a new --out"
                )
            stored = stored[STATE]
        return stored, older[-1]

    def save(self, state: State, after_round: int, keep_from: int) -> Path:
        """Write atomically, then drop versions older than the newest one a resume from `keep_from` could need."""
        import io

        buf = io.BytesIO()
        torch.save({RUN: self.run_id, CLIENT: self.cid, STATE: state} if self.run_id else state, buf)
        path = self.path(after_round)
        atomic_write_bytes(path, buf.getvalue())
        older = [v for v in self.versions() if v < keep_from]
        for v in older[:-1]:
            self.path(v).unlink(missing_ok=True)
        return path


def read_state(path: Path) -> State:
    """torch.load, then a young-generation collection: the unpickler leaves a reference cycle that would hold the
    loaded tensors until a full collection, and a driver reading hundreds of states a round would pile them up."""
    state = safe_load(path, "client state", "restore the run's client-state folder from a copy, or start a new --out")
    gc.collect(0)
    return state


def state_bytes(state: State) -> int:
    return sum(v.numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor))


class SpilledStates:
    """Every client's state of a simulation in versioned files under `folder` (written when a client trains), with
    the most recently used kept in memory up to `budget` bytes: the driver's memory does not grow with the clients."""

    def __init__(self, folder: Path, budget: int, run_id: str = ""):
        self.folder, self.budget, self.run_id = Path(folder), budget, run_id
        self.cache: OrderedDict[int, tuple[int, State]] = OrderedDict()  # cid -> (version, state), oldest use first
        self.keep_from = 0  # the round a resume starts from: the versions it needs are kept
        self.trained: dict[int, int] = {}  # cid -> the last round it trained (in the checkpoint: a resume checks files)

    def store(self, cid: int) -> ClientStateStore:
        return ClientStateStore(self.folder, "client-state", cid, self.run_id)

    def get(self, cid: int, before_round: int) -> Optional[State]:
        """The client's state as it stood before `before_round`, or None if it has never trained."""
        if cid in self.cache and self.cache[cid][0] < before_round:
            self.cache.move_to_end(cid)
            return self.cache[cid][1]
        store = self.store(cid)
        state, version = store.load(before_round)
        expected = self.trained.get(cid)
        if expected is not None and expected < before_round and version != expected:
            raise PfedkitError(
                f"client {cid}'s state after round {expected} is missing ({store.path(expected)}): "
                "the run cannot go on exactly without it "
                f"(starting the client afresh would change every result from round {expected + 1}); "
                "restore that file, or start the run again in a new --out"
            )
        if state is not None:
            self.remember(cid, version, state)
        return state

    def put(self, cid: int, state: State, after_round: int) -> None:
        self.store(cid).save(state, after_round, self.keep_from)
        self.trained[cid] = after_round
        self.remember(cid, after_round, state)

    def prune(self, keep_from: int) -> None:
        """Once a checkpoint that resumes at `keep_from` has landed: every client keeps only the versions from the
        newest one older than `keep_from` on."""
        self.keep_from = keep_from
        for folder in sorted(self.folder.glob("client-state/client-*")):
            older = sorted(
                int(m.group(1))
                for p in folder.iterdir()
                if (m := VERSION.match(p.name)) and int(m.group(1)) < keep_from
            )
            for version in older[:-1]:
                (folder / f"after-{version}.pt").unlink(missing_ok=True)

    def remember(self, cid: int, version: int, state: State) -> None:
        self.cache[cid] = (version, state)
        self.cache.move_to_end(cid)
        while len(self.cache) > 1 and sum(state_bytes(s) for _, s in self.cache.values()) > self.budget:
            self.cache.popitem(last=False)  # on disk already: forgetting costs a read later
