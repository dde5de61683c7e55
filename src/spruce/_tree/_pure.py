"""The one-tree ``map`` of the uncompiled build: the semantics of ``_traverse._map1``, in the
shape the CPython interpreter runs fastest.

Compiled by mypyc, ``_traverse``'s walkers are C loops over the engine's primitives
(``expand``, ``build``), and a call costs about what a loop step costs.  Run by the interpreter,
each primitive is a Python call and each statement a bytecode dispatch, so the shared walkers
map several times slower uncompiled than compiled.  This module is never compiled (``setup.py``
leaves it out) and is used only when the engine runs uncompiled (``_depth.COMPILED`` false):

- The first ``RECURSE`` levels are walked by recursion, one Python call per node.  A node's
  children are mapped by one ``for`` loop that calls ``f`` itself on the children whose type is
  a known leaf type (``_registry.LEAF_TYPES``: one set lookup, no call of ours) and recurses
  into the others.  Under CPython 3.11 a loop is cheaper than a list comprehension here: a
  comprehension is a function of its own, made and called once per node, and recursing from
  inside it puts two frames on the stack per level.  Loops cost far fewer instructions than
  comprehensions on trees of small nodes and slightly more on one wide list (the figures are
  in docs/performance.md, "Map").  Lists, tuples and dicts are taken apart and rebuilt inline,
  a dict by putting each output in place in a copy of it; other nodes go through
  ``expand_registered`` and ``build``.
- Below that, the iterative walker every walk hands its deep subtrees to (``_walker.Walker``),
  with its cycle check.  CPython runs it about as fast as this recursion (measured on a deep
  chain of lists: docs/performance.md), and its depth costs heap, never C stack or recursion
  limit.

Semantics kept from ``_map1`` (the test suite runs on both builds): ``f`` is called in leaf
order (a dict's children in sorted key order), ``is_leaf`` on every object before anything
else, rebuilt dicts keep the input's insertion order, a list is walked as it was when entered
(items a callback appends are not visited; one that shrinks raises ``changed_size``), and a
dict's values are read when it is entered.  A cycle raises ``CycleFound`` in the walker, and
``map`` walks again to name it.
"""

from __future__ import annotations

from itertools import islice
from typing import Any, Callable, Final

from ._depth import DEEP
from ._errors import changed_size
from ._expand import EMPTY, build, expand_registered
from ._kinds import CUSTOM, LEAF, NAMEDTUPLE
from ._nodes import NodeInfo, sorted_keys
from ._registry import LEAF_TYPES, _cache, lookup
from ._walker import Walker

RECURSE: Final = DEEP  # levels walked by recursion (16, uncompiled); deeper subtrees go to the walker
_cache_get: Final = _cache.get  # the registry's type cache (cleared in place, never replaced)


def map1(f: Callable[..., Any], tree: Any, is_leaf: Callable[[Any], Any] | None, none_is_leaf: bool) -> Any:
    """``map(f, tree)`` of one tree, uncompiled; see the module docstring and ``_traverse.map``."""
    # With is_leaf, no child is mapped without asking it (in ``m``): no type is a known leaf.
    leaf_types: set[type] | frozenset[type] = LEAF_TYPES if is_leaf is None else frozenset()

    def m(x: Any, depth: int) -> Any:
        if depth == RECURSE:  # first, so that is_leaf sees x once (the walker asks it)
            return Walker(f, is_leaf, none_is_leaf=none_is_leaf).walk(
                [x], EMPTY, EMPTY, depth
            )[0]
        if is_leaf is not None and is_leaf(x):
            return f(x)
        t = type(x)
        if t in LEAF_TYPES:
            return f(x)
        if x is None:
            return f(x) if none_is_leaf else None
        d = depth + 1
        if t is dict:
            # The copy keeps the insertion order and key objects of the dict as it is entered
            # (before any key's __lt__ runs); each output is put in place of its input.
            rebuilt = x.copy()
            try:
                order = sorted(rebuilt)
            except TypeError:
                order = sorted_keys(rebuilt)
            for k in order:
                c = rebuilt[k]
                rebuilt[k] = f(c) if type(c) in leaf_types else m(c, d)
            return rebuilt
        info: NodeInfo | None = None
        aux: Any = None
        if t is list or t is tuple:
            ch = x
        else:
            info = _cache_get(t)
            if info is None:
                info = lookup(t)
            kind = info.kind
            if kind == LEAF:
                return f(x)
            if kind == CUSTOM:
                # The registration's own flatten and unflatten (and their checks), without
                # the CustomData a PyTreeDef needs (which hashes the aux data).  ch may be a
                # list the node itself holds: walked as it is now, as a list node is.
                ch, aux = info.flatten_node(x)
            elif kind == NAMEDTUPLE:
                ch = x
            else:
                code, aux, ch = expand_registered(x, info)
        n = len(ch)
        out = []
        for c in islice(ch, n):
            out.append(f(c) if type(c) in leaf_types else m(c, d))
        if len(out) != n:
            raise changed_size(ch, n)
        if info is None:
            return out if t is list else tuple(out)
        if kind == CUSTOM:
            return info.unflatten_node(aux, out)
        if kind == NAMEDTUPLE:
            return t(*out)
        return build(code, aux, out)

    try:
        return m(tree, 0)
    finally:
        # m refers to itself through its closure: break the cycle, so that the closure is freed
        # now rather than by the cyclic garbage collector.
        m = None  # type: ignore[assignment]
