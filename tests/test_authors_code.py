"""pfedkit's methods against their authors' released code, step by step (benchmarks/authors_*.py).

Each needs the authors' checkout in an ignored folder (.peers/<name>) and is skipped without it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FEDPAC_PEER = REPO / ".peers" / "FedPAC"

needs_fedpac = pytest.mark.skipif(
    not (FEDPAC_PEER / "running.py").is_file() or importlib.util.find_spec("cvxpy") is None,
    reason="the authors' FedPAC checkout (.peers/FedPAC, from github:JianXu95/FedPAC) or cvxpy is missing",
)


def authors_fedpac():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import authors_fedpac
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return authors_fedpac


@needs_fedpac
def test_fedpac_matches_the_authors_code_step_by_step():
    script = authors_fedpac()
    rows = script.compare(script.Setting(), FEDPAC_PEER).rows
    for step in (
        "V_i",
        "h_i",
        "head after",
        "body after",
        "local prototypes",
        "body average",
        "global prototypes",
        "head weights",
        "combined heads",
    ):
        assert any(step in what for what in rows if what.startswith("round 1")), step
    beyond = {what: diff for what, (diff, tolerance) in rows.items() if not diff <= tolerance}
    assert not beyond, f"pfedkit's FedPAC parts from the authors' code: {beyond}"


@needs_fedpac
def test_the_fedpac_comparison_sees_a_slightly_wrong_update():
    """The same comparison with pfedkit's lambda 1% off (a shorter setting) finds the aligned body step apart."""
    script = authors_fedpac()
    small = script.Setting(clients=2, train_per_client=60, body_epochs=2)
    rows = script.compare(small, FEDPAC_PEER, perturb={"align_weight": 1.01}).rows
    body = "round 1: body after 2 body epochs (CE + lambda * MSE to the global prototypes)"
    assert rows[body][0] > rows[body][1]
    assert rows["round 0: body after 2 body epochs (CE only)"][0] <= script.TOLERANCE  # lambda is off in round 0
