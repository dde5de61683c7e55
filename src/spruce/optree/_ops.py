"""optree's tree operations (``optree.ops``) under optree's names, on spruce's engine.

Where optree and ``spruce.tree`` share a meaning the function here calls spruce's (the engine's
speed and its errors, which name the key path of a mismatch); where optree's meaning differs
from JAX's (paths are tuples of raw entries, ``tree_flatten_one_level`` returns four values,
``tree_broadcast_*`` broadcast leaves over subtrees both ways) it is written here.  Every
function takes optree's keywords: ``is_leaf``, ``none_is_leaf`` (None a leaf instead of an empty
node) and ``namespace`` (registrations of that namespace count; "" is the global one).
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .. import tree as _tree
from .._tree._kindenum import PyTreeKind
from .._tree._nodes import EntriesAux
from .._tree._treedef import PyTreeDef
from .._tree._treedef import flatten_up_to as _flatten_up_to
from ._accessors import treespec_accessors, treespec_paths

__all__ = [
    "MAX_RECURSION_DEPTH",
    "NONE_IS_NODE",
    "NONE_IS_LEAF",
    "tree_flatten",
    "tree_unflatten",
    "tree_iter",
    "tree_leaves",
    "tree_structure",
    "tree_is_leaf",
    "all_leaves",
    "tree_map",
    "tree_map_",
    "tree_map_with_path",
    "tree_map_with_path_",
    "tree_map_with_accessor",
    "tree_map_with_accessor_",
    "tree_replace_nones",
    "tree_partition",
    "tree_transpose",
    "tree_transpose_map",
    "tree_transpose_map_with_path",
    "tree_transpose_map_with_accessor",
    "tree_broadcast_prefix",
    "broadcast_prefix",
    "tree_broadcast_common",
    "broadcast_common",
    "tree_broadcast_map",
    "tree_broadcast_map_with_path",
    "tree_broadcast_map_with_accessor",
    "tree_reduce",
    "tree_sum",
    "tree_max",
    "tree_min",
    "tree_all",
    "tree_any",
    "tree_flatten_one_level",
    "prefix_errors",
]

MAX_RECURSION_DEPTH: int = 1000
"""How deep a tree may nest (optree's constant).  spruce's walks do not recurse on the C stack,
so they go deeper; the constant is kept for code that reads it."""
NONE_IS_NODE: bool = False
"""``none_is_leaf=NONE_IS_NODE``: None is a node with no children (the default)."""
NONE_IS_LEAF: bool = True
"""``none_is_leaf=NONE_IS_LEAF``: None is a leaf."""

IsLeaf = Callable[[Any], bool] | None


class _Missing:
    def __repr__(self) -> str:
        return "<MISSING>"


_MISSING: Any = _Missing()


def tree_flatten(
    tree: Any, /, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = ""
) -> tuple[list[Any], PyTreeDef]:
    """``(leaves, treespec)`` of ``tree``: ``spruce.tree.flatten`` with optree's keywords.

    >>> tree_flatten({'b': 2, 'a': (1, None)})
    ([1, 2], PyTreeDef({'a': (*, None), 'b': *}))
    >>> tree_flatten({'b': 2, 'a': (1, None)}, none_is_leaf=True)[0]
    [1, None, 2]
    """
    return _tree.flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)


def tree_unflatten(treespec: PyTreeDef, leaves: Iterable[Any]) -> Any:
    """The tree of structure ``treespec`` with ``leaves`` (``spruce.tree.unflatten``).

    Raises:
      TypeError: ``treespec`` is not a PyTreeDef.
      ValueError: the number of leaves differs from ``treespec.num_leaves``.
    """
    if not isinstance(treespec, PyTreeDef):
        raise TypeError(f"tree_unflatten: expected a PyTreeDef (optree's PyTreeSpec), got {treespec!r}")
    return treespec.unflatten(leaves)


def tree_iter(
    tree: Any, /, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = ""
) -> Iterator[Any]:
    """The leaves of ``tree``, one at a time, in flatten order (``spruce.tree.iter``)."""
    return _tree.iter(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)


def tree_leaves(
    tree: Any, /, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = ""
) -> list[Any]:
    """The leaves of ``tree`` in flatten order (``spruce.tree.leaves``)."""
    return _tree.leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)


def tree_structure(
    tree: Any, /, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = ""
) -> PyTreeDef:
    """The structure of ``tree`` (``spruce.tree.structure``)."""
    return _tree.structure(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)


def tree_is_leaf(
    tree: Any, /, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = ""
) -> bool:
    """True if ``tree`` is a leaf itself (``spruce.tree.is_leaf``)."""
    return _tree.is_leaf(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)


def all_leaves(
    iterable: Iterable[Any], /, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = ""
) -> bool:
    """True if every element of ``iterable`` is a leaf (``spruce.tree.all_leaves``)."""
    return _tree.all_leaves(iterable, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)


def tree_map(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: IsLeaf = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """``func(x, *ys)`` at each leaf ``x`` of ``tree`` (``ys`` the matching subtrees of
    ``rests``, which must have ``tree``'s structure as a prefix), in a tree of ``tree``'s
    structure (``spruce.tree.map``).

    Raises:
      ValueError: a tree of ``rests`` does not match (naming the key path).

    >>> tree_map(lambda x, y: x + y, [1, (2, 3)], [10, (20, 30)])
    [11, (22, 33)]
    """
    return _tree.map(func, tree, *rests, is_leaf=is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)


def tree_map_(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: IsLeaf = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """As ``tree_map``, for the side effects of ``func``: its results are dropped and ``tree``
    itself is returned (optree's in-place map).

    >>> seen = []
    >>> tree_map_(seen.append, {'a': 1, 'b': [2]}) == {'a': 1, 'b': [2]}, seen
    (True, [1, 2])
    """
    leaves, spec = tree_flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    others = [_flatten_up_to(spec, r, "tree_map_", f"rests[{i}]", namespace) for i, r in enumerate(rests)]
    for args in zip(leaves, *others):
        func(*args)
    return tree


def _with_prefix(
    what: str,
    prefixes: Callable[[PyTreeDef], list[Any]],
    func: Callable[..., Any],
    tree: Any,
    rests: tuple[Any, ...],
    is_leaf: IsLeaf,
    none_is_leaf: bool,
    namespace: str,
) -> tuple[list[Any], PyTreeDef]:
    """``func(prefix, x, *ys)`` at each leaf; ``(results, treespec)``."""
    leaves, spec = tree_flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    others = [_flatten_up_to(spec, r, what, f"rests[{i}]", namespace) for i, r in enumerate(rests)]
    return [func(*args) for args in zip(prefixes(spec), leaves, *others)], spec


def tree_map_with_path(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: IsLeaf = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """``func(path, x, *ys)`` at each leaf, where ``path`` is optree's path of the leaf (a
    tuple of the raw entries: dict keys, sequence and namedtuple indices, custom entries).

    >>> tree_map_with_path(lambda p, x: p, {'a': [5, 6]})
    {'a': [('a', 0), ('a', 1)]}
    """
    out, spec = _with_prefix("tree_map_with_path", treespec_paths, func, tree, rests, is_leaf, none_is_leaf, namespace)
    return spec.unflatten(out)


def tree_map_with_path_(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: IsLeaf = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """As ``tree_map_with_path`` for the side effects of ``func``; returns ``tree``."""
    _with_prefix("tree_map_with_path_", treespec_paths, func, tree, rests, is_leaf, none_is_leaf, namespace)
    return tree


def tree_map_with_accessor(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: IsLeaf = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """``func(accessor, x, *ys)`` at each leaf, where ``accessor`` is the leaf's
    ``PyTreeAccessor`` (``accessor(tree)`` is the leaf)."""
    out, spec = _with_prefix(
        "tree_map_with_accessor", treespec_accessors, func, tree, rests, is_leaf, none_is_leaf, namespace
    )
    return spec.unflatten(out)


def tree_map_with_accessor_(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: IsLeaf = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """As ``tree_map_with_accessor`` for the side effects of ``func``; returns ``tree``."""
    _with_prefix("tree_map_with_accessor_", treespec_accessors, func, tree, rests, is_leaf, none_is_leaf, namespace)
    return tree


def tree_replace_nones(sentinel: Any, tree: Any, /, namespace: str = "") -> Any:
    """``tree`` with every None replaced by ``sentinel`` (optree's ``tree_replace_nones``).

    >>> tree_replace_nones(0, {'a': None, 'b': [1, None]})
    {'a': 0, 'b': [1, 0]}
    """
    if tree is None:
        return sentinel
    return _tree.map(lambda x: sentinel if x is None else x, tree, none_is_leaf=True, namespace=namespace)


def tree_partition(
    predicate: Callable[[Any], Any],
    tree: Any,
    /,
    is_leaf: IsLeaf = None,
    *,
    fillvalue: Any = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[Any, Any]:
    """``(kept, dropped)``: two trees of ``tree``'s structure, the leaves where ``predicate`` is
    true in the first and the others in the second, ``fillvalue`` elsewhere
    (``spruce.tree.partition``)."""
    return _tree.partition(predicate, tree, fillvalue, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)


def tree_transpose(outer_treespec: PyTreeDef, inner_treespec: PyTreeDef, tree: Any, /, is_leaf: IsLeaf = None) -> Any:
    """Turn a tree of structure outer∘inner into inner∘outer (``spruce.tree.transpose``).

    Raises:
      TypeError: a structure is not a PyTreeDef.
      ValueError: ``tree`` is not outer∘inner (naming the key path), or the structures'
        ``none_is_leaf`` / namespaces differ.
    """
    if isinstance(outer_treespec, PyTreeDef) and isinstance(inner_treespec, PyTreeDef):
        if outer_treespec.none_is_leaf != inner_treespec.none_is_leaf:
            raise ValueError("tree_transpose: the outer and inner structures differ in none_is_leaf")
        if is_leaf is not None:  # the subtrees is_leaf stops at must sit where outer∘inner has leaves
            composed = outer_treespec.compose(inner_treespec)
            spec = tree_structure(tree, is_leaf, none_is_leaf=composed.none_is_leaf, namespace=composed.namespace)
            if spec != composed:
                raise ValueError(f"tree_transpose: the tree's structure {spec!r} is not outer∘inner = {composed!r}")
    return _tree.transpose(outer_treespec, inner_treespec, tree)  # (its TypeError names a non-structure)


def _transpose_map(
    what: str,
    prefixes: Callable[[PyTreeDef], list[Any]] | None,
    func: Callable[..., Any],
    tree: Any,
    rests: tuple[Any, ...],
    inner_treespec: PyTreeDef | None,
    is_leaf: IsLeaf,
    none_is_leaf: bool,
    namespace: str,
) -> Any:
    leaves, outer = tree_flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    if outer.num_leaves == 0:
        raise ValueError(f"{what}: the outer structure {outer!r} must have at least one leaf")
    others = [_flatten_up_to(outer, r, what, f"rests[{i}]", namespace) for i, r in enumerate(rests)]
    if prefixes is None:
        results = [func(*args) for args in zip(leaves, *others)]
    else:
        results = [func(*args) for args in zip(prefixes(outer), leaves, *others)]
    if inner_treespec is None:
        inner_treespec = tree_structure(results[0], none_is_leaf=none_is_leaf, namespace=namespace)
    elif not isinstance(inner_treespec, PyTreeDef):
        raise TypeError(f"{what}: inner_treespec must be a PyTreeDef, got {inner_treespec!r}")
    if inner_treespec.num_leaves == 0:
        raise ValueError(f"{what}: the inner structure {inner_treespec!r} must have at least one leaf")
    grid = [_flatten_up_to(inner_treespec, r, what, "a result of func", namespace) for r in results]
    columns = [outer.unflatten([row[j] for row in grid]) for j in range(inner_treespec.num_leaves)]
    return inner_treespec.unflatten(columns)


def tree_transpose_map(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    inner_treespec: PyTreeDef | None = None,
    is_leaf: IsLeaf = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """``tree_map`` whose ``func`` returns trees (of structure ``inner_treespec``, by default
    that of its first result), transposed: a tree of that inner structure whose leaves are trees
    of ``tree``'s structure.

    Raises:
      ValueError: ``tree`` has no leaves, the inner structure has none, or a result of ``func``
        does not have the inner structure (naming the key path).

    >>> tree_transpose_map(lambda x: {'lo': x - 1, 'hi': x + 1}, [1, 2])
    {'lo': [0, 1], 'hi': [2, 3]}
    """
    return _transpose_map("tree_transpose_map", None, func, tree, rests, inner_treespec, is_leaf, none_is_leaf, namespace)


def tree_transpose_map_with_path(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    inner_treespec: PyTreeDef | None = None,
    is_leaf: IsLeaf = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """``tree_transpose_map`` with ``func(path, x, *ys)`` (optree's paths)."""
    return _transpose_map(
        "tree_transpose_map_with_path", treespec_paths, func, tree, rests, inner_treespec, is_leaf, none_is_leaf, namespace
    )


def tree_transpose_map_with_accessor(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    inner_treespec: PyTreeDef | None = None,
    is_leaf: IsLeaf = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """``tree_transpose_map`` with ``func(accessor, x, *ys)``."""
    return _transpose_map(
        "tree_transpose_map_with_accessor",
        treespec_accessors,
        func,
        tree,
        rests,
        inner_treespec,
        is_leaf,
        none_is_leaf,
        namespace,
    )


def _broadcast_leaves(
    what: str, prefix_tree: Any, full_tree: Any, is_leaf: IsLeaf, none_is_leaf: bool, namespace: str
) -> tuple[list[Any], PyTreeDef]:
    """Each leaf of ``prefix_tree`` repeated over the leaves of the matching subtree of
    ``full_tree``; with the full tree's structure."""
    pleaves, pspec = tree_flatten(prefix_tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    subtrees = _flatten_up_to(pspec, full_tree, what, "full_tree", namespace)
    out: list[Any] = []
    specs: list[PyTreeDef] = []
    for leaf, sub in zip(pleaves, subtrees):
        spec = tree_structure(sub, none_is_leaf=none_is_leaf, namespace=namespace)
        out.extend([leaf] * spec.num_leaves)
        specs.append(spec)
    return out, _join(pspec, specs)


def _join(pspec: PyTreeDef, specs: list[PyTreeDef]) -> PyTreeDef:
    """The structure of ``pspec`` with its leaves replaced by ``specs`` (in leaf order)."""
    it = builtins.iter(specs)
    return pspec.transform(None, lambda _leaf: next(it))


def tree_broadcast_prefix(
    prefix_tree: Any, full_tree: Any, /, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = ""
) -> Any:
    """``prefix_tree`` with each leaf repeated over the matching subtree of ``full_tree``: a
    tree of ``full_tree``'s structure (optree's; ``spruce.tree.broadcast`` is JAX's name).

    Raises:
      ValueError: ``prefix_tree`` is not a prefix of ``full_tree`` (naming the key path).

    >>> tree_broadcast_prefix([1, 2], [[0, 0], {'a': 0}])
    [[1, 1], {'a': 2}]
    """
    leaves, spec = _broadcast_leaves("tree_broadcast_prefix", prefix_tree, full_tree, is_leaf, none_is_leaf, namespace)
    return spec.unflatten(leaves)


def broadcast_prefix(
    prefix_tree: Any, full_tree: Any, /, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = ""
) -> list[Any]:
    """The leaves of ``tree_broadcast_prefix(prefix_tree, full_tree)``, as a list.

    >>> broadcast_prefix([1, 2], [[0, 0], {'a': 0}])
    [1, 1, 2]
    """
    return _broadcast_leaves("broadcast_prefix", prefix_tree, full_tree, is_leaf, none_is_leaf, namespace)[0]


def _common(
    what: str, tree: Any, other_tree: Any, is_leaf: IsLeaf, none_is_leaf: bool, namespace: str
) -> tuple[list[Any], list[Any], PyTreeDef]:
    a = tree_structure(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    b = tree_structure(other_tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    try:
        common = a.broadcast_to_common_suffix(b)
    except ValueError as e:
        raise ValueError(f"{what}: the trees have no common suffix structure: {e}") from None
    full = common.unflatten([0] * common.num_leaves)
    x = _broadcast_leaves(what, tree, full, is_leaf, none_is_leaf, namespace)[0]
    y = _broadcast_leaves(what, other_tree, full, is_leaf, none_is_leaf, namespace)[0]
    return x, y, common


def tree_broadcast_common(
    tree: Any, other_tree: Any, /, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = ""
) -> tuple[Any, Any]:
    """Both trees broadcast to their smallest common suffix structure (each leaf repeated over
    the subtree the other tree has there).

    Raises:
      ValueError: the trees have nodes of different kinds, arities or keys at one place.

    >>> tree_broadcast_common([1, [2, 3]], [[4, 5], 6])
    ([[1, 1], [2, 3]], [[4, 5], [6, 6]])
    """
    x, y, common = _common("tree_broadcast_common", tree, other_tree, is_leaf, none_is_leaf, namespace)
    return common.unflatten(x), common.unflatten(y)


def broadcast_common(
    tree: Any, other_tree: Any, /, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = ""
) -> tuple[list[Any], list[Any]]:
    """The leaves of ``tree_broadcast_common(tree, other_tree)``, as two lists."""
    x, y, _ = _common("broadcast_common", tree, other_tree, is_leaf, none_is_leaf, namespace)
    return x, y


def _broadcast_map(
    what: str,
    prefixes: Callable[[PyTreeDef], list[Any]] | None,
    func: Callable[..., Any],
    tree: Any,
    rests: tuple[Any, ...],
    is_leaf: IsLeaf,
    none_is_leaf: bool,
    namespace: str,
) -> Any:
    trees = (tree, *rests)
    common = tree_structure(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    for t in rests:
        other = tree_structure(t, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
        try:
            common = common.broadcast_to_common_suffix(other)
        except ValueError as e:
            raise ValueError(f"{what}: the trees have no common suffix structure: {e}") from None
    full = common.unflatten([0] * common.num_leaves)
    columns = [_broadcast_leaves(what, t, full, is_leaf, none_is_leaf, namespace)[0] for t in trees]
    if prefixes is None:
        out = [func(*args) for args in zip(*columns)]
    else:
        out = [func(*args) for args in zip(prefixes(common), *columns)]
    return common.unflatten(out)


def tree_broadcast_map(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: IsLeaf = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """``tree_map`` over trees broadcast to their common suffix structure: where one tree has a
    leaf and another a subtree, the leaf is repeated over it.

    >>> tree_broadcast_map(lambda x, y: x * y, [1, [2, 3]], [[4, 5], 6])
    [[4, 5], [12, 18]]
    """
    return _broadcast_map("tree_broadcast_map", None, func, tree, rests, is_leaf, none_is_leaf, namespace)


def tree_broadcast_map_with_path(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: IsLeaf = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """``tree_broadcast_map`` with ``func(path, x, *ys)`` (paths of the common structure)."""
    return _broadcast_map(
        "tree_broadcast_map_with_path", treespec_paths, func, tree, rests, is_leaf, none_is_leaf, namespace
    )


def tree_broadcast_map_with_accessor(
    func: Callable[..., Any],
    tree: Any,
    /,
    *rests: Any,
    is_leaf: IsLeaf = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """``tree_broadcast_map`` with ``func(accessor, x, *ys)``."""
    return _broadcast_map(
        "tree_broadcast_map_with_accessor", treespec_accessors, func, tree, rests, is_leaf, none_is_leaf, namespace
    )


def tree_reduce(
    func: Callable[[Any, Any], Any],
    tree: Any,
    /,
    initial: Any = _MISSING,
    *,
    is_leaf: IsLeaf = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """``functools.reduce(func, leaves[, initial])`` (``spruce.tree.reduce``).

    Raises:
      TypeError: no leaves and no ``initial``.
    """
    leaves = tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    if initial is _MISSING:
        return functools.reduce(func, leaves)
    return functools.reduce(func, leaves, initial)


def tree_sum(
    tree: Any, /, start: Any = 0, *, is_leaf: IsLeaf = None, none_is_leaf: bool = False, namespace: str = ""
) -> Any:
    """``sum(leaves, start)``.

    >>> tree_sum({'a': 1, 'b': (2, 3)}, 10)
    16
    """
    return builtins.sum(tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace), start)


def _extreme(
    pick: Callable[..., Any], tree: Any, default: Any, key: Any, is_leaf: IsLeaf, none_is_leaf: bool, namespace: str
) -> Any:
    leaves = tree_leaves(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    kwargs: dict[str, Any] = {} if key is None else {"key": key}
    if default is not _MISSING:
        kwargs["default"] = default
    elif not leaves:
        raise ValueError(f"tree_{pick.__name__}() of a tree with no leaves needs a default")
    return pick(leaves, **kwargs)


def tree_max(
    tree: Any,
    /,
    *,
    default: Any = _MISSING,
    key: Callable[[Any], Any] | None = None,
    is_leaf: IsLeaf = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """``max(leaves, key=key, default=default)``.

    Raises:
      ValueError: no leaves and no ``default``.
    """
    return _extreme(builtins.max, tree, default, key, is_leaf, none_is_leaf, namespace)


def tree_min(
    tree: Any,
    /,
    *,
    default: Any = _MISSING,
    key: Callable[[Any], Any] | None = None,
    is_leaf: IsLeaf = None,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """``min(leaves, key=key, default=default)``.

    Raises:
      ValueError: no leaves and no ``default``.
    """
    return _extreme(builtins.min, tree, default, key, is_leaf, none_is_leaf, namespace)


def tree_all(tree: Any, /, *, is_leaf: IsLeaf = None, none_is_leaf: bool = False, namespace: str = "") -> bool:
    """``all(leaves)`` (``spruce.tree.all``)."""
    return _tree.all(tree, is_leaf=is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)


def tree_any(tree: Any, /, *, is_leaf: IsLeaf = None, none_is_leaf: bool = False, namespace: str = "") -> bool:
    """``any(leaves)`` (``spruce.tree.any``)."""
    return _tree.any(tree, is_leaf=is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)


def tree_flatten_one_level(
    tree: Any, /, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = ""
) -> tuple[list[Any], Any, list[Any], Callable[[Any, Iterable[Any]], Any]]:
    """``(children, metadata, entries, unflatten_func)`` of the root node, optree's one-level
    flatten (``spruce.tree.flatten_one_level`` is Equinox's, a different result):
    ``unflatten_func(metadata, children)`` rebuilds the node.

    Raises:
      ValueError: ``tree`` is a leaf.

    >>> children, metadata, entries, unflatten = tree_flatten_one_level({'b': 2, 'a': 1})
    >>> children, metadata, entries, unflatten(metadata, [10, 20])
    ([1, 2], ['a', 'b'], ['a', 'b'], {'a': 10, 'b': 20})
    """
    from ._registry import register_pytree_node

    if is_leaf is not None and is_leaf(tree):
        raise ValueError(f"tree_flatten_one_level: cannot flatten a leaf, got {tree!r}")
    children, spec = _tree.flatten_one_level(tree, none_is_leaf=none_is_leaf, namespace=namespace)
    if spec.is_leaf():
        raise ValueError(f"tree_flatten_one_level: cannot flatten a leaf, got {tree!r}")
    kind = spec.kind
    entries = spec.entries()
    node_type, data = spec.node_data()
    metadata: Any
    if kind in (PyTreeKind.DICT, PyTreeKind.ORDEREDDICT):
        metadata = list(entries)
    elif kind == PyTreeKind.DEFAULTDICT:
        metadata = (data[0], list(entries))
    elif kind in (PyTreeKind.NAMEDTUPLE, PyTreeKind.STRUCTSEQUENCE):
        metadata = node_type
    elif kind == PyTreeKind.CUSTOM:
        metadata = data.metadata if isinstance(data, EntriesAux) else data
    else:
        metadata = data
    entry = register_pytree_node.get(type(tree), namespace=namespace)  # type: ignore[attr-defined]
    if kind == PyTreeKind.NONE:
        entry = register_pytree_node.get(type(None))  # type: ignore[attr-defined]
    return children, metadata, entries, entry.unflatten_func


def _mismatches(
    prefix: Any, full: Any, path: tuple[Any, ...], is_leaf: IsLeaf, none_is_leaf: bool, namespace: str, out: list[str]
) -> None:
    """Append a description of each place under ``path`` where ``prefix`` is not a prefix of ``full``."""
    if tree_is_leaf(prefix, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace):
        return
    pchildren, pspec = _tree.flatten_one_level(prefix, none_is_leaf=none_is_leaf, namespace=namespace)
    where = "the root" if not path else f"path {path!r}"
    if tree_is_leaf(full, none_is_leaf=none_is_leaf, namespace=namespace):
        out.append(f"at {where}: the prefix has a {type(prefix).__name__} node where the full tree has the leaf {full!r}")
        return
    fchildren, fspec = _tree.flatten_one_level(full, none_is_leaf=none_is_leaf, namespace=namespace)
    if pspec.kind != fspec.kind or pspec.type is not fspec.type:
        out.append(
            f"at {where}: the prefix has a {type(prefix).__name__} node where the full tree has a "
            f"{type(full).__name__} node"
        )
        return
    if pspec.num_children != fspec.num_children:
        out.append(
            f"at {where}: the prefix's {type(prefix).__name__} has {pspec.num_children} children, the full "
            f"tree's has {fspec.num_children}"
        )
        return
    pentries, fentries = pspec.entries(), fspec.entries()
    if pspec.kind in (PyTreeKind.DICT, PyTreeKind.ORDEREDDICT, PyTreeKind.DEFAULTDICT) and set(pentries) != set(fentries):
        missing = [k for k in fentries if k not in set(pentries)]
        extra = [k for k in pentries if k not in set(fentries)]
        out.append(f"at {where}: dict keys differ (missing in the prefix: {missing!r}; extra: {extra!r})")
        return
    if pspec.kind == PyTreeKind.CUSTOM and pspec.node_data() != fspec.node_data():
        out.append(f"at {where}: the {type(prefix).__name__} nodes have different node data")
        return
    if pspec.kind in (PyTreeKind.DICT, PyTreeKind.ORDEREDDICT, PyTreeKind.DEFAULTDICT):
        by_key = dict(zip(fentries, fchildren))
        fchildren = [by_key[k] for k in pentries]
    for entry, p, f in zip(pentries, pchildren, fchildren):
        _mismatches(p, f, (*path, entry), is_leaf, none_is_leaf, namespace, out)


def prefix_errors(
    prefix_tree: Any, full_tree: Any, /, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = ""
) -> list[Callable[[str], ValueError]]:
    """Every place where ``prefix_tree`` is not a prefix of ``full_tree``, as optree's
    ``prefix_errors``: a list (empty if it is a prefix) of functions ``name -> ValueError``
    whose message names the place (optree's paths) and what differs there.

    >>> [e("args") for e in prefix_errors([1, 2], [1, [2, 3], 4])]
    [ValueError("pytree structure error in args: at the root: the prefix's list has 2 children, the full tree's has 3")]
    """
    found: list[str] = []
    _mismatches(prefix_tree, full_tree, (), is_leaf, none_is_leaf, namespace, found)
    return [functools.partial(_error, text) for text in found]


def _error(text: str, name: str) -> ValueError:
    return ValueError(f"pytree structure error in {name}: {text}")
