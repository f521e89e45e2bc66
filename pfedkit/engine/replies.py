"""One round's replies on the server, taken as they arrive, so the driver does not hold every trained client's model.

A method whose aggregation is a weighted mean (`Method.reply_fold`) adds each reply to a running sum and drops it;
one that needs every reply at once (FedAMP, FedFomo, FedPAC) keeps them, in memory up to a budget and past it in
files under the run folder, read back when the method asks. Either way the aggregate is bit for bit the one
`Method.aggregate` computes from a dict of every reply.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Optional

import torch

from pfedkit.engine.client_states import read_state
from pfedkit.engine.divergence import nonfinite_keys
from pfedkit.io import atomic_write_bytes
from pfedkit.methods.base import Method, WeightedMeanFold
from pfedkit.records import State


def message_bytes(message: Mapping[str, Any]) -> int:
    """Bytes of a payload or reply as sent: tensor data plus 8 bytes per plain number."""
    return sum(v.numel() * v.element_size() if isinstance(v, torch.Tensor) else 8 for v in message.values())


class SpilledReplies(Mapping[int, State]):
    """Replies by client, the first ones in memory up to `budget` bytes, the rest one file each under `folder`."""

    def __init__(self, folder: Path, budget: int):
        self.folder, self.budget = Path(folder), budget
        self.in_memory: dict[int, State] = {}
        self.on_disk: dict[int, Path] = {}
        self.held_bytes = 0

    def put(self, cid: int, reply: State) -> None:
        size = message_bytes(reply)
        if self.held_bytes + size <= self.budget or not (self.in_memory or self.on_disk):
            self.in_memory[cid] = reply
            self.held_bytes += size
            return
        buffer = io.BytesIO()
        torch.save(reply, buffer)
        path = self.folder / f"reply-{cid}.pt"
        atomic_write_bytes(path, buffer.getvalue())
        self.on_disk[cid] = path

    def __getitem__(self, cid: int) -> State:
        if cid in self.in_memory:
            return self.in_memory[cid]
        return read_state(self.on_disk[cid])

    def __iter__(self) -> Iterator[int]:
        return iter(sorted([*self.in_memory, *self.on_disk]))

    def __len__(self) -> int:
        return len(self.in_memory) + len(self.on_disk)

    def discard(self) -> None:
        self.in_memory.clear()
        self.on_disk.clear()
        shutil.rmtree(self.folder, ignore_errors=True)


class RoundReplies:
    """The replies of one round as they arrive: folded into the aggregate (`fold`), or kept (`SpilledReplies`).
    Replies holding inf or NaN keep their non-finite entries in `nonfinite`, out of the aggregate; the engine stops the
    run."""

    def __init__(
        self,
        fold: Optional[WeightedMeanFold],
        folder: Path,
        budget: int,
        promised: Optional[WeightedMeanFold] = None,
    ):
        self.fold, self.promised = fold, promised  # promised: the weights a kept reply is checked against
        self.kept = None if fold is not None else SpilledReplies(folder, budget)
        self.count, self.bytes = 0, 0
        self.nonfinite: dict[int, State] = {}

    @classmethod
    def holding(cls, replies: Mapping[int, State], folder: Path) -> "RoundReplies":
        """Replies that all arrived before aggregation (a Flower round's), held in memory, taken in client order."""
        taken = cls(None, folder, budget=2**62)
        for cid in sorted(replies):
            taken.add(cid, replies[cid])
        return taken

    def add(self, cid: int, reply: State) -> None:
        self.count += 1
        self.bytes += message_bytes(reply)
        if bad := nonfinite_keys(reply):
            self.nonfinite[cid] = {key: reply[key] for key in bad}
        elif self.fold is not None:
            self.fold.add(cid, reply)
        else:
            if self.promised is not None:
                self.promised.check_weight(cid, reply)
            self.kept.put(cid, reply)

    def aggregate(self, method: Method, server: State, round: int) -> State:
        if self.fold is not None:
            return self.fold.result()
        try:
            return method.aggregate(server, self.kept, round)
        finally:
            self.kept.discard()
