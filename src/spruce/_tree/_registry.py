"""Node kinds, the type registry, and the two primitives every walker is built from.

``expand(x)`` takes one object to ``(code, data, children)`` and ``build(code, data, children)``
takes it back.  ``code`` packs the node kind (low 4 bits) and the number of children
(``code >> 4``); a leaf has code 0.  ``data`` is what the node needs to be rebuilt and compared:
``None`` for tuple/list/None, a ``DictData`` for the dict kinds, the class for namedtuples and
struct sequences, ``maxlen`` for a deque, a ``CustomData`` for registered classes.

Types are classified once and cached (exact types only, as jax.tree_util: a subclass of a
registered class is a leaf unless registered itself; namedtuple subclasses are nodes).  The cache
is versioned so that a registration racing a lookup can never leave a stale entry behind.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict, defaultdict, deque
from typing import Any, Callable, Final, Iterable

from ._exceptions import FlattenResultError, RegisterDataclassError
from ._keys import GetAttrKey, dict_keys, flat_index_keys, sequence_keys

# ---------------------------------------------------------------------------------------------
# Node kinds.  A node's code is ``arity << SHIFT | kind``; leaves are code 0.

LEAF: Final = 0
NONE: Final = 1
TUPLE: Final = 2
LIST: Final = 3
DICT: Final = 4
NAMEDTUPLE: Final = 5
ORDEREDDICT: Final = 6
DEFAULTDICT: Final = 7
DEQUE: Final = 8
STRUCTSEQ: Final = 9
CUSTOM: Final = 10
NUM_KINDS: Final = 11
SHIFT: Final = 4
MASK: Final = 15

KIND_NAMES: Final = (
    "leaf",
    "None",
    "tuple",
    "list",
    "dict",
    "namedtuple",
    "OrderedDict",
    "defaultdict",
    "deque",
    "structseq",
    "custom",
)

# How a CUSTOM node is flattened.
MODE_FUNCS: Final = 0  # user flatten / unflatten (and optional flatten_with_keys)
MODE_KEYS: Final = 1  # user flatten_with_keys only; plain flatten derived from it
MODE_DATACLASS: Final = 2  # register_dataclass: attributes read and set directly
MODE_STATIC: Final = 3  # register_static: no children, the object itself is the node data
# jax.tree_util.register_dataclass (seen through spruce's JAX bridge): flattened as
# MODE_DATACLASS, rebuilt as JAX rebuilds it, ``nodetype(**fields)`` (so ``__init__`` runs).
MODE_DATACLASS_INIT: Final = 4


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

    def flatten_node(self, x: Any) -> tuple[list[Any], Any]:
        """``(children, aux_data)`` of a CUSTOM node."""
        mode = self.mode
        if mode == MODE_DATACLASS or mode == MODE_DATACLASS_INIT:
            children = [getattr(x, f) for f in self.data_fields]
            mf = self.meta_fields
            if not mf:
                return children, ()
            if len(mf) == 1:
                return children, (getattr(x, mf[0]),)
            return children, tuple([getattr(x, f) for f in mf])
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
            cls: Any = self.nodetype
            try:
                obj = cls.__new__(cls)
            except TypeError as e:
                raise TypeError(
                    f"cannot rebuild a {qualified_name(cls)} registered with register_dataclass: "
                    f"{qualified_name(cls)}.__new__(cls) failed ({e}). Registered dataclasses are "
                    "rebuilt without calling __init__, so __new__ must accept no arguments; "
                    "register the class with register_pytree_node and an unflatten function "
                    "that calls its constructor instead"
                ) from e
            attrs = getattr(obj, "__dict__", None)
            if type(attrs) is dict:
                # Writing the instance dict directly: no __setattr__ (frozen dataclasses), no
                # per-field attribute lookup.
                od: dict[str, Any] = attrs
                fields = self.data_fields
                for i in range(len(fields)):
                    od[fields[i]] = children[i]
                metas = self.meta_fields
                for i in range(len(metas)):
                    od[metas[i]] = aux[i]
            else:
                setter = object.__setattr__
                for name, value in zip(self.data_fields, children):
                    setter(obj, name, value)
                for name, value in zip(self.meta_fields, aux):
                    setter(obj, name, value)
            setter = object.__setattr__
            for name, default, factory in self.drop_defaults:
                setter(obj, name, factory() if factory is not None else default)
            return obj
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


def qualified_name(t: type) -> str:
    """``module.qualname`` of a type (``builtins.`` left out)."""
    module = getattr(t, "__module__", None)
    name = getattr(t, "__qualname__", None) or getattr(t, "__name__", "?")
    if module is None or module == "builtins":
        return str(name)
    return f"{module}.{name}"


# ---------------------------------------------------------------------------------------------
# Node data kept in a PyTreeDef.


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

    def __init__(self, keys: list[Any], order: list[Any] | None, factory: Any) -> None:
        self.keys = keys
        self.order = order
        self.factory = factory
        self.template = None
        self.built = False
        self.shared = False
        self.perm = None
        self.entries = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DictData):
            return False
        return self.keys == other.keys and self.factory == other.factory

    def __hash__(self) -> int:
        return hash((tuple(self.keys), self.factory))


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
    aux_hash: int
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
                + f"{_truncate(self.aux_str, 200)} (type {type(self.aux).__name__}), which is "
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


def _truncate(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# The registry.

_lock: Final = threading.RLock()
_registry: Final[dict[type, NodeInfo]] = {}
_cache: Final[dict[type, NodeInfo]] = {}
# The types classified as leaves, a subset of ``_cache`` kept beside it (same lock, same
# version check, cleared with it): the uncompiled map (``_pure``) tests ``type(c) in
# LEAF_TYPES`` inside its comprehensions, one set lookup with no call.
LEAF_TYPES: Final[set[type]] = set()
_version: list[int] = [0]

LEAF_INFO: Final = NodeInfo(object, LEAF)

# Hooks for spruce's JAX bridge (``spruce/_jax_bridge.py``, not compiled), so that the engine
# itself never imports JAX.  Each is a one-item list holding a function or None:
# - FOREIGN_LOOKUP[0](t) -> NodeInfo | None: how another registry (jax.tree_util) flattens a type
#   that spruce does not know; asked once per type (the answer is cached like any other), after
#   the built-in kinds, before the namedtuple / struct sequence checks.
# - ON_REGISTER[0](t): called after every registration made through spruce (outside the lock).
FOREIGN_LOOKUP: Final[list[Callable[[type], NodeInfo | None] | None]] = [None]
ON_REGISTER: Final[list[Callable[[type], None] | None]] = [None]
_BUILTIN_NODE_TYPES: Final = (tuple, list, dict, type(None), OrderedDict, defaultdict, deque)


def _is_namedtuple_type(t: type) -> bool:
    return issubclass(t, tuple) and hasattr(t, "_fields")


def _is_structseq_type(t: type) -> bool:
    return (
        issubclass(t, tuple)
        and hasattr(t, "n_sequence_fields")
        and hasattr(t, "n_fields")
        and hasattr(t, "n_unnamed_fields")
    )


def _classify(t: type) -> NodeInfo:
    info = _registry.get(t)
    if info is not None:
        return info
    if t is OrderedDict:
        return NodeInfo(t, ORDEREDDICT)
    if t is defaultdict:
        return NodeInfo(t, DEFAULTDICT)
    if t is deque:
        return NodeInfo(t, DEQUE)
    if t is tuple:
        return NodeInfo(t, TUPLE)
    if t is list:
        return NodeInfo(t, LIST)
    if t is dict:
        return NodeInfo(t, DICT)
    if t is type(None):
        return NodeInfo(t, NONE)
    find = FOREIGN_LOOKUP[0]
    if find is not None:
        found = find(t)
        if found is not None:
            return found
    if _is_structseq_type(t):
        return NodeInfo(t, STRUCTSEQ)
    if _is_namedtuple_type(t):
        return NodeInfo(t, NAMEDTUPLE)
    return LEAF_INFO


def lookup(t: type) -> NodeInfo:
    """The NodeInfo of type ``t`` (LEAF_INFO for leaf types), cached."""
    info = _cache.get(t)
    if info is not None:
        return info
    version = _version[0]
    info = _classify(t)
    with _lock:
        if _version[0] == version:
            _cache[t] = info
            if info is LEAF_INFO:
                LEAF_TYPES.add(t)
    return info


def _register(info: NodeInfo) -> None:
    t = info.nodetype
    if not isinstance(t, type):
        raise TypeError(f"only classes can be registered as pytree nodes, got {t!r}")
    with _lock:
        if t in _BUILTIN_NODE_TYPES:
            raise ValueError(
                f"{qualified_name(t)} is a built-in pytree node type and cannot be registered again"
            )
        if t in _registry:
            raise ValueError(
                f"{qualified_name(t)} is already registered as a pytree node; call "
                "spruce.tree.unregister first to replace its registration"
            )
        _registry[t] = info
        _cache.clear()
        LEAF_TYPES.clear()
        _version[0] += 1
    hook = ON_REGISTER[0]
    if hook is not None:
        hook(t)


def invalidate() -> None:
    """Forget every cached classification (another registry learned a type)."""
    with _lock:
        _cache.clear()
        LEAF_TYPES.clear()
        _version[0] += 1


def registered(t: type) -> NodeInfo | None:
    """The current registration of ``t`` made through spruce, or None."""
    return _registry.get(t)


def registered_types() -> list[type]:
    """The types registered through spruce now (a snapshot)."""
    with _lock:
        return list(_registry)


def unregister(nodetype: type) -> type:
    """Remove the registration of ``nodetype`` (made by any ``register_*`` function).

    Afterwards its instances are leaves again.  PyTreeDefs built before keep working (they hold
    the old registration).  Returns ``nodetype``.  jax.tree_util cannot forget a registration:
    once JAX has been imported, it keeps treating ``nodetype`` as a node and raises a TypeError
    when asked to flatten one, until ``nodetype`` is registered with spruce again.

    Raises:
      ValueError: ``nodetype`` is a built-in node type or not registered.

    Follows optree.unregister_pytree_node (jax.tree_util has no unregistration).
    """
    if not isinstance(nodetype, type):
        raise TypeError(f"unregister expects a class, got {nodetype!r}")
    with _lock:
        if nodetype in _BUILTIN_NODE_TYPES:
            raise ValueError(f"{qualified_name(nodetype)} is a built-in pytree node type and cannot be unregistered")
        if nodetype not in _registry:
            raise ValueError(f"{qualified_name(nodetype)} is not registered as a pytree node")
        del _registry[nodetype]
        _cache.clear()
        LEAF_TYPES.clear()
        _version[0] += 1
    return nodetype


def register_pytree_node(
    nodetype: type,
    flatten_func: Callable[[Any], tuple[Iterable[Any], Any]],
    unflatten_func: Callable[[Any, Iterable[Any]], Any],
    flatten_with_keys_func: Callable[[Any], tuple[Iterable[tuple[Any, Any]], Any]] | None = None,
) -> None:
    """Register ``nodetype`` as a pytree node, as jax.tree_util.register_pytree_node.

    Args:
      nodetype: the class (exact type: subclasses are not covered).
      flatten_func: ``x -> (children, aux_data)``; children an iterable of subtrees, aux_data
        hashable and comparable (it becomes part of the PyTreeDef).
      unflatten_func: ``(aux_data, children) -> x``; children is a tuple.  It is called with
        arbitrary objects in place of leaves (e.g. by transforms), so it should not validate them.
      flatten_with_keys_func: optional ``x -> ([(key, child), ...], aux_data)`` for key paths;
        without it, paths use FlattenedIndexKey.

    Raises:
      ValueError: ``nodetype`` is already registered (of N threads racing, one wins) or is a
        built-in node type.
    """
    _register(
        NodeInfo(
            nodetype,
            CUSTOM,
            MODE_FUNCS,
            flatten=flatten_func,
            unflatten=unflatten_func,
            flatten_with_keys=flatten_with_keys_func,
        )
    )


def register_pytree_with_keys(
    nodetype: type,
    flatten_with_keys: Callable[[Any], tuple[Iterable[tuple[Any, Any]], Any]],
    unflatten_func: Callable[[Any, Iterable[Any]], Any],
    flatten_func: Callable[[Any], tuple[Iterable[Any], Any]] | None = None,
) -> None:
    """Register ``nodetype`` with key-aware flattening, as jax.tree_util.register_pytree_with_keys.

    ``flatten_with_keys`` returns ``([(key, child), ...], aux_data)``; ``flatten_func`` (optional)
    is a faster keyless version used when paths are not needed.  Raises as register_pytree_node.
    """
    _register(
        NodeInfo(
            nodetype,
            CUSTOM,
            MODE_KEYS if flatten_func is None else MODE_FUNCS,
            flatten=flatten_func,
            unflatten=unflatten_func,
            flatten_with_keys=flatten_with_keys,
        )
    )


def register_with_fixed_keys(
    nodetype: type,
    flatten_func: Callable[[Any], tuple[Iterable[Any], Any]],
    unflatten_func: Callable[[Any, Iterable[Any]], Any],
    keys: Iterable[Any],
) -> None:
    """Register ``nodetype`` as ``register_pytree_node`` does, for a class whose nodes always
    have children with the key entries ``keys``: key paths come from ``flatten_func`` and the
    stored keys, with no ``flatten_with_keys`` building (key, child) pairs on every call.

    Internal (``spruce.Module`` registers its subclasses with it: the keys are the GetAttrKeys of
    the dynamic fields); not part of ``spruce.tree``.  A flatten that returns another number of
    children raises TypeError when key paths are asked for.
    """
    info = NodeInfo(nodetype, CUSTOM, MODE_FUNCS, flatten=flatten_func, unflatten=unflatten_func)
    info.fixed_keys = list(keys)
    _register(info)


def register_pytree_node_class(cls: Any) -> Any:
    """Class decorator: register ``cls`` using its ``tree_flatten`` method and ``tree_unflatten``
    classmethod, as jax.tree_util.register_pytree_node_class.  Returns ``cls``.
    """
    register_pytree_node(cls, _method(cls, "tree_flatten"), cls.tree_unflatten)
    return cls


def register_pytree_with_keys_class(cls: Any) -> Any:
    """Class decorator: register ``cls`` using its ``tree_flatten_with_keys`` method (and
    ``tree_flatten`` if defined) and ``tree_unflatten`` classmethod, as
    jax.tree_util.register_pytree_with_keys_class.  Returns ``cls``.
    """
    flatten = _method(cls, "tree_flatten") if hasattr(cls, "tree_flatten") else None
    register_pytree_with_keys(cls, _method(cls, "tree_flatten_with_keys"), cls.tree_unflatten, flatten)
    return cls


def _method(cls: Any, name: str) -> Callable[[Any], Any]:
    fn = getattr(cls, name)

    def call(x: Any) -> Any:
        return fn(x)

    return call


def register_dataclass(
    nodetype: Any,
    data_fields: Iterable[str] | None = None,
    meta_fields: Iterable[str] | None = None,
    drop_fields: Iterable[str] = (),
) -> Any:
    """Register a dataclass-like class whose fields are children (data) or node data (meta).

    Follows jax.tree_util.register_dataclass: usable as a decorator; when ``data_fields`` and
    ``meta_fields`` are both None they are inferred from ``dataclasses.fields`` (a field with
    ``metadata={'static': True}``, e.g. from ``spruce.tree.static()``, is meta).  Key paths use
    GetAttrKey(field).  Meta values must be hashable.

    Differs from JAX in one way, on purpose: unflatten does not call ``__init__`` or
    ``__post_init__`` (the object is created with ``__new__`` and its fields set directly, so
    frozen dataclasses and validating ``__post_init__`` work with placeholder leaves);
    ``drop_fields`` are reset to their declared default (or default_factory) on unflatten.

    Returns ``nodetype``.

    Raises:
      ValueError: only one of data_fields/meta_fields given, or neither for a class that is
        not a dataclass (also a TypeError, as JAX raises); a field is in two of the lists; a
        dataclass field is in none of them; a name is not a field.
      TypeError (later, when a node is rebuilt): the class's ``__new__`` needs arguments.
    """
    if not isinstance(nodetype, type):
        raise TypeError(f"register_dataclass expects a class, got {nodetype!r}")
    drop = tuple(drop_fields)
    is_dc = dataclasses.is_dataclass(nodetype)
    fields_by_name: dict[str, Any] = {}
    if is_dc:
        for f in dataclasses.fields(nodetype):
            fields_by_name[f.name] = f
    if data_fields is None and meta_fields is None:
        if not is_dc:
            raise RegisterDataclassError(
                f"register_dataclass({qualified_name(nodetype)}): data_fields and meta_fields can "
                "only be inferred for a dataclass; pass them explicitly"
            )
        data: tuple[str, ...] = tuple(
            n for n, f in fields_by_name.items() if not f.metadata.get("static", False) and n not in drop
        )
        meta: tuple[str, ...] = tuple(
            n for n, f in fields_by_name.items() if f.metadata.get("static", False) and n not in drop
        )
    elif data_fields is None or meta_fields is None:
        raise RegisterDataclassError(
            f"register_dataclass({qualified_name(nodetype)}): pass both data_fields and "
            "meta_fields, or neither (to infer them from the dataclass fields)"
        )
    else:
        data = tuple(data_fields)
        meta = tuple(meta_fields)
    for group in (data, meta, drop):
        for name in group:
            if not isinstance(name, str):
                raise TypeError(f"register_dataclass({qualified_name(nodetype)}): field names must be str, got {name!r}")
    seen: dict[str, str] = {}
    for label, group in (("data_fields", data), ("meta_fields", meta), ("drop_fields", drop)):
        for name in group:
            if name in seen:
                raise ValueError(
                    f"register_dataclass({qualified_name(nodetype)}): field {name!r} is in both "
                    f"{seen[name]} and {label}"
                )
            seen[name] = label
    if is_dc:
        for name in seen:
            if name not in fields_by_name:
                raise ValueError(
                    f"register_dataclass({qualified_name(nodetype)}): {name!r} is not a field of "
                    f"the dataclass (fields: {', '.join(fields_by_name)})"
                )
        missing = [n for n in fields_by_name if n not in seen]
        if missing:
            raise ValueError(
                f"register_dataclass({qualified_name(nodetype)}): field(s) {', '.join(map(repr, missing))} "
                "are in none of data_fields, meta_fields and drop_fields; every dataclass field "
                "must be listed in exactly one"
            )
    drop_defaults: list[tuple[str, Any, Any]] = []
    for name in drop:
        field = fields_by_name.get(name)
        if field is not None and field.default_factory is not dataclasses.MISSING:
            drop_defaults.append((name, None, field.default_factory))
        elif field is not None and field.default is not dataclasses.MISSING:
            drop_defaults.append((name, field.default, None))
        elif is_dc:
            raise ValueError(
                f"register_dataclass({qualified_name(nodetype)}): drop field {name!r} has no "
                "default or default_factory, so unflatten could not give it a value"
            )
    _register(
        NodeInfo(
            nodetype,
            CUSTOM,
            MODE_DATACLASS,
            data_fields=data,
            meta_fields=meta,
            drop_defaults=drop_defaults,
        )
    )
    return nodetype


def register_static(cls: Any) -> Any:
    """Register ``cls`` so its instances are nodes with no children: the instance itself is the
    node data (so it must be hashable).  As jax.tree_util.register_static.  Returns ``cls``.
    """
    _register(NodeInfo(cls, CUSTOM, MODE_STATIC))
    return cls


def is_tree_node(typ: Any) -> bool:
    """True if ``typ`` (a type, or else the type of the given object) is a pytree node type:
    a built-in container, a namedtuple or struct sequence, or a registered class.  As
    jax.tree_util.is_tree_node; ``NoneType`` counts as a node (with no children).
    """
    t = typ if isinstance(typ, type) else type(typ)
    return lookup(t).kind != LEAF


# ---------------------------------------------------------------------------------------------
# expand / build: one node apart and back together.

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


def dict_data(d: dict[Any, Any], factory: Any) -> tuple[DictData, list[Any]]:
    """Node data and children (in sorted key order) of a dict or defaultdict."""
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
        ch, aux = info.flatten_node(x)
        return (len(ch) << SHIFT) | CUSTOM, CustomData(info, aux), ch
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
    if kind == DEQUE:
        ch = list(x)
        return (len(ch) << SHIFT) | DEQUE, x.maxlen, ch
    # Built-in kinds reached through a registry entry cannot happen (they are exact-type
    # checked first), but keep expand total.
    return expand(x, False)


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
            ch, keys, aux = info.flatten_node_with_keys(x)
            return (len(ch) << SHIFT) | CUSTOM, CustomData(info, aux), ch, keys
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
    ycode, ydata, ych = expand(y, none_is_leaf)
    if ycode != code:
        return None
    if data is not ydata and not bool(data == ydata):
        return None
    return ych


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
        dd: DictData = data
        keys = dd.keys
        order = dd.order
        # A dict that already has the keys in insertion order, assigned in sorted order, keeps
        # the order without per-key lookups.  A node rebuilt more than once (a PyTreeDef
        # unflattened again and again, or a dict shape shared by many nodes) copies a cached
        # template, which is cheaper than inserting the keys (no table growth); a node rebuilt
        # once (map) does not make one.
        template = dd.template
        if order is None and len(keys) <= 16:
            out: dict[Any, Any] = {}  # small and sorted: inserting is as cheap as copying
        elif template is not None:
            out = template.copy()
        elif dd.built:
            template = dict.fromkeys(keys if order is None else order)
            dd.template = template
            out = template.copy()
        else:
            dd.built = True
            out = {} if order is None else dict.fromkeys(order)
        for i in range(len(keys)):
            out[keys[i]] = children[i]
        return out
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
