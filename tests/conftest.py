"""Shared fixtures: a tiny split model and client data small enough to check updates by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from pfedkit.testing import make, tiny_context, tiny_data, tiny_model  # noqa: F401  (the tests' helpers: pfedkit's)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    if not (SHARED_DATA / "mnist").exists():
        pytest.skip("../shared/data is not beside the repository")
    return SHARED_DATA
