"""optree's type predicates and typing names: namedtuple and struct-sequence tests, their field
names, the ``CustomTreeNode`` protocol and the ``PyTreeSpec`` alias of spruce's ``PyTreeDef``.

Semantics as ``optree.typing`` defines them: a namedtuple class is a ``tuple`` subclass with a
``_fields`` tuple of strings (made by ``collections.namedtuple`` or ``typing.NamedTuple``); a
struct sequence is a C-level named tuple (``time.struct_time``, ``os.stat_result``): a tuple
subclass that cannot be subclassed and has ``n_fields``, ``n_sequence_fields`` and
``n_unnamed_fields``.  The ``*_class`` functions take a class, the ``*_instance`` ones an
object, and the plain ones either.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any, Protocol, TypeVar, runtime_checkable

from .._tree._expand import structseq_fields as _engine_structseq_fields
from .._tree._kindenum import PyTreeKind
from .._tree._registry import is_namedtuple_type, is_structseq_type
from .._tree._treedef import PyTreeDef
from ..typing import PyTree

__all__ = [
    "PyTreeSpec",
    "PyTreeDef",
    "PyTreeKind",
    "PyTree",
    "PyTreeTypeVar",
    "CustomTreeNode",
    "FlattenFunc",
    "UnflattenFunc",
    "is_namedtuple",
    "is_namedtuple_class",
    "is_namedtuple_instance",
    "namedtuple_fields",
    "is_structseq",
    "is_structseq_class",
    "is_structseq_instance",
    "structseq_fields",
]

T = TypeVar("T")

PyTreeSpec = PyTreeDef
"""optree's name of a tree structure: spruce's ``PyTreeDef`` (one class, two names)."""

FlattenFunc = Callable[[Any], tuple[Iterable[Any], Hashable] | tuple[Iterable[Any], Hashable, Iterable[Any] | None]]
"""optree's flatten function: ``node -> (children, metadata)`` or ``(children, metadata, entries)``."""

UnflattenFunc = Callable[[Any, Iterable[Any]], Any]
"""optree's unflatten function: ``(metadata, children) -> node``."""


@runtime_checkable
class CustomTreeNode(Protocol[T]):
    """A class that flattens itself, as ``register_pytree_node_class`` expects:
    ``tree_flatten()`` returns ``(children, metadata)`` or ``(children, metadata, entries)``,
    and the class method ``tree_unflatten(metadata, children)`` rebuilds the node."""

    def tree_flatten(self) -> tuple[Iterable[T], Hashable] | tuple[Iterable[T], Hashable, Iterable[Any] | None]: ...

    @classmethod
    def tree_unflatten(cls, metadata: Hashable, children: Iterable[T]) -> CustomTreeNode[T]: ...


def PyTreeTypeVar(name: str, param: Any) -> Any:
    """optree's ``PyTreeTypeVar(name, T)``: the type of a tree whose leaves are ``T``, here
    ``spruce.typing.PyTree[T]`` (``name`` must be a string; it names nothing at run time).

    Raises:
      TypeError: ``name`` is not a string.

    >>> from spruce.optree import PyTreeTypeVar
    >>> PyTreeTypeVar("Tensors", int) == PyTree[int]
    True
    """
    if not isinstance(name, str):
        raise TypeError(f"PyTreeTypeVar's name must be a string, got {name!r}")
    alias: Any = PyTree
    return alias[param]


def is_namedtuple_class(cls: object, /) -> bool:
    """True if ``cls`` is a namedtuple class (``collections.namedtuple``, ``typing.NamedTuple``).

    >>> from collections import namedtuple
    >>> is_namedtuple_class(namedtuple("P", "x y")), is_namedtuple_class(tuple)
    (True, False)
    """
    return isinstance(cls, type) and is_namedtuple_type(cls)


def is_namedtuple_instance(obj: object, /) -> bool:
    """True if ``obj`` is an instance of a namedtuple class."""
    return is_namedtuple_type(type(obj))


def is_namedtuple(obj: object, /) -> bool:
    """True if ``obj`` is a namedtuple class or an instance of one."""
    return is_namedtuple_class(obj) or is_namedtuple_instance(obj)


def namedtuple_fields(obj: Any, /) -> tuple[str, ...]:
    """The field names of a namedtuple class or instance.

    Raises:
      TypeError: ``obj`` is neither.

    >>> from collections import namedtuple
    >>> namedtuple_fields(namedtuple("P", "x y")(1, 2))
    ('x', 'y')
    """
    if isinstance(obj, type):
        if not is_namedtuple_type(obj):
            raise TypeError(f"expected a namedtuple class, got {obj!r}")
        return tuple(obj._fields)  # type: ignore[attr-defined]
    if not is_namedtuple_type(type(obj)):
        raise TypeError(f"expected a namedtuple instance, got {obj!r}")
    return tuple(obj._fields)


def is_structseq_class(cls: object, /) -> bool:
    """True if ``cls`` is a struct sequence class (``time.struct_time``, ``os.stat_result``).

    >>> import time
    >>> is_structseq_class(time.struct_time), is_structseq_class(tuple)
    (True, False)
    """
    return isinstance(cls, type) and is_structseq_type(cls)


def is_structseq_instance(obj: object, /) -> bool:
    """True if ``obj`` is an instance of a struct sequence class."""
    return is_structseq_type(type(obj))


def is_structseq(obj: object, /) -> bool:
    """True if ``obj`` is a struct sequence class or an instance of one."""
    return is_structseq_class(obj) or is_structseq_instance(obj)


def structseq_fields(obj: Any, /) -> tuple[str, ...]:
    """The names of the sequence fields of a struct sequence class or instance (the fields that
    are its items; an unnamed field is named ``'unnamed field'``, as CPython does).

    Raises:
      TypeError: ``obj`` is neither.

    >>> import time
    >>> structseq_fields(time.gmtime(0))[:3]
    ('tm_year', 'tm_mon', 'tm_mday')
    """
    cls = obj if isinstance(obj, type) else type(obj)
    if not is_structseq_type(cls):
        what = "class" if isinstance(obj, type) else "instance"
        raise TypeError(f"expected a struct sequence {what}, got {obj!r}")
    n = int(cls.n_sequence_fields)  # type: ignore[attr-defined]
    named = _engine_structseq_fields(cls)[:n]  # the named ones come first (os.stat_result's ints last)
    return tuple(named) + ("unnamed field",) * (n - len(named))
