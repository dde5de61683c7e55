"""Folds over the leaves: ``reduce`` and ``reduce_associative`` (jax.tree_util's tree_reduce and
tree_reduce_associative).

Never compiled (setup.py leaves it out, as ``_pure``): their "no initializer" default is a
sentinel object, which a mypyc-compiled function cannot show in ``__text_signature__``, so
``inspect.signature`` and ``help`` would show no parameters.  Each is one call of ``leaves``
and a loop, so running them interpreted costs one frame per call.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from ._ops import MISSING
from ._traverse import IsLeaf, leaves


def reduce(
    function: Callable[[Any, Any], Any],
    tree: Any,
    initializer: Any = MISSING,
    is_leaf: IsLeaf = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """Fold ``function`` over the leaves, left to right, as jax.tree_util.tree_reduce.

    ``reduce(f, tree)`` is ``functools.reduce(f, leaves(tree))``; with ``initializer`` it starts
    from that value.

    Raises:
      TypeError: the tree has no leaves and no initializer was given.

    >>> reduce(lambda a, b: a + b, {'x': 1, 'y': [2, 3]})
    6
    >>> reduce(lambda a, b: a + b, [], 0)
    0
    """
    ls = leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    if initializer is MISSING:
        if not ls:
            raise TypeError("reduce of a pytree with no leaves needs an initializer")
        return functools.reduce(function, ls)
    return functools.reduce(function, ls, initializer)


def reduce_associative(
    operation: Callable[[Any, Any], Any],
    tree: Any,
    *,
    identity: Any = MISSING,
    is_leaf: IsLeaf = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """Reduce the leaves with an associative ``operation`` in a balanced binary tree of calls
    (depth log2(n) instead of n), as jax.tree_util.tree_reduce_associative.

    ``identity`` is returned for a tree with no leaves.

    Raises:
      ValueError: the tree has no leaves and no identity was given.

    >>> reduce_associative(lambda a, b: a + b, [1, 2, 3, 4, 5])
    15
    """
    ls = leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    if not ls:
        if identity is MISSING:
            raise ValueError("reduce_associative of a pytree with no leaves needs an identity")
        return identity
    while len(ls) > 1:
        nxt = [operation(ls[i], ls[i + 1]) for i in range(0, len(ls) - 1, 2)]
        if len(ls) % 2:
            nxt.append(ls[-1])
        ls = nxt
    return ls[0]
