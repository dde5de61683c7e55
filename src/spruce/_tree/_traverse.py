"""The walkers: flatten, flatten_with_path, map, map_with_path and the lazy leaf iterator.

Each public walk recurses (compiled: a direct C call per level, no frame stack to allocate, grow
and pop) for the first levels ``begin_walk`` grants (see ``_depth``), and hands a subtree below
that to the one iterative walker, ``_walker.Walker``, whose result it splices back where it
stopped.  The recursive walkers keep no ancestors: a cycle (met by the iterative walker) or a
mismatch of ``map``'s trees raises an internal exception, and the public function walks again
to name its key path (``_errors.cycle_error`` / ``mismatch_error``).  ``map`` is fused: it
builds the output while it walks, without a PyTreeDef or a leaves list in between.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

from ._depth import COMPILED, CycleFound, MismatchFound, begin_walk, end_walk
from ._errors import changed_size, cycle_error, mismatch_error
from ._expand import EMPTY, build, expand, expand_with_keys, match_children
from ._keys import (  # noqa: F401  (DictKey, keystr: doctests)
    SEQUENCE_KEYS,
    DictKey,
    keystr,
    sequence_keys,
)
from ._kinds import LEAF, LIST, SHIFT, TUPLE
from ._pure import (
    map1 as pure_map1,  # the uncompiled build's map (never compiled itself)
)
from ._registry import MODES, Namespace, view
from ._treedef import PyTreeDef
from ._walker import Walker, leaf_path

if TYPE_CHECKING:
    # Native 64-bit ints for positions and depths under mypyc (no tagged-int checks); plain
    # ints when the source runs uncompiled (annotations are never evaluated).
    from mypy_extensions import i64

IsLeaf = Callable[[Any], Any] | None


def _flatten_rec(
    seq: list[Any],
    is_leaf: IsLeaf,
    none_is_leaf: bool,
    leaves: list[Any],
    codes: list[int],
    data: list[Any],
    depth: i64,
    limit: i64,
    leaf_type: object,
) -> object:
    """Flatten the items of ``seq`` (at ``depth``; the root at 0) by recursion, for ``limit``
    levels; deeper subtrees go to the iterative walker.  Returns the leaf type to remember."""
    n: i64 = len(seq)
    pos: i64 = 0
    while pos < n:
        if pos >= len(seq):
            raise changed_size(seq, n)
        x = seq[pos]
        pos += 1
        if is_leaf is not None and is_leaf(x):
            leaves.append(x)
            codes.append(LEAF)
            continue
        t = type(x)
        if t is leaf_type:
            leaves.append(x)
            codes.append(LEAF)
            continue
        d: Any = None
        if t is list:  # the commonest node, taken apart here rather than by ``expand``
            ch: list[Any] = x
            code = (len(ch) << SHIFT) | LIST
        else:
            code, d, ch = expand(x, none_is_leaf)
            if code == LEAF:
                leaf_type = t
                leaves.append(x)
                codes.append(LEAF)
                continue
        codes.append(code)
        data.append(d)
        if not ch:
            continue
        if depth + 1 >= limit:
            Walker(None, is_leaf, none_is_leaf=none_is_leaf, table=True, leaves=leaves, codes=codes, data=data).walk(
                ch, EMPTY, EMPTY, depth + 1
            )
            continue
        leaf_type = _flatten_rec(ch, is_leaf, none_is_leaf, leaves, codes, data, depth + 1, limit, leaf_type)
    return leaf_type


def _flatten_into(
    tree: Any, is_leaf: IsLeaf, none_is_leaf: bool, leaves: list[Any], codes: list[int], data: list[Any]
) -> None:
    """Append the leaves of ``tree`` to ``leaves`` and its node table to ``codes``/``data``."""
    limit = begin_walk()
    try:
        _flatten_rec([tree], is_leaf, none_is_leaf, leaves, codes, data, 0, limit, None)
    except CycleFound:
        raise cycle_error(tree, is_leaf, False, none_is_leaf) from None
    finally:
        end_walk()


def _leaves_rec(
    seq: list[Any], is_leaf: IsLeaf, none_is_leaf: bool, leaves: list[Any], depth: i64, limit: i64, leaf_type: object
) -> object:
    """``_flatten_rec`` without the node table, for ``leaves``."""
    n: i64 = len(seq)
    pos: i64 = 0
    while pos < n:
        if pos >= len(seq):
            raise changed_size(seq, n)
        x = seq[pos]
        pos += 1
        if is_leaf is not None and is_leaf(x):
            leaves.append(x)
            continue
        t = type(x)
        if t is leaf_type:
            leaves.append(x)
            continue
        if t is list:
            ch: list[Any] = x
        else:
            code, d, ch = expand(x, none_is_leaf)
            if code == LEAF:
                leaf_type = t
                leaves.append(x)
                continue
        if not ch:
            continue
        if depth + 1 >= limit:
            Walker(None, is_leaf, none_is_leaf=none_is_leaf, leaves=leaves).walk(
                ch, EMPTY, EMPTY, depth + 1
            )
            continue
        leaf_type = _leaves_rec(ch, is_leaf, none_is_leaf, leaves, depth + 1, limit, leaf_type)
    return leaf_type


def flatten(
    tree: Any, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = ""
) -> tuple[list[Any], PyTreeDef]:
    """Flatten a pytree into its leaves and its structure.

    Follows jax.tree_util.tree_flatten: leaves come in pre-order, dict children in sorted key
    order (keys that do not compare fall back to a deterministic order by type, then key).

    Args:
      tree: any pytree.
      is_leaf: optional predicate called on every object visited (the root included) before it
        is expanded; a true result makes that object a leaf.
      none_is_leaf: if True, None is a leaf instead of an empty node.
      namespace: the registration namespace (optree's): classes registered in it are nodes
        too, over their global registration; "" (the default) is the global namespace.  The
        PyTreeDef records it when a node needed it (a class registered anywhere, a dict kept
        in insertion order by ``dict_insertion_ordered``), as optree's PyTreeSpec does.

    Returns:
      ``(leaves, treedef)``: a new list of the leaves and the PyTreeDef.

    Raises:
      ValueError: ``tree`` contains itself (the message names the key path of the cycle).
      TypeError: a registered flatten function returned something other than (children, aux).

    >>> leaves, treedef = flatten({'b': [1, None], 'a': (2,)})
    >>> leaves
    [2, 1]
    >>> treedef
    PyTreeDef({'a': (*,), 'b': [*, None]})
    """
    if namespace or MODES.ordered:
        return _walk_ns(tree, is_leaf, none_is_leaf, namespace, True)
    leaves: list[Any] = []
    codes: list[int] = []
    data: list[Any] = []
    _flatten_into(tree, is_leaf, none_is_leaf, leaves, codes, data)
    return leaves, PyTreeDef(codes, data, len(leaves), none_is_leaf)


def _view(namespace: str) -> Namespace:
    ns = view(namespace)
    return Namespace("", {}, False) if ns is None else ns


def _walk_ns(tree: Any, is_leaf: IsLeaf, none_is_leaf: bool, namespace: str, table: bool) -> tuple[list[Any], PyTreeDef]:
    """``flatten`` (``leaves`` without ``table``) in a namespace or with dicts in insertion
    order: the iterative walker from the root, with the namespace's view of the registry."""
    ns = _view(namespace)
    leaves: list[Any] = []
    codes: list[int] = []
    data: list[Any] = []
    begin_walk()
    try:
        Walker(None, is_leaf, none_is_leaf=none_is_leaf, table=table, leaves=leaves, codes=codes, data=data, ns=ns).walk(
            [tree], EMPTY, EMPTY, 0
        )
    except CycleFound:
        raise cycle_error(tree, is_leaf, False, none_is_leaf, ns) from None
    finally:
        end_walk()
    if not table:
        codes = [LEAF]
    return leaves, PyTreeDef(codes, data, len(leaves), none_is_leaf, ns.recorded())


def leaves(tree: Any, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = "") -> list[Any]:
    """The leaves of ``tree`` in flatten order (a new list), as jax.tree_util.tree_leaves.

    Takes and raises as ``flatten``.

    >>> leaves([1, {'x': 2, 'w': (3, None)}])
    [1, 3, 2]
    """
    if namespace or MODES.ordered:
        return _walk_ns(tree, is_leaf, none_is_leaf, namespace, False)[0]
    out: list[Any] = []
    limit = begin_walk()
    try:
        _leaves_rec([tree], is_leaf, none_is_leaf, out, 0, limit, None)
    except CycleFound:
        raise cycle_error(tree, is_leaf, False, none_is_leaf) from None
    finally:
        end_walk()
    return out


def structure(tree: Any, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = "") -> PyTreeDef:
    """The PyTreeDef of ``tree``, as jax.tree_util.tree_structure.  Takes and raises as ``flatten``.

    >>> structure((1, [2, 3], {'a': None}))
    PyTreeDef((*, [*, *], {'a': None}))
    """
    return flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)[1]


def iter_leaves(
    tree: Any, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False, namespace: str = ""
) -> Iterator[Any]:
    """Yield the leaves of ``tree`` lazily, in flatten order (optree's tree_iter).

    Each node is expanded only when the iteration reaches it, so stopping early skips the rest.
    Takes and raises as ``flatten``, except that a ``StopIteration`` raised by ``is_leaf`` or a
    flatten function is raised as a RuntimeError (its cause), so that it cannot pass for the
    end of the leaves.

    >>> it = iter_leaves({'a': [1, 2], 'b': 3})
    >>> next(it), next(it)
    (1, 2)
    """
    out: list[Any] = []
    ns = view(namespace)
    walker = Walker(None, is_leaf, none_is_leaf=none_is_leaf, leaves=out, ns=ns)
    walker.lazy = True
    walker.start([tree], EMPTY, EMPTY, 0)
    while True:
        try:
            more = walker.run()
        except CycleFound:
            raise cycle_error(tree, is_leaf, False, none_is_leaf, ns) from None
        except StopIteration as e:
            # Let out of a generator, a StopIteration would end the iteration early (compiled)
            # or become Python's "generator raised StopIteration" (PEP 479): say whose it was.
            err = RuntimeError(
                "iter: a callback (is_leaf or a registered flatten function) raised StopIteration, "
                "which would have ended the iteration early; it is chained as the cause"
            )
            err.__cause__ = e  # (not ``raise ... from e``: compiled, that drops a StopIteration)
            raise err  # noqa: B904 - the cause is set just above
        if not more:
            return
        yield out.pop()


def _fwp_rec(
    seq: list[Any],
    keys: list[Any],
    kstack: list[Any],
    is_leaf: IsLeaf,
    none_is_leaf: bool,
    out: list[tuple[tuple[Any, ...], Any]],
    codes: list[int],
    data: list[Any],
    depth: i64,
    limit: i64,
    leaf_type: object,
) -> object:
    """``flatten_with_path`` of the items of ``seq`` (keys ``keys``) by recursion, as
    ``_flatten_rec``; ``kstack`` holds the keys of the nodes entered below the root.

    ``keys`` may be longer than ``seq`` (the shared SequenceKey list): only ``keys[pos]`` for
    a position of ``seq`` is read.
    """
    n: i64 = len(seq)
    pos: i64 = 0
    while pos < n:
        if pos >= len(seq):
            raise changed_size(seq, n)
        x = seq[pos]
        k = keys[pos]
        pos += 1
        if is_leaf is not None and is_leaf(x):
            out.append((leaf_path(kstack, k, depth), x))
            codes.append(LEAF)
            continue
        t = type(x)
        if t is leaf_type:
            out.append((leaf_path(kstack, k, depth), x))
            codes.append(LEAF)
            continue
        d: Any = None
        if t is list or t is tuple:
            if t is list:
                ch: list[Any] = x
                code = (len(ch) << SHIFT) | LIST
            else:
                ch = list(x)
                code = (len(ch) << SHIFT) | TUPLE
            ckeys = SEQUENCE_KEYS if len(ch) <= len(SEQUENCE_KEYS) else sequence_keys(len(ch))
        else:
            code, d, ch, ckeys = expand_with_keys(x, none_is_leaf)
            if code == LEAF:
                leaf_type = t
                out.append((leaf_path(kstack, k, depth), x))
                codes.append(LEAF)
                continue
        codes.append(code)
        data.append(d)
        if not ch:
            continue
        if depth > 0:
            kstack.append(k)
        if depth + 1 >= limit:
            Walker(
                None, is_leaf, none_is_leaf=none_is_leaf, paths=True, table=True,
                leaves=out, codes=codes, data=data, kstack=kstack
            ).walk(
                ch, EMPTY, ckeys, depth + 1
            )
        else:
            leaf_type = _fwp_rec(ch, ckeys, kstack, is_leaf, none_is_leaf, out, codes, data, depth + 1, limit, leaf_type)
        if depth > 0:
            kstack.pop()
    return leaf_type


def flatten_with_path(
    tree: Any,
    is_leaf: Callable[..., Any] | None = None,
    is_leaf_takes_path: bool = False,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[list[tuple[tuple[Any, ...], Any]], PyTreeDef]:
    """Flatten with key paths, as jax.tree_util.tree_flatten_with_path.

    Returns ``([(path, leaf), ...], treedef)`` where each path is a tuple of key entries
    (DictKey, SequenceKey, GetAttrKey, FlattenedIndexKey, or a registered class's own keys).
    Takes and raises as ``flatten``, except that with ``is_leaf_takes_path=True`` (as in
    jax.tree_util) ``is_leaf`` is called as ``is_leaf(path, x)``, the root's path being ``()``.

    >>> pairs, _ = flatten_with_path({'a': [5]})
    >>> pairs
    [((DictKey(key='a'), SequenceKey(idx=0)), 5)]
    >>> flatten_with_path({'a': [5], 'b': [6]}, lambda p, x: p == (DictKey('b'),), True)[0]
    [((DictKey(key='a'), SequenceKey(idx=0)), 5), ((DictKey(key='b'),), [6])]
    """
    out: list[tuple[tuple[Any, ...], Any]] = []
    codes: list[int] = []
    data: list[Any] = []
    # Keys of the nodes entered below the root; a leaf's path is built from it only at the
    # leaf, so deep trees cost O(depth) per leaf, never O(depth) per node kept alive.
    kstack: list[Any] = []
    ns = view(namespace) if namespace or MODES.ordered else None
    limit = begin_walk()
    try:
        if (is_leaf_takes_path and is_leaf is not None) or ns is not None:
            Walker(
                None, is_leaf, path_leaf=is_leaf_takes_path and is_leaf is not None, none_is_leaf=none_is_leaf,
                paths=True, table=True, leaves=out, codes=codes, data=data, kstack=kstack, ns=ns,
            ).walk(
                [tree], EMPTY, [None], 0
            )
        else:
            _fwp_rec([tree], [None], kstack, is_leaf, none_is_leaf, out, codes, data, 0, limit, None)
    except CycleFound:
        raise cycle_error(tree, is_leaf, is_leaf_takes_path, none_is_leaf, ns) from None
    finally:
        end_walk()
    return out, PyTreeDef(codes, data, len(out), none_is_leaf, "" if ns is None else ns.recorded())


def leaves_with_path(
    tree: Any,
    is_leaf: Callable[..., Any] | None = None,
    is_leaf_takes_path: bool = False,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> list[tuple[tuple[Any, ...], Any]]:
    """``[(path, leaf), ...]``, as jax.tree_util.tree_leaves_with_path (``is_leaf_takes_path``
    included).  See flatten_with_path."""
    return flatten_with_path(tree, is_leaf, is_leaf_takes_path, none_is_leaf=none_is_leaf, namespace=namespace)[0]


def map(
    f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: IsLeaf = None, none_is_leaf: bool = False, namespace: str = ""
) -> Any:
    """Apply ``f`` to the leaves of ``tree`` (and the matching subtrees of ``rest``).

    Follows jax.tree_util.tree_map: ``f(x, *ys)`` is called once per leaf ``x`` of ``tree``,
    where each ``y`` is the subtree of the corresponding tree in ``rest`` at the same key path;
    every tree in ``rest`` must have ``tree``'s structure as a prefix.  The result has the
    structure of ``tree``, except that rebuilt dicts keep ``tree``'s insertion order (JAX sorts
    them).  ``is_leaf`` applies to ``tree`` only.

    Raises:
      ValueError: a tree in ``rest`` does not match: the message names the key path of the
        first mismatch and both sides (types, lengths, missing and extra keys); or a cycle.

    >>> map(lambda x, y: x + y, {'b': 1, 'a': [2, 3]}, {'a': [10, 20], 'b': 30})
    {'b': 31, 'a': [12, 23]}
    """
    if namespace or MODES.ordered:
        return _map_ns(f, tree, list(rest), is_leaf, False, none_is_leaf, False, namespace, "map")
    try:
        if not rest:
            if COMPILED:
                return _map1(f, tree, is_leaf, none_is_leaf)
            return pure_map1(f, tree, is_leaf, none_is_leaf)
        if len(rest) == 1:
            return _map2(f, tree, rest[0], is_leaf, none_is_leaf)
        return _mapn(f, tree, list(rest), is_leaf, False, none_is_leaf, False)
    except CycleFound:
        raise cycle_error(tree, is_leaf, False, none_is_leaf) from None
    except MismatchFound:
        raise mismatch_error("map", tree, list(rest), is_leaf, False, none_is_leaf) from None


def map_with_path(
    f: Callable[..., Any],
    tree: Any,
    *rest: Any,
    is_leaf: Callable[..., Any] | None = None,
    is_leaf_takes_path: bool = False,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Any:
    """As ``map``, but calls ``f(path, x, *ys)`` with the key path of each leaf, as
    jax.tree_util.tree_map_with_path; with ``is_leaf_takes_path=True``, ``is_leaf`` is called
    as ``is_leaf(path, x)``.

    >>> map_with_path(lambda p, x: f"{keystr(p)}={x}", {'a': [1]})
    {'a': ["['a'][0]=1"]}
    """
    path_leaf = is_leaf_takes_path and is_leaf is not None
    if namespace or MODES.ordered:
        return _map_ns(f, tree, list(rest), is_leaf, path_leaf, none_is_leaf, True, namespace, "map_with_path")
    try:
        return _mapn(f, tree, list(rest), is_leaf, path_leaf, none_is_leaf, True)
    except CycleFound:
        raise cycle_error(tree, is_leaf, path_leaf, none_is_leaf) from None
    except MismatchFound:
        raise mismatch_error("map_with_path", tree, list(rest), is_leaf, path_leaf, none_is_leaf) from None


def _map1_rec(
    f: Callable[..., Any],
    seq: list[Any],
    outs: list[Any],
    is_leaf: IsLeaf,
    none_is_leaf: bool,
    depth: i64,
    limit: i64,
    leaf_type: object,
) -> object:
    """One-tree map of the items of ``seq`` (at ``depth``) into ``outs`` by recursion, as
    ``_flatten_rec``; returns the leaf type."""
    n: i64 = len(seq)
    pos: i64 = 0
    while pos < n:
        if pos >= len(seq):
            raise changed_size(seq, n)
        x = seq[pos]
        pos += 1
        if is_leaf is not None and is_leaf(x):
            outs.append(f(x))
            continue
        t = type(x)
        if t is leaf_type:
            outs.append(f(x))
            continue
        d: Any = None
        if t is list:
            ch: list[Any] = x
            code = (len(ch) << SHIFT) | LIST
        else:
            code, d, ch = expand(x, none_is_leaf)
            if code == LEAF:
                leaf_type = t
                outs.append(f(x))
                continue
        if not ch:
            outs.append(build(code, d, []))
            continue
        if depth + 1 >= limit:
            sub = Walker(f, is_leaf, none_is_leaf=none_is_leaf).walk(
                ch, EMPTY, EMPTY, depth + 1
            )
        else:
            sub = []
            leaf_type = _map1_rec(f, ch, sub, is_leaf, none_is_leaf, depth + 1, limit, leaf_type)
        outs.append(build(code, d, sub))
    return leaf_type


def _map1(f: Callable[..., Any], tree: Any, is_leaf: IsLeaf, none_is_leaf: bool) -> Any:
    top: list[Any] = []
    limit = begin_walk()
    try:
        _map1_rec(f, [tree], top, is_leaf, none_is_leaf, 0, limit, None)
    finally:
        end_walk()
    return top[0]


def _map2_rec(
    f: Callable[..., Any],
    seq: list[Any],
    oseq: list[Any],
    outs: list[Any],
    is_leaf: IsLeaf,
    none_is_leaf: bool,
    depth: i64,
    limit: i64,
    leaf_type: object,
) -> object:
    """Two-tree map of the items of ``seq`` and ``oseq`` into ``outs`` by recursion, as
    ``_map1_rec``; a node of ``oseq`` that does not match raises ``MismatchFound``.

    ``oseq`` may be a list of the second tree itself (not a copy), so its length is checked
    as ``seq``'s is.
    """
    n: i64 = len(seq)
    pos: i64 = 0
    while pos < n:
        if pos >= len(seq):
            raise changed_size(seq, n)
        if pos >= len(oseq):
            raise changed_size(oseq, n)
        x = seq[pos]
        y = oseq[pos]
        pos += 1
        if is_leaf is not None and is_leaf(x):
            outs.append(f(x, y))
            continue
        t = type(x)
        if t is leaf_type:
            outs.append(f(x, y))
            continue
        d: Any = None
        ych: list[Any] | None
        if t is list:
            ch: list[Any] = x
            code = (len(ch) << SHIFT) | LIST
            ych = y if type(y) is list and len(y) == len(ch) else None
        else:
            code, d, ch = expand(x, none_is_leaf)
            if code == LEAF:
                leaf_type = t
                outs.append(f(x, y))
                continue
            ych = match_children(code, d, y, none_is_leaf)
        if ych is None:
            raise MismatchFound()
        if not ch:
            outs.append(build(code, d, []))
            continue
        if depth + 1 >= limit:
            sub = Walker(f, is_leaf, none_is_leaf=none_is_leaf, nrest=1).walk(
                ch, [ych], EMPTY, depth + 1
            )
        else:
            sub = []
            leaf_type = _map2_rec(f, ch, ych, sub, is_leaf, none_is_leaf, depth + 1, limit, leaf_type)
        outs.append(build(code, d, sub))
    return leaf_type


def _map2(f: Callable[..., Any], tree: Any, other: Any, is_leaf: IsLeaf, none_is_leaf: bool) -> Any:
    """``map`` with exactly one tree in ``rest`` (the common case: params and grads)."""
    top: list[Any] = []
    limit = begin_walk()
    try:
        _map2_rec(f, [tree], [other], top, is_leaf, none_is_leaf, 0, limit, None)
    finally:
        end_walk()
    return top[0]


def _mapn(
    f: Callable[..., Any],
    tree: Any,
    rest: list[Any],
    is_leaf: Callable[..., Any] | None,
    path_leaf: bool,
    none_is_leaf: bool,
    with_path: bool,
    ns: Namespace | None = None,
) -> Any:
    """``map`` over three or more trees, or with paths, or in a namespace: the iterative
    walker from the root."""
    walker = Walker(
        f, is_leaf, path_leaf=path_leaf, none_is_leaf=none_is_leaf, paths=with_path, nrest=len(rest), kstack=[], ns=ns
    )
    return walker.walk([tree], [[r] for r in rest], [None], 0)[0]


def _map_ns(
    f: Callable[..., Any],
    tree: Any,
    rest: list[Any],
    is_leaf: Callable[..., Any] | None,
    path_leaf: bool,
    none_is_leaf: bool,
    with_path: bool,
    namespace: str,
    what: str,
) -> Any:
    """``map`` / ``map_with_path`` in a namespace (see ``_walk_ns``)."""
    ns = _view(namespace)
    begin_walk()
    try:
        return _mapn(f, tree, rest, is_leaf, path_leaf, none_is_leaf, with_path, ns)
    except CycleFound:
        raise cycle_error(tree, is_leaf, path_leaf, none_is_leaf, ns) from None
    except MismatchFound:
        raise mismatch_error(what, tree, rest, is_leaf, path_leaf, none_is_leaf, ns) from None
    finally:
        end_walk()
