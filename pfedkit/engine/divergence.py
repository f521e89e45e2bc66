"""A run that goes non-finite stops at once, naming where, instead of training on NaN and reporting round 0's
accuracy."""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import torch

from pfedkit.errors import PfedkitError


def nonfinite_keys(message: Mapping[str, Any]) -> list[str]:
    """Keys of a payload, reply or state whose tensor or number is inf or NaN."""
    bad = []
    for key, value in message.items():
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                bad.append(key)
        elif isinstance(value, float) and not math.isfinite(value):
            bad.append(key)
    return bad


class Diverged(PfedkitError):
    """Non-finite values in a round: `round`, `where` (what held them), `clients`, `keys`."""

    def __init__(self, round: int, where: str, clients: Iterable[int], keys: Iterable[str], method: str, fix: str):
        self.round, self.where, self.clients, self.keys = round, where, sorted(clients), sorted(set(keys))
        self.method, self.fix = method, fix
        self.saved = ""  # what the engine kept, added once the last finite state is on disk
        super().__init__()

    def __str__(self) -> str:
        shown = ", ".join(self.keys[:4]) + (f" and {len(self.keys) - 4} more" if len(self.keys) > 4 else "")
        who = (
            f" of client(s) {', '.join(map(str, self.clients[:10]))}{' ...' if len(self.clients) > 10 else ''}"
            if self.clients
            else ""
        )
        return (
            f"the run diverged in round {self.round}: the {self.where}{who} hold non-finite values ({shown}); "
            f"method {self.method}. Likely fix: {self.fix}.{self.saved}"
        )

    def record(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "where": self.where,
            "clients": self.clients,
            "keys": self.keys,
            "method": self.method,
            "message": str(self),
        }


def likely_fix(lr: float, method_params: Mapping[str, Any], step_sizes: Iterable[str] = ()) -> str:
    """Step sizes are the usual cause: the client lr and the method's hyper-parameters that are step sizes
    (`step_sizes`; HyperParams.step_sizes() says which)."""
    names = set(step_sizes)
    steps = [
        f"method.{k} (now {v})"
        for k, v in method_params.items()
        if k in names and isinstance(v, (int, float)) and not isinstance(v, bool)
    ]
    return f"a smaller train.lr (now {lr})" + (f" or {', '.join(steps)}" if steps else "")


def check_finite(round: int, where: str, messages: Mapping[int, Mapping[str, Any]], method: str, fix: str) -> None:
    """Raise Diverged naming every client whose message holds a non-finite value."""
    bad = {cid: keys for cid, message in messages.items() if (keys := nonfinite_keys(message))}
    if bad:
        raise Diverged(round, where, bad, [k for keys in bad.values() for k in keys], method, fix)
