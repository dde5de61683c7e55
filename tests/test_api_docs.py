"""docs/api.md, the API reference, is what ``scripts/gen_api_docs.py`` writes from the
docstrings today (the same on every interpreter and build), and covers every public name of
every module the generator documents."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api.md"


def _generator() -> ModuleType:
    """scripts/gen_api_docs.py as a module (importing it imports no part of spruce)."""
    spec = importlib.util.spec_from_file_location("gen_api_docs", ROOT / "scripts" / "gen_api_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: the modules the generator documents, from the generator itself (so the two cannot drift)
MODULES: list[str] = list(_generator().MODULES)

pytestmark = pytest.mark.subprocess


@pytest.mark.slow
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


def test_the_generator_documents_every_subpackage() -> None:
    import spruce

    # every subpackage `import spruce` offers, but the command line (documented by its --help)
    assert {f"spruce.{name}" for name in spruce._SUBPACKAGES - {"cli"}} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_is_in_the_reference(module: str) -> None:
    """Every name in ``module.__all__`` has a heading, a row of an alias table or a ``Modules:``
    link; so has every name of the submodules it lists (``spruce.models.bert``), which the
    generator documents in sections of their own."""
    text = API.read_text(encoding="utf-8")
    headings = set(re.findall(r"^#{3,4} (\S+)$", text, re.M))
    table = set(re.findall(r"^\| `([\w.]+)` \| \[`[\w.]+`\]\(#[\w-]+\) \|$", text, re.M))
    modules = set(re.findall(r"\[`([\w.]+)`\]\(#[\w-]+\)", "\n".join(re.findall(r"^Modules: .*$", text, re.M))))
    lines = text.split("\n")
    todo = [module]
    while todo:
        name = todo.pop()
        assert f"## {name}" in lines, f"docs/api.md has no section for {name}"
        mod = importlib.import_module(name)
        for attr in mod.__all__:
            qualname = f"{name}.{attr}"
            assert qualname in headings | table | modules, f"{qualname} is missing from docs/api.md"
            obj = getattr(mod, attr)
            if inspect.ismodule(obj) and obj.__name__ not in MODULES:
                todo.append(obj.__name__)


def test_links_point_at_headings() -> None:
    text = API.read_text(encoding="utf-8")
    anchors = {re.sub(r"[^a-z0-9_-]", "", h.lower().replace(" ", "-")) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    targets = set(re.findall(r"\]\(#([\w-]+)\)", text))
    assert targets and targets <= anchors, sorted(targets - anchors)
