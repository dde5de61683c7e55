"""``tree_equal`` and ``assert_tree_equal``: comparing pytrees leaf by leaf."""

from __future__ import annotations

import sys
from typing import Any

from .. import tree as _tree
from .._arrays import array_summary, is_array
from .._tree._text import clip


def _is_tracer(x: Any) -> bool:
    core = sys.modules.get("jax.core")
    tracer = getattr(core, "Tracer", None)
    return tracer is not None and isinstance(x, tracer)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float, complex)) and not isinstance(x, bool)


def _first_difference(a: Any, b: Any, typematch: bool, rtol: float, atol: float) -> str | None:
    """None when the leaves are equal, else a description of how they differ."""
    a_arr, b_arr = is_array(a), is_array(b)
    tolerant = (rtol != 0 or atol != 0) and _is_number(a) and _is_number(b)
    if a_arr or b_arr or tolerant:
        if not (a_arr and b_arr):
            if typematch:
                return f"an array vs a {type(b if a_arr else a).__name__}"
            # An array and a Python scalar compare by value (as numpy would).
        if typematch and type(a) is not type(b):
            return f"types differ: {type(a).__name__} vs {type(b).__name__}"
        import numpy as np

        x = np.asarray(a)
        y = np.asarray(b)
        if a_arr and b_arr:
            if x.shape != y.shape:
                return f"shapes differ: {array_summary(a)} vs {array_summary(b)}"
            if x.dtype != y.dtype:
                return f"dtypes differ: {array_summary(a)} vs {array_summary(b)}"
        try:
            if rtol == 0 and atol == 0:
                same = np.asarray(x == y) | (np.isnan(x) & np.isnan(y)) if x.dtype.kind in "fc" else np.asarray(x == y)
            else:
                same = np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True)
        except (TypeError, ValueError) as e:
            return f"cannot be compared: {e}"
        same = np.broadcast_to(same, np.broadcast_shapes(x.shape, y.shape))
        if bool(same.all()):
            return None
        bad = tuple(int(i) for i in np.argwhere(~same)[0])
        xv = x[bad] if x.shape else x
        yv = y[bad] if y.shape else y
        where = f" at index {bad}" if bad else ""
        return f"values differ{where}: {xv!r} vs {yv!r} ({int((~same).sum())} of {same.size} elements differ)"
    if typematch and type(a) is not type(b):
        return f"types differ: {type(a).__name__} vs {type(b).__name__}"
    try:
        eq = a == b
        ok = bool(eq)
    except Exception as e:  # a leaf whose == does not give a bool
        return f"cannot be compared: {e}"
    return None if ok else f"{a!r} != {b!r}"


def _compare(trees: tuple[Any, ...], typematch: bool, rtol: float, atol: float) -> str | None:
    if len(trees) < 1:
        raise TypeError("tree_equal needs at least one tree")
    if rtol < 0 or atol < 0:
        raise ValueError(f"rtol and atol must be >= 0, got rtol={rtol}, atol={atol}")
    first, treedef = _tree.flatten_with_path(trees[0])
    for i, t in enumerate(trees[1:], start=1):
        other, other_def = _tree.flatten_with_path(t)
        if other_def != treedef:
            return f"tree {i} has a different structure from tree 0:\n  {clip(str(other_def), 300)}\n  {clip(str(treedef), 300)}"
        for (path, a), (_, b) in zip(first, other):
            diff = _first_difference(a, b, typematch, rtol, atol)
            if diff is not None:
                loc = _tree.keystr(path) or "(root)"
                return f"leaf {loc} of tree {i} differs from tree 0: {diff}"
    return None


def tree_equal(*pytrees: Any, typematch: bool = False, rtol: float = 0.0, atol: float = 0.0) -> bool:
    """True when all ``pytrees`` have the same structure and equal leaves.

    Arrays (JAX or NumPy) must have equal shapes and dtypes and equal elements (NaN equals NaN),
    or, when ``rtol``/``atol`` is given, elements close as ``numpy.isclose``.  Other leaves
    compare with ``==``.  ``typematch=True`` also requires leaves of the same type (a Python
    float and a 0-d array then differ; without it they compare by value).  Static fields and
    node data are compared as part of the structure.

    Concrete values only: array leaves are read to host memory (this blocks on pending
    computations); inside ``jax.jit`` (tracers) it raises TypeError — compare there with
    ``jnp`` functions instead.

    Follows equinox.tree_equal (which returns a traced bool under jit instead).

    >>> tree_equal({'a': [1, 2.0]}, {'a': [1, 2.0]}), tree_equal([1], [1.5], atol=1)
    (True, True)
    """
    _reject_tracers(pytrees)
    return _compare(pytrees, typematch, rtol, atol) is None


def assert_tree_equal(*pytrees: Any, typematch: bool = False, rtol: float = 0.0, atol: float = 0.0) -> None:
    """As ``tree_equal``, but raise AssertionError naming the first differing leaf's key path
    (``.layers[0].weight``), the first differing index and both values, or the structures.

    >>> assert_tree_equal([1, (2, 3)], [1, (2, 4)])
    Traceback (most recent call last):
    ...
    AssertionError: leaf [1][1] of tree 1 differs from tree 0: 3 != 4
    """
    _reject_tracers(pytrees)
    message = _compare(pytrees, typematch, rtol, atol)
    if message is not None:
        raise AssertionError(message)


def _reject_tracers(trees: tuple[Any, ...]) -> None:
    if "jax" not in sys.modules:
        return
    for t in trees:
        for leaf in _tree.iter(t):
            if _is_tracer(leaf):
                raise TypeError(
                    "tree_equal / assert_tree_equal need concrete values but got a JAX tracer "
                    "(called inside jax.jit / grad / vmap); compare traced arrays with jnp "
                    "functions instead"
                )
