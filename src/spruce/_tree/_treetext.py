"""A PyTreeDef's text and pickled state: ``table_str`` (the repr's body, exactly as JAX prints
it), ``encode_data`` / ``decode_data`` of node data in a pickle, validated on the way in (a
malformed state raises ValueError, never builds a broken structure).
"""

from __future__ import annotations

from typing import Any, Final

from ._expand import structseq_fields
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
    MODE_STATIC,
    NAMEDTUPLE,
    NONE,
    ORDEREDDICT,
    SHIFT,
    STRUCTSEQ,
    TUPLE,
)
from ._nodes import CustomData, DictData, sorted_keys
from ._registry import is_namedtuple_type, is_structseq_type, lookup, registered
from ._text import short_repr

_MAX_SIZE: Final = 1 << 62  # the largest deque maxlen a pickled state may give


def _open(out: list[str], code: int, d: Any) -> None:
    kind = code & MASK
    if kind == NONE:
        out.append("None")
    elif kind == TUPLE:
        out.append("(")
    elif kind == LIST:
        out.append("[")
    elif kind == DICT:
        out.append("{")
    elif kind == NAMEDTUPLE:
        out.append(f"CustomNode(namedtuple[{d.__name__}], [")
    elif kind == ORDEREDDICT:
        out.append(f"CustomNode(OrderedDict[{tuple(d.keys)!r}], [")
    elif kind == DEFAULTDICT:
        out.append(f"CustomNode(defaultdict[{(d.factory, tuple(d.keys))!r}], [")
    elif kind == DEQUE:
        out.append("deque([")
    elif kind == STRUCTSEQ:
        out.append(f"{d.__module__}.{d.__name__}(")
    else:
        cd: CustomData = d
        out.append(f"CustomNode({cd.info.nodetype.__name__}[{cd.aux_text()}], [")


def _close(out: list[str], code: int, d: Any) -> None:
    kind = code & MASK
    if kind == TUPLE:
        out.append(",)" if code >> SHIFT == 1 else ")")
    elif kind == LIST:
        out.append("]")
    elif kind == DICT:
        out.append("}")
    elif kind == DEQUE:
        out.append("])" if d is None else f"], maxlen={d})")
    elif kind == STRUCTSEQ:
        out.append(")")
    elif kind != NONE:
        out.append("])")


def _child_prefix(out: list[str], code: int, d: Any, i: int) -> None:
    kind = code & MASK
    if kind == DICT:
        out.append(f"{d.keys[i]!r}: ")
    elif kind == STRUCTSEQ:
        names = structseq_fields(d)
        if i < len(names):
            out.append(f"{names[i]}=")


def table_str(codes: list[int], data: list[Any]) -> str:
    """The JAX-style string of a node table (without the ``PyTreeDef(...)`` wrapper).

    Emitted as a flat list of pieces in one pre-order pass, so its cost is linear in the size
    of the result whatever the depth.
    """
    out: list[str] = []
    st_code: list[int] = []
    st_data: list[Any] = []
    st_next: list[int] = []  # index of the next child of each open node
    di = 0
    for c in codes:
        if st_code:
            i = st_next[-1]
            if i > 0:
                out.append(", ")
            _child_prefix(out, st_code[-1], st_data[-1], i)
            st_next[-1] = i + 1
        if c == LEAF:
            out.append("*")
        else:
            d = data[di]
            di += 1
            _open(out, c, d)
            if c >> SHIFT != 0:
                st_code.append(c)
                st_data.append(d)
                st_next.append(0)
                continue
            _close(out, c, d)
        while st_code and st_next[-1] == st_code[-1] >> SHIFT:
            _close(out, st_code.pop(), st_data.pop())
            st_next.pop()
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Pickling: the state is plain data; loading validates all of it.


def encode_table(codes: list[int], data: list[Any]) -> tuple[Any, ...]:
    """The pickled node data of a node table (``_encode`` of each non-leaf node's data)."""
    kinds = [c & MASK for c in codes if c != LEAF]
    return tuple([_encode(d, k) for d, k in zip(data, kinds)])


def _encode(d: Any, kind: int = LEAF) -> Any:
    if isinstance(d, DictData):
        state = ("dict", tuple(d.keys), None if d.order is None else tuple(d.order), d.factory)
        if kind != ORDEREDDICT and d.order is None and list(d.keys) != sorted_keys(d.keys):
            return state + ("insertion",)  # made under dict_insertion_ordered
        return state
    if isinstance(d, CustomData):
        return ("custom", d.info.nodetype, d.aux)
    return d


def _bad(msg: str) -> ValueError:
    return ValueError(f"invalid PyTreeDef pickle state: {msg}")


def _decode(kind: int, arity: int, d: Any, namespace: str = "") -> Any:
    if kind == NONE or kind == TUPLE or kind == LIST:
        if d is not None:
            raise _bad(f"a {('None', 'tuple', 'list')[kind - 1]} node has node data {short_repr(d)}")
        if kind == NONE and arity != 0:
            raise _bad("a None node has children")
        return None
    if kind == DICT or kind == ORDEREDDICT or kind == DEFAULTDICT:
        insertion = isinstance(d, tuple) and len(d) == 5 and d[4] == "insertion" and kind != ORDEREDDICT
        if not (isinstance(d, tuple) and (len(d) == 4 or insertion) and d[0] == "dict" and isinstance(d[1], tuple)):
            raise _bad(f"dict node data must be ('dict', keys, order, factory), got {short_repr(d)}")
        keys, order, factory = d[1], d[2], d[3]
        if len(keys) != arity:
            raise _bad(f"a dict node has {arity} children but {len(keys)} keys")
        try:
            key_set = set(keys)
            order_ok = order is None or (
                kind != ORDEREDDICT and isinstance(order, tuple) and len(order) == len(keys) and set(order) == key_set
            )
            sorted_ok = kind == ORDEREDDICT or (insertion and order is None) or list(keys) == sorted_keys(keys)
        except Exception:
            raise _bad("dict keys are not hashable and comparable") from None
        if len(key_set) != len(keys):
            raise _bad("dict keys are not unique")
        if not order_ok:
            raise _bad("dict insertion order does not match its keys")
        if not sorted_ok:
            raise _bad("dict keys are not in sorted order")
        if factory is not None and (kind != DEFAULTDICT or not callable(factory)):
            raise _bad("only a defaultdict node has a (callable) default_factory")
        return DictData(list(keys), None if order is None else list(order), factory)
    if kind == NAMEDTUPLE or kind == STRUCTSEQ:
        ok = isinstance(d, type) and (is_namedtuple_type(d) if kind == NAMEDTUPLE else is_structseq_type(d))
        if not ok:
            raise _bad(f"namedtuple/struct sequence node data must be such a class, got {short_repr(d)}")
        if kind == NAMEDTUPLE and len(d._fields) != arity:
            raise _bad(f"namedtuple {d.__name__} has {len(d._fields)} fields but the node has {arity} children")
        if kind == STRUCTSEQ and d.n_sequence_fields != arity:
            raise _bad(f"{d.__name__} has {d.n_sequence_fields} fields but the node has {arity} children")
        return d
    if kind == DEQUE:
        if d is not None and (type(d) is not int or d < arity or d > _MAX_SIZE):
            raise _bad(f"deque maxlen must be None or an int >= its length, got {short_repr(d)}")
        return d
    # CUSTOM
    if not (isinstance(d, tuple) and len(d) == 3 and d[0] == "custom" and isinstance(d[1], type)):
        raise _bad(f"custom node data must be ('custom', class, aux_data), got {short_repr(d)}")
    info = registered(d[1], namespace) or lookup(d[1])
    if info.kind != CUSTOM:
        raise _bad(f"{d[1].__name__} is not registered as a pytree node (register it before unpickling)")
    aux = d[2]
    if info.mode == MODE_DATACLASS or info.mode == MODE_DATACLASS_INIT:
        if arity != len(info.data_fields):
            raise _bad(f"{d[1].__name__} has {len(info.data_fields)} data fields but the node has {arity} children")
        if not isinstance(aux, tuple) or len(aux) != len(info.meta_fields):
            raise _bad(f"{d[1].__name__} node data must be a tuple of its {len(info.meta_fields)} meta fields")
    elif info.mode == MODE_STATIC and arity != 0:
        raise _bad(f"{d[1].__name__} is registered static: its nodes have no children")
    return CustomData(info, aux)
