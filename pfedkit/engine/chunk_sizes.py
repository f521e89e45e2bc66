"""How many clients one cohort step stacks (`run.cohort_size`): a number (at most that many; 0 = all of the round's),
or "auto": on a GPU the round's clients in 1, 2 and 4 chunks are each tried for two rounds, the second timed (the first
warms up and captures its steps), and the fastest per training sample kept; off a GPU "auto" is all at once. Chunks
give each client the numbers one stack gives, to float rounding (tests/test_cohort.py).
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Optional

import torch

DIVISORS = (1, 2, 4)  # the round's clients in this many chunks, tried in this order
TRIED_ROUNDS = 2  # rounds each divisor trains before its time counts: the first warms up and captures its steps


class ChunkSizes:
    def __init__(
        self, setting: Any = 0, device: Optional[torch.device] = None, clock: Optional[Callable[[], float]] = None
    ):
        if setting != "auto" and not (isinstance(setting, int) and setting >= 0):
            raise ValueError(f"cohort_size must be a number of clients (0: all) or 'auto', not {setting!r}")
        if setting == "auto" and clock is None and (device is None or device.type != "cuda"):
            setting = 0  # off a GPU one stack is the fastest: nothing to time
        self.setting, self.device = setting, device
        self.clock = clock or time.perf_counter
        self.rounds: dict[int, int] = {}  # divisor -> rounds trained with it
        self.per_sample: dict[int, float] = {}  # divisor -> seconds per training sample, its timed round
        self.chosen: Optional[int] = None
        self._round: Optional[tuple[int, float]] = None

    def size(self, clients: int) -> int:
        """Clients per step for a group of `clients` this round."""
        if self.setting != "auto":
            return self.setting or clients
        return math.ceil(clients / self.divisor())

    def fixed_size(self, clients: int) -> int:
        """Clients per batched evaluation: the number set, else all (evaluation is not timed)."""
        return (self.setting if self.setting != "auto" else 0) or clients or 1

    def divisor(self) -> int:
        if self.chosen is not None:
            return self.chosen
        return next((d for d in DIVISORS if self.rounds.get(d, 0) < TRIED_ROUNDS), DIVISORS[0])

    def begin_round(self) -> None:
        """Before a round's training: with a divisor still being tried, the clock starts (after the GPU's queue)."""
        if self.setting == "auto" and self.chosen is None:
            self.synchronize()
            self._round = (self.divisor(), self.clock())

    def end_round(self, samples: int) -> None:
        """After it: the round counts for its divisor; once every divisor has a timed round, the fastest is kept."""
        if self._round is None:
            return
        divisor, start = self._round
        self._round = None
        self.synchronize()
        seconds = self.clock() - start
        self.rounds[divisor] = self.rounds.get(divisor, 0) + 1
        if self.rounds[divisor] == TRIED_ROUNDS:
            self.per_sample[divisor] = seconds / max(samples, 1)
        if len(self.per_sample) == len(DIVISORS):
            self.chosen = min(DIVISORS, key=lambda d: self.per_sample[d])

    def synchronize(self) -> None:
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def record(self) -> dict[str, Any]:
        """For the run's summary, with "auto": the chunks chosen (or still tried), each one's microseconds a sample."""
        if self.setting != "auto":
            return {}
        timed = ", ".join(
            f"{d} chunk{'s' if d > 1 else ''} {1e6 * s:.1f} us/sample" for d, s in self.per_sample.items()
        )
        state = f"{self.chosen} chunk{'s' if self.chosen > 1 else ''}" if self.chosen else "still trying"
        return {"cohort_size": f"auto: {state}" + (f" ({timed})" if timed else "")}
