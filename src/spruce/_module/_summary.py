"""``spruce.summary``: parameter counts and byte sizes per subtree."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .. import tree as _tree
from .._arrays import array_summary, format_bytes, shape_and_itemsize


@dataclasses.dataclass(frozen=True)
class SummaryRow:
    """One subtree: its key path (``''`` for the root, else e.g. ``'.layers[0]'``), depth,
    type name (``f32[2,3]`` for an array or ``jax.ShapeDtypeStruct``), number of array leaves
    (``arrays``), total elements (``params``) and total bytes.  None subtrees (e.g. a disabled
    bias) get no row.  What counts as an array leaf: see ``spruce.summary``."""

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
        """Total number of array elements (what
        ``sum(x.size for x in jax.tree.leaves(params))`` counts)."""
        return self.rows[0].params

    @property
    def bytes(self) -> int:
        """Total bytes of the array leaves (elements times ``dtype.itemsize``)."""
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
            lines.append(f"{lab:<{w}}  {r.params:>12,}  {format_bytes(r.bytes):>12}")
        return "\n".join(lines)


def summary(tree: Any, *, max_depth: int | None = 2, is_leaf: Any = None) -> Summary:
    """Count parameters (array elements) and bytes of ``tree``, per subtree.

    Only shapes and dtypes are read: nothing is computed on device or read from memory.

    What counts: every leaf with a ``shape`` that is a tuple of ints and a NumPy dtype (or a
    JAX extended dtype, as PRNG key arrays have) is an array leaf of ``prod(shape)`` elements
    and ``prod(shape) * dtype.itemsize`` bytes.  That covers JAX and NumPy arrays, NumPy
    scalars, ml_dtypes (bfloat16, float8_*, int4 — one byte per element, numpy's itemsize),
    tracers, and ``jax.ShapeDtypeStruct``: a model built with ``jax.eval_shape`` is counted
    without allocating it, with the same totals as the real one.

    What does not: Python scalars (``1``, ``0.5``, ``True``), strings, functions and other
    leaves count zero (within ``max_depth`` they get a row of zeros named by their type), as do
    objects whose shape has symbolic dimensions, and classes (``np.float32`` itself).  None
    (an empty place, e.g. a disabled bias) gets no row.

    Args:
      tree: any pytree (a Module, a dict of params, ...).
      max_depth: rows for subtrees down to this depth (root = 0); None for every node.
      is_leaf: as in ``spruce.tree.flatten``.

    Returns:
      A ``Summary``: ``.params``, ``.bytes``, ``.arrays`` totals and ``.rows`` (one
      ``SummaryRow`` per subtree, in tree order); ``print(summary(model))`` shows a table.

    Raises:
      ValueError: ``max_depth`` is negative.

    >>> import numpy as np
    >>> s = summary({'W': np.zeros((3, 4), np.float32), 'b': np.zeros(4, np.float32), 'n': 1})
    >>> s.params, s.bytes, [r.path for r in s.rows]
    (16, 64, ['', "['W']", "['b']", "['n']"])
    >>> import jax, jax.numpy as jnp
    >>> shapes = jax.eval_shape(lambda: {'W': jnp.zeros((3, 4)), 'b': jnp.zeros(4)})
    >>> shapes['W']
    ShapeDtypeStruct(shape=(3, 4), dtype=float32)
    >>> summary(shapes).params, summary(shapes).bytes, summary(shapes).rows[1].type_name
    (16, 64, 'f32[3,4]')
    """
    if max_depth is not None and max_depth < 0:
        raise ValueError(f"summary: max_depth must be None or >= 0, got {max_depth}")
    rows: dict[tuple[Any, ...], list[Any]] = {}

    def row(path: tuple[Any, ...], node: Any) -> list[Any]:
        r = rows.get(path)
        if r is None:
            name = type(node).__name__ if shape_and_itemsize(node) is None else array_summary(node)
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
        shaped = shape_and_itemsize(leaf)
        if shaped is None:
            continue
        size = math.prod(shaped[0])
        nbytes = size * shaped[1]
        depth = len(path) if max_depth is None else min(len(path), max_depth)
        for d in range(depth + 1):
            r = rows[path[:d]]
            r[3] += 1
            r[4] += size
            r[5] += nbytes
    return Summary(tuple(SummaryRow(*r) for r in rows.values()))
