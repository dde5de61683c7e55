"""``spruce.summary``: parameter counts and byte sizes per subtree."""

from __future__ import annotations

import dataclasses
from typing import Any

from . import tree as _tree
from ._module._arrays import array_summary, is_array


@dataclasses.dataclass(frozen=True)
class SummaryRow:
    """One subtree: its key path (``''`` for the root, else e.g. ``'.layers[0]'``), depth,
    type name (``f32[2,3]`` for an array), number of array leaves, total elements
    (``params``) and total bytes.  None subtrees (e.g. a disabled bias) get no row."""

    path: str
    depth: int
    type_name: str
    arrays: int
    params: int
    bytes: int


@dataclasses.dataclass(frozen=True)
class Summary:
    """The result of ``spruce.summary``: ``rows`` in tree order (root first), with
    ``params`` / ``bytes`` / ``arrays`` totals of the whole tree.  ``str()`` is a table."""

    rows: tuple[SummaryRow, ...]

    @property
    def params(self) -> int:
        """Total number of array elements (the seed's ``n_params``)."""
        return self.rows[0].params

    @property
    def bytes(self) -> int:
        """Total bytes of the array leaves (``size * itemsize``)."""
        return self.rows[0].bytes

    @property
    def arrays(self) -> int:
        """Number of array leaves."""
        return self.rows[0].arrays

    def __str__(self) -> str:
        labels = [("  " * r.depth) + (r.path or "(root)") + f"  {r.type_name}" for r in self.rows]
        w = max(len(s) for s in labels + ["subtree"])
        lines = [f"{'subtree':<{w}}  {'params':>12}  {'bytes':>12}"]
        for lab, r in zip(labels, self.rows):
            lines.append(f"{lab:<{w}}  {r.params:>12,}  {_human(r.bytes):>12}")
        return "\n".join(lines)


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]  # int -> float on purpose
    return f"{n} B"  # pragma: no cover


def summary(tree: Any, *, max_depth: int | None = 2, is_leaf: Any = None) -> Summary:
    """Count parameters (array elements) and bytes of ``tree``, per subtree.

    Args:
      tree: any pytree (a Module, a dict of params, ...).
      max_depth: rows for subtrees down to this depth (root = 0); None for every node.
      is_leaf: as in ``spruce.tree.flatten``.

    Returns:
      A ``Summary``: ``.params``, ``.bytes``, ``.arrays`` totals and ``.rows`` (one
      ``SummaryRow`` per subtree, in tree order); ``print(summary(model))`` shows a table.
      Only array leaves (``spruce.is_array``: JAX and NumPy arrays) count; Python scalars and
      other leaves count zero.  Nothing is computed on device (shapes and dtypes only).

    >>> import numpy as np
    >>> s = summary({'W': np.zeros((3, 4), np.float32), 'b': np.zeros(4, np.float32), 'n': 1})
    >>> s.params, s.bytes, [r.path for r in s.rows]
    (16, 64, ['', "['W']", "['b']", "['n']"])
    """
    if max_depth is not None and max_depth < 0:
        raise ValueError(f"summary: max_depth must be None or >= 0, got {max_depth}")
    rows: dict[tuple[Any, ...], list[Any]] = {}

    def row(path: tuple[Any, ...], node: Any) -> list[Any]:
        r = rows.get(path)
        if r is None:
            name = array_summary(node) if is_array(node) else type(node).__name__
            r = [_tree.keystr(path), len(path), name, 0, 0, 0]
            rows[path] = r
        return r

    # Visit the nodes down to max_depth in pre-order, to name them and their types.
    stack: list[tuple[tuple[Any, ...], Any]] = [((), tree)]
    while stack:
        path, node = stack.pop()
        if node is None and path:
            continue  # an empty place (a disabled bias): no row
        row(path, node)
        if max_depth is not None and len(path) >= max_depth:
            continue
        if is_leaf is not None and is_leaf(node):
            continue
        if _tree.is_leaf(node):
            continue
        children, _ = _tree.flatten_one_level_with_path(node)
        stack.extend((path + (k,), c) for k, c in reversed(children))
    for path, leaf in _tree.leaves_with_path(tree, is_leaf):
        if not is_array(leaf):
            continue
        size = int(getattr(leaf, "size", 0))
        nbytes = size * int(leaf.dtype.itemsize)
        depth = len(path) if max_depth is None else min(len(path), max_depth)
        for d in range(depth + 1):
            r = rows[path[:d]]
            r[3] += 1
            r[4] += size
            r[5] += nbytes
    return Summary(tuple(SummaryRow(*r) for r in rows.values()))
