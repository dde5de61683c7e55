"""The libraries under comparison and each one's nearest equivalent of every benchmarked op.

Every operation of every library is a :class:`Bench`: a one-line statement run by ``timeit``
against a namespace holding the prepared inputs (the tree, its leaves and PyTreeDef, a second
equal tree, ...), so only the call itself is timed and the per-call harness cost is the same
for every library.  An operation a library lacks (or that raises on a tree) is an :class:`NA`
with the reason, shown as ``n/a`` in the report.

Semantics notes carried into the report:

- None is a leafless node in spruce, jax.tree_util and optree (default ``none_is_leaf=False``)
  and a leaf in dm-tree and torch.utils._pytree.
- dm-tree has no structure object: ``flatten`` and ``leaves`` both map to ``tree.flatten``
  (which returns the leaves only), ``unflatten`` to ``tree.unflatten_as(tree, leaves)``;
  ``structure``, ``treedef_eq``, ``treedef_hash`` and ``reduce`` are n/a.  It cannot register
  custom nodes, so the dataclass and module trees are n/a.
- torch.utils._pytree has no ``tree_reduce``: ``reduce`` is n/a.
- spruce caches a PyTreeDef's hash after the first ``hash()``: ``treedef_hash`` (the same
  PyTreeDef hashed repeatedly, as a dict lookup does) times the cached path for spruce.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
import timeit
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import bench_trees
from bench_trees import TreeCase

#: The benchmarked operations, in report order.
OPS: tuple[str, ...] = (
    "flatten",
    "unflatten",
    "leaves",
    "structure",
    "map",
    "map2",
    "flatten_with_path",
    "treedef_eq",
    "treedef_hash",
    "reduce",
)

OP_TITLES: dict[str, str] = {
    "flatten": "flatten → (leaves, treedef)",
    "unflatten": "unflatten(treedef, leaves)",
    "leaves": "leaves",
    "structure": "structure (treedef only)",
    "map": "map f over 1 tree",
    "map2": "map f over 2 trees",
    "flatten_with_path": "flatten with key paths",
    "treedef_eq": "treedef == equal treedef",
    "treedef_hash": "hash(treedef)",
    "reduce": "reduce (left fold)",
}

#: Operation groups for the geometric means of the report.
OP_GROUPS: dict[str, tuple[str, ...]] = {
    "structural": ("flatten", "leaves", "structure", "unflatten"),
    "traversal": ("map", "map2", "flatten_with_path"),
    "treedef & fold": ("treedef_eq", "treedef_hash", "reduce"),
}


@dataclass(frozen=True)
class Target:
    """A reported (not enforced) goal for the ratio spruce/fastest peer of one op."""

    geomean_max: float
    single_max: float | None = None


#: The project's goal: spruce ahead of the fastest peer on every op (geometric mean over trees
#: <= 0.7) and no single (tree, op) cell above 1.2, deep chains and treedef equality included.
TARGETS: dict[str, Target] = {
    op: Target(0.7, 1.2)
    for op in ("flatten", "leaves", "structure", "unflatten", "map", "map2", "flatten_with_path", "treedef_eq")
}


@dataclass(frozen=True)
class Bench:
    """One timed statement: ``stmt`` run with ``env`` as its globals."""

    stmt: str
    env: dict[str, Any]

    def timer(self) -> timeit.Timer:
        return timeit.Timer(self.stmt, globals=self.env)


@dataclass(frozen=True)
class NA:
    """An operation a library does not have for a tree, and why."""

    reason: str


Cell = Bench | NA


@dataclass
class Library:
    """A pytree library: its display name, version, and the factory of its benches."""

    name: str
    version: str
    module: Any
    make: Callable[[Any, TreeCase, Any, Any], dict[str, Cell]]
    is_spruce: bool = False
    notes: list[str] = field(default_factory=list)

    def benches(self, case: TreeCase) -> tuple[dict[str, Cell], int | None]:
        """The benches of every op on ``case`` (each checked by running it once), and the
        number of leaves the library sees (None if it cannot flatten the tree)."""
        if case.custom and self.name == "dm-tree":
            return {op: NA("no custom nodes") for op in OPS}, None
        t1, t2 = case.build(), case.build()
        try:
            cells = self.make(self.module, case, t1, t2)
        except Exception as e:  # the tree itself cannot be handled (e.g. RecursionError)
            return {op: NA(_err(e)) for op in OPS}, None
        checked: dict[str, Cell] = {}
        for op in OPS:
            cell = cells.get(op, NA("no equivalent"))
            if isinstance(cell, Bench):
                try:
                    cell.timer().timeit(1)
                except Exception as e:
                    cell = NA(_err(e))
            checked[op] = cell
        count = cells.get("_num_leaves")
        return checked, count.env["n"] if isinstance(count, Bench) else None


def _err(e: BaseException) -> str:
    return f"raises {type(e).__name__}"


def _f1(x: Any) -> Any:
    """The function mapped over one tree (identity: the library overhead is what is timed)."""
    return x


def _f2(x: Any, y: Any) -> Any:
    """The function mapped over two trees."""
    return x


def _count(acc: int, x: Any) -> int:
    """The reduction: counts leaves."""
    return acc + 1


def _common(t1: Any, t2: Any, td: Any, td2: Any, leaf_list: list[Any], /, **fns: Any) -> dict[str, Cell]:
    """Benches for a library with a treedef object; ``fns`` maps op names to its functions."""

    def b(stmt: str, fn: Any, **extra: Any) -> Bench:
        names = {"F": fn, "t1": t1, "t2": t2, "td": td, "td2": td2, "L": leaf_list, "f1": _f1, "f2": _f2, "fr": _count}
        return Bench(stmt, {**names, **extra})

    cells: dict[str, Cell] = {
        "treedef_eq": b("td == td2", None),
        "treedef_hash": b("F(td)", hash),
        "_num_leaves": Bench("", {"n": len(leaf_list)}),
    }
    for op, fn in fns.items():
        if isinstance(fn, tuple):  # (stmt, function)
            cells[op] = b(fn[0], fn[1])
        elif fn is None:
            cells[op] = NA("no equivalent")
        else:
            stmts = {"unflatten": "F(td, L)", "map": "F(f1, t1)", "map2": "F(f2, t1, t2)", "reduce": "F(fr, t1, 0)"}
            cells[op] = b(stmts.get(op, "F(t1)"), fn)
    return cells


# ---------------------------------------------------------------------------------------------
# Per-library adapters: (module, case, tree, equal tree) -> {op: Bench | NA}


def _spruce(t: Any, case: TreeCase, t1: Any, t2: Any) -> dict[str, Cell]:
    leaves, td = t.flatten(t1)
    return _common(
        t1, t2, td, t.structure(t2), leaves,
        flatten=t.flatten, unflatten=t.unflatten, leaves=t.leaves, structure=t.structure,
        map=t.map, map2=t.map, flatten_with_path=t.flatten_with_path, reduce=t.reduce,
    )  # fmt: skip


def _jax(jtu: Any, case: TreeCase, t1: Any, t2: Any) -> dict[str, Cell]:
    leaves, td = jtu.tree_flatten(t1)
    return _common(
        t1, t2, td, jtu.tree_structure(t2), leaves,
        flatten=jtu.tree_flatten, unflatten=jtu.tree_unflatten, leaves=jtu.tree_leaves,
        structure=jtu.tree_structure, map=jtu.tree_map, map2=jtu.tree_map,
        flatten_with_path=jtu.tree_flatten_with_path, reduce=jtu.tree_reduce,
    )  # fmt: skip


def _optree(ot: Any, case: TreeCase, t1: Any, t2: Any) -> dict[str, Cell]:
    ns = bench_trees.OPTREE_NAMESPACE if case.custom else ""
    leaves, td = ot.tree_flatten(t1, namespace=ns)
    if not ns:
        return _common(
            t1, t2, td, ot.tree_structure(t2), leaves,
            flatten=ot.tree_flatten, unflatten=ot.tree_unflatten, leaves=ot.tree_leaves,
            structure=ot.tree_structure, map=ot.tree_map, map2=ot.tree_map,
            flatten_with_path=ot.tree_flatten_with_path, reduce=ot.tree_reduce,
        )  # fmt: skip
    # Custom nodes live in a namespace: pass it (as optree users must).
    kw = ", namespace=NS"
    cells = _common(
        t1, t2, td, ot.tree_structure(t2, namespace=ns), leaves,
        flatten=("F(t1" + kw + ")", ot.tree_flatten), unflatten=ot.tree_unflatten,
        leaves=("F(t1" + kw + ")", ot.tree_leaves), structure=("F(t1" + kw + ")", ot.tree_structure),
        map=("F(f1, t1" + kw + ")", ot.tree_map), map2=("F(f2, t1, t2" + kw + ")", ot.tree_map),
        flatten_with_path=("F(t1" + kw + ")", ot.tree_flatten_with_path),
        reduce=("F(fr, t1, 0" + kw + ")", ot.tree_reduce),
    )  # fmt: skip
    for cell in cells.values():
        if isinstance(cell, Bench):
            cell.env["NS"] = ns
    return cells


def _torch(tp: Any, case: TreeCase, t1: Any, t2: Any) -> dict[str, Cell]:
    leaves, td = tp.tree_flatten(t1)
    return _common(
        t1, t2, td, tp.tree_structure(t2), leaves,
        flatten=tp.tree_flatten, unflatten=("F(L, td)", tp.tree_unflatten), leaves=tp.tree_leaves,
        structure=tp.tree_structure, map=tp.tree_map, map2=tp.tree_map,
        flatten_with_path=getattr(tp, "tree_flatten_with_path", None), reduce=None,
    )  # fmt: skip


def _dmtree(dm: Any, case: TreeCase, t1: Any, t2: Any) -> dict[str, Cell]:
    leaves = dm.flatten(t1)

    def b(stmt: str, fn: Any) -> Bench:
        return Bench(stmt, {"F": fn, "t1": t1, "t2": t2, "L": leaves, "f1": _f1, "f2": _f2})

    return {
        "flatten": b("F(t1)", dm.flatten),
        "unflatten": b("F(t1, L)", dm.unflatten_as),
        "leaves": b("F(t1)", dm.flatten),
        "structure": NA("no structure object"),
        "map": b("F(f1, t1)", dm.map_structure),
        "map2": b("F(f2, t1, t2)", dm.map_structure),
        "flatten_with_path": b("F(t1)", dm.flatten_with_path),
        "treedef_eq": NA("no structure object"),
        "treedef_hash": NA("no structure object"),
        "reduce": NA("no tree reduce"),
        "_num_leaves": Bench("", {"n": len(leaves)}),
    }


# ---------------------------------------------------------------------------------------------
# Discovery


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def load_pure_spruce(src: Path) -> ModuleType:
    """Import the uncompiled spruce source at ``src/spruce`` as package ``spruce_pure``.

    A second package name gives the pure modules their own ``sys.modules`` entries (and their
    own registry), so they run in this process beside the compiled build and are interleaved
    with it.  Raises RuntimeError if what was loaded is compiled code after all.
    """
    pkg = src / "spruce"
    spec = importlib.util.spec_from_file_location("spruce_pure", pkg / "__init__.py", submodule_search_locations=[str(pkg)])
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load spruce source from {pkg}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["spruce_pure"] = mod
    spec.loader.exec_module(mod)
    if mod.__compiled__:
        raise RuntimeError(f"{pkg} holds compiled extension modules; the pure build cannot be loaded from it")
    return mod


def discover(src: Path | None) -> tuple[list[Library], list[str]]:
    """The installed libraries (spruce first, then the pure build if ``src`` is given, then
    the peers), with their custom nodes registered; and the names of missing peers."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import spruce
    import spruce.tree

    libs: list[Library] = []
    missing: list[str] = []
    build = " (compiled)" if spruce.__compiled__ else " (NOT compiled)"
    libs.append(Library("spruce", _version("spruce") + build, spruce.tree, _spruce, is_spruce=True))
    if src is not None:
        pure = load_pure_spruce(src)
        version = f"{pure.__version__} (uncompiled: the source tree's src/spruce, imported as spruce_pure)"
        libs.append(Library("spruce-pure", version, pure.tree, _spruce, is_spruce=True))

    def peer(name: str, modname: str, dist: str, make: Callable[[Any, TreeCase, Any, Any], dict[str, Cell]]) -> None:
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            missing.append(name)
            return
        libs.append(Library(name, _version(dist), mod, make))

    peer("jax", "jax.tree_util", "jax", _jax)
    peer("optree", "optree", "optree", _optree)
    peer("dm-tree", "tree", "dm-tree", _dmtree)
    peer("torch", "torch.utils._pytree", "torch", _torch)
    # JAX first: spruce passes its own registrations on to jax.tree_util (its JAX bridge), and
    # JAX refuses a second registration, so JAX's numbers are for JAX's own registration.
    for lib in sorted(libs, key=lambda lib: lib.name != "jax"):
        if lib.name != "dm-tree":
            bench_trees.register_nodes("spruce" if lib.is_spruce else lib.name, lib.module)
    return libs, missing
