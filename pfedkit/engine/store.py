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

from pfedkit.config import CONFIG_HEADER, Config, dump_toml
from pfedkit.errors import DataError, PfedkitError
from pfedkit.io import STALE, atomic_write, atomic_write_json, output_folder, read_json
from pfedkit.registry import continues, read_saved_config, recorded_config, run_differences

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
# in a folder pfedkit made inside a run's --out for its own use (Flower's app and logs): the run accepts it there
WORK_MARKER = ".pfedkit-work"
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
        self.out = output_folder(out)
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


# ---- the run folder and its resume policy: what may be written where, and which state a run may take in ----

# what a run (and the suites, trackers and Flower beside it) writes in its folder; anything else is the user's
RUN_FILES = (
    "config.toml",
    "metrics.csv",
    "checkpoint.pt",
    "summary.json",
    "clients.csv",
    "clients.csv.gz",
    "curves.png",
    "diverged.json",
    "client-state",
    "replies",
    "reused.json",
    "continued.json",
    "wandb",
    "wandb-id.txt",
    "tensorboard",
    "replies.csv",
    "flower",
    "code_changes.json",
)


def prepare_run_folder(
    out: Path, config: Config, *, resume: bool, force: bool, can_continue: bool, accept_code_change: bool = False
) -> None:
    """Refuse a folder this run must not write into: with `resume`, one made with another config (unless the run
    carries a finished one on, `can_continue`), other method code (unless `accept_code_change`, recorded in
    code_changes.json) or other data; without, one holding a run or a user's own files.
    On resume, `config.data.checksum` becomes the run's own, so that the data are verified against it."""
    saved = out / "config.toml"
    if resume:
        if not saved.exists():
            return
        old = read_saved_config(saved, module_now=config.method.module)
        changes = code_change(out, old, config, run_differences(old, config), accept_code_change)
        if can_continue and continues(old, config, changes):
            check_continuable(out, old, config)
        elif changes:
            raise PfedkitError(
                f"{saved} was made with another configuration ({'; '.join(changes[:4])}"
                f"{'; ...' if len(changes) > 4 else ''}); resume with the run's own config "
                f"(`pfedkit run --out {out} --resume`, adding --data-root if its data moved; more rounds alone, "
                "--set train.rounds=N, carry a finished run on) or start a new --out"
            )
        given = config.data.checksum
        if given and old.data.checksum and given != old.data.checksum:
            raise PfedkitError(
                f"data.checksum {given} is not the {old.data.checksum} that {saved} records; "
                "leave data.checksum out to resume with the run's own data"
            )
        config.data.checksum = given or old.data.checksum  # the data must verify against the run's
    elif (out / CHECKPOINT).exists() or (out / "metrics.csv").exists():
        raise PfedkitError(f"{out} already holds a run; pass --resume to continue it, or choose another --out")
    elif not force and (foreign := foreign_files(out, config)):
        raise PfedkitError(
            f"{out} holds files pfedkit did not write ({', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}); "
            f"a run writes {', '.join(RUN_FILES[:4])} and more there, replacing any of that name: choose an empty "
            "or new --out, or pass --force to write beside them"
        )


CODE_CHANGES = "code_changes.json"  # in a run resumed with other method code (--accept-code-change): when and which


def code_change(out: Path, old: Config, new: Config, changes: list[str], accept: bool) -> list[str]:
    """The changes without the method's code: refused with its own message unless accepted, then recorded."""
    key = "method.source:"
    if not any(c.startswith(key) for c in changes):
        return changes
    if not accept:
        raise PfedkitError(
            f"the method's code changed since the run in {out} began (method {new.method.name}: {old.method.source} "
            f"-> {new.method.source}), so resuming would train its later rounds with other code than its first; "
            "start a new run with another --out, or continue it with the new code: "
            f"`pfedkit run --out {out} --resume --accept-code-change` (recorded in {CODE_CHANGES})"
        )
    from datetime import datetime, timezone

    record = read_json(out / CODE_CHANGES, "code changes") if (out / CODE_CHANGES).exists() else []
    record.append({"from": old.method.source, "to": new.method.source, "at": datetime.now(timezone.utc).isoformat()})
    atomic_write_json(out / CODE_CHANGES, record)
    return [c for c in changes if not c.startswith(key)]


def foreign_files(out: Path, config: Config) -> list[str]:
    """What in the folder a run did not write: a user's own notes, config or result-named files (a summary.json of
    their own) are never silently replaced. A result name counts as pfedkit's only beside a config.toml it wrote."""
    saved = out / "config.toml"
    ours = saved.exists() and config_is_ours(saved, config)
    foreign = []
    for path in sorted(out.iterdir()):
        if path.name == "config.toml":
            if not ours:
                foreign.append(path.name)
        elif path.is_dir() and (path / WORK_MARKER).exists():
            continue
        elif not ((path.name in RUN_FILES and ours) or path.name.startswith(".pfedkit") or STALE.match(path.name)):
            foreign.append(path.name)
    return foreign


def config_is_ours(path: Path, config: Config) -> bool:
    text = path.read_text(errors="replace")
    return text.startswith(CONFIG_HEADER) or text == dump_toml(config.to_dict())  # (no header before 0.1)


def check_continuable(out: Path, old: Config, config: Config) -> None:
    """The after-local point also measures the last training round; carried on, the run would not have."""
    last, every = old.train.rounds - 1, old.eval.every
    if old.eval.point != "start" and last % every:
        raise PfedkitError(
            f"{out} measured after local training in its last training round ({last}) only because it was the last; "
            f"a longer run does not (eval.every {every}), so carrying it on to {config.train.rounds} rounds would not "
            "give that run: start a new --out"
        )


def check_belongs(out: Path, ckpt: dict[str, Any], config: Config, accept_code_change: bool = False) -> None:
    """A checkpoint written by another run (copied in, or left by a run of another config) is refused, naming how
    the runs differ: resumed, it would mix that run's state into this run's results. (Other method code, accepted,
    was recorded when the run folder was prepared.)"""
    saved = ckpt.get("config")
    if not isinstance(saved, dict):  # every checkpoint holds its run's config: without one, whose it is is unknown
        raise PfedkitError(
            f"{out / CHECKPOINT} holds no run config, so nothing says it is this run's; put this run's own checkpoint "
            "back, or start a new --out"
        )
    try:
        theirs = recorded_config(saved, module_now=config.method.module)
    except Exception:
        theirs = None
    differences = (
        ["its config is not one this pfedkit reads"]
        if theirs is None
        else [
            c
            for c in run_differences(theirs, config)
            if not c.startswith("train.rounds:") and not (accept_code_change and c.startswith("method.source:"))
        ]
    )
    ours, other = config.data.checksum, saved.get("data", {}).get("checksum")
    if ours and other and ours != other:
        differences.append(f"data.checksum: {other} -> {ours}")
    if differences:
        raise PfedkitError(
            f"{out / CHECKPOINT} was written by another run than the one {out / 'config.toml'} describes "
            f"({'; '.join(differences[:4])}{'; ...' if len(differences) > 4 else ''}), so resuming would mix the two; "
            "put this run's own checkpoint back, or start a new --out"
        )


def verify_data(config: Config, checksum: str) -> None:
    """The loaded data must be the data the config (or the resumed run) names; else they are recorded now."""
    expected = config.data.checksum
    if expected and checksum != expected:
        raise DataError(
            f"the {config.data.dataset} data under {config.data.root} are not the data this run was made with "
            f"(expected {expected}, found {checksum}); point --data-root at the run's data, or start a new --out"
        )
    config.data.checksum = checksum
