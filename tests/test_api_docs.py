"""docs/api.md, the API reference, is what ``scripts/gen_api_docs.py`` writes from the
docstrings today (the same on every interpreter and build), and covers every public name."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api.md"

pytestmark = pytest.mark.subprocess


def test_api_reference_is_up_to_date() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_api_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, (
        "docs/api.md is stale: regenerate it with `make docs` (or `python scripts/gen_api_docs.py`)"
        f" and commit it.\n{proc.stdout}{proc.stderr[-3000:]}"
    )


@pytest.mark.parametrize(
    "module", ["spruce", "spruce.tree", "spruce.tree_util", "spruce.jax", "spruce.nn", "spruce.io", "spruce.models"]
)
def test_every_public_name_is_in_the_reference(module: str) -> None:
    text = API.read_text(encoding="utf-8")
    headings = set(re.findall(r"^#{3,4} (\S+)$", text, re.M))
    table = set(re.findall(r"^\| `([\w.]+)` \| \[`[\w.]+`\]\(#[\w-]+\) \|$", text, re.M))
    modules = set(re.findall(r"\[`([\w.]+)`\]\(#[\w-]+\)", "\n".join(re.findall(r"^Modules: .*$", text, re.M))))
    assert f"## {module}" in text.split("\n")
    for name in importlib.import_module(module).__all__:
        qualname = f"{module}.{name}"
        assert qualname in headings | table | modules, f"{qualname} is missing from docs/api.md"


def test_links_point_at_headings() -> None:
    text = API.read_text(encoding="utf-8")
    anchors = {re.sub(r"[^a-z0-9_-]", "", h.lower().replace(" ", "-")) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    targets = set(re.findall(r"\]\(#([\w-]+)\)", text))
    assert targets and targets <= anchors, sorted(targets - anchors)
