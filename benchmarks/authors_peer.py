"""What the checks against a PerAda-style checkout share (benchmarks/authors_heart.py, authors_perada.py): the
authors' modules imported under their own top-level names only while a `PeerCode` is active, the packages their
paths never use stubbed, and their `.cuda()` calls left on the CPU."""

from __future__ import annotations

import argparse
import contextlib
import importlib.machinery
import importlib.util
import math
import sys
import types
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import nn


class PeerMissing(FileNotFoundError):
    pass


def _is_cuda(device: Any) -> bool:
    return (isinstance(device, str) and device.startswith("cuda")) or (
        isinstance(device, torch.device) and device.type == "cuda"
    )


@contextlib.contextmanager
def patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    had = name in vars(owner)
    before = vars(owner).get(name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if had:
            setattr(owner, name, before)
        else:
            delattr(owner, name)


@contextlib.contextmanager
def cuda_as_cpu() -> Iterator[None]:
    """The code's `.to("cuda")`, `.cuda()` and `module.cuda()` leave tensors and modules where they are."""
    to = torch.Tensor.to

    def cpu_to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if (args and _is_cuda(args[0])) or _is_cuda(kwargs.get("device")):
            return self
        return to(self, *args, **kwargs)

    with contextlib.ExitStack() as stack:
        stack.enter_context(patched(torch.Tensor, "to", cpu_to))
        stack.enter_context(patched(torch.Tensor, "cuda", lambda self, *a, **k: self))
        stack.enter_context(patched(nn.Module, "cuda", lambda self, *a, **k: self))
        yield


def stub_module(name: str) -> types.ModuleType:
    stub = types.ModuleType(name)
    stub.__spec__ = importlib.machinery.ModuleSpec(name, None)
    return stub


class PeerCode:
    """A checkout at `path` whose top-level names (`tops`: optim, models, ...) are in sys.modules only while
    `active()`: outside it, those names are whatever they were before. `stubs[0]` (wandb) is always stubbed, the rest
    only where not installed."""

    def __init__(self, path: Path, tops: Sequence[str], stubs: Sequence[str]):
        self.path, self.tops = Path(path).resolve(), tuple(tops)
        self.modules: dict[str, types.ModuleType] = {}
        self.stubbed = [stubs[0]] + [name for name in stubs[1:] if importlib.util.find_spec(name) is None]

    def check_origin(self, *modules: types.ModuleType) -> None:
        for module in modules:
            if not Path(module.__file__).resolve().is_relative_to(self.path):
                raise RuntimeError(f"{module.__name__} came from {module.__file__}, not from {self.path}")

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        def ours(name: str) -> bool:
            return name.split(".")[0] in self.tops or name.split(".")[0] in self.stubbed

        saved = {n: m for n, m in sys.modules.items() if ours(n)}
        for n in saved:
            del sys.modules[n]
        for name in self.stubbed:  # imported by the code's modules, unused on the paths compared here
            stub = self.modules.get(name) or stub_module(name)
            if name == "torchvision":
                stub.models = self.modules.get("torchvision.models") or stub_module("torchvision.models")
                sys.modules["torchvision.models"] = stub.models
            sys.modules[name] = stub
        sys.modules.update(self.modules)
        sys.path.insert(0, str(self.path))
        try:
            with cuda_as_cpu():
                yield
        finally:
            sys.path.remove(str(self.path))
            theirs = {n: m for n, m in sys.modules.items() if ours(n)}
            self.modules.update(theirs)
            for n in theirs:
                del sys.modules[n]
            sys.modules.update(saved)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one CPU thread (the comparisons' float32 sums in one order), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_comparison(
    description: str,
    peer: Path,
    out: Path,
    compare: Callable[[Path], tuple[list[Any], dict[str, Any]]],
    render: Callable[[list[Any], dict[str, Any]], str],
    argv: list[str] | None = None,
) -> int:
    """An authors'-code script's command line: compare on one CPU thread, write and print the table; exit 0 when every
    row is as expected, 1 when one is not, 2 when the authors' code is missing."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--peer", type=Path, default=peer, help="the authors' code, extracted (default %(default)s)")
    parser.add_argument("--out", type=Path, default=out, help="the table (default %(default)s)")
    args = parser.parse_args(argv)
    try:
        with one_thread():
            rows, facts = compare(args.peer)
    except PeerMissing as err:
        print(err, file=sys.stderr)
        return 2
    text = render(rows, facts)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0 if all(r.as_expected for r in rows) else 1


STAT_SUFFIXES = ("running_mean", "running_var", "num_batches_tracked")  # BatchNorm statistics, not weights


def to_peer(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """pfedkit's names (body.*, head.*) as the code's (unprefixed, fc.*)."""
    return {("fc." + k[5:]) if k.startswith("head.") else k.removeprefix("body."): v for k, v in state.items()}


def from_peer(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {("head." + k[3:]) if k.startswith("fc.") else "body." + k: v.detach().clone() for k, v in state.items()}


def is_stat(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in STAT_SUFFIXES


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], keys: list[str]) -> float:
    if not keys:
        raise ValueError("nothing to compare")
    worst = 0.0
    for k in keys:
        if a[k].shape != b[k].shape:
            return math.inf
        worst = max(worst, float((a[k].double() - b[k].double()).abs().max()))
    return worst
