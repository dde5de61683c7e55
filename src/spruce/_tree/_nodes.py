"""Node data: what a PyTreeDef keeps of a node so it can rebuild and compare it.

``NodeInfo`` says how one type is taken apart and put together (one per classified type);
``DictData`` is the node data of the dict kinds (key order, insertion order, factory);
``CustomData`` is the node data of a registered class (its NodeInfo and aux data).  Dict keys
are ordered by ``sorted_keys``, which is total even over keys that do not compare.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Final

from ._depth import COMPILED
from ._exceptions import FlattenResultError
from ._keys import GetAttrKey, flat_index_keys
from ._kinds import (
    MODE_DATACLASS,
    MODE_DATACLASS_INIT,
    MODE_FUNCS,
    MODE_KEYS,
    MODE_STATIC,
)
from ._text import clip, qualified_name

if TYPE_CHECKING:
    from mypy_extensions import i64  # native ints when compiled (see _traverse)


class NodeInfo:
    """How one type is taken apart and put together.  One per classified type.

    ``kind`` is one of the kinds above.  For CUSTOM types the callbacks and field names of the
    registration are kept here.
    """

    nodetype: type
    kind: int
    mode: int
    flatten: Callable[[Any], Any] | None
    unflatten: Callable[[Any, Any], Any] | None
    flatten_with_keys: Callable[[Any], Any] | None
    data_fields: tuple[str, ...]
    meta_fields: tuple[str, ...]
    drop_defaults: list[tuple[str, Any, Any]]
    data_keys: list[Any]
    fixed_keys: list[Any] | None  # key entries of every node's children (register_with_fixed_keys)
    recent: list[CustomData]  # node data made last (see ``custom_data``)
    next_recent: int  # the entry of ``recent`` to replace next
    plain_aux: type | None  # a tuple subclass whose instances are only their items
    plain_fields: bool  # dataclass modes: no field name is a data descriptor of the class
    namespace: str  # the registration namespace ("" global)

    def __init__(
        self,
        nodetype: type,
        kind: int,
        mode: int = MODE_FUNCS,
        flatten: Callable[[Any], Any] | None = None,
        unflatten: Callable[[Any, Any], Any] | None = None,
        flatten_with_keys: Callable[[Any], Any] | None = None,
        data_fields: tuple[str, ...] = (),
        meta_fields: tuple[str, ...] = (),
        drop_defaults: list[tuple[str, Any, Any]] | None = None,
    ) -> None:
        self.nodetype = nodetype
        self.kind = kind
        self.mode = mode
        self.flatten = flatten
        self.unflatten = unflatten
        self.flatten_with_keys = flatten_with_keys
        self.data_fields = data_fields
        self.meta_fields = meta_fields
        self.drop_defaults = drop_defaults if drop_defaults is not None else []
        self.data_keys = [GetAttrKey(f) for f in data_fields]
        self.fixed_keys = None
        self.recent = []
        self.next_recent = 0
        self.plain_aux = None
        self.namespace = ""
        self.plain_fields = mode in (MODE_DATACLASS, MODE_DATACLASS_INIT) and no_data_descriptors(
            nodetype, data_fields + meta_fields
        )

    def custom_data(self, aux: Any) -> CustomData:
        """The node data of a node of this type whose flatten returned ``aux``.

        One of the last MAX_RECENT entries made for this type is given again when its aux is
        interchangeable with ``aux`` (see ``_same_aux``: the same objects, never merely equal
        ones, so a rebuilt node gets exactly what its flatten gave).  So the PyTreeDefs of equal
        models hold the same entries and compare them by identity, as dict shapes are, and a
        node seen before costs neither a hash nor an allocation.  Entries of unhashable aux
        data are never kept.  Run by the interpreter, where the comparisons are Python calls
        and cost more than they save (docs/performance.md), every node gets a new entry.
        """
        if not COMPILED:
            return CustomData(self, aux)
        recent = self.recent
        for i in range(len(recent)):
            cd = recent[i]
            if self._same_aux(cd.aux, aux):
                return cd
        cd = CustomData(self, aux)
        if cd.aux_str is None:
            if len(recent) < MAX_RECENT:
                recent.append(cd)
            else:
                recent[self.next_recent] = cd
                self.next_recent = (self.next_recent + 1) % MAX_RECENT
        return cd

    def _same_aux(self, a: Any, b: Any) -> bool:
        """``a`` and ``b`` are interchangeable: the same object, or tuples of one type (tuple,
        or a subclass without instance attributes, such as a Module's) whose items are the same
        objects or exact tuples of the same objects."""
        if a is b:
            return True
        t = type(a)
        if t is not type(b):
            return False
        if t is not tuple:
            if t is not self.plain_aux:
                if not (issubclass(t, tuple) and getattr(t, "__dictoffset__", 1) == 0):
                    return False
                self.plain_aux = t
        x: tuple[Any, ...] = a
        y: tuple[Any, ...] = b
        if len(x) != len(y):
            return False
        for i in range(len(x)):
            u = x[i]
            v = y[i]
            if u is v:
                continue
            if type(u) is not tuple or type(v) is not tuple:
                return False
            ut: tuple[Any, ...] = u
            vt: tuple[Any, ...] = v
            if len(ut) != len(vt):
                return False
            for j in range(len(ut)):
                if ut[j] is not vt[j]:
                    return False
        return True

    def dataclass_children(self, x: Any) -> list[Any]:
        """The data fields of a dataclass-mode node, in order (by ``getattr``)."""
        return [getattr(x, f) for f in self.data_fields]

    def dataclass_aux(self, x: Any) -> tuple[Any, ...]:
        """The meta fields of a dataclass-mode node, as a tuple (its aux data)."""
        mf = self.meta_fields
        if not mf:
            return ()
        if len(mf) == 1:
            return (getattr(x, mf[0]),)
        return tuple([getattr(x, f) for f in mf])

    def dataclass_data(self, x: Any) -> CustomData:
        """``custom_data(dataclass_aux(x))`` without making the aux tuple when a recent entry
        has the same single meta value (the common case: one static field such as an
        activation name, the same object in every layer)."""
        mf = self.meta_fields
        if COMPILED and len(mf) == 1:
            v = getattr(x, mf[0])
            recent = self.recent
            for i in range(len(recent)):
                cd = recent[i]
                aux = cd.aux
                if type(aux) is tuple and len(aux) == 1 and aux[0] is v:
                    return cd
            return self.custom_data((v,))
        return self.custom_data(self.dataclass_aux(x))

    def flatten_node(self, x: Any) -> tuple[list[Any], Any]:
        """``(children, aux_data)`` of a CUSTOM node."""
        mode = self.mode
        if mode == MODE_DATACLASS or mode == MODE_DATACLASS_INIT:
            return self.dataclass_children(x), self.dataclass_aux(x)
        if mode == MODE_STATIC:
            return [], x
        if mode == MODE_KEYS:
            keyed, aux = _call_flatten(self, self.flatten_with_keys, x, "flatten_with_keys")
            return [_keyed_child(self, kc)[1] for kc in keyed], aux
        raw, aux = _call_flatten(self, self.flatten, x, "flatten")
        if type(raw) is list:
            return raw, aux
        return list(raw), aux

    def flatten_node_with_keys(self, x: Any) -> tuple[list[Any], list[Any], Any]:
        """``(children, keys, aux_data)`` of a CUSTOM node."""
        mode = self.mode
        if mode == MODE_DATACLASS or mode == MODE_DATACLASS_INIT:
            children, meta = self.flatten_node(x)
            return children, self.data_keys, meta
        if self.flatten_with_keys is None:
            children, aux = self.flatten_node(x)
            fixed = self.fixed_keys
            if fixed is None:
                return children, flat_index_keys(len(children)), aux
            if len(fixed) != len(children):
                raise TypeError(
                    f"the flatten function registered for {qualified_name(self.nodetype)} returned "
                    f"{len(children)} children, but the class was registered with {len(fixed)} keys"
                )
            return children, fixed, aux
        keyed, aux = _call_flatten(self, self.flatten_with_keys, x, "flatten_with_keys")
        children = []
        keys = []
        for kc in keyed:
            pair = _keyed_child(self, kc)
            keys.append(pair[0])
            children.append(pair[1])
        return children, keys, aux

    def unflatten_node(self, aux: Any, children: list[Any]) -> Any:
        """Rebuild a CUSTOM node from its aux data and children."""
        mode = self.mode
        if mode == MODE_DATACLASS:
            return self.build_dataclass(aux, children, 0)
        if mode == MODE_STATIC:
            return aux
        if mode == MODE_DATACLASS_INIT:
            kwargs: dict[str, Any] = {}
            fields = self.data_fields
            for i in range(len(fields)):
                kwargs[fields[i]] = children[i]
            metas = self.meta_fields
            for i in range(len(metas)):
                kwargs[metas[i]] = aux[i]
            ctor: Any = self.nodetype
            return ctor(**kwargs)
        unflatten = self.unflatten
        assert unflatten is not None
        return unflatten(aux, tuple(children))

    def build_dataclass(self, aux: Any, src: list[Any], start: i64) -> Any:
        """A MODE_DATACLASS node from its aux data (the meta fields) and its children, which are
        ``src[start:start + len(data_fields)]`` (unflatten passes its leaves list: no slice)."""
        cls: Any = self.nodetype
        try:
            obj = cls.__new__(cls)  # (looked up each time: a class may be given a new __new__)
        except TypeError as e:
            raise TypeError(
                f"cannot rebuild a {qualified_name(cls)} registered with register_dataclass: "
                f"{qualified_name(cls)}.__new__(cls) failed ({e}). Registered dataclasses are "
                "rebuilt without calling __init__, so __new__ must accept no arguments; "
                "register the class with register_pytree_node and an unflatten function "
                "that calls its constructor instead"
            ) from e
        fields = self.data_fields
        metas = self.meta_fields
        attrs = getattr(obj, "__dict__", None) if self.plain_fields else None
        if type(attrs) is dict:
            # Writing the instance dict directly: no __setattr__ (frozen dataclasses), no
            # per-field attribute lookup.  Only when no field is a data descriptor (a property,
            # a slot of a base class, a descriptor-typed field), which object.__setattr__
            # below honours and the instance dict would hide.
            od: dict[str, Any] = attrs
            for i in range(len(fields)):
                od[fields[i]] = src[start + i]
            for i in range(len(metas)):
                od[metas[i]] = aux[i]
        else:
            setter = object.__setattr__
            for i in range(len(fields)):
                setter(obj, fields[i], src[start + i])
            for i in range(len(metas)):
                setter(obj, metas[i], aux[i])
        drops = self.drop_defaults
        if drops:
            setter = object.__setattr__
            for name, default, factory in drops:
                setter(obj, name, factory() if factory is not None else default)
        return obj


def _call_flatten(info: NodeInfo, fn: Callable[[Any], Any] | None, x: Any, what: str) -> tuple[Any, Any]:
    assert fn is not None
    result = fn(x)
    if type(result) is tuple and len(result) == 2:
        first = result[0]
        if type(first) is list or type(first) is tuple:  # the usual shapes: nothing to check
            return first, result[1]
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise FlattenResultError(
            f"the {what} function registered for {qualified_name(info.nodetype)} must return a "
            f"pair (children, aux_data); it returned {_short_type(result)}"
        )
    children = result[0]
    try:
        iter(children)
    except TypeError:
        raise FlattenResultError(
            f"the {what} function registered for {qualified_name(info.nodetype)} returned "
            f"children of type {type(children).__name__}, which is not iterable; it must return "
            "(children, aux_data) with children a sequence"
        ) from None
    return children, result[1]


def _keyed_child(info: NodeInfo, kc: Any) -> tuple[Any, Any]:
    if not isinstance(kc, tuple) or len(kc) != 2:
        raise TypeError(
            f"the flatten_with_keys function registered for {qualified_name(info.nodetype)} "
            f"must return children as (key, child) pairs; got {_short_type(kc)}"
        )
    return kc[0], kc[1]


def _short_type(x: Any) -> str:
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of length {len(x)}"
    return f"an object of type {type(x).__name__}"


class DictData:
    """Node data of the dict kinds.

    ``keys`` is the order the children are visited in (sorted for dict and defaultdict,
    insertion order for OrderedDict).  ``order`` is the insertion order when it differs from
    ``keys`` (so rebuilt dicts keep it) and does not take part in equality.  ``factory`` is a
    defaultdict's ``default_factory``.
    """

    keys: list[Any]  # never mutated after construction
    order: list[Any] | None  # never mutated after construction
    factory: Any
    template: dict[Any, Any] | None  # dict.fromkeys(insertion order), made when rebuilt a second time
    built: bool  # rebuilt once already (so a template pays off)
    # Set on the shared DictData of a dict shape (see ``dict_data``): shared (so every key is
    # a str), and the insertion position of each sorted key (None when the orders agree).
    shared: bool
    perm: list[int] | None
    entries: list[Any] | None  # the DictKey entries of ``keys``, made when first asked for
    inv: list[int] | None  # the sorted position of each key in insertion order, made by build

    def __init__(self, keys: list[Any], order: list[Any] | None, factory: Any) -> None:
        self.keys = keys
        self.order = order
        self.factory = factory
        self.template = None
        self.built = False
        self.shared = False
        self.perm = None
        self.entries = None
        self.inv = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DictData):
            return False
        return self.keys == other.keys and self.factory == other.factory

    def __hash__(self) -> int:
        return hash((tuple(self.keys), self.factory))


MAX_RECENT: Final = 8  # node data entries kept per registered type (NodeInfo.custom_data)

MSG_UNHASHABLE: Final = (
    "pytree node data (aux data / static fields) must be hashable and comparable, so that "
    "PyTreeDefs can be compared and hashed (as jax.jit does); "
)


class CustomData:
    """Node data of a registered class: its NodeInfo and the aux data its flatten returned.

    The aux data is hashed once when the node is flattened.  If that fails (an array or a list
    in a static field), ``aux_str`` keeps a snapshot of its ``str``, so the PyTreeDef prints the
    same forever, and comparing or hashing raises a clear error instead.
    """

    info: NodeInfo
    aux: Any
    aux_hash: i64  # native when compiled: compared in every PyTreeDef equality
    aux_str: str | None

    def __init__(self, info: NodeInfo, aux: Any) -> None:
        self.info = info
        self.aux = aux
        try:
            self.aux_hash = hash(aux)
            self.aux_str = None
        except Exception:
            self.aux_hash = -1
            try:
                self.aux_str = str(aux)
            except Exception as e:  # a broken __str__ must not stop the walk
                self.aux_str = f"<{type(aux).__name__} object (str failed: {type(e).__name__})>"

    def _check(self) -> None:
        if self.aux_str is not None:
            raise TypeError(
                MSG_UNHASHABLE
                + f"the node data of {qualified_name(self.info.nodetype)} is "
                + f"{clip(self.aux_str, 200)} (type {type(self.aux).__name__}), which is "
                + "not hashable. Mark array-valued fields as children (not static), or convert "
                + "lists to tuples."
            )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CustomData):
            return False
        return self.equals(other)

    def equals(self, other: CustomData) -> bool:
        """``self == other``, callable natively (PyTreeDef equality calls it directly)."""
        if self.info.nodetype is not other.info.nodetype:
            return False
        if self.aux_str is not None or other.aux_str is not None:
            self._check()
            other._check()
        if self.aux is other.aux:
            return True
        if self.aux_hash != other.aux_hash:
            return False
        try:
            return bool(self.aux == other.aux)
        except Exception as e:
            raise TypeError(
                MSG_UNHASHABLE
                + f"comparing the node data of {qualified_name(self.info.nodetype)} failed: {e}"
            ) from e

    def __hash__(self) -> int:
        self._check()
        return hash((self.info.nodetype, self.aux_hash))

    def aux_text(self) -> str:
        """The aux data as PyTreeDef repr shows it: its ``str``, as jax.tree_util."""
        return self.aux_str if self.aux_str is not None else str(self.aux)


class EntriesAux:
    """The aux data of a node whose flatten function also named its children's entries, as
    optree's three-value flatten functions do (classes registered through ``spruce.optree``).

    ``metadata`` is the aux data proper: it alone is compared, hashed and printed, so the
    entries change neither equality nor the repr of a PyTreeDef (as in optree, whose
    structures compare node data but not entries).  ``entries`` are the children's entries,
    which ``PyTreeDef.entries()`` returns and key paths use.
    """

    metadata: Any
    entries: tuple[Any, ...]

    def __init__(self, metadata: Any, entries: tuple[Any, ...]) -> None:
        self.metadata = metadata
        self.entries = entries

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EntriesAux) and bool(self.metadata == other.metadata)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.metadata)

    def __repr__(self) -> str:
        return repr(self.metadata)

    def __str__(self) -> str:
        return str(self.metadata)

    def __reduce__(self) -> Any:
        return (EntriesAux, (self.metadata, self.entries))


# Dict key order: sorted, with a deterministic total order for keys that do not compare.


def _type_key(k: Any) -> tuple[str, str]:
    t = type(k)
    return (str(getattr(t, "__module__", "")), str(getattr(t, "__qualname__", t.__name__)))


def _by_type_then_key(k: Any) -> tuple[str, str, Any]:
    m, q = _type_key(k)
    return (m, q, k)


def _by_type_then_repr(k: Any) -> tuple[str, str, str]:
    m, q = _type_key(k)
    return (m, q, repr(k))


def sorted_keys(d: Any) -> list[Any]:
    """The keys of ``d`` in sorted order.

    Keys that cannot be compared with each other (``{1: .., 'a': ..}``) are ordered by
    (type's module, type's qualname, key), then, if keys of one type still do not compare,
    by (module, qualname, repr(key)).  Equal dicts therefore always give the same order.
    """
    try:
        return sorted(d)
    except TypeError:
        pass
    try:
        return sorted(d, key=_by_type_then_key)
    except TypeError:
        return sorted(d, key=_by_type_then_repr)


def no_data_descriptors(cls: type, names: tuple[str, ...]) -> bool:
    """True when no class in ``cls``'s MRO defines one of ``names`` as a data descriptor (an
    object whose type has ``__set__`` or ``__delete__``: a property, a ``__slots__`` member,
    a descriptor-typed dataclass field), so that storing a field in the instance ``__dict__``
    is what ``object.__setattr__`` would do."""
    for name in names:
        for klass in cls.__mro__:
            attr = klass.__dict__.get(name, _MISSING)
            if attr is not _MISSING:
                t = type(attr)
                if hasattr(t, "__set__") or hasattr(t, "__delete__"):
                    return False
                break
    return True


_MISSING: Final = object()
