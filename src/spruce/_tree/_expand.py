"""expand and build: one node apart and back together, the primitives every walker uses.

``expand(x)`` takes one object to ``(code, data, children)`` and ``build(code, data, children)``
takes it back.  ``code`` packs the node kind (low 4 bits, ``_kinds``) and the number of
children (``code >> 4``); a leaf has code 0.  ``data`` is what the node needs to be rebuilt and
compared: ``None`` for tuple/list/None, a ``DictData`` for the dict kinds, the class for
namedtuples and struct sequences, ``maxlen`` for a deque, a ``CustomData`` for registered
classes.  ``match_children`` takes another tree's node in the order of a given one.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict, deque
from typing import TYPE_CHECKING, Any, Final

from ._depth import COMPILED
from ._keys import GetAttrKey, dict_keys, sequence_keys
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
from ._nodes import CustomData, DictData, NodeInfo, sorted_keys
from ._registry import Namespace, _cache, lookup, lookup_in

if TYPE_CHECKING:
    from mypy_extensions import i64  # native ints when compiled (see _traverse)

EMPTY: Final[list[Any]] = []
_ABSENT: Final = object()

# Dict shapes.  A plain dict's node data depends only on its keys in insertion order, and a
# model repeats the same few dicts (one {'W', 'b'} per layer), so ``dict_data`` makes it once per
# shape and shares it: a dict seen before costs no sort, no per-key lookup and no allocation
# beyond its children list, and PyTreeDefs holding it compare those nodes by identity.  Only
# dicts whose keys are all exactly str are shared (equal str keys are interchangeable; 1, 1.0 and
# True are equal keys but not the same key), up to MAX_SHAPE_KEYS keys and MAX_SHAPES shapes,
# so a stream of new key sets cannot grow the table without bound.
_SHAPES: Final[dict[tuple[Any, ...], DictData]] = {}
MAX_SHAPE_KEYS: Final = 64
MAX_SHAPES: Final = 4096


# In front of ``_SHAPES``, a direct-mapped probe by the identity of a dict's first key and its
# size: a model's dicts are built from the same key objects again and again (string literals,
# attribute names), so a dict whose keys are, one by one, the very objects of a shared shape's
# insertion order gets that shape without building a key list and a tuple to hash and compare.
# A miss (other key objects, even equal ones) takes the ``_SHAPES`` path, which refills the slot.
PROBE_SIZE: Final = 1024
_PROBE: Final[list[Any]] = [None] * PROBE_SIZE


def dict_data(d: dict[Any, Any], factory: Any) -> tuple[DictData, list[Any]]:
    """Node data and children (in sorted key order) of a dict or defaultdict."""
    slot: i64 = -1
    if factory is None and COMPILED:
        n: i64 = len(d)
        for k in d:
            slot = ((id(k) >> 4) ^ n) & (PROBE_SIZE - 1)
            break
        if slot >= 0:
            hit = _PROBE[slot]
            if hit is not None:
                dd: DictData = hit
                ordered = dd.keys if dd.order is None else dd.order
                if len(ordered) == n:
                    i: i64 = 0
                    for k in d:
                        if k is not ordered[i]:
                            break
                        i += 1
                    if i == n:
                        values = list(d.values())
                        perm = dd.perm
                        return dd, (values if perm is None else [values[j] for j in perm])
    dd, ch = _shared_dict_data(d, factory)
    if slot >= 0 and dd.shared:
        _PROBE[slot] = dd
    return dd, ch


def _shared_dict_data(d: dict[Any, Any], factory: Any) -> tuple[DictData, list[Any]]:
    """``dict_data`` through the ``_SHAPES`` table (no probe)."""
    order = list(d.keys())
    if factory is None and len(order) <= MAX_SHAPE_KEYS:
        for k in order:
            if type(k) is not str:
                return _dict_data(d, order, factory)
        shape = tuple(order)
        dd = _SHAPES.get(shape)
        if dd is None:
            dd = _dict_data(d, order, None)[0]
            if dd.order is not None:
                at = {k: i for i, k in enumerate(order)}
                dd.perm = [at[k] for k in dd.keys]
            dd.shared = True
            if len(_SHAPES) < MAX_SHAPES:
                _SHAPES[shape] = dd
        values = list(d.values())
        perm = dd.perm
        if perm is None:
            return dd, values
        return dd, [values[i] for i in perm]
    return _dict_data(d, order, factory)


def _dict_data(d: dict[Any, Any], order: list[Any], factory: Any) -> tuple[DictData, list[Any]]:
    """``dict_data`` without sharing: ``order`` is ``list(d.keys())``, kept by the DictData."""
    keys = order[:]
    try:
        keys.sort()
    except TypeError:
        keys = sorted_keys(d)
    # The sorted list holds the dict's own key objects, so identity tells whether the
    # insertion order is the sorted one; if it is, the values come in order without lookups.
    for i in range(len(keys)):
        if keys[i] is not order[i]:
            return DictData(keys, order, factory), [d[k] for k in keys]
    return DictData(keys, None, factory), list(d.values())


def expand(x: Any, none_is_leaf: bool) -> tuple[int, Any, list[Any]]:
    """Take one object apart: ``(code, data, children)``; code 0 means a leaf."""
    t = type(x)
    if t is list:
        # The list itself, not a copy: walkers fix its length when they enter it (items a
        # callback appends are not visited) and raise if it shrinks under them.
        lst: list[Any] = x
        return (len(lst) << SHIFT) | LIST, None, lst
    if t is tuple:
        ch = list(x)
        return (len(ch) << SHIFT) | TUPLE, None, ch
    if t is dict:
        dd, ch = dict_data(x, None)
        return (len(ch) << SHIFT) | DICT, dd, ch
    if x is None:
        if none_is_leaf:
            return LEAF, None, EMPTY
        return NONE, None, EMPTY
    info = _cache.get(t)
    if info is None:
        info = lookup(t)
    kind = info.kind
    if kind == LEAF:
        return LEAF, None, EMPTY
    return expand_registered(x, info)


def expand_registered(x: Any, info: NodeInfo) -> tuple[int, Any, list[Any]]:
    kind = info.kind
    if kind == CUSTOM:
        mode = info.mode
        if mode == MODE_DATACLASS or mode == MODE_DATACLASS_INIT:
            ch = info.dataclass_children(x)
            return (len(ch) << SHIFT) | CUSTOM, info.dataclass_data(x), ch
        ch, aux = info.flatten_node(x)
        return (len(ch) << SHIFT) | CUSTOM, info.custom_data(aux), ch
    if kind == NAMEDTUPLE or kind == STRUCTSEQ:
        ch = list(x)
        return (len(ch) << SHIFT) | kind, info.nodetype, ch
    if kind == ORDEREDDICT:
        okeys = list(x)
        ch = [x[k] for k in okeys]
        return (len(ch) << SHIFT) | ORDEREDDICT, DictData(okeys, None, None), ch
    if kind == DEFAULTDICT:
        dd, ch = dict_data(x, x.default_factory)
        return (len(ch) << SHIFT) | DEFAULTDICT, dd, ch
    # DEQUE, the only kind left: list, tuple, dict and None are exact types that every caller
    # tests before asking the registry, and leaves have no NodeInfo of another kind.
    ch = list(x)
    return (len(ch) << SHIFT) | DEQUE, x.maxlen, ch


def child_keys(x: Any, code: int, data: Any, n: int) -> list[Any]:
    """The key entries of the ``n`` children of node ``x`` (not for CUSTOM nodes).

    The list may be shared with other nodes: callers never mutate it.
    """
    kind = code & MASK
    if kind == TUPLE or kind == LIST or kind == DEQUE:
        return sequence_keys(n)
    if kind == DICT or kind == ORDEREDDICT or kind == DEFAULTDICT:
        assert isinstance(data, DictData)
        entries = data.entries
        if entries is None:
            entries = dict_keys(data.keys)
            data.entries = entries
        return entries
    if kind == NAMEDTUPLE:
        return [GetAttrKey(f) for f in data._fields]
    if kind == STRUCTSEQ:
        names = structseq_fields(data)
        return [GetAttrKey(f) for f in names[:n]] + sequence_keys(n)[len(names) :]
    return []


def structseq_fields(t: Any) -> list[str]:
    names = getattr(t, "__match_args__", None)
    if names is None:
        return []
    return [str(n) for n in names]


def expand_with_keys(x: Any, none_is_leaf: bool) -> tuple[int, Any, list[Any], list[Any]]:
    """As ``expand``, plus the key entries of the children."""
    t = type(x)
    if t is not list and t is not tuple and t is not dict and x is not None:
        info = _cache.get(t)
        if info is None:
            info = lookup(t)
        kind = info.kind
        if kind == LEAF:
            return LEAF, None, EMPTY, EMPTY
        if kind == CUSTOM:
            mode = info.mode
            if mode == MODE_DATACLASS or mode == MODE_DATACLASS_INIT:
                ch = info.dataclass_children(x)
                return (len(ch) << SHIFT) | CUSTOM, info.dataclass_data(x), ch, info.data_keys
            ch, keys, aux = info.flatten_node_with_keys(x)
            return (len(ch) << SHIFT) | CUSTOM, info.custom_data(aux), ch, keys
        code, data, ch = expand_registered(x, info)
    else:
        code, data, ch = expand(x, none_is_leaf)
    if code == LEAF or not ch:
        return code, data, ch, EMPTY
    return code, data, ch, child_keys(x, code, data, len(ch))


def match_children(code: int, data: Any, y: Any, none_is_leaf: bool) -> list[Any] | None:
    """The children of ``y`` in the order of a node (code, data) it should match, or None when
    it does not match (different kind, length, keys or node data).

    Exact lists, tuples and dicts are checked without sorting ``y``'s keys: same length and
    every key present means the same key set.
    """
    kind = code & MASK
    n = code >> SHIFT
    t = type(y)
    if kind == LIST:
        if t is list and len(y) == n:
            lst: list[Any] = y
            return lst[:]
        return None
    if kind == TUPLE:
        if t is tuple and len(y) == n:
            return list(y)
        return None
    if kind == DICT:
        if t is dict and len(y) == n:
            yd: dict[Any, Any] = y
            dd: DictData = data
            if dd.shared and list(yd.keys()) == (dd.keys if dd.order is None else dd.order):
                # Same keys in the same insertion order (as equal as ``get`` would find them):
                # the values come out by position, without a lookup per key.
                values = list(yd.values())
                perm = dd.perm
                return values if perm is None else [values[i] for i in perm]
            out: list[Any] = []
            for k in data.keys:
                v = yd.get(k, _ABSENT)
                if v is _ABSENT:
                    return None
                out.append(v)
            return out
        return None
    if kind == NONE:
        return EMPTY if y is None else None
    if kind == DEFAULTDICT:  # by key too: a structure made under dict_insertion_ordered has its own order
        if t is defaultdict and len(y) == n and y.default_factory == data.factory:
            dout: list[Any] = []
            for k in data.keys:
                v = y.get(k, _ABSENT)
                if v is _ABSENT:
                    return None
                dout.append(v)
            return dout
        return None
    ycode, ydata, ych = expand(y, none_is_leaf)
    if ycode != code:
        return None
    if data is not ydata and not bool(data == ydata):
        return None
    return ych


def _ordered_dict(x: Any, factory: Any) -> tuple[DictData, list[Any]]:
    """A dict's node data and children in insertion order (dict_insertion_ordered)."""
    keys = list(x)
    return DictData(keys, None, factory), [x[k] for k in keys]


def ns_expand(x: Any, none_is_leaf: bool, ns: Namespace) -> tuple[int, Any, list[Any]]:
    """``expand`` in a walk of registry view ``ns`` (a namespace, or dicts in insertion order)."""
    t = type(x)
    if t is list or t is tuple or x is None:
        return expand(x, none_is_leaf)
    info = ns.nodes.get(t)
    if info is not None:
        ns.used = True
        return expand_registered(x, info)
    if ns.ordered and (t is dict or t is defaultdict):
        ns.used = True
        dd, ch = _ordered_dict(x, None if t is dict else x.default_factory)
        return (len(ch) << SHIFT) | (DICT if t is dict else DEFAULTDICT), dd, ch
    code, d, ch = expand(x, none_is_leaf)
    if code & MASK == CUSTOM:
        ns.used = True
    return code, d, ch


def ns_expand_with_keys(x: Any, none_is_leaf: bool, ns: Namespace) -> tuple[int, Any, list[Any], list[Any]]:
    """``expand_with_keys`` in a walk of registry view ``ns``."""
    t = type(x)
    info = ns.nodes.get(t)
    if info is None and not (ns.ordered and (t is dict or t is defaultdict)):
        code, d, ch, keys = expand_with_keys(x, none_is_leaf)
        if code & MASK == CUSTOM:
            ns.used = True
        return code, d, ch, keys
    ns.used = True
    if info is not None and info.kind == CUSTOM:
        mode = info.mode
        if mode == MODE_DATACLASS or mode == MODE_DATACLASS_INIT:
            ch = info.dataclass_children(x)
            return (len(ch) << SHIFT) | CUSTOM, info.dataclass_data(x), ch, info.data_keys
        ch, keys, aux = info.flatten_node_with_keys(x)
        return (len(ch) << SHIFT) | CUSTOM, info.custom_data(aux), ch, keys
    code, d, ch = ns_expand(x, none_is_leaf, ns)
    if not ch:
        return code, d, ch, EMPTY
    return code, d, ch, child_keys(x, code, d, len(ch))


def ns_match_children(code: int, data: Any, y: Any, none_is_leaf: bool, ns: Namespace) -> list[Any] | None:
    """``match_children`` in a walk of registry view ``ns``."""
    kind = code & MASK
    if kind == LIST or kind == TUPLE or kind == DICT or kind == NONE or kind == DEFAULTDICT:
        return match_children(code, data, y, none_is_leaf)
    ycode, ydata, ych = ns_expand(y, none_is_leaf, ns)
    if ycode != code:
        return None
    if data is not ydata and not bool(data == ydata):
        return None
    return ych


def lookup_ns(t: type, ns: Namespace | None) -> NodeInfo:
    """The NodeInfo of ``t`` (in view ``ns`` when given)."""
    return lookup(t) if ns is None else lookup_in(t, ns)


def insertion_children(keys: list[Any], order: Any) -> list[int]:
    """For each key of ``order`` (insertion order) its position in ``keys`` (sorted order)."""
    at: dict[Any, int] = {}
    for i in range(len(keys)):
        at[keys[i]] = i
    return [at[k] for k in order]


def build_dict(dd: DictData, src: list[Any], start: i64) -> dict[Any, Any]:
    """A dict node of node data ``dd`` whose children, in sorted key order, are
    ``src[start:start + len(dd.keys)]`` (unflatten passes its leaves list: no slice)."""
    keys = dd.keys
    order = dd.order
    # A dict that already has the keys in insertion order, assigned in sorted order, keeps the
    # order without per-key lookups.  A node rebuilt more than once (a PyTreeDef unflattened
    # again and again, or a dict shape shared by many nodes) copies a cached template, which
    # is cheaper than inserting the keys (no table growth); a node rebuilt once (map) does not
    # make one.
    template = dd.template
    if order is None and len(keys) <= 16:
        out: dict[Any, Any] = {}  # small and sorted: inserting is as cheap as copying
    elif order is not None and len(keys) <= 5:
        # Small and not sorted: inserted in insertion order, ``inv`` giving each key's child.
        # Up to 5 keys (what a new dict holds before its first resize) this is cheaper than a
        # template copy plus assignment; at 8 keys it was dearer (docs/performance.md).
        inv = dd.inv
        if inv is None:
            inv = insertion_children(keys, order)
            dd.inv = inv
        out = {}
        for k, j in zip(order, inv):  # mypyc: no iterator, no boxed position
            out[k] = src[start + j]
        return out
    elif template is not None:
        out = template.copy()
    elif dd.built:
        template = dict.fromkeys(keys if order is None else order)
        dd.template = template
        out = template.copy()
    else:
        dd.built = True
        out = {} if order is None else dict.fromkeys(order)
    i: i64 = start
    for k in keys:
        out[k] = src[i]
        i += 1
    return out


def build(code: int, data: Any, children: list[Any]) -> Any:
    """Put one node together from its code, node data and (already built) children.

    ``children`` may be returned as the list node itself, so callers pass a fresh list.
    """
    kind = code & MASK
    if kind == LIST:
        return children
    if kind == TUPLE:
        return tuple(children)
    if kind == DICT:
        return build_dict(data, children, 0)
    if kind == NONE:
        return None
    if kind == CUSTOM:
        cd: CustomData = data
        return cd.info.unflatten_node(cd.aux, children)
    if kind == NAMEDTUPLE:
        return data(*children)
    if kind == ORDEREDDICT:
        od: DictData = data
        return OrderedDict(zip(od.keys, children))
    if kind == DEFAULTDICT:
        ddd: DictData = data
        tmp = dict(zip(ddd.keys, children))
        order = ddd.order if ddd.order is not None else ddd.keys
        return defaultdict(ddd.factory, [(k, tmp[k]) for k in order])
    if kind == DEQUE:
        return deque(children, maxlen=data)
    if kind == STRUCTSEQ:
        return data(children)
    raise ValueError(f"invalid pytree node code {code}")
