"""optree's path entries and accessors: how to reach a leaf from the root of a tree.

A *path entry* (``PyTreeEntry`` and its subclasses) is one step down: the entry of a child in
its parent (an index, a key, a field name, a flat position), the parent's type and kind, and
how to take that step (``entry(parent) -> child``) or spell it as code (``entry.codify()``).
A *path accessor* (``PyTreeAccessor``) is a tuple of entries, root first: calling it on the tree
returns the leaf; ``codify()`` spells the whole path (``*['a'][0].x``).

The classes, their equality, representations and code spelling follow optree 0.20.0's
``optree.accessors``; the walkers at the end of this module (``tree_accessors``,
``tree_paths``, ``treespec_accessors``, ...) compute optree's accessors and paths from spruce's
structures.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Self, SupportsIndex, TypeVar, overload

from .._tree._kindenum import PyTreeKind

if TYPE_CHECKING:
    import builtins

    from .._tree._treedef import PyTreeDef

__all__ = [
    "PyTreeEntry",
    "GetItemEntry",
    "GetAttrEntry",
    "FlattenedEntry",
    "AutoEntry",
    "SequenceEntry",
    "MappingEntry",
    "NamedTupleEntry",
    "StructSequenceEntry",
    "DataclassEntry",
    "PyTreeAccessor",
    "tree_accessors",
    "tree_flatten_with_accessor",
    "tree_paths",
    "tree_flatten_with_path",
    "treespec_accessors",
    "treespec_paths",
]

# The class attribute ``spruce.optree.dataclasses.register_node`` sets on a registered
# dataclass: ``(children_field_names, metadata_field_names)``.
DATACLASS_FIELDS_ATTR = "__spruce_optree_fields__"

_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)
_KT_co = TypeVar("_KT_co", covariant=True)
_VT_co = TypeVar("_VT_co", covariant=True)

# The name CPython gives an unnamed field of a struct sequence.
_UNNAMED_FIELD = "unnamed field"


@dataclasses.dataclass(init=True, repr=False, eq=False, frozen=True, slots=True)
class PyTreeEntry:
    """One step from a node to one of its children, as ``optree.PyTreeEntry``.

    Fields: ``entry`` (the child's entry in its parent, as the parent's ``entries()`` give
    it), ``type`` (the parent's class) and ``kind`` (the parent's ``PyTreeKind``).  Frozen and
    hashable.  Calling the entry on a parent returns the child (``parent[entry]`` here;
    subclasses take the step their own way); ``codify(node)`` spells the step as code.

    Two entries are equal if their entry, type and kind are, and their classes take and spell
    the step with the same methods (so a ``FlattenedEntry`` equals a plain ``PyTreeEntry`` with
    the same fields, but never a ``SequenceEntry``), as in optree.

    Raises:
      ValueError: on creation, if ``kind`` is ``LEAF`` or ``NONE`` (those nodes have no
        children).

    >>> e = PyTreeEntry(1, list, PyTreeKind.LIST)
    >>> e([10, 20]), e.codify('x')
    (20, 'x[<flat index 1>]')
    """

    entry: Any
    type: builtins.type
    kind: PyTreeKind

    def __post_init__(self) -> None:
        if self.kind == PyTreeKind.LEAF:
            raise ValueError("a path entry needs a node with children: the kind cannot be PyTreeKind.LEAF")
        if self.kind == PyTreeKind.NONE:
            raise ValueError("a path entry needs a node with children: None has none (kind PyTreeKind.NONE)")

    def __call__(self, obj: Any, /) -> Any:
        """The child of ``obj`` at this entry (``obj[entry]``).

        Raises:
          TypeError: ``obj`` cannot be indexed by the entry.
        """
        try:
            return obj[self.entry]
        except TypeError as ex:
            raise TypeError(
                f"{type(self).__name__}: cannot take entry {self.entry!r} of {obj!r} (of type {type(obj).__name__})"
            ) from ex

    def __add__(self, other: object, /) -> PyTreeAccessor:
        """``entry + entry`` or ``entry + accessor``: the accessor of the joined path."""
        if isinstance(other, PyTreeEntry):
            return PyTreeAccessor((self, other))
        if isinstance(other, PyTreeAccessor):
            return PyTreeAccessor((self, *other))
        return NotImplemented

    def _identity(self) -> tuple[Any, ...]:
        cls = type(self)
        return (self.entry, self.type, self.kind, cls.__call__, cls.codify)

    def __eq__(self, other: object, /) -> bool:
        """Equal entry, type and kind, and the same way of taking and spelling the step."""
        return isinstance(other, PyTreeEntry) and self._identity() == other._identity()

    def __hash__(self) -> int:
        """A hash consistent with ``__eq__``."""
        return hash(self._identity())

    def __repr__(self) -> str:
        """``ClassName(entry=..., type=...)``, as optree prints it."""
        return f"{type(self).__name__}(entry={self.entry!r}, type={self.type!r})"

    def codify(self, /, node: str = "") -> str:
        """The step as code after ``node`` (here the flat position, which is not Python)."""
        return f"{node}[<flat index {self.entry!r}>]"


def _auto_entry_class(cls: builtins.type) -> builtins.type[PyTreeEntry]:
    """The entry class ``AutoEntry`` picks for the children of a custom node of class ``cls``."""
    from ._types import is_namedtuple_class, is_structseq_class

    if is_structseq_class(cls):
        return StructSequenceEntry
    if is_namedtuple_class(cls):
        return NamedTupleEntry
    if dataclasses.is_dataclass(cls):
        return DataclassEntry
    if issubclass(cls, Mapping):
        return MappingEntry
    if issubclass(cls, Sequence):
        return SequenceEntry
    return FlattenedEntry


class AutoEntry(PyTreeEntry):
    """The default entry class of a registered custom node, as ``optree.AutoEntry``: creating
    ``AutoEntry(entry, type, PyTreeKind.CUSTOM)`` returns an entry of the class the node's type
    calls for: ``StructSequenceEntry`` for a struct sequence, ``NamedTupleEntry`` for a
    namedtuple, ``DataclassEntry`` for a dataclass, ``MappingEntry`` for a ``Mapping``,
    ``SequenceEntry`` for a ``Sequence``, else ``FlattenedEntry``.  A subclass of ``AutoEntry``
    is created as itself.

    Raises:
      ValueError: ``AutoEntry`` itself with a kind other than ``CUSTOM``.

    >>> class Box:
    ...     pass
    >>> AutoEntry(0, Box, PyTreeKind.CUSTOM).__class__.__name__
    'FlattenedEntry'
    >>> AutoEntry('k', dict, PyTreeKind.CUSTOM)
    MappingEntry(key='k', type=<class 'dict'>)
    """

    __slots__ = ()

    def __new__(cls, entry: Any, type: builtins.type, kind: PyTreeKind) -> Any:
        if cls is not AutoEntry:
            return super().__new__(cls)
        if kind != PyTreeKind.CUSTOM:
            raise ValueError(f"AutoEntry picks an entry class only for custom nodes (PyTreeKind.CUSTOM), got {kind!r}")
        # an instance of another class: Python will not run __init__ on it, so build it whole
        return _auto_entry_class(type)(entry, type, kind)


class GetItemEntry(PyTreeEntry):
    """An entry whose step is ``parent[entry]``, spelled ``node[entry]`` (``optree.GetItemEntry``).

    >>> GetItemEntry('a', dict, PyTreeKind.CUSTOM).codify('x')
    "x['a']"
    """

    __slots__ = ()

    def __call__(self, obj: Any, /) -> Any:
        """``obj[entry]`` (errors as indexing raises them)."""
        return obj[self.entry]

    def codify(self, /, node: str = "") -> str:
        """``node[entry]``."""
        return f"{node}[{self.entry!r}]"


class GetAttrEntry(PyTreeEntry):
    """An entry whose step is reading an attribute (``optree.GetAttrEntry``); a dotted name
    (``'a.b'``) reads ``a`` then ``b``.  Spelled ``node.a.b``, or ``getattr(node, 'name')`` for a
    name that is not an identifier.

    >>> GetAttrEntry('real.imag', complex, PyTreeKind.CUSTOM).codify('z')
    'z.real.imag'
    >>> GetAttrEntry('real.imag', complex, PyTreeKind.CUSTOM)(3 + 4j)
    0.0
    """

    __slots__ = ()

    @property
    def name(self) -> str:
        """The attribute name (possibly dotted)."""
        return str(self.entry)

    def __call__(self, obj: Any, /) -> Any:
        """The attribute(s) of ``obj`` (AttributeError as ``getattr`` raises it)."""
        for part in self.name.split("."):
            obj = getattr(obj, part)
        return obj

    def codify(self, /, node: str = "") -> str:
        """``node.name`` per dotted part, ``getattr(node, 'part')`` for a non-identifier part."""
        for part in self.name.split("."):
            node = f"{node}.{part}" if part.isidentifier() else f"getattr({node}, {part!r})"
        return node


class FlattenedEntry(PyTreeEntry):
    """The entry of a child of a custom node that has no better way to be reached: its position
    among the node's flattened children (``optree.FlattenedEntry``).  Taking the step is
    ``parent[entry]``, which works only if the node supports it."""

    __slots__ = ()


class SequenceEntry(GetItemEntry, Generic[_T_co]):
    """The entry of an item of a sequence (tuple, list, deque, or a custom ``Sequence``):
    ``entry`` is the index (``optree.SequenceEntry``).

    >>> SequenceEntry(1, tuple, PyTreeKind.TUPLE)
    SequenceEntry(index=1, type=<class 'tuple'>)
    """

    __slots__ = ()

    @property
    def index(self) -> int:
        """The item's index."""
        index: int = self.entry
        return index

    def __call__(self, obj: Any, /) -> Any:
        """``obj[index]``."""
        return obj[self.index]

    def __repr__(self) -> str:
        """``SequenceEntry(index=..., type=...)``."""
        return f"{type(self).__name__}(index={self.index!r}, type={self.type!r})"


class MappingEntry(GetItemEntry, Generic[_KT_co, _VT_co]):
    """The entry of a value of a mapping (dict, OrderedDict, defaultdict, or a custom
    ``Mapping``): ``entry`` is the key (``optree.MappingEntry``).

    >>> MappingEntry('a', dict, PyTreeKind.DICT)({'a': 1}), MappingEntry('a', dict, PyTreeKind.DICT).codify('d')
    (1, "d['a']")
    """

    __slots__ = ()

    @property
    def key(self) -> Any:
        """The value's key."""
        return self.entry

    def __call__(self, obj: Any, /) -> Any:
        """``obj[key]``."""
        return obj[self.key]

    def __repr__(self) -> str:
        """``MappingEntry(key=..., type=...)``."""
        return f"{type(self).__name__}(key={self.key!r}, type={self.type!r})"


class NamedTupleEntry(SequenceEntry[_T]):
    """The entry of a field of a namedtuple: ``entry`` is the index, ``field`` its name, and
    the step is spelled ``node.field`` (``optree.NamedTupleEntry``).

    >>> from collections import namedtuple
    >>> P = namedtuple('P', 'x y')
    >>> e = NamedTupleEntry(1, P, PyTreeKind.NAMEDTUPLE)
    >>> e.field, e(P(1, 2)), e.codify('p')
    ('y', 2, 'p.y')
    """

    __slots__ = ()

    @property
    def fields(self) -> tuple[str, ...]:
        """The namedtuple's field names."""
        from ._types import namedtuple_fields

        return namedtuple_fields(self.type)

    @property
    def field(self) -> str:
        """The name of this entry's field."""
        return self.fields[self.index]

    def __repr__(self) -> str:
        """``NamedTupleEntry(field=..., type=...)``."""
        return f"{type(self).__name__}(field={self.field!r}, type={self.type!r})"

    def codify(self, /, node: str = "") -> str:
        """``node.field``."""
        return f"{node}.{self.field}"


class StructSequenceEntry(SequenceEntry[_T]):
    """The entry of a field of a struct sequence (``time.struct_time``, ``os.stat_result``):
    ``entry`` is the index, ``field`` its name, spelled ``node.field``; an unnamed field is
    spelled and shown by its index (``optree.StructSequenceEntry``).

    >>> import time
    >>> e = StructSequenceEntry(0, time.struct_time, PyTreeKind.STRUCTSEQUENCE)
    >>> e, e.codify('t')
    (StructSequenceEntry(field='tm_year', type=<class 'time.struct_time'>), 't.tm_year')
    """

    __slots__ = ()

    @property
    def fields(self) -> tuple[str, ...]:
        """The names of the struct sequence's items (``'unnamed field'`` for an unnamed one)."""
        from ._types import structseq_fields

        return structseq_fields(self.type)

    @property
    def field(self) -> str:
        """The name of this entry's field."""
        return self.fields[self.index]

    @property
    def is_unnamed(self) -> bool:
        """True if this entry's field has no name (reachable only by index)."""
        return self.field == _UNNAMED_FIELD

    def __repr__(self) -> str:
        """``StructSequenceEntry(field=..., type=...)``, or ``(entry=..., ...)`` if unnamed."""
        if self.is_unnamed:
            return f"{type(self).__name__}(entry={self.entry!r}, type={self.type!r})"
        return f"{type(self).__name__}(field={self.field!r}, type={self.type!r})"

    def codify(self, /, node: str = "") -> str:
        """``node.field``, or ``node[index]`` for an unnamed field."""
        if self.is_unnamed:
            return f"{node}[{self.entry!r}]"
        return f"{node}.{self.field}"


class DataclassEntry(GetAttrEntry):
    """The entry of a field of a dataclass (``optree.DataclassEntry``): ``entry`` is the field's
    name, or its position among the node's children.  A position is resolved through the
    children fields ``spruce.optree.dataclasses.register_node`` recorded on the class, else the
    dataclass's declared field order.  Spelled ``node.field``.

    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class P:
    ...     x: int
    ...     y: int
    >>> e = DataclassEntry(1, P, PyTreeKind.CUSTOM)
    >>> e.field, e(P(1, 2)), e.codify('p')
    ('y', 2, 'p.y')
    """

    __slots__ = ()

    @property
    def fields(self) -> tuple[str, ...]:
        """All the dataclass's field names, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(self.type))

    @property
    def init_fields(self) -> tuple[str, ...]:
        """The names of the fields ``__init__`` takes."""
        return tuple(f.name for f in dataclasses.fields(self.type) if f.init)

    @property
    def children_fields(self) -> tuple[str, ...]:
        """The field names an integer entry indexes: those recorded at registration by
        ``spruce.optree.dataclasses.register_node`` on this very class (a subclass inherits the
        attribute but not the registration), else all fields in declaration order."""
        recorded = self.type.__dict__.get(DATACLASS_FIELDS_ATTR)
        if recorded is None:
            return self.fields
        return tuple(recorded[0])

    @property
    def field(self) -> str:
        """The name of this entry's field."""
        if isinstance(self.entry, int):
            return self.children_fields[self.entry]
        return str(self.entry)

    @property
    def name(self) -> str:
        """The attribute read (the field's name)."""
        return self.field

    def __repr__(self) -> str:
        """``DataclassEntry(field=..., type=...)``."""
        return f"{type(self).__name__}(field={self.field!r}, type={self.type!r})"


class PyTreeAccessor(tuple[PyTreeEntry, ...]):
    """A path from a tree's root to one of its subtrees: a tuple of ``PyTreeEntry``, root
    first (``optree.PyTreeAccessor``).  Calling it on the tree takes each step in turn;
    ``path`` is the tuple of the raw entries; slicing gives an accessor; ``+`` joins it with an
    entry or an accessor, ``*`` repeats it; it equals only other accessors with equal entries.

    Raises:
      TypeError: on creation, if an item is not a ``PyTreeEntry``.

    >>> a = PyTreeAccessor([MappingEntry('a', dict, PyTreeKind.DICT), SequenceEntry(1, list, PyTreeKind.LIST)])
    >>> a({'a': [10, 20]}), a.path, a.codify('tree')
    (20, ('a', 1), "tree['a'][1]")
    >>> a
    PyTreeAccessor(*['a'][1], (MappingEntry(key='a', type=<class 'dict'>), SequenceEntry(index=1, type=<class 'list'>)))
    """

    __slots__ = ()

    def __new__(cls, /, path: Iterable[PyTreeEntry] = ()) -> Self:
        entries = path if isinstance(path, (list, tuple)) else tuple(path)
        for e in entries:
            if not isinstance(e, PyTreeEntry):
                raise TypeError(
                    f"PyTreeAccessor: every item must be a PyTreeEntry, got {e!r} (of type {type(e).__name__}) in {entries!r}"
                )
        return super().__new__(cls, entries)

    @property
    def path(self) -> tuple[Any, ...]:
        """The raw entries of the steps, root first (optree's path of the subtree)."""
        return tuple(e.entry for e in self)

    def __call__(self, obj: Any, /) -> Any:
        """The subtree of ``obj`` this accessor leads to (errors as the steps raise them)."""
        for entry in self:
            obj = entry(obj)
        return obj

    @overload
    def __getitem__(self, index: SupportsIndex, /) -> PyTreeEntry: ...

    @overload
    def __getitem__(self, index: slice, /) -> Self: ...

    def __getitem__(self, index: SupportsIndex | slice, /) -> PyTreeEntry | Self:
        """One entry, or an accessor for a slice of the steps."""
        if isinstance(index, slice):
            return type(self)(super().__getitem__(index))
        return super().__getitem__(index)

    def __add__(self, other: object, /) -> Self:
        """``accessor + entry`` or ``accessor + accessor``: the joined path."""
        if isinstance(other, PyTreeEntry):
            return type(self)((*self, other))
        if isinstance(other, PyTreeAccessor):
            return type(self)((*self, *other))
        return NotImplemented

    def __mul__(self, value: SupportsIndex, /) -> Self:
        """The path repeated ``value`` times."""
        return type(self)(super().__mul__(value))

    def __rmul__(self, value: SupportsIndex, /) -> Self:
        """The path repeated ``value`` times."""
        return type(self)(super().__rmul__(value))

    def __eq__(self, other: object, /) -> bool:
        """Equal to another accessor with equal entries (never to a plain tuple)."""
        return isinstance(other, PyTreeAccessor) and tuple.__eq__(self, other)

    def __ne__(self, other: object, /) -> bool:
        """The negation of ``==``."""
        return not self == other

    def __hash__(self) -> int:
        """The tuple's hash."""
        return tuple.__hash__(self)

    def __repr__(self) -> str:
        """``PyTreeAccessor(<code>, (<entries>))``, as optree prints it."""
        return f"{type(self).__name__}({self.codify()}, {tuple.__repr__(self)})"

    def codify(self, /, root: str = "*") -> str:
        """The path as code, starting from ``root``."""
        code = root
        for entry in self:
            code = entry.codify(code)
        return code


# -- optree's paths and accessors of a structure ---------------------------------------------

_SEQUENCE_KINDS = frozenset({PyTreeKind.TUPLE, PyTreeKind.LIST, PyTreeKind.DEQUE})
_MAPPING_KINDS = frozenset({PyTreeKind.DICT, PyTreeKind.ORDEREDDICT, PyTreeKind.DEFAULTDICT})


def _entry_class(kind: PyTreeKind, cls: builtins.type, namespace: str) -> builtins.type[PyTreeEntry]:
    """The entry class of the children of a node of ``kind`` and class ``cls``, as optree picks
    it: by kind for the built-in ones, the registered ``path_entry_type`` for a custom class
    (``AutoEntry`` resolved here, once per node, to the class it would create)."""
    if kind in _SEQUENCE_KINDS:
        return SequenceEntry
    if kind in _MAPPING_KINDS:
        return MappingEntry
    if kind == PyTreeKind.NAMEDTUPLE:
        return NamedTupleEntry
    if kind == PyTreeKind.STRUCTSEQUENCE:
        return StructSequenceEntry
    chosen = path_entry_type_of(cls, namespace)
    return _auto_entry_class(cls) if chosen is AutoEntry else chosen


# (namespace, class) -> the path entry class given when the class was registered through
# ``spruce.optree.register_pytree_node`` ("" the global namespace); written by ``_registry``.
PATH_ENTRY_TYPES: dict[tuple[str, builtins.type], builtins.type[PyTreeEntry]] = {}


def path_entry_type_of(cls: builtins.type, namespace: str) -> builtins.type[PyTreeEntry]:
    """The path entry class of the children of a registered class ``cls`` in a walk in
    ``namespace``: the one given at its registration (there, else globally), else ``AutoEntry``."""
    chosen = PATH_ENTRY_TYPES.get((namespace, cls)) if namespace else None
    if chosen is None:
        chosen = PATH_ENTRY_TYPES.get(("", cls))
    return AutoEntry if chosen is None else chosen


def _walk(treespec: PyTreeDef, what: str, make: Callable[[PyTreeDef, PyTreeDef], list[Any]]) -> list[tuple[Any, ...]]:
    """The path of each leaf of ``treespec``, in leaf order, as a tuple of what ``make`` gives
    for the steps: ``make(treespec, node)`` returns one step per child of ``node`` (a one-node
    structure holding a node of ``treespec``).

    One pass over the structure's pre-order node table with a stack of the open nodes, so
    it takes time in proportion to the nodes plus the total length of the paths, at any depth.
    """
    from .._tree._kinds import LEAF, SHIFT
    from .._tree._treedef import PyTreeDef

    if not isinstance(treespec, PyTreeDef):
        raise TypeError(f"{what}: expected a PyTreeSpec (spruce PyTreeDef), got {treespec!r} (of type {type(treespec).__name__})")
    codes: list[int] = treespec._codes
    data: list[Any] = treespec._data
    none_is_leaf = treespec.none_is_leaf
    namespace = treespec.namespace
    out: list[tuple[Any, ...]] = []
    path: list[Any] = []  # the steps to the node being visited
    steps: list[list[Any]] = []  # per open node, the steps to its children ...
    nexts: list[int] = []  # ... and which child comes next
    di = 0
    for code in codes:
        while steps and nexts[-1] == len(steps[-1]):
            steps.pop()
            nexts.pop()
        depth = len(steps)
        if depth:
            del path[depth - 1 :]
            path.append(steps[-1][nexts[-1]])
            nexts[-1] += 1
        if code == LEAF:
            out.append(tuple(path))
            continue
        d = data[di]
        di += 1
        if code >> SHIFT:
            steps.append(make(treespec, PyTreeDef([code], [d], 0, none_is_leaf, namespace)))
            nexts.append(0)
    return out


def _accessor_steps(treespec: PyTreeDef, node: PyTreeDef) -> list[PyTreeEntry]:
    kind = node.kind
    cls = node.type
    entry_class = _entry_class(kind, cls, treespec.namespace)
    return [entry_class(e, cls, kind) for e in node.entries()]


def _path_steps(treespec: PyTreeDef, node: PyTreeDef) -> list[Any]:
    return node.entries()


def treespec_accessors(treespec: PyTreeDef, /) -> list[PyTreeAccessor]:
    """The accessor of each leaf of ``treespec``, in leaf order, as optree's
    ``PyTreeSpec.accessors()``: each step's entry class is chosen by the node's kind
    (``SequenceEntry`` for tuples, lists and deques, ``MappingEntry`` for the dicts,
    ``NamedTupleEntry``, ``StructSequenceEntry``) or, for a custom class, the
    ``path_entry_type`` it was registered with (``AutoEntry`` by default).  Any depth.

    Raises:
      TypeError: ``treespec`` is not a structure.

    >>> from spruce.tree import structure
    >>> accessor = treespec_accessors(structure({'a': [1, (2,)]}))[1]
    >>> accessor.codify(), [type(e).__name__ for e in accessor]
    ("*['a'][1][0]", ['MappingEntry', 'SequenceEntry', 'SequenceEntry'])
    """
    return [PyTreeAccessor(p) for p in _walk(treespec, "treespec_accessors", _accessor_steps)]


def treespec_paths(treespec: PyTreeDef, /) -> list[tuple[Any, ...]]:
    """The path of each leaf of ``treespec``, in leaf order, as optree's
    ``PyTreeSpec.paths()``: a tuple of the raw entries (indices for sequences, namedtuples and
    struct sequences, keys for dicts, a custom node's entries).  These are optree's paths, not
    the key paths of ``PyTreeDef.paths()``.  Any depth.

    Raises:
      TypeError: ``treespec`` is not a structure.

    >>> from spruce.tree import structure
    >>> treespec_paths(structure({'b': [1, 2], 'a': None}))
    [('b', 0), ('b', 1)]
    """
    return _walk(treespec, "treespec_paths", _path_steps)


def tree_flatten_with_accessor(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[list[PyTreeAccessor], list[Any], PyTreeDef]:
    """``(accessors, leaves, treespec)`` of ``tree``, as ``optree.tree_flatten_with_accessor``:
    ``accessors[i](tree) is leaves[i]``.  ``is_leaf``, ``none_is_leaf`` and ``namespace`` as in
    ``spruce.tree.flatten`` ("" is the global namespace).

    >>> accessors, leaves, _ = tree_flatten_with_accessor({'x': [1, 2]})
    >>> [a.codify('t') for a in accessors], leaves
    (["t['x'][0]", "t['x'][1]"], [1, 2])
    """
    from .. import tree as _tree

    leaves, treespec = _tree.flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    return treespec_accessors(treespec), leaves, treespec


def tree_accessors(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> list[PyTreeAccessor]:
    """The accessor of each leaf of ``tree``, in leaf order (``optree.tree_accessors``); the
    arguments as ``tree_flatten_with_accessor``.

    >>> from collections import namedtuple
    >>> P = namedtuple('P', 'x y')
    >>> [a.codify() for a in tree_accessors([P(1, None), 2])]
    ['*[0].x', '*[1]']
    """
    return tree_flatten_with_accessor(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)[0]


def tree_flatten_with_path(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[list[tuple[Any, ...]], list[Any], PyTreeDef]:
    """``(paths, leaves, treespec)`` of ``tree``, as ``optree.tree_flatten_with_path``: each path
    a tuple of raw entries (see ``treespec_paths``); the arguments as
    ``tree_flatten_with_accessor``.

    >>> paths, leaves, _ = tree_flatten_with_path({'b': (1, [2]), 'a': 3})
    >>> paths, leaves
    ([('a',), ('b', 0), ('b', 1, 0)], [3, 1, 2])
    """
    from .. import tree as _tree

    leaves, treespec = _tree.flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    return treespec_paths(treespec), leaves, treespec


def tree_paths(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> list[tuple[Any, ...]]:
    """The path of each leaf of ``tree``, in leaf order (``optree.tree_paths``); the arguments
    as ``tree_flatten_with_accessor``.

    >>> tree_paths([1, {'k': None, 'j': 2}], none_is_leaf=True)
    [(0,), (1, 'j'), (1, 'k')]
    """
    return tree_flatten_with_path(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)[0]
