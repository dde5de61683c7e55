"""The public API as a strict type checker sees it (the package ships ``py.typed``).

``mypy --strict`` on a user file that touches every public name of ``spruce``, ``spruce.tree``
and ``spruce.tree_util`` must pass: a name that a module binds but does not export (a renaming
import such as ``from .tree import map as tree_map`` with no literal ``__all__``) fails with
``Module "spruce.tree_util" does not explicitly export attribute "tree_map"``.

mypy reads the *source* package ``src/spruce`` (MYPYPATH, and ``--no-site-packages`` so that an
installed spruce cannot be picked up instead); JAX and NumPy, which spruce imports lazily, are
then unknown to it and typed as Any, which also keeps the run to a few seconds.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import types
from typing import ClassVar

import pytest

import spruce
import spruce.tree
import spruce.tree_util

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
MODULES = {"spruce": spruce, "st": spruce.tree, "tu": spruce.tree_util}
TYPE_ALIASES = {"KeyEntry", "KeyPath"}  # spruce.tree_util's, as jax.tree_util's

MYPY_INI = """\
[mypy]

[mypy-jax.*,numpy.*,ml_dtypes.*]
ignore_missing_imports = True
"""

# Calls whose types must line up, beyond the mere access of every name.
USES = """\
leaves, treedef = st.flatten({"b": [1, None], "a": (2,)})
n: int = treedef.num_leaves
rebuilt: object = st.unflatten(treedef, leaves)
# unflatten returns Any, as JAX's: the rebuilt tree is indexed without a cast
first: object = tu.tree_unflatten(treedef, [1, 2])["a"]
again: object = treedef.unflatten((1, 2))["b"][0]
squares: object = tu.tree_map(lambda x: x * x, [1, 2])
paths: list[tu.KeyPath] = [p for p, _ in tu.tree_leaves_with_path({"a": 1})]
entry: tu.KeyEntry = paths[0][0]
text: str = tu.keystr(paths[0])
report: spruce.Summary = spruce.summary({"w": [1.0]})
total: int = report.params
version: str = spruce.__version__
compiled: bool = spruce.__compiled__
"""


def _mypy(tmp_path: pathlib.Path, files: dict[str, str]) -> tuple[int, str]:
    """Run ``mypy --strict`` in a fresh interpreter on ``files`` (written to ``tmp_path``)."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "mypy.ini").write_text(MYPY_INI)
    env = {**os.environ, "MYPYPATH": str(SRC)}
    env.pop("PYTHONPATH", None)
    command = [sys.executable, "-m", "mypy", "--strict", "--no-site-packages", "--config-file", "mypy.ini",
               "--cache-dir", str(tmp_path / "cache"), *files]  # fmt: skip
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("alias", sorted(MODULES))
def test_all_lists_every_public_name(alias: str) -> None:
    module = MODULES[alias]
    names = list(module.__all__)
    assert len(names) == len(set(names)), f"{module.__name__}.__all__ has duplicates"
    missing = [name for name in names if not hasattr(module, name)]
    assert not missing, f"{module.__name__}.__all__ names what the module lacks: {missing}"
    # every other public binding is a submodule (spruce.nn, ... once imported)
    unlisted = [
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and name not in names and not isinstance(value, types.ModuleType)
    ]
    assert not unlisted, f"{module.__name__} binds public names that __all__ omits: {unlisted}"


def test_tree_util_only_rebinds_spruce_tree() -> None:
    canonical = {id(getattr(spruce.tree, name)) for name in spruce.tree.__all__}
    for name in spruce.tree_util.__all__:
        if name not in TYPE_ALIASES:
            assert id(getattr(spruce.tree_util, name)) in canonical, name


def _user_file() -> str:
    lines = ["from __future__ import annotations", "", "import spruce"]
    lines += ["import spruce.tree as st", "import spruce.tree_util as tu", ""]
    for alias, module in MODULES.items():
        values = [n for n in module.__all__ if n not in TYPE_ALIASES]
        lines.append(f"{alias}_names: list[object] = [")
        lines += [f"    {alias}.{name}," for name in values]
        lines.append("]")
    return "\n".join(lines) + "\n" + USES


@pytest.mark.slow
def test_mypy_strict_accepts_every_public_name(tmp_path: pathlib.Path) -> None:
    # probe.py uses a name that is bound but not exported: its error shows that the check is
    # strict and reads the source tree (an installed spruce is out of reach).
    probe = "import spruce.tree_util as tu\n\nprint(tu._Any)\n"
    returncode, report = _mypy(tmp_path, {"user.py": _user_file(), "probe.py": probe})
    errors = [line for line in report.splitlines() if ": error:" in line]
    expected = 'probe.py:3: error: Module "spruce.tree_util" does not explicitly export attribute "_Any"'
    assert returncode == 1 and len(errors) == 1 and errors[0].startswith(expected), (
        f"mypy --strict on user.py:\n{_user_file()}\n{report}"
    )


# -- spruce.typing at run time (tests/test_static_typing.py checks what the checkers see) ----------


def test_typed_names_are_the_engine_functions() -> None:
    # The typed declarations of spruce.tree exist for checkers only: at run time every name is
    # the engine's function itself, with no Python wrapper in between.
    from spruce._tree import _folds, _traverse, _treedef

    engine = {"flatten": _traverse.flatten, "structure": _traverse.structure, "leaves": _traverse.leaves,
              "iter": _traverse.iter_leaves, "leaves_with_path": _traverse.leaves_with_path,
              "flatten_with_path": _traverse.flatten_with_path, "map": _traverse.map,
              "map_with_path": _traverse.map_with_path, "reduce": _folds.reduce, "unflatten": _treedef.unflatten}  # fmt: skip
    for name, function in engine.items():
        assert getattr(spruce.tree, name) is function, name


def test_registration_sets_and_unregister_removes_the_node_marker() -> None:
    from spruce.typing import PyTreeNode

    class Point:
        def __init__(self, x: float) -> None:
            self.x = x

    assert not isinstance(Point(1.0), PyTreeNode)
    spruce.tree.register_pytree_node(Point, lambda p: ((p.x,), None), lambda _, xs: Point(*xs))
    try:
        assert Point.__dict__["__spruce_pytree__"] is True
        assert isinstance(Point(1.0), PyTreeNode)
    finally:
        spruce.tree.unregister(Point)
    assert "__spruce_pytree__" not in Point.__dict__
    assert not isinstance(Point(1.0), PyTreeNode)


def test_a_declared_marker_survives_unregister() -> None:
    import dataclasses

    @dataclasses.dataclass
    class Pair:  # ClassVar imported at module level: dataclasses reads the string annotation there
        __spruce_pytree__: ClassVar[bool] = True
        a: int
        b: int

    spruce.tree.register_dataclass(Pair)
    spruce.tree.unregister(Pair)
    assert Pair.__dict__["__spruce_pytree__"] is True


def test_modules_are_nodes_and_containers_are_not() -> None:
    from spruce.typing import PyTreeNode

    class Scale(spruce.Module):
        factor: float

    assert Scale.__spruce_pytree__ is True
    assert isinstance(Scale(2.0), PyTreeNode)
    assert not any(isinstance(x, PyTreeNode) for x in ({"a": 1}, [1], (1,), None, 1.0))


def test_type_parameters_exist_at_run_time() -> None:
    # Annotations evaluated at run time (typing.get_type_hints, a dataclass field) work.
    import typing

    from spruce.typing import PyTree

    def total(tree: PyTree[float], treedef: spruce.tree.PyTreeDef[dict[str, float]]) -> float:
        return 0.0

    hints = typing.get_type_hints(total, localns={"PyTree": PyTree, "spruce": spruce})
    assert typing.get_args(hints["tree"])[0] is float
    assert typing.get_args(hints["treedef"]) == (dict[str, float],)
    leaves, treedef = spruce.tree.flatten({"a": 1.0})
    assert treedef.unflatten(leaves) == {"a": 1.0}


def test_shape_strings_in_field_annotations_are_kept_and_not_checked() -> None:
    # A jaxtyping-style annotation is kept as written and never evaluated: the names in it need
    # not even exist (no jaxtyping here), and a value of another shape is accepted.
    class Linear(spruce.Module):
        weight: Float[Array, 'out in']  # noqa: F821, F722
        bias: Float[Array, ' out'] | None = None  # noqa: F821, F722

    layer = Linear(weight=[[1.0, 2.0]])
    assert Linear.__annotations__["weight"] == "Float[Array, 'out in']"
    assert spruce.tree.leaves(layer) == [1.0, 2.0]


def test_final_fields_are_ordinary_fields_at_run_time() -> None:
    # Final[...] is how a field is frozen for checkers (spruce.typing); at run time it is a field
    # like any other: set by __init__ (generated or hand-written), a child, frozen afterwards.
    import dataclasses
    from typing import Final

    class Auto(spruce.Module):
        weight: Final[float]

    class Hand(spruce.Module):
        weight: Final[float]

        def __init__(self, weight: float) -> None:
            self.weight = weight

    for module in (Auto(weight=2.0), Hand(2.0)):
        assert spruce.tree.leaves(module) == [2.0]
        with pytest.raises(dataclasses.FrozenInstanceError):
            module.weight = 3.0  # type: ignore[misc]
