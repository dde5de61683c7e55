"""Operations built on the walkers: reductions, transpose, broadcast, partition, one-level views."""

from __future__ import annotations

import builtins
from typing import Any, Callable, Iterable

from ._exceptions import TransposeError
from ._expand import expand, expand_with_keys, lookup_ns, ns_expand, ns_expand_with_keys
from ._kinds import LEAF, SHIFT
from ._registry import view
from ._traverse import IsLeaf, flatten, iter_leaves, map, structure
from ._treedef import PyTreeDef, flatten_up_to


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()


def all(tree: Any, *, is_leaf: IsLeaf = None, none_is_leaf: bool = False, namespace: str = "") -> bool:
    """True if every leaf is truthy (True for no leaves), as jax.tree_util.tree_all.

    Stops at the first falsy leaf without flattening the rest.  Raises as ``iter``.

    >>> all([1, (True, 'x')]), all({'a': 1, 'b': 0})
    (True, False)
    """
    return builtins.all(iter_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace))


def any(tree: Any, *, is_leaf: IsLeaf = None, none_is_leaf: bool = False, namespace: str = "") -> bool:
    """True if some leaf is truthy (False for no leaves), as optree.tree_any.

    Stops at the first truthy leaf without flattening the rest.  Raises as ``iter``.

    >>> any([0, (None, '')]), any([0, [1]])
    (False, True)
    """
    return builtins.any(iter_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace))


def transpose(outer_treedef: PyTreeDef, inner_treedef: PyTreeDef | None, pytree_to_transpose: Any) -> Any:
    """Turn a tree of structure outer∘inner into one of structure inner∘outer, as
    jax.tree_util.tree_transpose (e.g. a list of pairs into a pair of lists).

    ``inner_treedef`` None means: the structure of the first outer leaf's subtree.  Unlike JAX,
    the input is checked against outer∘inner node by node, not just by its leaf count.

    Raises:
      ValueError: the tree is not outer∘inner (naming the key path and both sides; also a
        TypeError, which is what JAX raises), or inner_treedef is None and outer has no leaves.

    >>> outer = structure([0, 0, 0])
    >>> inner = structure((0, 0))
    >>> transpose(outer, inner, [(1, 2), (3, 4), (5, 6)])
    ([1, 3, 5], [2, 4, 6])
    """
    if not isinstance(outer_treedef, PyTreeDef):
        raise TypeError(f"transpose: outer_treedef must be a PyTreeDef, got {type(outer_treedef).__name__}")
    if inner_treedef is not None and not isinstance(inner_treedef, PyTreeDef):
        raise TypeError(f"transpose: inner_treedef must be a PyTreeDef or None, got {type(inner_treedef).__name__}")
    if inner_treedef is None:
        subtrees = flatten_up_to(outer_treedef, pytree_to_transpose, "transpose", "the tree")
        if not subtrees:
            raise ValueError("transpose: cannot infer inner_treedef when outer_treedef has no leaves")
        inner_treedef = structure(
            subtrees[0], none_is_leaf=outer_treedef.none_is_leaf, namespace=outer_treedef.namespace
        )
    composed = outer_treedef.compose(inner_treedef)
    try:
        flat = flatten_up_to(
            composed, pytree_to_transpose, "transpose", f"the tree (expected outer∘inner = {composed!r})"
        )
    except ValueError as e:  # JAX raises TypeError here: an error that is both (see _exceptions)
        raise TransposeError(str(e)) from None
    no = outer_treedef.num_leaves
    ni = inner_treedef.num_leaves
    columns = [outer_treedef.unflatten([flat[i * ni + j] for i in range(no)]) for j in range(ni)]
    return inner_treedef.unflatten(columns)


def broadcast(prefix_tree: Any, full_tree: Any, is_leaf: IsLeaf = None, *, namespace: str = "") -> Any:
    """Repeat each leaf of ``prefix_tree`` over the matching subtree of ``full_tree``, as
    jax.tree.broadcast.  The result has ``full_tree``'s structure; ``is_leaf`` applies to
    ``prefix_tree`` only.

    Raises:
      ValueError: ``prefix_tree`` is not a prefix of ``full_tree`` (naming the key path).

    >>> broadcast([1, 2], [[0, 0], {'a': 0}])
    [[1, 1], {'a': 2}]
    """
    pleaves, pdef = flatten(prefix_tree, is_leaf, namespace=namespace)
    subtrees = flatten_up_to(pdef, full_tree, "broadcast", "full_tree", namespace)
    out = [_fill(leaf, sub, namespace) for leaf, sub in zip(pleaves, subtrees)]
    return pdef.unflatten(out)


def _fill(value: Any, subtree: Any, namespace: str) -> Any:
    return map(lambda _: value, subtree, namespace=namespace)


def partition(
    predicate: Callable[[Any], Any],
    tree: Any,
    fill_value: Any = None,
    is_leaf: IsLeaf = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[Any, Any]:
    """Split ``tree`` in two trees of the same structure by a per-leaf predicate, as
    optree.tree_partition.

    Returns ``(true_tree, false_tree)``: in the first, leaves where ``predicate`` is false are
    replaced by ``fill_value``; in the second, those where it is true.  ``predicate`` is called
    once per leaf.  Predicate first, as optree; ``spruce.partition(tree, filter_spec)`` is
    Equinox's, tree first, and also takes a prefix tree of predicates as ``filter_spec``.

    >>> partition(lambda x: x > 1, [1, 2, 3])
    ([None, 2, 3], [1, None, None])
    """
    ls, td = flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    flags = [bool(predicate(x)) for x in ls]
    true_leaves = [x if t else fill_value for x, t in zip(ls, flags)]
    false_leaves = [fill_value if t else x for x, t in zip(ls, flags)]
    return td.unflatten(true_leaves), td.unflatten(false_leaves)


def is_leaf(tree: Any, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = "") -> bool:
    """True if ``tree`` itself is a leaf (not a node), as optree.tree_is_leaf.

    >>> is_leaf(1), is_leaf([1]), is_leaf(None), is_leaf(None, none_is_leaf=True)
    (True, False, False, True)
    """
    return _leafy(tree, is_leaf, none_is_leaf, namespace)


def _leafy(x: Any, predicate: IsLeaf, none_is_leaf: bool, namespace: str) -> bool:
    if predicate is not None and predicate(x):
        return True
    if x is None:
        return none_is_leaf
    return lookup_ns(type(x), view(namespace) if namespace else None).kind == LEAF


def all_leaves(
    iterable: Iterable[Any], is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = ""
) -> bool:
    """True if every element of ``iterable`` is a leaf, as jax.tree_util.all_leaves.

    >>> all_leaves([1, 'a']), all_leaves([1, [2]])
    (True, False)
    """
    for x in iterable:
        if not _leafy(x, is_leaf, none_is_leaf, namespace):
            return False
    return True


def flatten_one_level(tree: Any, *, none_is_leaf: bool = False, namespace: str = "") -> tuple[list[Any], PyTreeDef]:
    """The direct children of ``tree`` and a PyTreeDef of that one level (children as ``*``).

    Follows equinox.tree_flatten_one_level (a leaf gives ``([tree], PyTreeDef(*))``), not
    jax.tree_util.flatten_one_level, which returns the node's aux data instead of a PyTreeDef
    and raises on leaves; ``treedef.node_data()`` gives that aux data.

    >>> flatten_one_level({'b': [1, 2], 'a': 3})
    ([3, [1, 2]], PyTreeDef({'a': *, 'b': *}))
    """
    ns = view(namespace)
    code, d, ch = expand(tree, none_is_leaf) if ns is None else ns_expand(tree, none_is_leaf, ns)
    recorded = "" if ns is None else ns.recorded()
    if code == LEAF:
        return [tree], PyTreeDef([LEAF], [], 1, none_is_leaf, recorded)
    n = code >> SHIFT
    return list(ch), PyTreeDef([code] + [LEAF] * n, [d], n, none_is_leaf, recorded)


def flatten_one_level_with_path(
    tree: Any, *, none_is_leaf: bool = False, namespace: str = ""
) -> tuple[list[tuple[Any, Any]], PyTreeDef]:
    """As ``flatten_one_level``, with each child paired with its key entry: ``([(key, child),
    ...], treedef)``.  A leaf gives ``[((), tree)]``.

    >>> flatten_one_level_with_path([7])[0]
    [(SequenceKey(idx=0), 7)]
    """
    ns = view(namespace)
    if ns is None:
        code, d, ch, keys = expand_with_keys(tree, none_is_leaf)
    else:
        code, d, ch, keys = ns_expand_with_keys(tree, none_is_leaf, ns)
    recorded = "" if ns is None else ns.recorded()
    if code == LEAF:
        return [((), tree)], PyTreeDef([LEAF], [], 1, none_is_leaf, recorded)
    n = code >> SHIFT
    return [(keys[i], ch[i]) for i in range(n)], PyTreeDef([code] + [LEAF] * n, [d], n, none_is_leaf, recorded)
