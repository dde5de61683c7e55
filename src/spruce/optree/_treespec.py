"""optree's ``treespec_*`` functions: questions about a structure (its entries, children, one
level, prefix order, ...) and constructors that build a structure from the structures of its
children (``treespec_tuple([a, b])`` is the structure of ``(x, y)`` when ``a`` and ``b`` are those
of ``x`` and ``y``).

Semantics are optree 0.20.0's (``optree.treespec_*``); the structures are spruce's ``PyTreeDef``
(optree's ``PyTreeSpec``).  A structure a constructor makes is equal to, and prints as, the one
``spruce.tree.structure`` gives for the corresponding tree with the same ``none_is_leaf`` and
``namespace``: the root node is made by flattening one level of a collection of child structures
in that walk (so its kind, key order and registration are what a walk would decide), and the
children's structures are put in its place.

Rules the constructors share (optree's):

- every child is a PyTreeDef made with the constructor's ``none_is_leaf`` (else ValueError);
- the children made in a namespace (not "") agree on it, and with ``namespace`` when that is not
  "" (else ValueError); the result records that namespace, or ``namespace`` when the root node
  needed it (a class registered there, a dict kept in insertion order), else "";
- a child made in the global namespace must not hold a registered class that the result's
  namespace registers otherwise (ValueError: it would unflatten differently).

Not here: ``treespec_paths`` / ``treespec_accessors`` (``spruce.optree._accessors``).  Where
optree raises AttributeError for an argument that is not a structure, these raise TypeError.
"""

from __future__ import annotations

import builtins
import operator
import warnings
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, SupportsIndex

from .._tree._kindenum import PyTreeKind
from .._tree._ops import flatten_one_level
from .._tree._registry import is_tree_node, registered
from .._tree._treedef import PyTreeDef, treedef_tuple
from ._types import is_namedtuple_instance, is_structseq_instance

__all__ = [
    "treespec_entries",
    "treespec_entry",
    "treespec_children",
    "treespec_child",
    "treespec_one_level",
    "treespec_transform",
    "treespec_is_leaf",
    "treespec_is_strict_leaf",
    "treespec_is_one_level",
    "treespec_is_prefix",
    "treespec_is_suffix",
    "treespec_leaf",
    "treespec_none",
    "treespec_tuple",
    "treespec_list",
    "treespec_dict",
    "treespec_namedtuple",
    "treespec_ordereddict",
    "treespec_defaultdict",
    "treespec_deque",
    "treespec_structseq",
    "treespec_frozendict",
    "treespec_from_collection",
]

Spec = PyTreeDef[Any]


def _spec(x: object, what: str) -> Spec:
    """``x`` if it is a structure, else TypeError naming the function."""
    if not isinstance(x, PyTreeDef):
        raise TypeError(f"{what}: expected a PyTreeSpec (a spruce PyTreeDef), got {type(x).__name__}: {x!r}")
    return x


def _namespace(namespace: object, what: str) -> str:
    """The namespace argument as spruce spells it ("" global; optree's sentinel is "" too)."""
    if not isinstance(namespace, str):
        raise TypeError(f"{what}: the namespace must be a string, got {namespace!r}")
    return str(namespace) if namespace else ""


# -- questions about a structure ------------------------------------------------------------


def treespec_entries(treespec: Spec, /) -> list[Any]:
    """The entries of the root's children (``treespec.entries()``, optree's
    ``treespec_entries``): a dict's keys in the structure's order, the field names of a dataclass
    node, the entries a registered flatten function gave, else the positions ``0..n-1``; ``[]``
    for a leaf.

    Raises:
      TypeError: ``treespec`` is not a structure.

    >>> from spruce.tree import structure
    >>> treespec_entries(structure({'b': 1, 'a': (2, 3)})), treespec_entries(structure([7, 8]))
    (['a', 'b'], [0, 1])
    """
    return _spec(treespec, "treespec_entries").entries()


def treespec_entry(treespec: Spec, index: SupportsIndex, /) -> Any:
    """The entry of the root's child number ``index`` (negative counts from the end), as
    optree's ``treespec_entry``.

    Raises:
      TypeError: ``treespec`` is not a structure, or ``index`` not an integer.
      IndexError: ``index`` is out of range.

    >>> from spruce.tree import structure
    >>> treespec_entry(structure({'b': 1, 'a': 2}), -1)
    'b'
    """
    return _spec(treespec, "treespec_entry").entry(operator.index(index))


def treespec_children(treespec: Spec, /) -> list[Spec]:
    """The structures of the root's children, in order (``[]`` for a leaf or an empty node), as
    optree's ``treespec_children``.

    Raises:
      TypeError: ``treespec`` is not a structure.

    >>> from spruce.tree import structure
    >>> treespec_children(structure({'b': 1, 'a': (2, None)}))
    [PyTreeDef((*, None)), PyTreeDef(*)]
    """
    return _spec(treespec, "treespec_children").children()


def treespec_child(treespec: Spec, index: SupportsIndex, /) -> Spec:
    """The structure of the root's child number ``index`` (negative counts from the end), as
    optree's ``treespec_child``.

    Raises:
      TypeError: ``treespec`` is not a structure, or ``index`` not an integer.
      IndexError: ``index`` is out of range.
    """
    return _spec(treespec, "treespec_child").child(operator.index(index))


def treespec_one_level(treespec: Spec, /) -> Spec | None:
    """The root node alone, each of its children a leaf (``{'a': *, 'b': *}`` for a dict of two
    subtrees), or None when the structure is a leaf; optree's ``treespec_one_level``.  The
    result keeps ``none_is_leaf`` and the namespace.

    Raises:
      TypeError: ``treespec`` is not a structure.

    >>> from spruce.tree import structure
    >>> treespec_one_level(structure({'b': [1, 2], 'a': (3, None)}))
    PyTreeDef({'a': *, 'b': *})
    >>> treespec_one_level(structure(1)) is None
    True
    """
    spec = _spec(treespec, "treespec_one_level")
    if spec.is_leaf():
        return None
    # ``transform`` hands each node's one-level structure to ``f_node``, children before their
    # parent: the last one it is given is the root's.
    seen: list[Spec] = []

    def keep(one: Spec) -> Spec:
        seen.append(one)
        return one

    spec.transform(keep, None)
    return seen[-1]


def treespec_transform(
    treespec: Spec,
    /,
    f_node: Callable[[Spec], Spec] | None = None,
    f_leaf: Callable[[Spec], Spec] | None = None,
) -> Spec:
    """A new structure: every node replaced by ``f_node(its one-level structure)`` (which must
    have one leaf per child: the children's results take their places) and every leaf by
    ``f_leaf(leaf structure)``; None keeps them.  optree's ``treespec_transform``
    (``treespec.transform``).

    Raises:
      TypeError: ``treespec`` is not a structure, or a function returned something else.
      ValueError: ``f_node`` returned a structure with a different number of leaves.

    >>> from spruce.tree import structure
    >>> spec = structure({'b': 1, 'a': (2, [3])})
    >>> treespec_transform(spec, lambda one: treespec_list([treespec_leaf()] * one.num_children))
    PyTreeDef([[*, [*]], *])
    """
    return _spec(treespec, "treespec_transform").transform(f_node, f_leaf)


def treespec_is_leaf(treespec: Spec, /, *, strict: bool = True) -> bool:
    """True if the structure is a single leaf ``*``; with ``strict=False`` also for a node
    without children (None, ``()``, ``{}``, ...).  optree's ``treespec_is_leaf``.

    Raises:
      TypeError: ``treespec`` is not a structure.

    >>> from spruce.tree import structure
    >>> treespec_is_leaf(structure(1)), treespec_is_leaf(structure(())), treespec_is_leaf(structure(()), strict=False)
    (True, False, True)
    """
    return _spec(treespec, "treespec_is_leaf").is_leaf(strict=bool(strict))


def treespec_is_strict_leaf(treespec: Spec, /) -> bool:
    """``treespec_is_leaf(treespec, strict=True)``: a single leaf (None is one only in a
    structure made with ``none_is_leaf=True``).  optree's ``treespec_is_strict_leaf``.

    Raises:
      TypeError: ``treespec`` is not a structure.
    """
    return _spec(treespec, "treespec_is_strict_leaf").is_leaf(strict=True)


def treespec_is_one_level(treespec: Spec, /) -> bool:
    """True if the structure is one node whose children are all leaves (a node without
    children counts; a leaf does not), as optree's ``treespec_is_one_level``.

    Raises:
      TypeError: ``treespec`` is not a structure.

    >>> from spruce.tree import structure
    >>> [treespec_is_one_level(structure(t)) for t in (1, None, [1, 2], [1, (2,)])]
    [False, True, True, False]
    """
    spec = _spec(treespec, "treespec_is_one_level")
    n = spec.num_children
    return spec.num_nodes == n + 1 and spec.num_leaves == n


def treespec_is_prefix(treespec: Spec, other_treespec: Spec, /, *, strict: bool = False) -> bool:
    """True if ``other_treespec`` is ``treespec`` with some leaves replaced by subtrees (with
    ``strict``, and is not equal to it), as optree's ``treespec_is_prefix``.  This order is a
    preorder: a tuple and a list are not comparable; two deques that differ only in ``maxlen``
    are each other's prefix but not equal.

    Raises:
      TypeError: either argument is not a structure.
      ValueError: the two were made in different namespaces.

    >>> from spruce.tree import structure
    >>> treespec_is_prefix(structure([1, 2]), structure([1, (2, 3)])), treespec_is_prefix(structure((1,)), structure([1]))
    (True, False)
    """
    return _spec(treespec, "treespec_is_prefix").is_prefix(_spec(other_treespec, "treespec_is_prefix"), strict=bool(strict))


def treespec_is_suffix(treespec: Spec, other_treespec: Spec, /, *, strict: bool = False) -> bool:
    """``treespec_is_prefix(other_treespec, treespec, strict=strict)``, as optree's
    ``treespec_is_suffix``.

    Raises:
      TypeError: either argument is not a structure.
      ValueError: the two were made in different namespaces.
    """
    return _spec(treespec, "treespec_is_suffix").is_suffix(_spec(other_treespec, "treespec_is_suffix"), strict=bool(strict))


# -- constructors ----------------------------------------------------------------------------


class _Hole:
    """A placeholder leaf: what the leaf constructors flatten."""

    __slots__ = ()


def treespec_leaf(*, none_is_leaf: bool = False, namespace: str = "") -> Spec:
    """The structure of a single leaf, ``PyTreeDef(*)``, as optree's ``treespec_leaf``.  A leaf
    needs no registration, so ``namespace`` is only type-checked and the result records "".

    Raises:
      TypeError: ``namespace`` is not a string.

    >>> treespec_leaf(), treespec_leaf(none_is_leaf=True)
    (PyTreeDef(*), PyTreeDef(*, none_is_leaf=True))
    """
    _namespace(namespace, "treespec_leaf")
    return flatten_one_level(_Hole(), none_is_leaf=bool(none_is_leaf))[1]


def treespec_none(*, none_is_leaf: bool = False, namespace: str = "") -> Spec:
    """The structure of None: ``PyTreeDef(None)``, a node without children, or a leaf when
    ``none_is_leaf`` (optree's ``treespec_none``).  ``namespace`` is only type-checked.

    Raises:
      TypeError: ``namespace`` is not a string.

    >>> treespec_none(), treespec_none(none_is_leaf=True) == treespec_leaf(none_is_leaf=True)
    (PyTreeDef(None), True)
    """
    _namespace(namespace, "treespec_none")
    return flatten_one_level(None, none_is_leaf=bool(none_is_leaf))[1]


def _kind_name(collection: object) -> str:
    t = type(collection)
    if t in (builtins.tuple, builtins.list, builtins.dict, OrderedDict, defaultdict, deque):
        return t.__name__
    return repr(t)


def _custom_types(spec: Spec) -> list[type]:
    """The classes of the registered-class nodes of ``spec`` (each one-level structure that
    ``transform`` gives is one node)."""
    found: list[type] = []

    def note(one: Spec) -> Spec:
        if one.kind == PyTreeKind.CUSTOM:
            found.append(one.type)
        return one

    spec.transform(note, None)
    return found


def _check_no_stale(root: Spec, children: list[Spec], target: str) -> None:
    """ValueError if a registered class resolved in the global namespace (the root node when
    flattened there, or a node of a child made there) is registered otherwise in ``target``,
    the namespace the new structure records (optree refuses such a structure)."""
    suspects: list[type] = []
    if not root.namespace and root.kind == PyTreeKind.CUSTOM:
        suspects.append(root.type)
    for child in children:
        if not child.namespace:
            suspects.extend(_custom_types(child))
    for t in suspects:
        if registered(t, target) is not None:
            raise ValueError(
                f"PyTreeSpecs cannot be composed into a collection: custom PyTree type {t!r} no longer resolves "
                f"to its original registration in namespace {target!r} (it was resolved in the global namespace, "
                f"and {target!r} registers it too)"
            )


def _make(collection: Any, none_is_leaf: bool, namespace: object, what: str, *, stacklevel: int) -> Spec:
    """The structure of ``collection`` whose children are structures (optree's
    ``make_from_collection``): the root node as a walk with ``none_is_leaf`` / ``namespace``
    sees it, with the children's structures in place of its children."""
    ns = _namespace(namespace, what)
    nil = bool(none_is_leaf)
    children, one = flatten_one_level(collection, none_is_leaf=nil, namespace=ns)
    if one.is_leaf():
        warnings.warn(
            f"{what}: the collection is a leaf (not a node in this walk), so the result is a leaf structure: {collection!r}",
            UserWarning,
            stacklevel=stacklevel + 1,
        )
        return one
    common = ""
    for i, child in enumerate(children):
        if not isinstance(child, PyTreeDef):
            raise ValueError(
                f"{what}: Expected a(n) {_kind_name(collection)} of PyTreeSpec(s), got {collection!r} "
                f"(child {i} is of type {type(child).__name__})"
            )
        if child.none_is_leaf != nil:
            raise ValueError(
                f"{what}: Expected treespec(s) with `none_is_leaf={nil}`, but child {i} was made with "
                f"none_is_leaf={child.none_is_leaf}: {child!r}"
            )
        if child.namespace:
            if common and child.namespace != common:
                raise ValueError(f"{what}: Expected treespecs with the same namespace, got {common!r} vs. {child.namespace!r}")
            common = child.namespace
    if common and ns and common != ns:
        raise ValueError(f"{what}: Expected treespec(s) with namespace {ns!r}, got {common!r}")
    pending = iter(children)
    out = one.transform(None, lambda _leaf: next(pending)) if children else one
    target = common or one.namespace
    if target:
        _check_no_stale(one, children, target)
        if out.namespace != target:
            # The root did not need the namespace, a child did: a tuple of the two records the
            # child's, and its first child is ``out`` recording it too.
            carrier = next(c for c in children if c.namespace == target)
            out = treedef_tuple([out, carrier]).children()[0]
    return out


def treespec_tuple(iterable: Iterable[Spec] = (), /, *, none_is_leaf: bool = False, namespace: str = "") -> Spec:
    """The structure of a tuple whose children have the given structures (optree's
    ``treespec_tuple``).  ``none_is_leaf`` and ``namespace`` are the walk's, as in
    ``spruce.tree.structure``; see the module docstring for the rules on the children.

    Raises:
      ValueError: an item is not a structure; the items disagree with ``none_is_leaf``, or on
        their namespace.
      TypeError: ``iterable`` is not iterable, ``namespace`` not a string.

    >>> treespec_tuple([treespec_leaf(), treespec_none(), treespec_list([treespec_leaf()])])
    PyTreeDef((*, None, [*]))
    """
    return _make(builtins.tuple(iterable), none_is_leaf, namespace, "treespec_tuple", stacklevel=2)


def treespec_list(iterable: Iterable[Spec] = (), /, *, none_is_leaf: bool = False, namespace: str = "") -> Spec:
    """The structure of a list whose children have the given structures (optree's
    ``treespec_list``; the rules of ``treespec_tuple``).

    Raises:
      ValueError / TypeError: as ``treespec_tuple``.

    >>> treespec_list([treespec_leaf(), treespec_tuple()])
    PyTreeDef([*, ()])
    """
    return _make(builtins.list(iterable), none_is_leaf, namespace, "treespec_list", stacklevel=2)


def treespec_dict(
    mapping: Mapping[Any, Spec] | Iterable[tuple[Any, Spec]] = (),
    /,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
    **kwargs: Spec,
) -> Spec:
    """The structure of a dict of the given key -> structure pairs (a mapping or pairs, and
    keyword arguments), as optree's ``treespec_dict``.  Keys are sorted as a walk sorts them
    (insertion order under ``dict_insertion_ordered`` for the walk's namespace).

    Raises:
      ValueError / TypeError: as ``treespec_tuple``; TypeError from ``dict()`` for bad pairs.

    >>> treespec_dict({'b': treespec_leaf(), 'a': treespec_none()}, c=treespec_leaf())
    PyTreeDef({'a': None, 'b': *, 'c': *})
    """
    return _make(builtins.dict(mapping, **kwargs), none_is_leaf, namespace, "treespec_dict", stacklevel=2)


def treespec_namedtuple(namedtuple: Any, /, *, none_is_leaf: bool = False, namespace: str = "") -> Spec:
    """The structure of a namedtuple of the class of ``namedtuple`` (an instance whose fields
    are structures), as optree's ``treespec_namedtuple``.

    Raises:
      ValueError: ``namedtuple`` is not a namedtuple instance; and as ``treespec_tuple``.

    >>> from collections import namedtuple
    >>> Point = namedtuple('Point', 'x y')
    >>> treespec_namedtuple(Point(treespec_leaf(), treespec_none())).num_leaves
    1
    """
    if not is_namedtuple_instance(namedtuple):
        raise ValueError(f"treespec_namedtuple: Expected a namedtuple of PyTreeSpec(s), got {namedtuple!r}")
    return _make(namedtuple, none_is_leaf, namespace, "treespec_namedtuple", stacklevel=2)


def treespec_ordereddict(
    mapping: Mapping[Any, Spec] | Iterable[tuple[Any, Spec]] = (),
    /,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
    **kwargs: Spec,
) -> Spec:
    """The structure of an OrderedDict of the given key -> structure pairs, in the order given
    (optree's ``treespec_ordereddict``; the rules of ``treespec_dict``).

    Raises:
      ValueError / TypeError: as ``treespec_dict``.

    >>> treespec_ordereddict([('b', treespec_leaf()), ('a', treespec_none())]).entries()
    ['b', 'a']
    """
    return _make(OrderedDict(mapping, **kwargs), none_is_leaf, namespace, "treespec_ordereddict", stacklevel=2)


def treespec_defaultdict(
    default_factory: Callable[[], Any] | None = None,
    mapping: Mapping[Any, Spec] | Iterable[tuple[Any, Spec]] = (),
    /,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
    **kwargs: Spec,
) -> Spec:
    """The structure of a defaultdict with ``default_factory`` (node data) and the given key ->
    structure pairs, keys sorted as in a dict (optree's ``treespec_defaultdict``).

    Raises:
      TypeError: ``default_factory`` is neither callable nor None; and as ``treespec_dict``.

    >>> spec = treespec_defaultdict(int, {'b': treespec_leaf(), 'a': treespec_leaf()})
    >>> spec.entries(), spec.node_data()[1][0]
    (['a', 'b'], <class 'int'>)
    """
    return _make(defaultdict(default_factory, mapping, **kwargs), none_is_leaf, namespace, "treespec_defaultdict", stacklevel=2)


def treespec_deque(
    iterable: Iterable[Spec] = (),
    /,
    maxlen: int | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> Spec:
    """The structure of a deque whose children have the given structures, with ``maxlen``
    (node data), as optree's ``treespec_deque``.

    Raises:
      ValueError: a negative ``maxlen``; and as ``treespec_tuple``.

    >>> treespec_deque([treespec_leaf(), treespec_none()], maxlen=4)
    PyTreeDef(deque([*, None], maxlen=4))
    """
    return _make(deque(iterable, maxlen=maxlen), none_is_leaf, namespace, "treespec_deque", stacklevel=2)


def treespec_structseq(structseq: Any, /, *, none_is_leaf: bool = False, namespace: str = "") -> Spec:
    """The structure of a struct sequence (``time.struct_time``, ``os.stat_result``, ...) of the
    class of ``structseq``, an instance whose fields are structures (optree's
    ``treespec_structseq``).

    Raises:
      ValueError: ``structseq`` is not a struct sequence instance; and as ``treespec_tuple``.

    >>> import time
    >>> treespec_structseq(time.struct_time([treespec_leaf()] * 9)).num_leaves
    9
    """
    if not is_structseq_instance(structseq):
        raise ValueError(f"treespec_structseq: Expected a PyStructSequence of PyTreeSpec(s), got {structseq!r}")
    return _make(structseq, none_is_leaf, namespace, "treespec_structseq", stacklevel=2)


def treespec_frozendict(
    mapping: Mapping[Any, Spec] | Iterable[tuple[Any, Spec]] = (),
    /,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
    **kwargs: Spec,
) -> Spec:
    """The structure of a built-in ``frozendict`` (Python 3.15+), as optree's
    ``treespec_frozendict``.  The name exists on every interpreter; where there is no built-in
    frozendict that spruce's engine walks as a node, calling it raises, as optree's does.

    Raises:
      RuntimeError: no such frozendict on this interpreter.
    """
    frozendict = getattr(builtins, "frozendict", None)
    if frozendict is None or not is_tree_node(frozendict):
        raise RuntimeError(
            "treespec_frozendict needs a built-in frozendict (Python 3.15+) that spruce walks as a node; "
            "this interpreter has none"
        )
    return _make(frozendict(mapping, **kwargs), none_is_leaf, namespace, "treespec_frozendict", stacklevel=2)


def treespec_from_collection(collection: Collection[Spec], /, *, none_is_leaf: bool = False, namespace: str = "") -> Spec:
    """The structure of ``collection`` (any node: tuple, list, dict, namedtuple, deque, a
    registered class, ...) whose children are structures, with those structures in their
    places; optree's ``treespec_from_collection``.  The root is read as a walk with
    ``none_is_leaf`` / ``namespace`` reads it.  A collection that is a leaf of such a walk
    gives ``PyTreeDef(*)`` with a UserWarning.

    Raises:
      ValueError: a child is not a structure; the children disagree with ``none_is_leaf``, or
        on their namespace.
      TypeError: ``namespace`` is not a string.

    >>> treespec_from_collection([treespec_leaf(), 1])
    Traceback (most recent call last):
      ...
    ValueError: treespec_from_collection: Expected a(n) list of PyTreeSpec(s), got [PyTreeDef(*), 1] (child 1 is of type int)
    >>> treespec_from_collection({'b': treespec_leaf(), 'a': treespec_list([treespec_none()])})
    PyTreeDef({'a': [None], 'b': *})
    """
    return _make(collection, none_is_leaf, namespace, "treespec_from_collection", stacklevel=2)
