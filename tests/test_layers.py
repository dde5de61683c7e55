"""The package's layout is its architecture: a layer imports only from the layers below it.

Layers, bottom to top (a module's layer is decided by its path under ``src/spruce``):

0. the engine: ``_tree/``;
1. the public faces of the engine and the shared vocabularies: ``tree``, ``tree_util``,
   ``_arrays``, ``_names``, ``_place``, ``_jax_bridge``, ``_partial``, ``_extras``, ``typing``,
   ``optree/`` (optree's names on the engine);
2. the model layer: ``_module/``;
3. the JAX layer: ``jax/``;
4. ``io/``, ``sharding/``, ``nn/`` (none of them imports another);
5. ``models/``, ``view/``;
6. the command line: ``cli/``;
7. the package's faces: ``__init__`` (which re-exports) and ``__main__``.

Within layer 1 and 7 modules may import each other (the faces and vocabularies are small and
flat); elsewhere a layer's folders do not import each other.

Every ``import`` and ``from ... import`` statement is read from the source (function-level
imports included), so a lazy import counts as an arrow too.  The same reading finds import
circles between modules, and files over 800 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "spruce"
MAX_LINES = 800

LAYERS: dict[str, int] = {
    "_tree": 0,
    "tree": 1,
    "tree_util": 1,
    "_arrays": 1,
    "_names": 1,
    "_place": 1,
    "_jax_bridge": 1,
    "_partial": 1,
    "_extras": 1,
    "typing": 1,
    "optree": 1,
    "_module": 2,
    "jax": 3,
    "io": 4,
    "sharding": 4,
    "nn": 4,
    "models": 5,
    "view": 5,
    "cli": 6,
    "__init__": 7,
    "__main__": 7,
}
LAYER_NAMES = ["engine", "shared vocabularies", "model layer", "JAX layer", "io/sharding/nn", "models/view", "cli", "package"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _top(module: str) -> str:
    """The first component below ``spruce`` (``'spruce.io._api'`` -> ``'io'``), or
    ``'__init__'`` for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, imported module)`` of every import of a spruce module in the file, relative ones
    resolved; ``from X import y`` yields ``X.y`` when that is a module of the package, else X."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "spruce" or alias.name.startswith("spruce."):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not (target == "spruce" or target.startswith("spruce.")):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield node.lineno, sub if _is_module(sub) else target


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:])
    return (SRC / rel).with_suffix(".py").is_file() or (SRC / rel / "__init__.py").is_file()


def _sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def _graph() -> dict[str, dict[str, int]]:
    graph: dict[str, dict[str, int]] = {}
    for path in _sources():
        module = _module_name(path)
        edges = graph.setdefault(module, {})
        for line, target in _imports(path):
            if target != module:
                edges.setdefault(target, line)
    return graph


def test_every_module_has_a_layer() -> None:
    unknown = sorted({_top(m) for m in _graph()} - set(LAYERS))
    assert unknown == [], f"modules outside every layer (add them to LAYERS): {unknown}"


def test_no_import_runs_upward_or_sideways() -> None:
    bad = []
    for module, edges in _graph().items():
        mine = LAYERS[_top(module)]
        for target, line in edges.items():
            if target == "spruce":  # `import spruce`: the package's face, above every layer but cli
                if mine < LAYERS["cli"]:
                    bad.append(f"{module}:{line} imports the package spruce (a layer above it)")
                continue
            theirs = LAYERS[_top(target)]
            same_folder = _top(target) == _top(module)
            if theirs > mine or (theirs == mine and not same_folder and mine not in (1, 7)):
                bad.append(
                    f"{module}:{line} ({LAYER_NAMES[mine]}) imports {target} ({LAYER_NAMES[theirs]})"
                )
    assert bad == [], "\n".join(bad)


def test_no_import_circle() -> None:
    """No circle among modules, counting every import (lazy ones included): a circle means two
    modules that cannot be read, or moved, apart.  (A package's ``__init__`` re-exporting its
    own submodules is not a circle: the submodules import their siblings, not the package.)"""
    full: dict[str, set[str]] = {m: set(e) for m, e in _graph().items()}
    seen: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(m: str) -> None:
        seen[m] = 1
        stack.append(m)
        for t in sorted(full.get(m, ())):
            if t.startswith(m + "."):  # a package importing its own submodule
                continue
            if seen.get(t) == 1:
                circles.append(stack[stack.index(t):] + [t])
            elif t not in seen:
                visit(t)
        stack.pop()
        seen[m] = 2

    for m in sorted(full):
        if m not in seen:
            visit(m)
    assert circles == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_file_over_800_lines(path: Path) -> None:
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(SRC)} has {n} lines (split it by concern)"
