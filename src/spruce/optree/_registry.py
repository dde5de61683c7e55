"""optree's registration surface: ``register_pytree_node`` (with ``path_entry_type`` and a
required ``namespace``), ``register_pytree_node_class``, ``unregister_pytree_node``,
``register_pytree_node.get`` and ``dict_insertion_ordered``.

A class registered here is registered with spruce's engine in the same namespace, so every
spruce function (and, in the global namespace, JAX's tree_util through the bridge) sees it.
optree's flatten functions may return ``(children, metadata, entries)``: the entries travel in
the structure (``spruce._tree._nodes.EntriesAux``), are what ``PyTreeDef.entries()`` returns and
are the keys of the children's key paths.  What optree adds on top of the engine's registration
(the path entry class, the functions as given) is kept in this module.

optree spells the global namespace with a private sentinel; here it is ``GLOBAL_NAMESPACE``
(traversal functions also accept ``namespace=""`` for it, as spruce's do).
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import inspect
import operator
import threading
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .._tree._kindenum import PyTreeKind
from .._tree._nodes import EntriesAux
from .._tree._registry import dict_insertion_ordered as _engine_ordered
from .._tree._registry import is_namedtuple_type, is_structseq_type, registered
from .._tree._registry import register_pytree_node as _engine_register
from .._tree._registry import unregister as _engine_unregister
from ._accessors import (
    PATH_ENTRY_TYPES,
    AutoEntry,
    MappingEntry,
    NamedTupleEntry,
    PyTreeEntry,
    SequenceEntry,
    StructSequenceEntry,
)

__all__ = [
    "GLOBAL_NAMESPACE",
    "PyTreeNodeRegistryEntry",
    "register_pytree_node",
    "register_pytree_node_class",
    "unregister_pytree_node",
    "dict_insertion_ordered",
]


class _GlobalNamespace(str):
    """The global namespace: equal to "" (spruce's name for it), printed as optree prints it."""

    def __repr__(self) -> str:
        return "<GLOBAL NAMESPACE>"


GLOBAL_NAMESPACE: str = _GlobalNamespace("")
"""The global namespace, for the registration functions that refuse ``namespace=""``."""


@dataclasses.dataclass(frozen=True)
class PyTreeNodeRegistryEntry:
    """A registration as ``register_pytree_node.get`` returns it: the class, its flatten and
    unflatten functions (optree's conventions: ``node -> (children, metadata[, entries])`` and
    ``(metadata, children) -> node``), the path entry class, the kind and the namespace."""

    type: builtins.type
    flatten_func: Callable[[Any], Any]
    unflatten_func: Callable[[Any, Any], Any]
    path_entry_type: builtins.type[PyTreeEntry] = AutoEntry
    kind: PyTreeKind = PyTreeKind.CUSTOM
    namespace: str = ""


_lock = threading.Lock()
# (namespace, class) -> the registration made through this module
_REGISTRY: dict[tuple[str, type], PyTreeNodeRegistryEntry] = {}


def _namespace(namespace: object, what: str) -> str:
    """spruce's namespace string of a registration call's ``namespace`` (optree's rules)."""
    if namespace is GLOBAL_NAMESPACE:
        return ""
    if not isinstance(namespace, str):
        raise TypeError(f"{what}: the namespace must be a string, got {namespace!r}")
    if namespace == "":
        raise ValueError(f"{what}: the namespace cannot be an empty string (use a name, or GLOBAL_NAMESPACE)")
    return namespace


def _split(out: Any, nodetype: type) -> tuple[tuple[Any, ...], Any, tuple[Any, ...] | None]:
    """``(children, metadata, entries)`` of a flatten function's result."""
    if not isinstance(out, tuple) or len(out) not in (2, 3):
        raise ValueError(
            f"the flatten function of {nodetype.__qualname__} must return (children, metadata) or "
            f"(children, metadata, entries), got {type(out).__name__}"
        )
    children = tuple(out[0])
    entries = None if len(out) == 2 or out[2] is None else tuple(out[2])
    if entries is not None and len(entries) != len(children):
        raise ValueError(
            f"the flatten function of {nodetype.__qualname__} returned {len(children)} children "
            f"and {len(entries)} entries; they must be as many"
        )
    return children, out[1], entries


def register_pytree_node(
    cls: type,
    /,
    flatten_func: Callable[[Any], Any],
    unflatten_func: Callable[[Any, Any], Any],
    *,
    path_entry_type: type[PyTreeEntry] = AutoEntry,
    namespace: str,
) -> type:
    """Register ``cls`` as a pytree node in ``namespace``, as ``optree.register_pytree_node``.

    Args:
      cls: the class (exact type: subclasses are not covered).
      flatten_func: ``node -> (children, metadata)`` or ``(children, metadata, entries)``;
        ``metadata`` hashable (it is part of the structure); ``entries`` (one per child, or
        None for the positions) name the children in paths and accessors.
      unflatten_func: ``(metadata, children) -> node``.
      path_entry_type: the ``PyTreeEntry`` subclass of the children's accessors (default
        ``AutoEntry``: chosen from the class, see its docstring).
      namespace: a non-empty name (the class is a node only in walks called with it), or
        ``GLOBAL_NAMESPACE`` (everywhere, and in JAX's tree_util through the bridge).

    Returns:
      ``cls``.

    Raises:
      TypeError: ``cls`` is not a class, ``path_entry_type`` not a PyTreeEntry subclass, the
        namespace not a string.
      ValueError: an empty namespace; ``cls`` already registered there, or a built-in node type.

    >>> from spruce.optree import register_pytree_node, tree_flatten_with_path, unregister_pytree_node
    >>> class Pair:
    ...     def __init__(self, a, b): self.a, self.b = a, b
    >>> _ = register_pytree_node(Pair, lambda p: ((p.a, p.b), None, ("a", "b")),
    ...                          lambda _, c: Pair(*c), namespace="doc")
    >>> tree_flatten_with_path(Pair(1, 2), namespace="doc")[0]
    [('a',), ('b',)]
    >>> _ = unregister_pytree_node(Pair, namespace="doc")
    """
    if not inspect.isclass(cls):
        raise TypeError(f"register_pytree_node: expected a class, got {cls!r}")
    if not (inspect.isclass(path_entry_type) and issubclass(path_entry_type, PyTreeEntry)):
        raise TypeError(f"register_pytree_node: expected a subclass of PyTreeEntry, got {path_entry_type!r}")
    ns = _namespace(namespace, "register_pytree_node")

    def flatten(node: Any) -> tuple[tuple[Any, ...], Any]:
        children, metadata, entries = _split(flatten_func(node), cls)
        return children, (metadata if entries is None else EntriesAux(metadata, entries))

    def flatten_with_keys(node: Any) -> tuple[list[tuple[Any, Any]], Any]:
        children, metadata, entries = _split(flatten_func(node), cls)
        if entries is None:
            return list(enumerate(children)), metadata
        return list(zip(entries, children)), EntriesAux(metadata, entries)

    def unflatten(aux: Any, children: Iterable[Any]) -> Any:
        return unflatten_func(aux.metadata if isinstance(aux, EntriesAux) else aux, children)

    with _lock:
        _engine_register(cls, flatten, unflatten, flatten_with_keys, namespace=ns)
        _REGISTRY[(ns, cls)] = PyTreeNodeRegistryEntry(
            cls, flatten_func, unflatten_func, path_entry_type, PyTreeKind.CUSTOM, namespace
        )
        PATH_ENTRY_TYPES[(ns, cls)] = path_entry_type
    return cls


def register_pytree_node_class(
    cls: Any = None,
    /,
    *,
    path_entry_type: type[PyTreeEntry] | None = None,
    namespace: str | None = None,
) -> Any:
    """Register a class that flattens itself (``__tree_flatten__`` / ``__tree_unflatten__``,
    or the older ``tree_flatten`` / ``tree_unflatten``; see ``CustomTreeNode``), as
    ``optree.register_pytree_node_class`` (the class is not changed): used as
    ``@register_pytree_node_class(namespace="ns")`` or ``@register_pytree_node_class("ns")``.
    ``path_entry_type`` defaults to the class attribute ``TREE_PATH_ENTRY_TYPE``, else
    ``AutoEntry``.

    Raises:
      ValueError: no namespace, an empty one, or a namespace given twice.
      TypeError: as ``register_pytree_node``; the class has neither pair of methods.
    """
    if cls is GLOBAL_NAMESPACE or isinstance(cls, str):
        if namespace is not None:
            raise ValueError("register_pytree_node_class: the namespace is given twice")
        ns = cls
        _namespace(ns, "register_pytree_node_class")
        return lambda c: register_pytree_node_class(c, path_entry_type=path_entry_type, namespace=ns)
    if namespace is None:
        raise ValueError("register_pytree_node_class: a namespace is required (a name, or GLOBAL_NAMESPACE)")
    if cls is None:
        return lambda c: register_pytree_node_class(c, path_entry_type=path_entry_type, namespace=namespace)
    if not inspect.isclass(cls):
        raise TypeError(f"register_pytree_node_class: expected a class, got {cls!r}")
    if path_entry_type is None:
        path_entry_type = getattr(cls, "TREE_PATH_ENTRY_TYPE", AutoEntry)
    for flatten_name, unflatten_name in (("__tree_flatten__", "__tree_unflatten__"), ("tree_flatten", "tree_unflatten")):
        if callable(getattr(cls, flatten_name, None)) and callable(getattr(cls, unflatten_name, None)):
            break
    else:
        raise TypeError(
            f"register_pytree_node_class: {cls.__qualname__} must define __tree_flatten__ and "
            "__tree_unflatten__ (or the older tree_flatten and tree_unflatten)"
        )
    register_pytree_node(
        cls,
        operator.methodcaller(flatten_name),
        getattr(cls, unflatten_name),
        path_entry_type=path_entry_type,
        namespace=namespace,
    )
    return cls


def unregister_pytree_node(cls: type, /, *, namespace: str) -> PyTreeNodeRegistryEntry:
    """Remove the registration of ``cls`` in ``namespace`` and return it (optree's
    ``unregister_pytree_node``; structures made before keep working).

    Raises:
      TypeError: ``cls`` is not a class.
      ValueError: an empty namespace; ``cls`` is not registered there, or is a built-in node.
    """
    if not inspect.isclass(cls):
        raise TypeError(f"unregister_pytree_node: expected a class, got {cls!r}")
    ns = _namespace(namespace, "unregister_pytree_node")
    with _lock:
        entry = _REGISTRY.get((ns, cls)) or _entry_of_engine(cls, ns)
        if entry is None:
            where = "the global namespace" if not ns else f"namespace {ns!r}"
            raise ValueError(f"unregister_pytree_node: {cls.__qualname__} is not registered in {where}")
        _engine_unregister(cls, namespace=ns)
        _REGISTRY.pop((ns, cls), None)
        PATH_ENTRY_TYPES.pop((ns, cls), None)
    return entry


def _entry_of_engine(cls: type, ns: str) -> PyTreeNodeRegistryEntry | None:
    """An optree-style registration entry of a class registered through ``spruce.tree``."""
    info = registered(cls, ns)
    if info is None:
        return None
    from .._tree._ops import flatten_one_level

    def flatten(node: Any) -> tuple[list[Any], Any, list[Any]]:
        children, spec = flatten_one_level(node, namespace=ns)
        return children, spec.node_data()[1], spec.entries()

    def unflatten(metadata: Any, children: Iterable[Any]) -> Any:
        assert info is not None and info.unflatten is not None
        return info.unflatten(metadata, children)

    return PyTreeNodeRegistryEntry(cls, flatten, unflatten, AutoEntry, PyTreeKind.CUSTOM, ns or GLOBAL_NAMESPACE)


def _dict_flatten(d: Any) -> tuple[list[Any], list[Any], list[Any]]:
    from .._tree._nodes import sorted_keys

    keys = sorted_keys(d)
    return [d[k] for k in keys], keys, keys


def _builtin_entries() -> dict[type, PyTreeNodeRegistryEntry]:
    """The built-in node types as optree lists them (flatten / unflatten in optree's form)."""
    g = GLOBAL_NAMESPACE
    return {
        type(None): PyTreeNodeRegistryEntry(
            type(None), lambda _: ((), None), lambda _m, _c: None, PyTreeEntry, PyTreeKind.NONE, g
        ),
        tuple: PyTreeNodeRegistryEntry(tuple, lambda t: (t, None), lambda _m, c: tuple(c), SequenceEntry, PyTreeKind.TUPLE, g),
        list: PyTreeNodeRegistryEntry(list, lambda x: (x, None), lambda _m, c: list(c), SequenceEntry, PyTreeKind.LIST, g),
        dict: PyTreeNodeRegistryEntry(dict, _dict_flatten, lambda m, c: dict(zip(m, c)), MappingEntry, PyTreeKind.DICT, g),
        OrderedDict: PyTreeNodeRegistryEntry(
            OrderedDict, lambda d: (list(d.values()), list(d), list(d)), lambda m, c: OrderedDict(zip(m, c)),
            MappingEntry, PyTreeKind.ORDEREDDICT, g,
        ),
        defaultdict: PyTreeNodeRegistryEntry(
            defaultdict,
            lambda d: (_dict_flatten(d)[0], (d.default_factory, _dict_flatten(d)[1]), _dict_flatten(d)[1]),
            lambda m, c: defaultdict(m[0], zip(m[1], c)),
            MappingEntry, PyTreeKind.DEFAULTDICT, g,
        ),
        deque: PyTreeNodeRegistryEntry(
            deque, lambda d: (list(d), d.maxlen), lambda m, c: deque(c, maxlen=m), SequenceEntry, PyTreeKind.DEQUE, g
        ),
    }


def _registry_get(cls: Any = None, *, namespace: str = "") -> Any:
    """``register_pytree_node.get(cls=None, *, namespace="")``: the registration of ``cls``
    (in ``namespace``, else the global one; None if it is a leaf), or, without ``cls``, a dict
    of every registration visible in ``namespace``: the built-in node types, the classes
    registered globally or in ``namespace`` (namedtuple and struct sequence classes are nodes
    without a registration, so they are not listed; ``get`` of one of them gives its entry)."""
    ns = "" if namespace is GLOBAL_NAMESPACE else namespace
    if not isinstance(ns, str):
        raise TypeError(f"register_pytree_node.get: the namespace must be a string, got {namespace!r}")
    known = _builtin_entries()
    if cls is None:
        out: dict[type, PyTreeNodeRegistryEntry] = dict(known)
        with _lock:
            for (where, t), entry in _REGISTRY.items():
                if where == "" or where == ns:
                    out[t] = entry
        from .._tree._registry import registered_types

        for t in registered_types():
            if t not in out:
                found = _entry_of_engine(t, "")
                if found is not None:
                    out[t] = found
        return out
    if not inspect.isclass(cls):
        raise TypeError(f"register_pytree_node.get: expected a class or None, got {cls!r}")
    if cls in known:
        return known[cls]
    if is_namedtuple_type(cls):
        return PyTreeNodeRegistryEntry(
            cls, lambda t: (t, type(t)), lambda m, c: m(*c), NamedTupleEntry, PyTreeKind.NAMEDTUPLE, GLOBAL_NAMESPACE
        )
    if is_structseq_type(cls):
        return PyTreeNodeRegistryEntry(
            cls, lambda t: (t, type(t)), lambda m, c: m(c), StructSequenceEntry, PyTreeKind.STRUCTSEQUENCE, GLOBAL_NAMESPACE
        )
    with _lock:
        for where in ((ns, "") if ns else ("",)):
            mine = _REGISTRY.get((where, cls))
            if mine is not None:
                return mine
    for where in ((ns, "") if ns else ("",)):
        e = _entry_of_engine(cls, where)
        if e is not None:
            return e
    return None


register_pytree_node.get = _registry_get  # type: ignore[attr-defined]


@contextlib.contextmanager
def dict_insertion_ordered(mode: bool, /, *, namespace: str) -> Iterator[None]:
    """Within the block, dicts keep their insertion order in leaves and structures (walks in
    ``namespace``; ``GLOBAL_NAMESPACE`` for every walk), as ``optree.dict_insertion_ordered``;
    ``mode=False`` switches it off.  spruce's own ``spruce.tree.dict_insertion_ordered`` is the
    same switch (with ``namespace=""`` for the global one).

    Raises:
      TypeError / ValueError: the namespace is not a string / is empty.
    """
    ns = _namespace(namespace, "dict_insertion_ordered")
    with _engine_ordered(bool(mode), namespace=ns):
        yield
