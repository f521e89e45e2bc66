"""Several runs as one computation: runs of one method that differ only in seed, repeat,
train.lr or the method's `packable` hyper-parameters train their rounds as one cohort.

Each run stays a run of its own (its Simulation, folder, metrics, checkpoints and resume) and goes through its rounds
in a thread of its own; only the local training passes through a `CohortGroup`. When every run still going has handed
in its round's training tasks, the thread that handed in last trains them all as one stacked computation
(`cohort.train_together`) and each run takes its own results back. Runs need not be in the same round (a resumed run
may be behind the others); a run that ends, fails or is not on the cohort path leaves the group and the others go on.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Optional

from pfedkit.engine.cohort import Cohort, train_together


class CohortGroup:
    def __init__(self, members: int):
        self.size = self.active = members
        self.lead: Optional[Cohort] = None  # holds the stacked buffers and captured steps of every round
        self.pending: dict[object, tuple[Cohort, list[Any]]] = {}
        self.done: dict[object, Any] = {}
        self.cond = threading.Condition()

    def join(self, cohort: Cohort) -> None:
        with self.cond:
            if self.lead is None:
                self.lead = cohort

    def leave(self) -> None:
        """A run that ended (or never trains in a cohort): the rest no longer wait for it."""
        with self.cond:
            self.active -= 1
            if self.pending and len(self.pending) >= self.active:
                self.train_pending()

    def train(self, cohort: Cohort, tasks: list[Any]) -> list[tuple[int, Any]]:
        """This run's (cid, result) list once the group has trained the round (as `Cohort.train` gives them)."""
        ticket = object()
        with self.cond:
            self.pending[ticket] = (cohort, tasks)
            if len(self.pending) >= self.active:
                self.train_pending()
            while ticket not in self.done:
                self.cond.wait()
            result = self.done.pop(ticket)
        if isinstance(result, BaseException):
            raise result
        return result

    def train_pending(self) -> None:
        """Called with the lock held, when every active run has handed in its tasks."""
        tickets = list(self.pending)
        runs = [self.pending.pop(t) for t in tickets]
        try:
            out: dict[int, list] = {i: [] for i in range(len(runs))}
            for index, cid, result in train_together(runs, lead=self.lead):
                out[index].append((cid, result))
            for index, ticket in enumerate(tickets):
                self.done[ticket] = out[index]
        except BaseException as err:  # each run of the round fails with it
            for ticket in tickets:
                self.done[ticket] = err
        self.cond.notify_all()


class Member:
    """One run's place in a group: it trains with the group once joined, and leaves once (when it ends, fails, or
    turns out not to train in a cohort)."""

    def __init__(self, group: CohortGroup):
        self.group, self.left = group, False

    def join(self, cohort: Cohort) -> None:
        self.group.join(cohort)

    def train(self, cohort: Cohort, tasks: list[Any]) -> list[tuple[int, Any]]:
        return self.group.train(cohort, tasks)

    def leave(self) -> None:
        if not self.left:
            self.left = True
            self.group.leave()


def run_together(
    runs: dict[Path, Any], start: Callable[[Path, Any, Member], dict[str, Any]]
) -> dict[Path, dict[str, Any] | BaseException]:
    """Each run as `start(run_dir, config, member)` in a thread of its own, all members of one CohortGroup; each run's
    summary, or the exception it ended with."""
    group = CohortGroup(len(runs))
    outcome: dict[Path, dict[str, Any] | BaseException] = {}

    def go(run_dir: Path, config: Any) -> None:
        member = Member(group)
        try:
            outcome[run_dir] = start(run_dir, config, member)
        except BaseException as err:
            outcome[run_dir] = err
        finally:
            member.leave()

    threads = [
        threading.Thread(target=go, args=(run_dir, config), name=f"run {run_dir}", daemon=True)
        for run_dir, config in runs.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {run_dir: outcome[run_dir] for run_dir in runs}
