"""Files as results are written and read: atomic writes (a reader sees the old file or the new one, never half)
and CSV."""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import re
import shutil
import signal
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from pfedkit.errors import ConfigError, PfedkitError

_UMASK = os.umask(0)
os.umask(_UMASK)


def output_folder(out: Any, what: str = "--out") -> Path:
    """`out` as a folder to write into (made if missing), refused with the fix when it cannot be one: not a path, a
    file, a device, or a link to nothing."""
    if not isinstance(out, (str, os.PathLike)) or str(out) == "":
        raise ConfigError(f"{what} must be a folder's path (a str or Path), not {out!r}")
    out = Path(out)
    if out.is_symlink() and not out.exists():
        raise PfedkitError(
            f"{what} {out} is a link to {os.readlink(out)}, which does not exist: remove the link or "
            "choose another folder"
        )
    if out.exists() and not out.is_dir():
        kind = "a file" if out.is_file() else "not a folder (a device or other special file)"
        raise PfedkitError(f"{what} {out} is {kind}: choose a folder (it is made if missing)")
    out.mkdir(parents=True, exist_ok=True)
    return out


def atomic_write(path: Path, write) -> None:
    """Write to a temporary file beside `path`, then rename: a reader sees the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMPORARY, dir=path.parent)
    os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes files private; results should read like any other file
    try:
        with interrupts_deferred(), os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            os.replace(tmp, path)
    except BaseException as err:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(err, RuntimeError):  # torch.save's writer reports a failed write in its own words
            full = shutil.disk_usage(path.parent).free < 2**20
            raise OSError(errno.ENOSPC if full else errno.EIO, f"writing failed ({err})", str(path)) from None
        raise


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """A Ctrl-C during the block is raised when it ends: inside torch.save it would surface as a failed write (torch
    turns the KeyboardInterrupt into its own RuntimeError), and the file is whole a moment later anyway. Only where
    Python's own Ctrl-C handler is in place (the main thread of a command; workers ignore SIGINT)."""
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if caught:
        raise KeyboardInterrupt


# the temporary name atomic_write gives a file while writing it: marked as pfedkit's, so that only a file pfedkit began
# writing is ever taken for a killed write's leftover (never a user's .env.template or .notes.personal)
TEMPORARY = ".pfedkit-partial"
STALE = re.compile(r"^\.(.+)\.[A-Za-z0-9_]{8}" + re.escape(TEMPORARY) + "$")


def remove_stale_temporaries(folder: Path, recursive: bool = True) -> list[Path]:
    """Temporary files a killed write left under `folder` (a run folder its run holds the lock of; with `recursive`
    off, a comparison's own files beside its run folders); removed."""
    found = Path(folder).rglob(".*") if recursive else Path(folder).glob(".*")
    stale = [p for p in found if p.is_file() and STALE.match(p.name) and not p.name.startswith(".pfedkit")]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def read_json(path: Path, what: str = "file") -> Any:
    """A JSON file pfedkit wrote; damaged, an error that names it and how to recover, not a traceback."""
    from pfedkit.errors import PfedkitError

    try:
        return json.loads(Path(path).read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise PfedkitError(
            f"{what} {path} is damaged ({err}); delete it (a run folder's summary.json is written "
            "again when the run is resumed with --resume) or restore it"
        ) from None


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def atomic_write_csv(path: Path, rows: list[dict[str, Any]], columns: Iterable[str]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    atomic_write_text(path, buf.getvalue())


def read_csv(path: Path) -> list[dict[str, str]]:
    """A CSV file's rows; a file that is not text is an error naming it, not a traceback."""
    from pfedkit.errors import PfedkitError

    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except UnicodeDecodeError as err:
        raise PfedkitError(f"{path} is not text (UTF-8): {err}; the file is damaged: restore it") from None
