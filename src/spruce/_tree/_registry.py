"""The type registry: which types are nodes, and the registration API.

Types are classified once and cached (exact types only, as jax.tree_util: a subclass of a
registered class is a leaf unless registered itself; namedtuples and struct sequences are nodes).
The cache is versioned so that a registration racing a lookup can never leave a stale entry
behind.  The ``register_*`` functions here are the ones ``spruce.tree`` exports.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict, defaultdict, deque
from typing import Any, Callable, Final, Iterable

from ._exceptions import RegisterDataclassError
from ._kinds import (
    CUSTOM,
    DEFAULTDICT,
    DEQUE,
    DICT,
    LEAF,
    LIST,
    MODE_DATACLASS,
    MODE_FUNCS,
    MODE_KEYS,
    MODE_STATIC,
    NAMEDTUPLE,
    NONE,
    ORDEREDDICT,
    STRUCTSEQ,
    TUPLE,
)
from ._nodes import NodeInfo
from ._text import qualified_name

_lock: Final = threading.RLock()
_registry: Final[dict[type, NodeInfo]] = {}
_cache: Final[dict[type, NodeInfo]] = {}
# The types classified as leaves, a subset of ``_cache`` kept beside it (same lock, same
# version check, cleared with it): the uncompiled map (``_pure``) tests ``type(c) in
# LEAF_TYPES`` inside its loops, one set lookup with no call.
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

# Registration namespaces (optree's): a type registered in namespace "ns" is a node only in
# walks called with ``namespace="ns"``, where it takes precedence over a global registration.
# Each namespace's registrations live apart from the global registry, so a walk in the global
# namespace never looks at them: namespaces cost a global walk one test of its ``namespace``
# argument and of ``GLOBAL_ORDERED`` (see ``view``), nothing per node.
_ns_registry: Final[dict[str, dict[type, NodeInfo]]] = {}
# dict_insertion_ordered: the namespaces whose walks keep dicts in insertion order, and the
# same flag for the global namespace (which every namespace inherits).
_ns_ordered: Final[set[str]] = set()


class _Modes:
    """Process-wide walk modes read at the start of every walk: a native attribute (compiled,
    one load of a C bool, no reference counting)."""

    ordered: bool  # dict_insertion_ordered in the global namespace

    def __init__(self) -> None:
        self.ordered = False


MODES: Final = _Modes()


class Namespace:
    """A walk's view of the registry when it runs in a namespace or keeps dicts in insertion
    order: the namespace's own registrations (over the global ones) and the dict mode.

    ``used`` becomes True when the walk met a node whose meaning the namespace decides (a
    registered class, or a dict kept in insertion order), which is when its PyTreeDef records
    the namespace (as optree's PyTreeSpec does).
    """

    name: str
    nodes: dict[type, NodeInfo]
    ordered: bool
    used: bool

    def __init__(self, name: str, nodes: dict[type, NodeInfo], ordered: bool) -> None:
        self.name = name
        self.nodes = nodes
        self.ordered = ordered
        self.used = False

    def recorded(self) -> str:
        """The namespace a PyTreeDef made by this walk records ("" when nothing needed it)."""
        return self.name if self.used else ""


_EMPTY_NODES: Final[dict[type, NodeInfo]] = {}


def check_namespace(namespace: object) -> str:
    if not isinstance(namespace, str):
        raise TypeError(f"the namespace must be a str, got {namespace!r}")
    return namespace


def view(namespace: str) -> Namespace | None:
    """The registry view of a walk in ``namespace``; None for the plain global walk (the
    global namespace without dict_insertion_ordered), which the fast walkers take."""
    if not namespace:
        if not isinstance(namespace, str):
            raise TypeError(f"the namespace must be a str, got {namespace!r}")
        if not MODES.ordered:
            return None
        return Namespace("", _EMPTY_NODES, True)
    check_namespace(namespace)
    nodes = _ns_registry.get(namespace)
    return Namespace(namespace, _EMPTY_NODES if nodes is None else nodes, MODES.ordered or namespace in _ns_ordered)


def is_dict_insertion_ordered(namespace: str = "", *, inherit_global_namespace: bool = True) -> bool:
    """Whether walks in ``namespace`` keep dicts in insertion order (see dict_insertion_ordered)."""
    check_namespace(namespace)
    if not namespace or inherit_global_namespace:
        if MODES.ordered:
            return True
    return bool(namespace) and namespace in _ns_ordered


def _set_ordered(mode: bool, namespace: str) -> None:
    with _lock:
        if not namespace:
            MODES.ordered = mode
        elif mode:
            _ns_ordered.add(namespace)
        else:
            _ns_ordered.discard(namespace)


class dict_insertion_ordered:
    """Context manager: within it, walks in ``namespace`` keep dicts (and defaultdicts) in
    insertion order, in the leaves and in the PyTreeDef, instead of sorting their keys.

    Follows optree.dict_insertion_ordered, except that ``namespace=""`` is the global namespace
    (whose mode every namespace inherits; optree spells it with a private sentinel).
    OrderedDict always keeps its order.  The mode is process-wide, not per thread (as
    optree's); the previous mode comes back on exit.  Also a decorator.  A PyTreeDef made inside records the
    namespace and its dicts' order: it differs from the sorted one (``==`` is False).

    >>> from spruce.tree import flatten
    >>> with dict_insertion_ordered(True, namespace=""):
    ...     flatten({'b': 1, 'a': 2})
    ([1, 2], PyTreeDef({'b': *, 'a': *}))
    >>> flatten({'b': 1, 'a': 2})
    ([2, 1], PyTreeDef({'a': *, 'b': *}))
    """

    mode: bool
    namespace: str
    _prev: list[bool]

    def __init__(self, mode: bool = True, *, namespace: str) -> None:
        self.mode = bool(mode)
        self.namespace = check_namespace(namespace)
        self._prev = []

    def __enter__(self) -> None:
        self._prev.append(is_dict_insertion_ordered(self.namespace, inherit_global_namespace=False))
        _set_ordered(self.mode, self.namespace)

    def __exit__(self, *exc: object) -> None:
        _set_ordered(self._prev.pop(), self.namespace)

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """Used as a decorator (as optree's, a contextlib context manager): ``func`` runs in the mode."""

        def run(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)

        return run


def is_namedtuple_type(t: type) -> bool:
    """True for a namedtuple class (a tuple subclass with ``_fields``): spruce's one namedtuple
    test, used by every layer."""
    return issubclass(t, tuple) and hasattr(t, "_fields")


def is_structseq_type(t: type) -> bool:
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
    if is_structseq_type(t):
        return NodeInfo(t, STRUCTSEQ)
    if is_namedtuple_type(t):
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


def _register(info: NodeInfo, namespace: str = "") -> None:
    t = info.nodetype
    if not isinstance(t, type):
        raise TypeError(f"only classes can be registered as pytree nodes, got {t!r}")
    if check_namespace(namespace):
        with _lock:
            if t in _BUILTIN_NODE_TYPES:
                raise ValueError(
                    f"{qualified_name(t)} is a built-in pytree node type and cannot be registered again"
                )
            nodes = _ns_registry.setdefault(namespace, {})
            if t in nodes:
                raise ValueError(
                    f"{qualified_name(t)} is already registered as a pytree node in namespace "
                    f"{namespace!r}; call spruce.tree.unregister(cls, namespace={namespace!r}) first"
                )
            info.namespace = namespace
            nodes[t] = info
        return
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
        _mark(t)
    hook = ON_REGISTER[0]
    if hook is not None:
        hook(t)


# Classes that registration gave the class attribute ``__spruce_pytree__`` (the marker of
# ``spruce.typing.PyTreeNode``), so that unregister takes away only what it set.
_marked: Final[set[type]] = set()


def _mark(t: type) -> None:
    if "__spruce_pytree__" in t.__dict__:
        return  # declared by the class itself (Module does)
    try:
        setattr(t, "__spruce_pytree__", True)  # noqa: B010  (a dunder name read by checkers)
    except (TypeError, AttributeError):
        return  # a built-in or extension type: its dict is read-only
    _marked.add(t)


def _unmark(t: type) -> None:
    if t in _marked:
        _marked.discard(t)
        try:
            delattr(t, "__spruce_pytree__")
        except (TypeError, AttributeError):
            pass


def invalidate() -> None:
    """Forget every cached classification (another registry learned a type)."""
    with _lock:
        _cache.clear()
        LEAF_TYPES.clear()
        _version[0] += 1


def registered(t: type, namespace: str = "") -> NodeInfo | None:
    """The current registration of ``t`` made through spruce (in ``namespace``: there only), or None."""
    if namespace:
        return _ns_registry.get(namespace, _EMPTY_NODES).get(t)
    return _registry.get(t)


def lookup_in(t: type, ns: Namespace) -> NodeInfo:
    """The NodeInfo of ``t`` in a walk of view ``ns``: its registration there, or the global one."""
    info = ns.nodes.get(t)
    if info is not None:
        return info
    return lookup(t)


def registered_types() -> list[type]:
    """The types registered through spruce now (a snapshot)."""
    with _lock:
        return list(_registry)


def unregister(nodetype: type, *, namespace: str = "") -> type:
    """Remove the registration of ``nodetype`` (made by any ``register_*`` function) in
    ``namespace`` ("" the global one; a namespace's registration is removed from it only).

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
    if check_namespace(namespace):
        with _lock:
            nodes = _ns_registry.get(namespace, _EMPTY_NODES)
            if nodetype in _BUILTIN_NODE_TYPES:
                raise ValueError(f"{qualified_name(nodetype)} is a built-in pytree node type and cannot be unregistered")
            if nodetype not in nodes:
                raise ValueError(f"{qualified_name(nodetype)} is not registered as a pytree node in namespace {namespace!r}")
            del nodes[nodetype]
            if not nodes:
                del _ns_registry[namespace]
        return nodetype
    with _lock:
        if nodetype in _BUILTIN_NODE_TYPES:
            raise ValueError(f"{qualified_name(nodetype)} is a built-in pytree node type and cannot be unregistered")
        if nodetype not in _registry:
            raise ValueError(f"{qualified_name(nodetype)} is not registered as a pytree node")
        del _registry[nodetype]
        _cache.clear()
        LEAF_TYPES.clear()
        _version[0] += 1
        _unmark(nodetype)
    return nodetype


def register_pytree_node(
    nodetype: type,
    flatten_func: Callable[[Any], tuple[Iterable[Any], Any]],
    unflatten_func: Callable[[Any, Iterable[Any]], Any],
    flatten_with_keys_func: Callable[[Any], tuple[Iterable[tuple[Any, Any]], Any]] | None = None,
    *,
    namespace: str = "",
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
      namespace: "" (the default) registers it globally (and with jax.tree_util); another
        name registers it in that namespace only, as optree's ``namespace=``: it is a node
        only in walks called with that ``namespace=``, where it takes precedence over a global
        registration of the same class.

    Raises:
      ValueError: ``nodetype`` is already registered in that namespace (of N threads racing,
        one wins) or is a built-in node type.
    """
    _register(
        NodeInfo(
            nodetype,
            CUSTOM,
            MODE_FUNCS,
            flatten=flatten_func,
            unflatten=unflatten_func,
            flatten_with_keys=flatten_with_keys_func,
        ),
        namespace,
    )


def register_pytree_with_keys(
    nodetype: type,
    flatten_with_keys: Callable[[Any], tuple[Iterable[tuple[Any, Any]], Any]],
    unflatten_func: Callable[[Any, Iterable[Any]], Any],
    flatten_func: Callable[[Any], tuple[Iterable[Any], Any]] | None = None,
    *,
    namespace: str = "",
) -> None:
    """Register ``nodetype`` with key-aware flattening, as jax.tree_util.register_pytree_with_keys.

    ``flatten_with_keys`` returns ``([(key, child), ...], aux_data)``; ``flatten_func`` (optional)
    is a faster keyless version used when paths are not needed.  ``namespace`` and errors as
    register_pytree_node.
    """
    _register(
        NodeInfo(
            nodetype,
            CUSTOM,
            MODE_KEYS if flatten_func is None else MODE_FUNCS,
            flatten=flatten_func,
            unflatten=unflatten_func,
            flatten_with_keys=flatten_with_keys,
        ),
        namespace,
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


def register_pytree_node_class(cls: Any = None, *, namespace: str = "") -> Any:
    """Class decorator: register ``cls`` using its ``tree_flatten`` method and ``tree_unflatten``
    classmethod, as jax.tree_util.register_pytree_node_class.  Returns ``cls``.  With only
    ``namespace=`` given it returns the decorator for that namespace (see register_pytree_node).
    """
    if cls is None:
        return _in_namespace(register_pytree_node_class, namespace)
    register_pytree_node(cls, _method(cls, "tree_flatten"), cls.tree_unflatten, namespace=namespace)
    return cls


def register_pytree_with_keys_class(cls: Any = None, *, namespace: str = "") -> Any:
    """Class decorator: register ``cls`` using its ``tree_flatten_with_keys`` method (and
    ``tree_flatten`` if defined) and ``tree_unflatten`` classmethod, as
    jax.tree_util.register_pytree_with_keys_class.  Returns ``cls``; ``namespace`` as
    register_pytree_node_class.
    """
    if cls is None:
        return _in_namespace(register_pytree_with_keys_class, namespace)
    flatten = _method(cls, "tree_flatten") if hasattr(cls, "tree_flatten") else None
    register_pytree_with_keys(
        cls, _method(cls, "tree_flatten_with_keys"), cls.tree_unflatten, flatten, namespace=namespace
    )
    return cls


def _in_namespace(register: Callable[..., Any], namespace: str) -> Callable[[Any], Any]:
    def decorate(cls: Any) -> Any:
        return register(cls, namespace=namespace)

    return decorate


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
    *,
    namespace: str = "",
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
    Fields are written to the instance ``__dict__`` unless the class defines one of them as a
    data descriptor (a property, a slot, a descriptor-typed field), in which case it is set
    through ``object.__setattr__``; which fields are descriptors is read at registration, so
    after adding a descriptor to the class, ``unregister`` it and register it again.

    Returns ``nodetype``; ``namespace`` as register_pytree_node.

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
        ),
        namespace,
    )
    return nodetype


def register_static(cls: Any = None, *, namespace: str = "") -> Any:
    """Register ``cls`` so its instances are nodes with no children: the instance itself is the
    node data (so it must be hashable).  As jax.tree_util.register_static.  Returns ``cls``;
    ``namespace`` as register_pytree_node_class.
    """
    if cls is None:
        return _in_namespace(register_static, namespace)
    _register(NodeInfo(cls, CUSTOM, MODE_STATIC), namespace)
    return cls


def is_tree_node(typ: Any, *, namespace: str = "") -> bool:
    """True if ``typ`` (a type, or else the type of the given object) is a pytree node type:
    a built-in container, a namedtuple or struct sequence, or a registered class (globally or
    in ``namespace``).  As jax.tree_util.is_tree_node; ``NoneType`` counts as a node (with no
    children).
    """
    t = typ if isinstance(typ, type) else type(typ)
    if check_namespace(namespace):
        info = _ns_registry.get(namespace, _EMPTY_NODES).get(t)
        if info is not None:
            return True
    return lookup(t).kind != LEAF
