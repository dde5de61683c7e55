"""pytest configuration for the doctests of ``src/spruce`` (``--doctest-modules src/spruce``).

The examples save checkpoints under ``tempfile.mkdtemp()``, as a user would; here that folder
is made inside pytest's own temporary directory (which pytest prunes), so a run of the suite
leaves nothing in the system's temporary directory.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _examples_write_under_pytest_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
