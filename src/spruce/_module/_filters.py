"""filter / partition / combine: splitting a pytree by a predicate on its leaves and merging it
back.  Semantics follow equinox.filter / partition / combine: removed leaves become ``None``
(an empty node), and ``combine`` takes the first non-None leaf at each position.

``spruce.partition(tree, filter_spec)`` (this module) is Equinox's function; the engine's
``spruce.tree.partition(pred, tree)`` is optree's, with the arguments the other way round.  One
implementation does the work of both: this module turns a filter spec (a prefix tree of bools
and predicates) into one flag per leaf and hands them to the engine's partition.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import tree as _tree

IsLeaf = Callable[[Any], bool] | None


def _keep_mask(spec: Any, subtree: Any, is_leaf: IsLeaf) -> Any:
    """A tree of bools (subtree's structure) from one filter_spec leaf."""
    if isinstance(spec, bool):
        return _tree.map(lambda _: spec, subtree, is_leaf=is_leaf)
    if callable(spec):

        def keep(x: Any) -> bool:
            out = spec(x)
            if not isinstance(out, bool):
                raise TypeError(
                    f"filter: the filter_spec function {getattr(spec, '__name__', spec)!r} must "
                    f"return a bool for every leaf, got {type(out).__name__} for a leaf of type "
                    f"{type(x).__name__}"
                )
            return out

        return _tree.map(keep, subtree, is_leaf=is_leaf)
    raise TypeError(
        f"filter: filter_spec leaves must be bools or callables (leaf -> bool), got {type(spec).__name__}"
    )


def _flags(tree: Any, filter_spec: Any, is_leaf: IsLeaf) -> list[bool]:
    """One bool per leaf of ``tree``, in leaf order: whether ``filter_spec`` keeps it."""
    spec_def = _tree.structure(filter_spec)
    subtrees = spec_def.flatten_up_to(tree)
    flags: list[bool] = []
    for spec, subtree in zip(_tree.leaves(filter_spec), subtrees):
        flags += _tree.leaves(_keep_mask(spec, subtree, is_leaf))
    return flags


def _split(tree: Any, filter_spec: Any, replace: Any, is_leaf: IsLeaf) -> tuple[Any, Any]:
    """``(kept, rest)``: the engine's one partition (``spruce.tree.partition``), driven by the
    flags of ``filter_spec``, one per leaf in leaf order."""
    flags = iter(_flags(tree, filter_spec, is_leaf))
    return _tree.partition(lambda _: next(flags), tree, replace, is_leaf)


def filter(
    tree: Any,
    filter_spec: Any,
    inverse: bool = False,
    replace: Any = None,
    is_leaf: IsLeaf = None,
) -> Any:
    """Keep the leaves of ``tree`` selected by ``filter_spec``; replace the others.

    Args:
      tree: any pytree.
      filter_spec: a bool, a callable ``leaf -> bool`` (e.g. ``spruce.is_array``), or a pytree
        that is a prefix of ``tree`` whose leaves are bools or callables; each spec leaf
        applies to every leaf of the matching subtree of ``tree``.
      inverse: keep the leaves that are *not* selected.
      replace: what removed leaves become (default None, an empty node, which ``combine``
        fills back in).
      is_leaf: as in ``spruce.tree.flatten``, for ``tree``.

    Returns:
      A pytree like ``tree`` with removed leaves set to ``replace``.

    Raises:
      ValueError: ``filter_spec`` is not a prefix of ``tree`` (names the key path).
      TypeError: a spec leaf is neither bool nor callable, or a callable returns a non-bool.

    >>> import spruce
    >>> filter([1, 'a', 2.0], lambda x: isinstance(x, (int, float)))
    [1, None, 2.0]
    """
    kept, rest = _split(tree, filter_spec, replace, is_leaf)
    return rest if inverse else kept


def partition(
    tree: Any,
    filter_spec: Any,
    replace: Any = None,
    is_leaf: IsLeaf = None,
) -> tuple[Any, Any]:
    """Split ``tree`` in two: ``(filter(tree, spec), filter(tree, spec, inverse=True))``.

    The usual split is ``params, static = spruce.partition(model, spruce.is_array)``; rebuild
    with ``spruce.combine(params, static)``.  Arguments and errors as ``filter``.  Follows
    equinox.partition, tree first.  Not to be confused with ``spruce.tree.partition(predicate,
    tree)`` (optree's ``tree_partition``, predicate first, in the engine), which takes only a
    per-leaf predicate (no prefix spec) and fills with ``fill_value``.

    >>> partition([1, 'a'], lambda x: isinstance(x, int))
    ([1, None], [None, 'a'])
    """
    return _split(tree, filter_spec, replace, is_leaf)


def combine(*trees: Any, is_leaf: IsLeaf = None) -> Any:
    """Merge trees of the same structure (with None at removed leaves, as made by ``filter`` /
    ``partition``): at each leaf position the first non-None value wins (None if all are None).

    Raises:
      TypeError: no trees given.
      ValueError: the trees' structures differ (with None counted as a leaf); the message
        names the position.

    Follows equinox.combine.

    >>> combine([1, None], [None, 'a'])
    [1, 'a']
    """
    if not trees:
        raise TypeError("combine() needs at least one tree")
    out, treedef = _tree.flatten(trees[0], is_leaf, none_is_leaf=True)
    for i, t in enumerate(trees[1:], start=1):
        other, other_def = _tree.flatten(t, is_leaf, none_is_leaf=True)
        if other_def != treedef:
            raise ValueError(
                f"combine: tree {i} does not have the structure of tree 0 (None counted as a "
                f"leaf): {other_def} vs {treedef}"
            )
        for j, v in enumerate(other):
            if out[j] is None:
                out[j] = v
    return treedef.unflatten(out)
