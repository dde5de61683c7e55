"""``spruce.apply_updates``: add optimizer updates to a model's array leaves (no JAX import)."""

from __future__ import annotations

from typing import Any

from .. import tree as _tree


def _is_none(x: Any) -> bool:
    return x is None


def apply_updates(model: Any, updates: Any) -> Any:
    """``model`` with ``updates`` added to its leaves: the step after an optax optimizer.

    Args:
      model: any pytree, e.g. a Module (static fields and non-array leaves are kept).
      updates: a pytree with ``model``'s structure, or a prefix of it with None: a None (a
        leaf the optimizer did not touch, as ``spruce.filter`` / ``filter_grad`` give for
        non-float leaves) leaves the model's leaf (or subtree) as it is; every other update
        leaf is added, ``p + u``, and the result keeps ``p``'s dtype.

    Returns:
      A new pytree like ``model``; ``model`` is not changed.

    Raises:
      ValueError: ``updates`` does not have ``model``'s structure (None counted as a prefix).

    Follows ``equinox.apply_updates`` (and ``optax.apply_updates``, whose dtype rule it keeps).

    >>> import numpy as np
    >>> apply_updates({'w': np.ones(2), 'step': 3}, {'w': np.full(2, 0.5), 'step': None})
    {'w': array([1.5, 1.5]), 'step': 3}
    """

    def add(u: Any, p: Any) -> Any:
        if u is None:
            return p
        out = p + u
        dtype = getattr(p, "dtype", None)
        if dtype is not None and getattr(out, "dtype", dtype) != dtype:
            out = out.astype(dtype)
        return out

    return _tree.map(add, updates, model, is_leaf=_is_none)
