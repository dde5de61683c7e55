"""``filter_shard``: place the array leaves of a pytree on devices or shardings, outside or
inside a trace (re-exported by ``spruce.jax``; the placement itself is ``spruce._place``).
"""

from __future__ import annotations

from typing import Any

from .. import tree as _tree
from .._place import leaf_shardings, place


def filter_shard(x: Any, device_or_shardings: Any) -> Any:
    """Place the array leaves of ``x``: ``jax.device_put`` outside a trace, and
    ``jax.lax.with_sharding_constraint`` on traced leaves (inside ``jax.jit`` /
    ``filter_jit``).  Non-array leaves (Python numbers, strings, functions, static Module
    fields) pass through unchanged.

    Args:
      x: any pytree.
      device_or_shardings: a ``jax.Device``, a ``jax.sharding.Sharding``, or a tree of them (or
        None: that subtree is left where it is) whose structure is a prefix of ``x``'s; e.g.
        ``spruce.sharding.shardings(x, mesh, rules)``, whose None entries for non-array leaves
        fit.  An entry that covers a subtree applies to every array leaf in it.

    Returns:
      A tree of the same structure: array leaves as ``jax.Array``s on their shardings (NumPy
      arrays are copied to the devices, each receiving only its slice), or constrained tracers;
      a ``jax.ShapeDtypeStruct`` leaf gets the sharding as its own (an abstract placement).

    Raises:
      TypeError: an entry that is not a Sharding, Device or None (naming its key path).
      ValueError: the shardings are not a prefix of ``x`` (naming the key path); a sharding that
        does not fit its array (naming the key path; JAX's error is chained).

    Follows ``equinox.filter_shard``, except that None entries leave a subtree alone, and that
    outside a trace it calls ``jax.device_put`` (equinox uses ``with_sharding_constraint``
    everywhere).

    >>> import jax, numpy as np
    >>> out = filter_shard({'w': np.ones(2), 'act': 'relu'}, jax.devices()[0])
    >>> type(out['w']).__name__, out['act'], out['w'].sharding.device_set == {jax.devices()[0]}
    ('ArrayImpl', 'relu', True)
    """
    leaves, treedef = _tree.flatten(x)
    placements = leaf_shardings(device_or_shardings, x, "filter_shard")

    def where(i: int) -> str:
        path = _tree.leaves_with_path(x)[i][0]
        return f"key path {_tree.keystr(path)}" if path else "the root"

    return treedef.unflatten(place(leaves, placements, "filter_shard", where))
