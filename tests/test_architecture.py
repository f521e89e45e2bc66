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


def test_no_module_of_pfedkit_imports_itself_back():
    """No import circle among pfedkit's modules, imports inside functions included (grimp reads every import)."""
    import grimp

    graph = grimp.build_graph("pfedkit")
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph.find_modules_directly_imported_by(module):
            if not other.startswith("pfedkit"):
                continue
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    assert not circles, f"import circles: {circles}"


def test_every_random_draw_of_the_package_is_seeded_in_seeding_py():
    """Seeds are derived in one place (pfedkit/seeding.py): a generator made elsewhere is a seed derived elsewhere.
    pfedkit/testing.py (helpers for users' tests) is the one exception."""
    import re

    made = re.compile(r"default_rng\(|torch\.Generator\(|manual_seed\(|np\.random\.seed\(|random\.seed\(")
    found = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "pfedkit").rglob("*.py"))
        if path.name not in ("seeding.py", "testing.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if made.search(line)
    ]
    assert not found, f"seeded outside pfedkit/seeding.py: {found}"


def test_data_set_names_come_from_one_table():
    from pfedkit.data import fetch, sources

    assert sources.DATASET_NAMES == tuple(sources.LOADERS)
    for table in (fetch.CHECKSUMS, fetch.CONTENT_CHECKSUMS, fetch.BASE_URLS, fetch.ARCHIVES):
        assert set(table) <= set(sources.DATASET_NAMES)
