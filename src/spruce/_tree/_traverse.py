"""The walkers: flatten, flatten_with_path, map, map_with_path and the lazy leaf iterator.

Each walker is one loop over an explicit frame stack (the children list being walked and the
position in it), so depth costs heap, never C stack.  ``map`` is fused: it builds the output
while it walks, without a PyTreeDef or a leaves list in between.

Frame-stack convention shared with ``_errors``: ``st_seq[i]`` is the children list that held
the node entered at depth i and ``st_pos[i]`` is one past that node's index in it, so the node
itself is ``st_seq[i][st_pos[i] - 1]`` (``nodes_of``) and need not be stacked.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from ._errors import DEEP, changed_size, check_depth, cycle_error, mismatch_error, nodes_of
from ._keys import keystr  # noqa: F401  (used by the map_with_path doctest)
from ._registry import LEAF, SHIFT, build, expand, expand_with_keys, match_children
from ._treedef import PyTreeDef

IsLeaf = Callable[[Any], Any] | None


def flatten_into(
    tree: Any, is_leaf: IsLeaf, none_is_leaf: bool, leaves: list[Any], codes: list[int], data: list[Any]
) -> None:
    """Append the leaves of ``tree`` to ``leaves`` and its node table to ``codes``/``data``."""
    seq: list[Any] = [tree]
    pos = 0
    n = 1
    st_seq: list[list[Any]] = []
    st_pos: list[int] = []
    st_n: list[int] = []  # each frame's child count, fixed when it was entered
    mark: object = None  # cycle check of deep walks: see _errors.DEEP
    mark_depth = 0
    leaf_type: object = None  # the type of the last leaf seen: most leaves share it
    while True:
        if pos < n:
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
            code, d, ch = expand(x, none_is_leaf)
            if code == LEAF:
                leaf_type = t
                leaves.append(x)
                codes.append(LEAF)
                continue
            codes.append(code)
            data.append(d)
            if code >> SHIFT == 0:
                continue
            st_seq.append(seq)
            st_pos.append(pos)
            st_n.append(n)
            depth = len(st_seq)
            if depth >= DEEP:
                if x is mark:
                    raise cycle_error(nodes_of(st_seq, st_pos), st_pos, none_is_leaf)
                if depth & (depth - 1) == 0:
                    mark = x
                    mark_depth = depth
                    check_depth(depth)
            seq = ch
            pos = 0
            n = len(ch)
        elif st_seq:
            seq = st_seq.pop()
            if len(st_seq) < mark_depth:
                mark = None
                mark_depth = 0
            pos = st_pos.pop()
            n = st_n.pop()
        else:
            return


def flatten(tree: Any, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False) -> tuple[list[Any], PyTreeDef]:
    """Flatten a pytree into its leaves and its structure.

    Follows jax.tree_util.tree_flatten: leaves come in pre-order, dict children in sorted key
    order (keys that do not compare fall back to a deterministic order by type, then key).

    Args:
      tree: any pytree.
      is_leaf: optional predicate called on every object visited (the root included) before it
        is expanded; a true result makes that object a leaf.
      none_is_leaf: if True, None is a leaf instead of an empty node.

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
    leaves: list[Any] = []
    codes: list[int] = []
    data: list[Any] = []
    flatten_into(tree, is_leaf, none_is_leaf, leaves, codes, data)
    return leaves, PyTreeDef(codes, data, len(leaves), none_is_leaf)


def leaves(tree: Any, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False) -> list[Any]:
    """The leaves of ``tree`` in flatten order (a new list), as jax.tree_util.tree_leaves.

    Takes and raises as ``flatten``.

    >>> leaves([1, {'x': 2, 'w': (3, None)}])
    [1, 3, 2]
    """
    out: list[Any] = []
    codes: list[int] = []
    data: list[Any] = []
    flatten_into(tree, is_leaf, none_is_leaf, out, codes, data)
    return out


def structure(tree: Any, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False) -> PyTreeDef:
    """The PyTreeDef of ``tree``, as jax.tree_util.tree_structure.  Takes and raises as ``flatten``.

    >>> structure((1, [2, 3], {'a': None}))
    PyTreeDef((*, [*, *], {'a': None}))
    """
    return flatten(tree, is_leaf, none_is_leaf=none_is_leaf)[1]


def iter_leaves(tree: Any, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False) -> Iterator[Any]:
    """Yield the leaves of ``tree`` lazily, in flatten order (optree's tree_iter).

    Each node is expanded only when the iteration reaches it, so stopping early skips the rest.
    Takes and raises as ``flatten``.

    >>> it = iter_leaves({'a': [1, 2], 'b': 3})
    >>> next(it), next(it)
    (1, 2)
    """
    seq: list[Any] = [tree]
    pos = 0
    n = 1
    st_seq: list[list[Any]] = []
    st_pos: list[int] = []
    st_n: list[int] = []  # each frame's child count, fixed when it was entered
    mark: object = None  # cycle check of deep walks: see _errors.DEEP
    mark_depth = 0
    leaf_type: object = None  # the type of the last leaf seen: most leaves share it
    while True:
        if pos < n:
            if pos >= len(seq):
                raise changed_size(seq, n)
            x = seq[pos]
            pos += 1
            if is_leaf is not None and is_leaf(x):
                yield x
                continue
            t = type(x)
            if t is leaf_type:
                yield x
                continue
            code, d, ch = expand(x, none_is_leaf)
            if code == LEAF:
                leaf_type = t
                yield x
                continue
            if code >> SHIFT == 0:
                continue
            st_seq.append(seq)
            st_pos.append(pos)
            st_n.append(n)
            depth = len(st_seq)
            if depth >= DEEP:
                if x is mark:
                    raise cycle_error(nodes_of(st_seq, st_pos), st_pos, none_is_leaf)
                if depth & (depth - 1) == 0:
                    mark = x
                    mark_depth = depth
                    check_depth(depth)
            seq = ch
            pos = 0
            n = len(ch)
        elif st_seq:
            seq = st_seq.pop()
            if len(st_seq) < mark_depth:
                mark = None
                mark_depth = 0
            pos = st_pos.pop()
            n = st_n.pop()
        else:
            return


def flatten_with_path(
    tree: Any, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False
) -> tuple[list[tuple[tuple[Any, ...], Any]], PyTreeDef]:
    """Flatten with key paths, as jax.tree_util.tree_flatten_with_path.

    Returns ``([(path, leaf), ...], treedef)`` where each path is a tuple of key entries
    (DictKey, SequenceKey, GetAttrKey, FlattenedIndexKey, or a registered class's own keys).
    Takes and raises as ``flatten``.

    >>> pairs, _ = flatten_with_path({'a': [5]})
    >>> pairs
    [((DictKey(key='a'), SequenceKey(idx=0)), 5)]
    """
    out: list[tuple[tuple[Any, ...], Any]] = []
    codes: list[int] = []
    data: list[Any] = []
    seq: list[Any] = [tree]
    keys: list[Any] = [None]
    pos = 0
    n = 1
    # Keys of the nodes entered below the root; a leaf's path is built from it only at the
    # leaf, so deep trees cost O(depth) per leaf, never O(depth) per node kept alive.
    kstack: list[Any] = []
    st_seq: list[list[Any]] = []
    st_pos: list[int] = []
    st_n: list[int] = []  # each frame's child count, fixed when it was entered
    mark: object = None  # cycle check of deep walks: see _errors.DEEP
    mark_depth = 0
    st_keys: list[list[Any]] = []
    while True:
        if pos < n:
            if pos >= len(seq):
                raise changed_size(seq, n)
            x = seq[pos]
            k = keys[pos]
            pos += 1
            if is_leaf is not None and is_leaf(x):
                out.append((_leaf_path(kstack, k, bool(st_seq)), x))
                codes.append(LEAF)
                continue
            code, d, ch, ckeys = expand_with_keys(x, none_is_leaf)
            if code == LEAF:
                out.append((_leaf_path(kstack, k, bool(st_seq)), x))
                codes.append(LEAF)
                continue
            codes.append(code)
            data.append(d)
            if code >> SHIFT == 0:
                continue
            if st_seq:
                kstack.append(k)
            st_seq.append(seq)
            st_pos.append(pos)
            st_n.append(n)
            st_keys.append(keys)
            depth = len(st_seq)
            if depth >= DEEP:
                if x is mark:
                    raise cycle_error(nodes_of(st_seq, st_pos), st_pos, none_is_leaf)
                if depth & (depth - 1) == 0:
                    mark = x
                    mark_depth = depth
                    check_depth(depth)
            seq = ch
            keys = ckeys
            pos = 0
            n = len(ch)
        elif st_seq:
            seq = st_seq.pop()
            if len(st_seq) < mark_depth:
                mark = None
                mark_depth = 0
            pos = st_pos.pop()
            keys = st_keys.pop()
            if st_seq:
                kstack.pop()
            n = st_n.pop()
        else:
            break
    return out, PyTreeDef(codes, data, len(out), none_is_leaf)


def _leaf_path(kstack: list[Any], k: Any, below_root: bool) -> tuple[Any, ...]:
    if not below_root:
        return ()
    kstack.append(k)
    path = tuple(kstack)
    kstack.pop()
    return path


def leaves_with_path(
    tree: Any, is_leaf: IsLeaf = None, *, none_is_leaf: bool = False
) -> list[tuple[tuple[Any, ...], Any]]:
    """``[(path, leaf), ...]``, as jax.tree_util.tree_leaves_with_path.  See flatten_with_path."""
    return flatten_with_path(tree, is_leaf, none_is_leaf=none_is_leaf)[0]


def map(f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: IsLeaf = None, none_is_leaf: bool = False) -> Any:
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
    if not rest:
        return _map1(f, tree, is_leaf, none_is_leaf)
    if len(rest) == 1:
        return _map2(f, tree, rest[0], is_leaf, none_is_leaf)
    return _mapn(f, tree, list(rest), is_leaf, none_is_leaf, False)


def map_with_path(
    f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: IsLeaf = None, none_is_leaf: bool = False
) -> Any:
    """As ``map``, but calls ``f(path, x, *ys)`` with the key path of each leaf, as
    jax.tree_util.tree_map_with_path.

    >>> map_with_path(lambda p, x: f"{keystr(p)}={x}", {'a': [1]})
    {'a': ["['a'][0]=1"]}
    """
    return _mapn(f, tree, list(rest), is_leaf, none_is_leaf, True)


def _map1(f: Callable[..., Any], tree: Any, is_leaf: IsLeaf, none_is_leaf: bool) -> Any:
    seq: list[Any] = [tree]
    pos = 0
    n = 1
    outs: list[Any] = []
    st_seq: list[list[Any]] = []
    st_pos: list[int] = []
    st_n: list[int] = []  # each frame's child count, fixed when it was entered
    mark: object = None  # cycle check of deep walks: see _errors.DEEP
    mark_depth = 0
    st_outs: list[list[Any]] = []
    st_code: list[int] = []
    st_data: list[Any] = []
    leaf_type: object = None  # the type of the last leaf seen: most leaves share it
    while True:
        if pos < n:
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
            code, d, ch = expand(x, none_is_leaf)
            if code == LEAF:
                leaf_type = t
                outs.append(f(x))
                continue
            if code >> SHIFT == 0:
                outs.append(build(code, d, []))
                continue
            st_seq.append(seq)
            st_pos.append(pos)
            st_n.append(n)
            st_outs.append(outs)
            st_code.append(code)
            st_data.append(d)
            depth = len(st_seq)
            if depth >= DEEP:
                if x is mark:
                    raise cycle_error(nodes_of(st_seq, st_pos), st_pos, none_is_leaf)
                if depth & (depth - 1) == 0:
                    mark = x
                    mark_depth = depth
                    check_depth(depth)
            seq = ch
            pos = 0
            n = len(ch)
            outs = []
        elif st_seq:
            seq = st_seq.pop()
            if len(st_seq) < mark_depth:
                mark = None
                mark_depth = 0
            pos = st_pos.pop()
            built = build(st_code.pop(), st_data.pop(), outs)
            outs = st_outs.pop()
            n = st_n.pop()
            outs.append(built)
        else:
            return outs[0]


def _map2(f: Callable[..., Any], tree: Any, other: Any, is_leaf: IsLeaf, none_is_leaf: bool) -> Any:
    """``map`` with exactly one tree in ``rest`` (the common case: params and grads)."""
    seq: list[Any] = [tree]
    oseq: list[Any] = [other]
    st_oseq: list[list[Any]] = []
    pos = 0
    n = 1
    outs: list[Any] = []
    st_seq: list[list[Any]] = []
    st_pos: list[int] = []
    st_n: list[int] = []  # each frame's child count, fixed when it was entered
    mark: object = None  # cycle check of deep walks: see _errors.DEEP
    mark_depth = 0
    st_outs: list[list[Any]] = []
    st_code: list[int] = []
    st_data: list[Any] = []
    leaf_type: object = None  # the type of the last leaf seen: most leaves share it
    while True:
        if pos < n:
            if pos >= len(seq):
                raise changed_size(seq, n)
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
            code, d, ch = expand(x, none_is_leaf)
            if code == LEAF:
                leaf_type = t
                outs.append(f(x, y))
                continue
            ych = match_children(code, d, y, none_is_leaf)
            if ych is None:
                raise mismatch_error(
                    "map", nodes_of(st_seq, st_pos) + [x], st_pos + [pos], none_is_leaf, code, d, y, "tree #2 (rest[0])"
                )
            if code >> SHIFT == 0:
                outs.append(build(code, d, []))
                continue
            st_seq.append(seq)
            st_oseq.append(oseq)
            st_pos.append(pos)
            st_n.append(n)
            st_outs.append(outs)
            st_code.append(code)
            st_data.append(d)
            depth = len(st_seq)
            if depth >= DEEP:
                if x is mark:
                    raise cycle_error(nodes_of(st_seq, st_pos), st_pos, none_is_leaf)
                if depth & (depth - 1) == 0:
                    mark = x
                    mark_depth = depth
                    check_depth(depth)
            seq = ch
            oseq = ych
            pos = 0
            n = len(ch)
            outs = []
        elif st_seq:
            seq = st_seq.pop()
            if len(st_seq) < mark_depth:
                mark = None
                mark_depth = 0
            oseq = st_oseq.pop()
            pos = st_pos.pop()
            built = build(st_code.pop(), st_data.pop(), outs)
            outs = st_outs.pop()
            n = st_n.pop()
            outs.append(built)
        else:
            return outs[0]


def _mapn(
    f: Callable[..., Any], tree: Any, rest: list[Any], is_leaf: IsLeaf, none_is_leaf: bool, with_path: bool
) -> Any:
    nrest = len(rest)
    seq: list[Any] = [tree]
    rseqs: list[list[Any]] = [[r] for r in rest]
    keys: list[Any] = [None]
    kstack: list[Any] = []  # keys of the nodes entered below the root (see flatten_with_path)
    pos = 0
    n = 1
    outs: list[Any] = []
    st_seq: list[list[Any]] = []
    st_rseqs: list[list[list[Any]]] = []
    st_keys: list[list[Any]] = []
    st_pos: list[int] = []
    st_n: list[int] = []  # each frame's child count, fixed when it was entered
    mark: object = None  # cycle check of deep walks: see _errors.DEEP
    mark_depth = 0
    st_outs: list[list[Any]] = []
    st_code: list[int] = []
    st_data: list[Any] = []
    leaf_type: object = None  # the type of the last leaf seen: most leaves share it
    while True:
        if pos < n:
            if pos >= len(seq):
                raise changed_size(seq, n)
            x = seq[pos]
            ys = [r[pos] for r in rseqs]
            k: Any = keys[pos] if with_path else None
            pos += 1
            if is_leaf is not None and is_leaf(x):
                outs.append(_call_leaf(f, with_path, kstack, k, bool(st_seq), x, ys))
                continue
            ckeys: list[Any] = keys
            if with_path:
                code, d, ch, ckeys = expand_with_keys(x, none_is_leaf)
            else:
                code, d, ch = expand(x, none_is_leaf)
            if code == LEAF:
                outs.append(_call_leaf(f, with_path, kstack, k, bool(st_seq), x, ys))
                continue
            children: list[list[Any]] = []
            for j in range(nrest):
                y = ys[j]
                ych = match_children(code, d, y, none_is_leaf)
                if ych is None:
                    raise mismatch_error(
                        "map",
                        nodes_of(st_seq, st_pos) + [x],
                        st_pos + [pos],
                        none_is_leaf,
                        code,
                        d,
                        y,
                        f"tree #{j + 2} (rest[{j}])",
                    )
                children.append(ych)
            if code >> SHIFT == 0:
                outs.append(build(code, d, []))
                continue
            if st_seq:
                kstack.append(k)
            st_seq.append(seq)
            st_rseqs.append(rseqs)
            st_keys.append(keys)
            st_pos.append(pos)
            st_n.append(n)
            st_outs.append(outs)
            st_code.append(code)
            st_data.append(d)
            depth = len(st_seq)
            if depth >= DEEP:
                if x is mark:
                    raise cycle_error(nodes_of(st_seq, st_pos), st_pos, none_is_leaf)
                if depth & (depth - 1) == 0:
                    mark = x
                    mark_depth = depth
                    check_depth(depth)
            seq = ch
            rseqs = children
            keys = ckeys
            pos = 0
            n = len(ch)
            outs = []
        elif st_seq:
            seq = st_seq.pop()
            if len(st_seq) < mark_depth:
                mark = None
                mark_depth = 0
            rseqs = st_rseqs.pop()
            keys = st_keys.pop()
            if st_seq:
                kstack.pop()
            pos = st_pos.pop()
            built = build(st_code.pop(), st_data.pop(), outs)
            outs = st_outs.pop()
            n = st_n.pop()
            outs.append(built)
        else:
            return outs[0]


def _call_leaf(
    f: Callable[..., Any], with_path: bool, kstack: list[Any], k: Any, below_root: bool, x: Any, ys: list[Any]
) -> Any:
    if not with_path:
        return f(x, *ys)
    if not below_root:
        return f((), x, *ys)
    kstack.append(k)
    path = tuple(kstack)
    kstack.pop()
    return f(path, x, *ys)
