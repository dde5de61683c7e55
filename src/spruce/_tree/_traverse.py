"""The walkers: flatten, flatten_with_path, map, map_with_path and the lazy leaf iterator.

Each walker recurses for the first DEEP levels (compiled, a direct C call per level: no frame
stack to grow and pop) and hands deeper subtrees to a loop over an explicit frame stack (the
children list being walked and the position in it), so past DEEP depth costs heap, never C
stack; see ``_errors.DEEP``.  ``map`` is fused: it builds the output while it walks, without a
PyTreeDef or a leaves list in between.

Frame-stack convention shared with ``_errors``: ``st_seq[i]`` is the children list that held
the node entered at depth i and ``st_pos[i]`` is one past that node's index in it, so the node
itself is ``st_seq[i][st_pos[i] - 1]`` (``nodes_of``) and need not be stacked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

from ._errors import (
    COMPILED,
    DEEP,
    begin_walk,
    changed_size,
    check_depth,
    cycle_error,
    end_walk,
    mismatch_error,
    nodes_of,
)
from ._pure import map1 as pure_map1  # the uncompiled build's map (never compiled itself)
from ._keys import SEQUENCE_KEYS, keystr, sequence_keys  # noqa: F401  (keystr: map_with_path doctest)
from ._registry import LEAF, LIST, SHIFT, TUPLE, build, expand, expand_with_keys, match_children
from ._treedef import PyTreeDef

if TYPE_CHECKING:
    # Native 64-bit ints for positions and depths under mypyc (no tagged-int checks); plain
    # ints when the source runs uncompiled (annotations are never evaluated).
    from mypy_extensions import i64

IsLeaf = Callable[[Any], Any] | None


class _Handoff:
    """A recursive walk that stopped: at depth DEEP (the iterative walker carries on from
    exactly that point, with the frames the recursion was in), or at a mismatch (``error``;
    the frames name its key path).  Every level pushes its frame on the way back up, so the
    lists are deepest first until ``reverse`` puts them in stack order.
    """

    def __init__(self, node: Any, children: list[Any], leaf_type: object) -> None:
        self.node = node
        self.children = children
        self.leaf_type = leaf_type
        self.other_children: list[Any] = children  # map2: the second tree's children
        self.error = False  # map2: ``node`` (at ``pos`` in the innermost frame) did not match
        self.pos = 0
        self.code = 0
        self.data: Any = None
        self.other: Any = None
        self.seqs: list[list[Any]] = []
        self.poss: list[int] = []
        self.ns: list[int] = []
        self.outs: list[list[Any]] = []
        self.codes: list[int] = []
        self.datas: list[Any] = []
        self.oseqs: list[list[Any]] = []

    def push(self, seq: list[Any], pos: int, n: int) -> None:
        self.seqs.append(seq)
        self.poss.append(pos)
        self.ns.append(n)

    def push_map(self, seq: list[Any], pos: int, n: int, outs: list[Any], code: int, data: Any) -> None:
        self.seqs.append(seq)
        self.poss.append(pos)
        self.ns.append(n)
        self.outs.append(outs)
        self.codes.append(code)
        self.datas.append(data)

    def reverse(self) -> None:
        self.seqs.reverse()
        self.poss.reverse()
        self.ns.reverse()
        self.outs.reverse()
        self.codes.reverse()
        self.datas.reverse()
        self.oseqs.reverse()


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
    """Flatten the items of ``seq`` (a frame at ``depth``) by recursion, the fast path for the
    first DEEP levels: no frame stack to allocate, grow and pop.

    Returns the leaf type to remember, or a ``_Handoff`` when a node at depth DEEP was reached
    (its frames are pushed by every level on the way back up).
    """
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
            h = _Handoff(x, ch, leaf_type)
            h.push(seq, pos, n)
            return h
        r = _flatten_rec(ch, is_leaf, none_is_leaf, leaves, codes, data, depth + 1, limit, leaf_type)
        if isinstance(r, _Handoff):
            r.push(seq, pos, n)
            return r
        leaf_type = r
    return leaf_type


def flatten_into(
    tree: Any, is_leaf: IsLeaf, none_is_leaf: bool, leaves: list[Any], codes: list[int], data: list[Any]
) -> None:
    """Append the leaves of ``tree`` to ``leaves`` and its node table to ``codes``/``data``.

    The first DEEP levels are walked by recursion (cheapest for the usual shallow trees); a
    deeper tree is carried on by an iterative walk with an explicit frame stack, so depth
    costs heap, never C stack.
    """
    limit = begin_walk()
    try:
        r = _flatten_rec([tree], is_leaf, none_is_leaf, leaves, codes, data, 0, limit, None)
    finally:
        end_walk()
    if isinstance(r, _Handoff):
        _flatten_resume(r, is_leaf, none_is_leaf, leaves, codes, data)


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
            h = _Handoff(x, ch, leaf_type)
            h.push(seq, pos, n)
            return h
        r = _leaves_rec(ch, is_leaf, none_is_leaf, leaves, depth + 1, limit, leaf_type)
        if isinstance(r, _Handoff):
            r.push(seq, pos, n)
            return r
        leaf_type = r
    return leaf_type


def _flatten_resume(
    r: _Handoff, is_leaf: IsLeaf, none_is_leaf: bool, leaves: list[Any], codes: list[int], data: list[Any]
) -> None:
    """Carry on a flatten that the recursion handed off at depth DEEP, iteratively."""
    r.reverse()
    st_seq = r.seqs
    st_pos = r.poss
    st_n = r.ns
    seq = r.children
    pos = 0
    n = len(seq)
    mark: object = r.node  # cycle check of deep walks: see _errors.DEEP (DEEP is a power of 2)
    mark_depth = len(st_seq)
    leaf_type: object = r.leaf_type  # the type of the last leaf seen: most leaves share it
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
    limit = begin_walk()
    try:
        r = _leaves_rec([tree], is_leaf, none_is_leaf, out, 0, limit, None)
    finally:
        end_walk()
    if isinstance(r, _Handoff):
        # The node table of the deep part is made and dropped: deep trees are rare.
        _flatten_resume(r, is_leaf, none_is_leaf, out, [], [])
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
    """``flatten_with_path`` of the items of ``seq`` (keys ``keys``) by recursion for the first
    DEEP levels, as ``_flatten_rec``; ``kstack`` holds the keys of the nodes entered below the
    root.  Returns the leaf type, or a ``_Handoff`` (its ``other_children`` are the next keys).

    ``keys`` may be longer than ``seq`` (the shared SequenceKey list): only ``keys[pos]`` for
    a position of ``seq`` is read.
    """
    n: i64 = len(seq)
    pos: i64 = 0
    below_root = depth > 0
    while pos < n:
        if pos >= len(seq):
            raise changed_size(seq, n)
        x = seq[pos]
        k = keys[pos]
        pos += 1
        if is_leaf is not None and is_leaf(x):
            out.append((_leaf_path(kstack, k, below_root), x))
            codes.append(LEAF)
            continue
        t = type(x)
        if t is leaf_type:
            out.append((_leaf_path(kstack, k, below_root), x))
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
                out.append((_leaf_path(kstack, k, below_root), x))
                codes.append(LEAF)
                continue
        codes.append(code)
        data.append(d)
        if not ch:
            continue
        if below_root:
            kstack.append(k)
        if depth + 1 >= limit:
            h = _Handoff(x, ch, leaf_type)
            h.other_children = ckeys
            h.push(seq, pos, n)
            h.oseqs.append(keys)
            return h
        r = _fwp_rec(ch, ckeys, kstack, is_leaf, none_is_leaf, out, codes, data, depth + 1, limit, leaf_type)
        if isinstance(r, _Handoff):
            r.push(seq, pos, n)
            r.oseqs.append(keys)
            return r
        leaf_type = r
        if below_root:
            kstack.pop()
    return leaf_type


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
    # Keys of the nodes entered below the root; a leaf's path is built from it only at the
    # leaf, so deep trees cost O(depth) per leaf, never O(depth) per node kept alive.
    kstack: list[Any] = []
    limit = begin_walk()
    try:
        r = _fwp_rec([tree], [None], kstack, is_leaf, none_is_leaf, out, codes, data, 0, limit, None)
    finally:
        end_walk()
    if not isinstance(r, _Handoff):
        return out, PyTreeDef(codes, data, len(out), none_is_leaf)
    # Deeper than DEEP: carry on iteratively from where the recursion stopped.
    r.reverse()
    st_seq = r.seqs
    st_pos = r.poss
    st_n = r.ns
    st_keys = r.oseqs
    seq = r.children
    keys = r.other_children
    pos = 0
    n = len(seq)
    mark: object = r.node  # cycle check of deep walks: see _errors.DEEP (a power of 2)
    mark_depth = len(st_seq)
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
        if COMPILED:
            return _map1(f, tree, is_leaf, none_is_leaf)
        return pure_map1(f, tree, is_leaf, none_is_leaf)
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
    """One-tree map of the items of ``seq`` (a frame at ``depth``) into ``outs``, by recursion
    for the first DEEP levels (as ``_flatten_rec``; returns the leaf type or a ``_Handoff``)."""
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
            h = _Handoff(x, ch, leaf_type)
            h.push_map(seq, pos, n, outs, code, d)
            return h
        sub: list[Any] = []
        r = _map1_rec(f, ch, sub, is_leaf, none_is_leaf, depth + 1, limit, leaf_type)
        if isinstance(r, _Handoff):
            r.push_map(seq, pos, n, outs, code, d)
            return r
        leaf_type = r
        outs.append(build(code, d, sub))
    return leaf_type


def _map1(f: Callable[..., Any], tree: Any, is_leaf: IsLeaf, none_is_leaf: bool) -> Any:
    top: list[Any] = []
    limit = begin_walk()
    try:
        r = _map1_rec(f, [tree], top, is_leaf, none_is_leaf, 0, limit, None)
    finally:
        end_walk()
    if not isinstance(r, _Handoff):
        return top[0]
    # Deeper than DEEP: carry on iteratively from where the recursion stopped.
    r.reverse()
    st_seq = r.seqs
    st_pos = r.poss
    st_n = r.ns
    st_outs = r.outs
    st_code = r.codes
    st_data = r.datas
    seq = r.children
    pos = 0
    n = len(seq)
    outs: list[Any] = []
    mark: object = r.node  # cycle check of deep walks: see _errors.DEEP (a power of 2)
    mark_depth = len(st_seq)
    leaf_type: object = r.leaf_type  # the type of the last leaf seen: most leaves share it
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
    """Two-tree map of the items of ``seq`` and ``oseq`` into ``outs``, by recursion for the
    first DEEP levels; a mismatch returns an ``error`` handoff whose frames name its path.

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
            h = _Handoff(x, ch, leaf_type)
            h.error = True
            h.pos = pos
            h.code = code
            h.data = d
            h.other = y
            return h
        if not ch:
            outs.append(build(code, d, []))
            continue
        if depth + 1 >= limit:
            h = _Handoff(x, ch, leaf_type)
            h.other_children = ych
            h.push_map(seq, pos, n, outs, code, d)
            h.oseqs.append(oseq)
            return h
        sub: list[Any] = []
        r = _map2_rec(f, ch, ych, sub, is_leaf, none_is_leaf, depth + 1, limit, leaf_type)
        if isinstance(r, _Handoff):
            r.push_map(seq, pos, n, outs, code, d)
            r.oseqs.append(oseq)
            return r
        leaf_type = r
        outs.append(build(code, d, sub))
    return leaf_type


def _map2(f: Callable[..., Any], tree: Any, other: Any, is_leaf: IsLeaf, none_is_leaf: bool) -> Any:
    """``map`` with exactly one tree in ``rest`` (the common case: params and grads)."""
    top: list[Any] = []
    limit = begin_walk()
    try:
        r = _map2_rec(f, [tree], [other], top, is_leaf, none_is_leaf, 0, limit, None)
    finally:
        end_walk()
    if not isinstance(r, _Handoff):
        return top[0]
    r.reverse()
    if r.error:
        # The frames were pushed by the levels above the mismatch only.
        raise mismatch_error(
            "map",
            nodes_of(r.seqs, r.poss) + [r.node],
            r.poss + [r.pos],
            none_is_leaf,
            r.code,
            r.data,
            r.other,
            "tree #2 (rest[0])",
        )
    # Deeper than DEEP: carry on iteratively from where the recursion stopped.
    st_seq = r.seqs
    st_oseq = r.oseqs
    st_pos = r.poss
    st_n = r.ns
    st_outs = r.outs
    st_code = r.codes
    st_data = r.datas
    seq = r.children
    oseq = r.other_children
    pos = 0
    n = len(seq)
    outs: list[Any] = []
    mark: object = r.node  # cycle check of deep walks: see _errors.DEEP (a power of 2)
    mark_depth = len(st_seq)
    leaf_type: object = r.leaf_type  # the type of the last leaf seen: most leaves share it
    while True:
        if pos < n:
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
