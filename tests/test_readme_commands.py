"""Every command README.md shows runs: read out of README.md itself, each made tiny (one or two rounds, a sliver of
the data, a scratch folder) and run as a user would type it. A command added to the README without a way to make it
tiny here fails the test, so a README command cannot break unseen."""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DATA = REPO.parent / "shared" / "data"
TINY = ["--set", "train.rounds=1", "--set", "data.fraction=0.02", "--set", "partition.clients=4"]


def fenced(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)


def readme_commands() -> list[str]:
    """Each shell command of the README's bash blocks, its comment cut off."""
    commands = []
    for block in fenced("bash"):
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def tiny(command: str, scratch: Path) -> list[str] | None:
    """The command as a user types it, with its outputs in `scratch`, DATA the shared data, and a tiny setting;
    None for a set-up command (what CI itself runs)."""
    # the set-up lines: `bash setup.sh` is what CI itself runs, and so is the test suite; the demo runs here
    command = command.split("&&")[-1].strip() if command.startswith("bash setup.sh") else command
    if command.startswith(("bash setup.sh", "python3 -m pytest")):
        return None
    words = shlex.split(command.replace("DATA", str(DATA)))
    words = [str(scratch / w) if w.startswith("runs/") else w for w in words]
    if words[0] == "pfedkit":
        words = ["python3", "-m", "pfedkit", *words[1:]]
    if words[:3] == ["python3", "-m", "pfedkit"]:
        words[0] = sys.executable
    verb = words[3] if words[:3] == [sys.executable, "-m", "pfedkit"] else None
    if verb == "demo":
        return words + ["--rounds", "2", "--out", str(scratch / "demo"), "--quiet"]
    if verb in ("run", "compare"):
        return words + TINY
    if verb == "tune":
        trials = words.index("--trials")
        return words[: trials + 1] + ["2"] + words[trials + 2 :] + TINY
    if verb == "reproduce" and "--list" in words:
        return words
    if verb == "reproduce":
        seeds = words.index("--seeds")
        words = words[: seeds + 1] + ["0"] + words[seeds + 2 :]
        return words + ["--rows", "fedavg", "--columns", "pat", "--data-root", str(DATA), *TINY[:4]]
    raise AssertionError(f"README shows {command!r}, which this test cannot make tiny: teach tiny() about it")


def run(words: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(words, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def test_the_readme_commands_are_found_and_each_has_a_tiny_form(tmp_path):
    commands = readme_commands()
    verbs = {shlex.split(c)[1] for c in commands if c.startswith("pfedkit")}
    assert {"run", "compare", "reproduce", "tune"} <= verbs, commands
    assert any("pfedkit demo" in c for c in commands)
    for command in commands:
        tiny(command, tmp_path)  # raises for a command it does not know


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "mnist").exists(), reason="needs ../shared/data/mnist")
@pytest.mark.parametrize("command", readme_commands())
def test_each_readme_command_runs(command, tmp_path):
    if " tune " in command:
        pytest.importorskip("optuna")
    words = tiny(command, tmp_path)
    if words is None:
        pytest.skip("set-up: what CI itself runs")
    done = run(words, REPO)
    assert done.returncode == 0, f"{' '.join(words)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    print(f"ran: {' '.join(words)}")


@pytest.mark.slow
def test_the_readme_python_example_runs_and_prints_numbers(tmp_path):
    """The README's Python block, run in a scratch folder with 2 rounds: what it prints are numbers (a column's last
    entry is a (round, value) pair, which the block must unpack)."""
    (block,) = [b for b in fenced("python") if "pfedkit.run(" in b]
    code = block.replace('"rounds": 20', '"rounds": 2').replace("examples/", f"{REPO}/examples/")
    printed = []
    env = {"print": lambda *values: printed.extend(values)}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(code, "README.md", "exec"), env)
    finally:
        os.chdir(cwd)
    assert printed and all(isinstance(v, (int, float)) for v in printed), printed
    assert ast.parse(block)  # the block is valid Python as shown
