"""optree's ``optree.dataclasses``: dataclasses that are pytree nodes in a registration namespace.

``field``, ``dataclass`` and ``make_dataclass`` are the standard library's, plus a
``pytree_node=`` flag on fields and a required ``namespace=`` on classes; ``register_node`` makes
an existing dataclass a node.  Every other name of the standard ``dataclasses`` module is
re-exported unchanged.  Semantics are optree 0.20.0's:

- a field whose ``metadata['pytree_node']`` is true (the default) is a *child*: it must be an
  ``__init__`` argument; an ``__init__`` field marked ``pytree_node=False`` is *metadata* (part
  of the structure, compared and hashed with it); a non-init field is neither (``__init__`` /
  ``__post_init__`` recompute it);
- flattening gives the children in field order; their entries (``spec.entries()``, paths) are
  the field names, their accessors ``DataclassEntry``; the node data is the tuple of
  ``(name, value)`` pairs of the metadata fields;
- unflattening calls ``cls(**children, **metadata)``: ``__init__`` and ``__post_init__`` run
  again (a ``__post_init__`` that changes a field's value does not round-trip);
- a class is registered once through this module (the class attribute
  ``__spruce_optree_fields__ = (children field names, metadata field names)`` marks it; to make
  it a node in a second namespace, use ``spruce.optree.register_pytree_node`` with your own
  functions).

The registration is ``spruce.optree.register_pytree_node``'s, so ``spruce.tree`` walks in the same
namespace see the class too.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import (
    KW_ONLY as KW_ONLY,
)
from dataclasses import (
    MISSING as MISSING,
)
from dataclasses import (
    Field as Field,
)
from dataclasses import (
    FrozenInstanceError as FrozenInstanceError,
)
from dataclasses import (
    InitVar as InitVar,
)
from dataclasses import (
    asdict as asdict,
)
from dataclasses import (
    astuple as astuple,
)
from dataclasses import (
    fields as fields,
)
from dataclasses import (
    is_dataclass as is_dataclass,
)
from dataclasses import (
    replace as replace,
)
from typing import Any, TypeVar, dataclass_transform, overload

from ._accessors import DATACLASS_FIELDS_ATTR, DataclassEntry

# optree's order: its two names, then the standard module's __all__ (the same on 3.11 to 3.14).
__all__ = [
    "DataclassEntry",
    "register_node",
    "dataclass",
    "field",
    "Field",
    "FrozenInstanceError",
    "InitVar",
    "KW_ONLY",
    "MISSING",
    "fields",
    "asdict",
    "astuple",
    "make_dataclass",
    "replace",
    "is_dataclass",
]

_T = TypeVar("_T")
_TypeT = TypeVar("_TypeT", bound=type)

_MODULE = "spruce.optree.dataclasses"


def _unsupported(function: str, name: str) -> TypeError:
    """The error of an argument this Python's dataclasses does not have (as Python words it)."""
    return TypeError(f"{function}() got an unexpected keyword argument {name!r}")


def _registration_namespace(namespace: object) -> str:
    """The namespace of a registration call: a string ("" is the global namespace)."""
    from ._registry import GLOBAL_NAMESPACE

    if namespace is not GLOBAL_NAMESPACE and not isinstance(namespace, str):
        raise TypeError(f"The namespace must be a string, got {namespace!r}")
    return GLOBAL_NAMESPACE if namespace == "" else str(namespace)


def field(
    *,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    init: bool = True,
    repr: bool = True,
    hash: bool | None = None,
    compare: bool = True,
    metadata: dict[Any, Any] | None = None,
    kw_only: Any = MISSING,
    doc: str | None = None,
    pytree_node: bool | None = None,
) -> Any:
    """``dataclasses.field`` with ``pytree_node``: whether the field is a child of the node
    (True) or metadata (False); None takes ``metadata.get('pytree_node', True)``.  The value is
    stored as ``metadata['pytree_node']`` (the given ``metadata`` is copied, not changed).
    optree's ``optree.dataclasses.field``; ``doc`` needs Python 3.14.

    Raises:
      TypeError: ``init=False`` with a field that would be a child (a child must be an
        ``__init__`` argument: pass ``pytree_node=False``); ``doc`` before Python 3.14.

    >>> field(default=0).metadata['pytree_node'], field(init=False, pytree_node=False).metadata['pytree_node']
    (True, False)
    """
    meta = dict(metadata or {})
    node = meta.get("pytree_node", True) if pytree_node is None else pytree_node
    meta["pytree_node"] = node
    if not init and node:
        raise TypeError(
            "`pytree_node=True` is not allowed for non-init fields: a child must be an __init__ argument. "
            f"Mark it `{_MODULE}.field(init=False, pytree_node=False)`."
        )
    kwargs: dict[str, Any] = {
        "default": default,
        "default_factory": default_factory,
        "init": init,
        "repr": repr,
        "hash": hash,
        "compare": compare,
        "metadata": meta,
        "kw_only": kw_only,
    }
    if sys.version_info >= (3, 14):
        kwargs["doc"] = doc
    elif doc is not None:
        raise _unsupported("field", "doc")
    return dataclasses.field(**kwargs)


@overload
def dataclass(
    *,
    init: bool = True,
    repr: bool = True,
    eq: bool = True,
    order: bool = False,
    unsafe_hash: bool = False,
    frozen: bool = False,
    match_args: bool = True,
    kw_only: bool = False,
    slots: bool = False,
    weakref_slot: bool = False,
    namespace: str,
) -> Callable[[_TypeT], _TypeT]: ...


@overload
def dataclass(
    cls: _TypeT,
    /,
    *,
    init: bool = True,
    repr: bool = True,
    eq: bool = True,
    order: bool = False,
    unsafe_hash: bool = False,
    frozen: bool = False,
    match_args: bool = True,
    kw_only: bool = False,
    slots: bool = False,
    weakref_slot: bool = False,
    namespace: str,
) -> _TypeT: ...


@dataclass_transform(field_specifiers=(field,))
def dataclass(
    cls: _TypeT | None = None,
    /,
    *,
    init: bool = True,
    repr: bool = True,
    eq: bool = True,
    order: bool = False,
    unsafe_hash: bool = False,
    frozen: bool = False,
    match_args: bool = True,
    kw_only: bool = False,
    slots: bool = False,
    weakref_slot: bool = False,
    namespace: str,
) -> _TypeT | Callable[[_TypeT], _TypeT]:
    """``dataclasses.dataclass`` that also registers the class as a pytree node in
    ``namespace`` ("" or ``GLOBAL_NAMESPACE``: the global one), as optree's
    ``optree.dataclasses.dataclass``; see the module docstring for children and metadata.
    ``@dataclass(namespace=...)`` decorates; ``dataclass(cls, namespace=...)`` returns ``cls``.

    Raises:
      TypeError: ``cls`` is not a class, or was made by this decorator already; the namespace is
        not a string; a child field is not an ``__init__`` argument (see ``register_node``).

    >>> import spruce.tree as st
    >>> @dataclass(namespace='doc-dataclass')
    ... class Point:
    ...     x: float
    ...     y: float
    ...     label: str = field(default='p', pytree_node=False)
    >>> st.flatten(Point(1.0, 2.0), namespace='doc-dataclass')[0], st.leaves(Point(1.0, 2.0))
    ([1.0, 2.0], [Point(x=1.0, y=2.0, label='p')])
    """
    options: dict[str, Any] = {
        "init": init,
        "repr": repr,
        "eq": eq,
        "order": order,
        "unsafe_hash": unsafe_hash,
        "frozen": frozen,
        "match_args": match_args,
        "kw_only": kw_only,
        "slots": slots,
        "weakref_slot": weakref_slot,
    }
    if cls is None:

        def decorate(cls: _TypeT) -> _TypeT:
            return dataclass(cls, namespace=namespace, **options)

        return decorate
    if not inspect.isclass(cls):
        raise TypeError(f"@{_MODULE}.dataclass() can only be used with classes, not {cls!r}")
    if DATACLASS_FIELDS_ATTR in cls.__dict__:
        raise TypeError(f"@{_MODULE}.dataclass() cannot be applied to {cls.__name__} more than once")
    ns = _registration_namespace(namespace)
    made: Any = dataclasses.dataclass(cls, **options)
    out: _TypeT = register_node(made, namespace=ns)
    return out


def make_dataclass(
    cls_name: str,
    fields: Iterable[str | tuple[str, Any] | tuple[str, Any, Any]],
    *,
    bases: tuple[type, ...] = (),
    ns: dict[str, Any] | None = None,
    init: bool = True,
    repr: bool = True,
    eq: bool = True,
    order: bool = False,
    unsafe_hash: bool = False,
    frozen: bool = False,
    match_args: bool = True,
    kw_only: bool = False,
    slots: bool = False,
    weakref_slot: bool = False,
    module: str | None = None,
    decorator: Any = dataclasses.dataclass,
    namespace: str,
) -> type:
    """``dataclasses.make_dataclass`` that registers the new class as a pytree node in
    ``namespace``, as optree's ``optree.dataclasses.make_dataclass``.  The standard library's
    ``namespace`` (the class body's dict) is called ``ns`` here; a call that passes that dict as
    ``namespace=`` and the registration namespace as ``ns=`` is understood too.  ``module``
    needs Python 3.12, ``decorator`` 3.14 (where this module's ``dataclass`` registers the
    class when ``decorator`` is either ``dataclass``).

    Raises:
      TypeError: no registration namespace, or one that is not a string; ``module`` /
        ``decorator`` on a Python without them; and as ``dataclass``.

    >>> import spruce.tree as st
    >>> Pair = make_dataclass('Pair', ['a', ('b', int, field(default=0, pytree_node=False))], namespace='doc-make')
    >>> st.leaves(Pair(1, 2), namespace='doc-make'), st.leaves(Pair(1, 2))
    ([1], [Pair(a=1, b=2)])
    """
    from ._registry import GLOBAL_NAMESPACE

    if isinstance(namespace, dict) or namespace is None:
        if ns is GLOBAL_NAMESPACE or isinstance(ns, str):  # the two swapped: take them as meant
            ns, namespace = namespace, ns
        elif ns is None:
            raise TypeError("make_dataclass() missing 1 required keyword-only argument: 'ns'")
    registration = _registration_namespace(namespace)
    options: dict[str, Any] = {
        "init": init,
        "repr": repr,
        "eq": eq,
        "order": order,
        "unsafe_hash": unsafe_hash,
        "frozen": frozen,
        "match_args": match_args,
        "kw_only": kw_only,
        "slots": slots,
        "weakref_slot": weakref_slot,
        "bases": bases,
        "namespace": ns,
    }
    if sys.version_info >= (3, 12):
        if module is None:  # the caller's module, as the standard library finds it
            module = sys._getframe(1).f_globals.get("__name__", "__main__")
        options["module"] = module
    elif module is not None:
        raise _unsupported("make_dataclass", "module")
    registered_already = False
    if sys.version_info >= (3, 14):
        if decorator is dataclasses.dataclass or decorator is dataclass:

            def registering(cls: type, /, **kw: Any) -> type:
                out: type = dataclass(cls, namespace=registration, **kw)
                return out

            decorator = registering
            registered_already = True
        options["decorator"] = decorator
    elif decorator is not dataclasses.dataclass:
        raise _unsupported("make_dataclass", "decorator")
    cls: type = dataclasses.make_dataclass(cls_name, fields, **options)
    return cls if registered_already else register_node(cls, namespace=registration)


def _init_vars(cls: type) -> list[str]:
    """The names of the ``InitVar`` pseudo-fields of dataclass ``cls``.  They are in the
    class's ``__dataclass_fields__`` (not in ``fields()``), tagged with the standard library's
    private ``_FIELD_INITVAR`` marker; relied on here, and tested."""
    marker = getattr(dataclasses, "_FIELD_INITVAR", None)
    table: dict[str, Any] = getattr(cls, "__dataclass_fields__", {})
    return [name for name, f in table.items() if getattr(f, "_field_type", None) is marker and marker is not None]


@overload
def register_node(cls: str | None = None, /, *, namespace: str | None = None) -> Callable[[_TypeT], _TypeT]: ...


@overload
def register_node(cls: _TypeT, /, *, namespace: str) -> _TypeT: ...


def register_node(cls: Any = None, /, *, namespace: str | None = None) -> Any:
    """Register an existing dataclass as a pytree node in ``namespace`` (optree's
    ``optree.dataclasses.register_node``): children and metadata fields as the module docstring
    says.  Call it as ``register_node(cls, namespace='ns')``, or decorate with
    ``@register_node(namespace='ns')`` / ``@register_node('ns')``; ``''`` (keyword) or
    ``GLOBAL_NAMESPACE`` registers globally.  A class made with ``init=False`` gets a
    UserWarning: unflattening calls ``cls(**fields)``.

    Returns:
      ``cls`` (sets ``cls.__spruce_optree_fields__``), or a decorator.

    Raises:
      ValueError: no namespace; a namespace given both ways, or an empty one given
        positionally; ``cls`` already registered in the namespace (nothing is left changed).
      TypeError: ``cls`` is not a class, not a dataclass, or already registered by this module;
        the namespace is not a string; a child field is not an ``__init__`` argument; the class
        has ``InitVar`` fields (``cls(**fields)`` could not rebuild it).

    >>> import dataclasses, spruce.tree as st
    >>> @register_node('doc-register')
    ... @dataclasses.dataclass
    ... class Box:
    ...     w: int
    ...     tag: str = dataclasses.field(default='b', metadata={'pytree_node': False})
    >>> spec = st.structure(Box(3), namespace='doc-register')
    >>> spec.entries(), Box.__spruce_optree_fields__
    (['w'], (('w',), ('tag',)))
    """
    from ._registry import GLOBAL_NAMESPACE

    if cls is GLOBAL_NAMESPACE or isinstance(cls, str):
        if namespace is not None:
            raise ValueError("Cannot specify `namespace` when the first argument is a string (the namespace)")
        if cls == "" and cls is not GLOBAL_NAMESPACE:
            raise ValueError("The namespace cannot be an empty string (pass namespace='' or GLOBAL_NAMESPACE for the global one)")
        cls, namespace = None, cls
    if namespace is None:
        raise ValueError("Must specify `namespace` when the first argument is a class")
    if cls is None:
        chosen = namespace

        def decorate(cls: _TypeT, /) -> _TypeT:
            out: _TypeT = register_node(cls, namespace=chosen)
            return out

        return decorate
    if not inspect.isclass(cls):
        raise TypeError(f"register_node: Expected a class, got {cls!r}")
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"register_node: {cls!r} is not a dataclass")
    if DATACLASS_FIELDS_ATTR in cls.__dict__:
        raise TypeError(
            f"Cannot register {cls.__name__} as a pytree node more than once with `{_MODULE}.register_node()`. "
            "Use `spruce.optree.register_pytree_node()` or `spruce.optree.register_pytree_node_class()` with "
            "explicit flatten/unflatten functions to register it in another namespace."
        )
    ns = _registration_namespace(namespace)
    params = getattr(cls, "__dataclass_params__", None)
    if params is not None and not params.init:
        warnings.warn(
            f"Dataclass {cls.__name__!r} was defined with `init=False`: unflattening may fail, since "
            f"`{_MODULE}.register_node()` rebuilds instances with `cls(**fields)`.",
            UserWarning,
            stacklevel=2,
        )
    init_vars = _init_vars(cls)
    if init_vars:
        raise TypeError(
            f"Dataclass {cls.__name__!r} has `InitVar` field(s) {init_vars!r}, which `cls(**fields)` cannot "
            "round-trip: register it with `spruce.optree.register_pytree_node()` or "
            "`spruce.optree.register_pytree_node_class()` and explicit flatten/unflatten functions."
        )
    children: list[str] = []
    meta: list[str] = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("pytree_node", True):
            if not f.init:
                raise TypeError(
                    f"PyTree node field {f.name!r} must be included in `__init__()`, or marked "
                    f"`{_MODULE}.field(init=False, pytree_node=False)`."
                )
            children.append(f.name)
        elif f.init:
            meta.append(f.name)
    children_names = tuple(children)
    meta_names = tuple(meta)
    node_type: type = cls

    def flatten(obj: Any, /) -> tuple[tuple[Any, ...], tuple[tuple[str, Any], ...], tuple[str, ...]]:
        return (
            tuple(getattr(obj, name) for name in children_names),
            tuple((name, getattr(obj, name)) for name in meta_names),
            children_names,
        )

    def unflatten(metadata: tuple[tuple[str, Any], ...], values: Iterable[Any], /) -> Any:
        kwargs = dict(zip(children_names, values))
        kwargs.update(metadata)
        return node_type(**kwargs)

    from ._registry import register_pytree_node, unregister_pytree_node

    register_pytree_node(cls, flatten, unflatten, path_entry_type=DataclassEntry, namespace=ns)
    # The marker goes on after the registration succeeded, and the registration is undone if
    # the class refuses it: either half alone would make the class impossible to register again.
    try:
        setattr(cls, DATACLASS_FIELDS_ATTR, (children_names, meta_names))
    except BaseException:
        unregister_pytree_node(cls, namespace=ns)
        raise
    return cls
