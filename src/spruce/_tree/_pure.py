"""The one-tree ``map`` of the uncompiled build: the semantics of ``_traverse._map1``, in the
shape the CPython interpreter runs fastest.

Compiled by mypyc, ``_traverse``'s walkers are C loops over the engine's primitives
(``expand``, ``build``), and a call costs about what a loop step costs.  Run by the interpreter,
each primitive is a Python call and each statement a bytecode dispatch: the uncompiled build
mapped 4-12 times slower than the compiled one.  This module is never compiled (``setup.py``
leaves it out) and is used only when the engine runs uncompiled (``_errors.COMPILED`` false):

- The first ``RECURSE`` levels are walked by recursion, one Python call per node.  A node's
  children are mapped by a list comprehension that calls ``f`` itself on the children whose
  type is a known leaf type (``_registry.LEAF_TYPES``: one set lookup, no call of ours) and
  recurses into the others.  Lists, tuples and dicts are taken apart and rebuilt inline, dicts
  with C-level calls (``sorted``, ``itemgetter``, ``copy`` + ``update``) rather than loops
  over their keys; other nodes go through ``expand_registered`` and ``build``.
- Below that, a loop over an explicit stack of frame tuples (``_walk_deep``), which CPython
  runs faster than deep recursion (about 0.4 µs a level against 2 µs), with the cycle check of
  the other walkers (see ``_errors.DEEP``).  Depth costs heap, never C stack or recursion limit.

Semantics kept from ``_map1`` (the test suite runs on both builds): ``f`` is called in leaf
order (a dict's children in sorted key order), ``is_leaf`` on every object before anything
else, rebuilt dicts keep the input's insertion order, a list is walked as it was when entered
(items a callback appends are not visited; one that shrinks raises ``changed_size``), and a
dict's values are read when it is entered.  Cycles raise ``cycle_error`` with both key paths.
"""

from __future__ import annotations

from itertools import islice
from operator import itemgetter
from typing import Any, Callable, Final

from ._errors import changed_size, check_depth, cycle_error_below
from ._registry import CUSTOM, LEAF, LEAF_TYPES, LIST, NAMEDTUPLE, _cache, build, expand, expand_registered, lookup, sorted_keys

RECURSE: Final = 16  # levels walked by recursion; deeper subtrees go to _walk_deep
_NO_MARK: Final = object()  # _walk_deep's cycle mark before it marks a node
_cache_get: Final = _cache.get  # the registry's type cache (cleared in place, never replaced)


def map1(f: Callable[..., Any], tree: Any, is_leaf: Callable[[Any], Any] | None, none_is_leaf: bool) -> Any:
    """``map(f, tree)`` of one tree, uncompiled; see the module docstring and ``_traverse.map``."""
    ancestors: list[Any] = [None] * RECURSE  # ancestors[d]: the node being walked at depth d

    def m(x: Any, depth: int) -> Any:
        if depth == RECURSE:  # first, so that is_leaf sees x once (_walk_deep asks it)
            return _walk_deep(f, x, is_leaf, none_is_leaf, ancestors, depth)
        if is_leaf is not None and is_leaf(x):
            return f(x)
        t = type(x)
        if t in LEAF_TYPES:
            return f(x)
        if x is None:
            return f(x) if none_is_leaf else None
        ancestors[depth] = x
        d = depth + 1
        if t is dict:
            # The copy keeps the insertion order and key objects of the dict as it is entered
            # (before any key's __lt__ runs); ``update`` puts the outputs in place.
            rebuilt = x.copy()
            try:
                order = sorted(rebuilt)
            except TypeError:
                order = sorted_keys(rebuilt)
            values = itemgetter(*order)(rebuilt) if len(order) > 1 else [rebuilt[k] for k in order]
            if is_leaf is None:
                rebuilt.update(zip(order, [f(c) if type(c) in LEAF_TYPES else m(c, d) for c in values]))
            else:
                rebuilt.update(zip(order, [m(c, d) for c in values]))
            return rebuilt
        if t is list:
            n = len(x)
            if is_leaf is None:
                out = [f(c) if type(c) in LEAF_TYPES else m(c, d) for c in islice(x, n)]
            else:
                out = [m(c, d) for c in islice(x, n)]
            if len(out) != n:
                raise changed_size(x, n)
            return out
        if t is tuple:
            if is_leaf is None:
                return tuple([f(c) if type(c) in LEAF_TYPES else m(c, d) for c in x])
            return tuple([m(c, d) for c in x])
        info = _cache_get(t)
        if info is None:
            info = lookup(t)
        kind = info.kind
        if kind == LEAF:
            return f(x)
        if kind == CUSTOM:
            # The registration's own flatten and unflatten (and their checks), without the
            # CustomData a PyTreeDef needs (which hashes the aux data).
            ch, aux = info.flatten_node(x)
            # ch may be a list the node itself holds: walked as it is now, as a list node is
            n = len(ch)
            if is_leaf is None:
                outs = [f(c) if type(c) in LEAF_TYPES else m(c, d) for c in islice(ch, n)]
            else:
                outs = [m(c, d) for c in islice(ch, n)]
            if len(outs) != n:
                raise changed_size(ch, n)
            return info.unflatten_node(aux, outs)
        if kind == NAMEDTUPLE:
            if is_leaf is None:
                return t(*[f(c) if type(c) in LEAF_TYPES else m(c, d) for c in x])
            return t(*[m(c, d) for c in x])
        code, data, ch = expand_registered(x, info)
        if is_leaf is None:
            outs = [f(c) if type(c) in LEAF_TYPES else m(c, d) for c in ch]
        else:
            outs = [m(c, d) for c in ch]
        return build(code, data, outs)

    try:
        return m(tree, 0)
    finally:
        # m refers to itself through its closure: break the cycle, so that the closure and the
        # ancestors are freed now rather than by the cyclic garbage collector.
        m = None  # type: ignore[assignment]


def _walk_deep(
    f: Callable[..., Any],
    root: Any,
    is_leaf: Callable[[Any], Any] | None,
    none_is_leaf: bool,
    ancestors: list[Any],
    base: int,
) -> Any:
    """Map the subtree ``root`` (at depth ``base``, below ``ancestors[:base]``) iteratively.

    A frame is the tuple ``(seq, pos, n, outs, code, data)`` of the node being walked: its
    children, the position in them, their count when entered, the outputs so far, and how to
    build it.  The frame of ``root``'s parent is the one-item list ``[root]``.
    """
    leaf_types = LEAF_TYPES
    stack: list[tuple[list[Any], int, int, list[Any], int, Any]] = []
    seq: list[Any] = [root]
    pos = 0
    n = 1
    outs: list[Any] = []
    code = LIST
    data: Any = None
    depth = base  # of the nodes whose children are being walked
    mark: object = _NO_MARK  # the cycle check of deep walks: see _errors.DEEP (a power of 2)
    mark_depth = 0
    while True:
        if pos < n:
            try:
                x = seq[pos]
            except IndexError:  # only a list of the tree can shrink; the others are copies
                raise changed_size(seq, n) from None
            pos += 1
            if is_leaf is not None and is_leaf(x):
                outs.append(f(x))
                continue
            t = type(x)
            if t in leaf_types:
                outs.append(f(x))
                continue
            if t is list:
                ch: list[Any] = x
                xcode = LIST
                xdata: Any = None
            else:
                xcode, xdata, ch = expand(x, none_is_leaf)
                if xcode == LEAF:
                    outs.append(f(x))
                    continue
            if not ch:
                outs.append(build(xcode, xdata, []))
                continue
            stack.append((seq, pos, n, outs, code, data))
            depth += 1
            if x is mark:
                nodes = [fr[0][fr[1] - 1] for fr in stack]
                raise cycle_error_below(ancestors, base, nodes, [fr[1] for fr in stack], none_is_leaf)
            if depth & (depth - 1) == 0:
                mark = x
                mark_depth = depth
                check_depth(depth)
            seq = ch
            pos = 0
            n = len(ch)
            outs = []
            code = xcode
            data = xdata
        elif stack:
            built = outs if code == LIST else build(code, data, outs)
            seq, pos, n, outs, code, data = stack.pop()
            depth -= 1
            if depth < mark_depth:
                mark = _NO_MARK
                mark_depth = 0
            outs.append(built)
        else:
            return outs[0]
