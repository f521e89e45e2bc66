"""The package's layering (pyproject.toml, [tool.importlinter]) holds: no import runs up a layer, no import cycle
between layers, the core never imports Flower or Ray, and only the tuner and run tracking import their extras."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold():
    tool = Path(sys.executable).parent / "lint-imports"
    command = [str(tool)] if tool.exists() else [shutil.which("lint-imports") or "lint-imports"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout and "3 kept" in result.stdout


def test_the_tree_is_formatted_and_lint_free():
    """ruff as configured in pyproject.toml: `ruff format --check` and `ruff check` (lines within 120 characters,
    pyflakes, import order) on every Python file."""
    for args in (["format", "--check"], ["check"]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *args, "."], cwd=REPO, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, f"ruff {' '.join(args)}:\n{result.stdout[-3000:]}{result.stderr[-1000:]}"
