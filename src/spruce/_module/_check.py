"""``tree_check``: a pytree is a tree — no node inside itself, no node in two places."""

from __future__ import annotations

from typing import Any

from .. import tree as _tree
from .._tree._text import clip


def _where(cell: Any) -> str:
    """The key path of a path cell ``(parent cell, key)`` (None for the root), as text."""
    keys = []
    while cell is not None:
        cell, key = cell
        keys.append(key)
    return clip(_tree.keystr(tuple(reversed(keys))), 300) if keys else "the root"


def tree_check(tree: Any) -> None:
    """Raise ValueError unless ``tree`` is a tree in the strict sense: no node contains itself
    (a cycle), and no node — a container or registered object with at least one child —
    appears twice (the same Python object at two key paths).  Returns None.

    Leaves may repeat (``[x, x]`` with an array ``x``), and so may nodes without children
    (``None``, ``[]``, a Module with no non-static fields): flattening and unflattening loses
    nothing for them.  A node with children that appears twice is legal for JAX, but every
    transform (``jax.jit``, ``jax.grad``, ...) flattens and rebuilds the tree, and the copy then
    holds two independent nodes where there was one: parameters meant to be tied are no longer
    tied.  Call ``tree_check`` before a transform to catch that early (tie parameters with
    ``spruce.nn.Shared`` instead).

    The error names the node's type and both key paths: where the node is first met and where
    it is met again (for a cycle, where it contains itself).  The walk uses no recursion, so no
    depth can overflow the stack; it visits nodes in flattening order.

    Follows ``equinox.tree_check`` (same rule for leaves and for nodes without children).

    >>> tree_check({'a': [1, 2], 'b': [1, 2]})      # equal but distinct lists: fine
    >>> shared = [1, 2]
    >>> tree_check({'a': shared, 'b': shared})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: tree_check: the list at ['a'] appears again at ['b']: a node with children may appear only once ...
    """
    # Key paths are kept as linked cells (parent cell, key), shared between siblings, so a deep
    # tree costs memory in proportion to its size, not to size times depth.
    # id -> (path cell where first met, still open: an ancestor of the node being visited)
    seen: dict[int, tuple[Any, bool]] = {}
    # Work items: (node, path cell) to visit, or (closing, id) once the node of that id is done.
    closing = object()
    stack: list[tuple[Any, Any]] = [(tree, None)]
    while stack:
        node, path = stack.pop()
        if node is closing:
            first, _ = seen[path]
            seen[path] = (first, False)
            continue
        children, treedef = _tree.flatten_one_level_with_path(node)
        if not children or _tree.treedef_is_leaf(treedef):  # a node without children, or a leaf
            continue
        key = id(node)
        met = seen.get(key)
        if met is not None:
            first, open_ = met
            kind = type(node).__name__
            if open_:
                raise ValueError(
                    f"tree_check: the {kind} at {_where(first)} contains itself at "
                    f"{_where(path)}: a pytree cannot hold a cycle"
                )
            raise ValueError(
                f"tree_check: the {kind} at {_where(first)} appears again at {_where(path)}: a "
                "node with children may appear only once in a pytree (transforms such as jax.jit "
                "flatten and rebuild the tree, which makes two independent copies of it); leaves "
                "and empty nodes may repeat"
            )
        seen[key] = (path, True)
        stack.append((closing, key))
        for k, child in reversed(children):
            stack.append((child, (path, k)))
