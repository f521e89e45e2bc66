"""Every committed suite table rebuilds from the committed files alone (what a clean clone has), byte for byte."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pfedkit.papers.reproduce import run_suite
from pfedkit.papers.suites import SUITES

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
SHARED_DATA = REPO.parent / "shared" / "data"


def results_folder(suite: str, scale: str) -> Path:
    return RESULTS / (suite.replace("-", "_") + ("" if scale == "small" else f"_{scale}"))


def tracked(folder: Path) -> list[str]:
    done = subprocess.run(
        ["git", "ls-files", "--", str(folder.relative_to(REPO))], cwd=REPO, capture_output=True, text=True
    )
    return done.stdout.split() if done.returncode == 0 else []


CASES = [
    (name, scale)
    for name, suite in sorted(SUITES.items())
    for scale in suite.scales
    if (results_folder(name, scale) / "table.md").exists()
]


@pytest.mark.slow
@pytest.mark.parametrize("name, scale", CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_a_committed_table_rebuilds_from_committed_files(tmp_path, name, scale):
    if not SHARED_DATA.exists():
        pytest.skip("../shared/data is not beside the repository (the tables name which data are missing)")
    folder = results_folder(name, scale)
    if not tracked(folder):
        pytest.skip("not a git checkout")
    noise = SUITES[name].noise or {}
    borrowed = noise.get("suite", name) if isinstance(noise, dict) else name  # a list: floors of its own
    source = SUITES[borrowed]  # the suite whose noise rows give the floor (this one, or a borrowed one)
    folders = {results_folder(name, s) for s in SUITES[name].scales} | {
        results_folder(source.name, s) for s in source.scales
    }
    for sibling in folders:  # the suite's other scales, and a borrowed floor's suite
        for rel in tracked(sibling):  # a clean clone's copy of the folders
            target = tmp_path / sibling.name / Path(rel).relative_to(sibling.relative_to(REPO))
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, target)
    out = tmp_path / folder.name
    (out / "table.md").unlink()
    run_suite(
        SUITES[name],
        scale=scale,
        out=out,
        table_only=True,
        progress=False,
        data_root=str(SHARED_DATA),
        log=lambda *args: None,
    )
    assert (out / "table.md").read_text() == (folder / "table.md").read_text()


def test_a_table_of_a_suite_with_no_runs_leaves_no_folder(tmp_path):
    out = tmp_path / "nothing"
    run_suite(SUITES["fedpac-figure1"], out=out, table_only=True, progress=False, log=lambda *args: None)
    assert not out.exists()
