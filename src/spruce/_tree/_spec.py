"""optree's PyTreeSpec surface of a PyTreeDef: kinds and types of nodes, entries, folds over the
node table (``walk``, ``traverse``), ``transform`` and ``broadcast_to_common_suffix``.

Functions of a PyTreeDef's table, which ``_treedef.PyTreeDef``'s methods call; new structures
are made by ``PyTreeDef._make`` (same ``none_is_leaf`` and namespace), so this module never
imports ``_treedef`` at run time.
"""

from __future__ import annotations

import operator
from collections import OrderedDict, defaultdict, deque
from typing import Any, Callable

from ._expand import build
from ._kinds import (
    CUSTOM,
    DEFAULTDICT,
    DEQUE,
    DICT,
    LEAF,
    LIST,
    MASK,
    MODE_DATACLASS,
    MODE_DATACLASS_INIT,
    NAMEDTUPLE,
    NONE,
    ORDEREDDICT,
    SHIFT,
    STRUCTSEQ,
    TUPLE,
)
from ._nodes import CustomData, EntriesAux
from ._text import qualified_name

# A PyTreeDef, typed loosely: _treedef imports this module, so it cannot import _treedef.
PyTreeDef = Any


def node_data(code: int, d: Any) -> tuple[Any, Any]:
    """``node_data()`` of a node whose table entry is ``code`` and data ``d`` (not a leaf)."""
    kind = code & MASK
    if kind == NONE:
        return (type(None), None)
    if kind == TUPLE:
        return (tuple, None)
    if kind == LIST:
        return (list, None)
    if kind == DICT:
        return (dict, list(d.keys))
    if kind == ORDEREDDICT:  # (a tuple, as JAX: its OrderedDict is a registered node)
        return (OrderedDict, tuple(d.keys))
    if kind == DEFAULTDICT:
        return (defaultdict, (d.factory, tuple(d.keys)))
    if kind == DEQUE:
        return (deque, d)
    if kind == NAMEDTUPLE or kind == STRUCTSEQ:
        return (d, None)
    cd: CustomData = d
    return (cd.info.nodetype, cd.aux)


def root_type(td: PyTreeDef) -> Any:
    code = td._codes[0]
    return None if code == LEAF else node_data(code, td._data[0])[0]


def entries(td: PyTreeDef) -> list[Any]:
    """The entries of the root's children, as optree's PyTreeSpec.entries: the keys of a dict
    kind (in the structure's order), the field names of a register_dataclass class, the
    entries a flatten function returned (optree's three-value flatten, see ``EntriesAux``),
    and the positions 0..n-1 of every other node."""
    code = td._codes[0]
    n = code >> SHIFT
    kind = code & MASK
    if kind == DICT or kind == ORDEREDDICT or kind == DEFAULTDICT:
        return list(td._data[0].keys)
    if kind == CUSTOM:
        cd: CustomData = td._data[0]
        if cd.info.mode == MODE_DATACLASS or cd.info.mode == MODE_DATACLASS_INIT:
            return list(cd.info.data_fields)
        if isinstance(cd.aux, EntriesAux):
            return list(cd.aux.entries)
    return list(range(n))


def index(i: Any, n: int, what: str) -> int:
    """``i`` as an index of ``n`` children (negative from the end), or IndexError."""
    j = operator.index(i)
    if j < 0:
        j += n
    if not 0 <= j < n:
        raise IndexError(f"PyTreeDef.{what}: index {i} is out of range for a node with {n} children")
    return j


def same_namespace(a: PyTreeDef, b: PyTreeDef, what: str) -> str:
    """The namespace of a structure made of ``a`` and ``b``: the one that is not "" (ValueError
    if both are set and differ, as optree)."""
    x: str = a._namespace
    y: str = b._namespace
    if x and y and x != y:
        raise ValueError(f"{what}: the PyTreeDefs have different namespaces, {x!r} and {y!r}")
    return x or y


def fold(
    codes: list[int],
    data: list[Any],
    items: list[Any],
    f_leaf: Callable[[Any], Any] | None,
    on_node: Callable[[int, Any, list[Any]], Any],
) -> Any:
    """Fold a node table over ``items`` (one per leaf), children before parents: each leaf
    becomes ``f_leaf(leaf)`` (itself when None), in leaf order, and each node
    ``on_node(code, data, results of its children)``.  Returns what the root became.
    Iterative: any depth."""
    results: list[list[Any]] = []  # of each open node, its children's results so far
    left: list[int] = []  # of each open node, how many children are still to come
    nodes: list[tuple[int, Any]] = []
    li = 0
    di = 0
    value: Any = None
    for c in codes:
        if c == LEAF:
            leaf = items[li]
            li += 1
            value = leaf if f_leaf is None else f_leaf(leaf)
        else:
            d = data[di]
            di += 1
            k = c >> SHIFT
            if k > 0:
                results.append([])
                left.append(k)
                nodes.append((c, d))
                continue
            value = on_node(c, d, [])
        while results:  # hand the value to its parent; close the nodes it completes
            results[-1].append(value)
            left[-1] -= 1
            if left[-1] > 0:
                break
            left.pop()
            c, d = nodes.pop()
            value = on_node(c, d, results.pop())
    return value


def walk_jax(td: PyTreeDef, f_node: Callable[..., Any], f_leaf: Callable[[Any], Any] | None, items: list[Any]) -> Any:
    """jax.tree_util.PyTreeDef.walk: ``f_node(results tuple, data)``, data as ``node_data()``
    gives it, except a namedtuple's or struct sequence's class (as JAX's)."""

    def on_node(c: int, d: Any, ch: list[Any]) -> Any:
        kind = c & MASK
        nd = d if kind == NAMEDTUPLE or kind == STRUCTSEQ else node_data(c, d)[1]
        return f_node(tuple(ch), nd)

    return fold(td._codes, td._data, items, f_leaf, on_node)


def walk_optree(
    td: PyTreeDef, items: list[Any], f_node: Callable[..., Any] | None, f_leaf: Callable[[Any], Any] | None
) -> Any:
    """optree's PyTreeSpec.walk: ``f_node(node type, node data, children results tuple)``
    (the node rebuilt from the results when ``f_node`` is None); node data as in ``walk_jax``,
    except that dict kinds give their keys as a list (as optree's)."""

    def on_node(c: int, d: Any, ch: list[Any]) -> Any:
        if f_node is None:
            return build(c, d, ch)
        t, nd = node_data(c, d)
        kind = c & MASK
        if kind == NAMEDTUPLE or kind == STRUCTSEQ:
            nd = d
        elif kind == ORDEREDDICT:
            nd = list(d.keys)
        elif kind == DEFAULTDICT:
            nd = (d.factory, list(d.keys))
        return f_node(t, nd, tuple(ch))

    return fold(td._codes, td._data, items, f_leaf, on_node)


def traverse(
    td: PyTreeDef, items: list[Any], f_node: Callable[[Any], Any] | None, f_leaf: Callable[[Any], Any] | None
) -> Any:
    """optree's PyTreeSpec.traverse: every node rebuilt from its children's results, then
    ``f_node(node)`` (when given)."""

    def on_node(c: int, d: Any, ch: list[Any]) -> Any:
        node = build(c, d, ch)
        return node if f_node is None else f_node(node)

    return fold(td._codes, td._data, items, f_leaf, on_node)


def _check_spec(td: PyTreeDef, out: Any, arity: int, given: PyTreeDef) -> PyTreeDef:
    if not isinstance(out, type(td)):
        raise TypeError(
            f"transform: the function must return a PyTreeDef, got {type(out).__name__} (given {given!r})"
        )
    spec: PyTreeDef = out
    if arity >= 0 and spec._num_leaves != arity:
        raise ValueError(
            f"transform: the node function must return a PyTreeDef with as many leaves as the node "
            f"has children ({arity}), got {spec!r} (given {given!r})"
        )
    return spec


def transform(
    td: PyTreeDef, f_node: Callable[[Any], Any] | None, f_leaf: Callable[[Any], Any] | None
) -> PyTreeDef:
    """optree's PyTreeSpec.transform: each leaf becomes the structure ``f_leaf(PyTreeDef(*))``
    and each node the structure ``f_node(one-level structure of the node)``, whose leaves are
    then replaced by what the node's children became (children first)."""
    leaf = td._make([LEAF], [], 1)

    def on_leaf(x: Any) -> Any:
        return leaf if f_leaf is None else _check_spec(td, f_leaf(leaf), -1, leaf)

    def on_node(c: int, d: Any, ch: list[Any]) -> Any:
        k = c >> SHIFT
        one = td._make([c] + [LEAF] * k, [d], k)
        spec = one if f_node is None else _check_spec(td, f_node(one), k, one)
        codes: list[int] = []
        data: list[Any] = []
        leaves = 0
        di = 0
        ci = 0
        for code in spec._codes:
            if code == LEAF:
                sub: PyTreeDef = ch[ci]
                ci += 1
                codes.extend(sub._codes)
                data.extend(sub._data)
                leaves += sub._num_leaves
            else:
                codes.append(code)
                data.append(spec._data[di])
                di += 1
        return td._make(codes, data, leaves)

    return fold(td._codes, td._data, [None] * td._num_leaves, on_leaf, on_node)


def span(codes: list[int], i: int, di: int) -> tuple[int, int]:
    """End (exclusive) of the subtree starting at node ``i`` / data index ``di``."""
    need = 1
    while need > 0:
        c = codes[i]
        need += (c >> SHIFT) - 1
        if c != LEAF:
            di += 1
        i += 1
    return i, di


def broadcast_to_common_suffix(a: PyTreeDef, b: PyTreeDef) -> PyTreeDef:
    """The structure that both ``a`` and ``b`` are prefixes of and that has each node of
    either (optree's PyTreeSpec.broadcast_to_common_suffix): where one has a leaf, the other's
    subtree.  ValueError where both have nodes that differ (kind, arity or node data)."""
    ns = same_namespace(a, b, "broadcast_to_common_suffix")
    if a._none_is_leaf != b._none_is_leaf:
        raise ValueError("broadcast_to_common_suffix: the PyTreeDefs differ in none_is_leaf")
    ca, da, cb, db = a._codes, a._data, b._codes, b._data
    codes: list[int] = []
    data: list[Any] = []
    i = j = di = dj = 0
    while i < len(ca):
        x = ca[i]
        y = cb[j]
        if x == LEAF:
            j2, dj2 = span(cb, j, dj)
            codes.extend(cb[j:j2])
            data.extend(db[dj:dj2])
            i += 1
            j, dj = j2, dj2
        elif y == LEAF:
            i2, di2 = span(ca, i, di)
            codes.extend(ca[i:i2])
            data.extend(da[di:di2])
            i, di = i2, di2
            j += 1
        else:
            dx = da[di]
            dy = db[dj]
            if x != y or not (dx is dy or bool(dx == dy)):
                tx, _ = node_data(x, dx)
                ty, _ = node_data(y, dy)
                raise ValueError(
                    "broadcast_to_common_suffix: the PyTreeDefs have different nodes at the same "
                    f"place: {qualified_name(tx)} with {x >> SHIFT} children and node data "
                    f"{node_data(x, dx)[1]!r}, and {qualified_name(ty)} with {y >> SHIFT} children "
                    f"and node data {node_data(y, dy)[1]!r}"
                )
            codes.append(x)
            data.append(dx)
            i += 1
            j += 1
            di += 1
            dj += 1
    return type(a)(codes, data, sum(1 for c in codes if c == LEAF), a._none_is_leaf, ns)


def order_error(other: object, op: str) -> TypeError:
    return TypeError(f"'{op}' is not supported between a PyTreeDef and {type(other).__name__}")


def optree_args(what: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any, Any]:
    """``(f_node, f_leaf, leaves)`` of a call ``walk(leaves, f_node=None, f_leaf=None)``."""
    names = ("leaves", "f_node", "f_leaf")
    got: dict[str, Any] = {"f_node": None, "f_leaf": None}
    if len(args) > 3:
        raise TypeError(f"{what}() takes at most 3 arguments ({len(args)} given)")
    for name, value in zip(names, args):
        got[name] = value
    for name, value in kwargs.items():
        if name not in names or (name in got and names.index(name) < len(args)):
            raise TypeError(f"{what}() got an unexpected or repeated keyword argument {name!r}")
        got[name] = value
    if "leaves" not in got:
        raise TypeError(f"{what}() missing the leaves argument")
    return got["f_node"], got["f_leaf"], got["leaves"]
