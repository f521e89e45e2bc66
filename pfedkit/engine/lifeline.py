"""Processes that die with the one that started them, however it dies (kill -9 and the out-of-memory killer included).

- Forked workers call `die_with_parent()` first thing: the kernel kills them when their parent goes (Linux), or a
  watcher thread notices the new parent within a second (elsewhere).
- Processes started with their own session (Flower's SuperLink and SuperNodes, which start helpers of their own)
  are registered with a `Guardian`: a small process that reads a pipe from us and, when that pipe closes without
  a goodbye (we died), kills every registered process with all its descendants.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1  # linux/prctl.h
GOODBYE = "bye"


def die_with_parent(parent_pid: int) -> None:
    """Called in a child: exit when `parent_pid` is gone."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent_pid:  # the parent died before the call took effect
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True, name="pfedkit-lifeline").start()


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    os._exit(1)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def trees(pids: list[int]) -> list[int]:
    """The processes and all their descendants, found now (before any is signalled and its children move away)."""
    return [p for pid in pids for p in (pid, *descendants(pid))]


def send(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


class Guardian:
    """`g = Guardian(); g.watch(proc.pid); ...; g.close()`: if this process dies before `close()`, the guardian
    kills every watched process tree within a moment."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pfedkit.engine.lifeline", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            text=True,
        )

    def watch(self, pid: int) -> None:
        self.proc.stdin.write(f"{pid}\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        """Our own shutdown: the guardian leaves without killing anything."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(GOODBYE + "\n")
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _guard() -> None:
    """The guardian's main: read pids until a goodbye (leave them) or end of file (our parent died: kill them)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is for the parent, which then shuts down in order
    watched: list[int] = []
    for line in sys.stdin:
        line = line.strip()
        if line == GOODBYE:
            return
        if line.isdigit():
            watched.append(int(line))
    targets = trees(watched)
    send(targets, signal.SIGTERM)
    time.sleep(2.0)
    send(targets, signal.SIGKILL)


if __name__ == "__main__":
    _guard()
