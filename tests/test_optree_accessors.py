"""spruce.optree's path entries, accessors and paths, compared with optree's on the same trees.

Every tree in ``CASES`` is flattened by both libraries (custom classes registered in both,
each in its own registry, under the same namespace): the leaves, optree's paths and the
accessors must agree (accessor classes live in different modules, so they are compared by
class name, entry, node type, kind value, repr and code), and every accessor applied to the
tree must return its leaf.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import operator
import os
import pickle
import time
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import optree
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spruce.optree import _accessors as acc
from spruce.optree import _registry
from spruce.tree import PyTreeKind, structure

NS = "spruce-accessors-test"
OPTREE_GLOBAL = vars(optree.registry)["__GLOBAL_NAMESPACE"]  # optree's global namespace sentinel

# -- classes of the trees ---------------------------------------------------------------------

Point = collections.namedtuple("Point", "x y")


class Pair(typing.NamedTuple):
    first: Any
    second: Any


class WithEntries:
    """Flattened with entries ('a', 'b'), reachable as ``node['a']`` (FlattenedEntry's step)."""

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b

    def __getitem__(self, name: str) -> Any:
        return getattr(self, name)


class NoEntries:
    """Flattened without entries (a two-value flatten)."""

    def __init__(self, *items: Any) -> None:
        self.items = items

    def __getitem__(self, i: int) -> Any:
        return self.items[i]


class NoneEntries:
    """Flattened with ``None`` for the entries; not subscriptable, so its children's
    FlattenedEntry steps raise TypeError (in both libraries)."""

    def __init__(self, *items: Any) -> None:
        self.items = items


class Attrs:
    """Entries are attribute names, read with GetAttrEntry (one is dotted)."""

    def __init__(self, u: Any, inner: Any) -> None:
        self.u, self.inner = u, inner


class Inner:
    def __init__(self, v: Any) -> None:
        self.v = v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Inner) and self.v == other.v

    def __hash__(self) -> int:
        return hash(self.v)


class MyMap(Mapping[str, Any]):
    """A Mapping: AutoEntry gives MappingEntry."""

    def __init__(self, d: dict[str, Any]) -> None:
        self.d = dict(d)

    def __getitem__(self, k: str) -> Any:
        return self.d[k]

    def __iter__(self) -> Iterator[str]:
        return iter(self.d)

    def __len__(self) -> int:
        return len(self.d)


class MySeq(Sequence[Any]):
    """A Sequence: AutoEntry gives SequenceEntry."""

    def __init__(self, *items: Any) -> None:
        self.items = list(items)

    def __getitem__(self, i: Any) -> Any:
        return self.items[i]

    def __len__(self) -> int:
        return len(self.items)


@dataclasses.dataclass
class DC:
    """A dataclass registered through register_pytree_node: AutoEntry gives DataclassEntry."""

    x: Any
    y: Any
    tag: str = "t"


REGISTRATIONS: list[tuple[type, Callable[[Any], Any], Callable[[Any, Any], Any], str | None]] = [
    (WithEntries, lambda n: ((n.a, n.b), None, ("a", "b")), lambda _, c: WithEntries(*c), None),
    (NoEntries, lambda n: (n.items, len(n.items)), lambda _, c: NoEntries(*c), None),
    (NoneEntries, lambda n: (n.items, None, None), lambda _, c: NoneEntries(*c), None),
    (Attrs, lambda n: ((n.u, n.inner.v), None, ("u", "inner.v")), lambda _, c: Attrs(c[0], Inner(c[1])), "GetAttrEntry"),
    (MyMap, lambda n: (list(n.d.values()), tuple(n.d), tuple(n.d)), lambda m, c: MyMap(dict(zip(m, c))), None),
    (MySeq, lambda n: (n.items, None), lambda _, c: MySeq(*c), None),
    (DC, lambda n: ((n.x, n.y), n.tag), lambda tag, c: DC(*c, tag), None),
]


@pytest.fixture(scope="module", autouse=True)
def _registered() -> Iterator[None]:
    """Each custom class registered in both libraries under NS (and nowhere else)."""
    for cls, flatten, unflatten, entry_class in REGISTRATIONS:
        ours = getattr(acc, entry_class) if entry_class else acc.AutoEntry
        theirs = getattr(optree, entry_class) if entry_class else optree.AutoEntry
        _registry.register_pytree_node(cls, flatten, unflatten, path_entry_type=ours, namespace=NS)
        optree.register_pytree_node(cls, flatten, unflatten, path_entry_type=theirs, namespace=NS)
    yield
    for cls, *_ in REGISTRATIONS:
        _registry.unregister_pytree_node(cls, namespace=NS)
        optree.unregister_pytree_node(cls, namespace=NS)


def _chain(depth: int) -> Any:
    tree: Any = "bottom"
    for _ in range(depth):
        tree = [tree]
    return tree


CASES: dict[str, Callable[[], Any]] = {
    "leaf": lambda: 1,
    "none": lambda: None,
    "empty-containers": lambda: [(), [], {}, None, collections.OrderedDict()],
    "flat-list": lambda: [1, 2, 3],
    "nested": lambda: {"b": [1, (2, None, 3)], "a": {"y": 4, "x": [5, [6]]}},
    "dict-mixed-keys": lambda: {1: "one", "b": 2, None: 3, (1,): 4},
    "dict-int-keys": lambda: {3: "c", 1: "a", 2: ["b", "bb"]},
    "namedtuple": lambda: Point(1, Point(2, None)),
    "typing-namedtuple": lambda: [Pair(Point(1, 2), "s"), Pair(None, (3,))],
    "ordereddict": lambda: collections.OrderedDict([("z", 1), ("a", [2, 3])]),
    "defaultdict": lambda: collections.defaultdict(list, {"q": 1, "p": (2, 3)}),
    "deque": lambda: collections.deque([1, [2, None], 3], maxlen=5),
    "struct-time": lambda: time.gmtime(0),
    "stat-result": lambda: {"st": os.stat_result(tuple(range(10)))},
    "structseq-nested": lambda: [time.gmtime(86400), os.stat_result(tuple(range(100, 110)))],
    "custom-entries": lambda: WithEntries([1, 2], {"k": WithEntries(3, None)}),
    "custom-no-entries": lambda: NoEntries(1, (2, 3), NoEntries(4)),
    "custom-none-entries": lambda: NoneEntries("a", ["b"]),
    "custom-getattr": lambda: [Attrs(1, Inner(2)), Attrs((3,), Inner([4]))],
    "custom-mapping": lambda: MyMap({"b": 1, "a": [2, MyMap({"c": 3})]}),
    "custom-sequence": lambda: MySeq(1, MySeq(2, 3), (4,)),
    "custom-dataclass": lambda: DC([1, 2], DC(3, 4, "in"), "out"),
    "everything": lambda: {
        "nt": Point(WithEntries(1, 2), MySeq(3)),
        "od": collections.OrderedDict(b=DC(4, None), a=collections.deque([5])),
        "dd": collections.defaultdict(int, {2: time.gmtime(0)}),
        "none": None,
        "l": [NoEntries(MyMap({"x": 6})), Attrs(7, Inner((8, 9)))],
    },
    "deep-chain": lambda: _chain(1000),
    "wide": lambda: {f"k{i:05d}": [i, (i, {"v": i})] for i in range(3334)},
}

IS_LEAF: dict[str, Callable[[Any], bool] | None] = {
    "no-is_leaf": None,
    "tuples-are-leaves": lambda x: isinstance(x, tuple),
    "custom-are-leaves": lambda x: isinstance(x, (WithEntries, Attrs, DC)),
}


def _entry_view(e: Any) -> tuple[Any, ...]:
    """What two entries from the two libraries must share."""
    return (type(e).__name__, e.entry, e.type, int(e.kind), e.kind.name, repr(e), e.codify("n"))


def _accessor_view(a: Any) -> tuple[Any, ...]:
    return (repr(a), a.codify(), a.codify("tree"), a.path, tuple(_entry_view(e) for e in a))


@pytest.mark.parametrize("is_leaf", IS_LEAF.values(), ids=IS_LEAF.keys())
@pytest.mark.parametrize("none_is_leaf", [False, True], ids=["none-node", "none-leaf"])
@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_same_as_optree(make: Callable[[], Any], none_is_leaf: bool, is_leaf: Callable[[Any], bool] | None) -> None:
    tree = make()
    kw: dict[str, Any] = {"none_is_leaf": none_is_leaf, "namespace": NS}
    accessors, leaves, spec = acc.tree_flatten_with_accessor(tree, is_leaf, **kw)
    theirs, their_leaves, their_spec = optree.tree_flatten_with_accessor(tree, is_leaf, **kw)
    assert [id(x) for x in leaves] == [id(x) for x in their_leaves]
    assert spec.num_leaves == their_spec.num_leaves == len(accessors)
    assert [_accessor_view(a) for a in accessors] == [_accessor_view(a) for a in theirs]
    for accessor, their_accessor, leaf in zip(accessors, theirs, leaves):
        try:
            their_accessor(tree)
        except TypeError:  # a step optree cannot take either (a FlattenedEntry of NoneEntries)
            assert any(isinstance(e.type, type) and e.type is NoneEntries for e in accessor)
            with pytest.raises(TypeError):
                accessor(tree)
        else:
            assert accessor(tree) is leaf
    assert acc.treespec_accessors(spec) == accessors
    assert acc.tree_accessors(tree, is_leaf, **kw) == accessors

    paths, path_leaves, path_spec = acc.tree_flatten_with_path(tree, is_leaf, **kw)
    their_paths = optree.tree_paths(tree, is_leaf, **kw)
    assert paths == their_paths == [a.path for a in accessors]
    assert path_spec == spec and [id(x) for x in path_leaves] == [id(x) for x in leaves]
    assert acc.tree_paths(tree, is_leaf, **kw) == paths == acc.treespec_paths(spec)


def test_global_registration_and_namespaces() -> None:
    """A class registered globally is a node in every walk; one registered in NS only there."""

    class G:
        def __init__(self, v: Any) -> None:
            self.v = v

    flatten = lambda g: ((g.v,), None, ("v",))
    unflatten = lambda _, c: G(*c)
    _registry.register_pytree_node(G, flatten, unflatten, path_entry_type=acc.GetAttrEntry, namespace=_registry.GLOBAL_NAMESPACE)
    optree.register_pytree_node(G, flatten, unflatten, path_entry_type=optree.GetAttrEntry, namespace=OPTREE_GLOBAL)
    try:
        tree = {"g": G([1, WithEntries(2, 3)])}
        for namespace in ("", NS):
            ours = acc.tree_accessors(tree, namespace=namespace)
            theirs = optree.tree_accessors(tree, namespace=namespace)
            assert [_accessor_view(a) for a in ours] == [_accessor_view(a) for a in theirs]
            assert acc.tree_paths(tree, namespace=namespace) == optree.tree_paths(tree, namespace=namespace)
        assert [a.codify() for a in acc.tree_accessors(tree)] == ["*['g'].v[0]", "*['g'].v[1]"]
        assert [a.codify() for a in acc.tree_accessors(tree, namespace=NS)] == [
            "*['g'].v[0]",
            "*['g'].v[1][<flat index 'a'>]",
            "*['g'].v[1][<flat index 'b'>]",
        ]
    finally:
        _registry.unregister_pytree_node(G, namespace=_registry.GLOBAL_NAMESPACE)
        optree.unregister_pytree_node(G, namespace=OPTREE_GLOBAL)


_keys = st.one_of(st.integers(-3, 3), st.text("abc", max_size=2))
_trees = st.recursive(
    st.one_of(st.none(), st.integers(), st.text("xy", max_size=1)),
    lambda sub: st.one_of(
        st.lists(sub, max_size=3),
        st.lists(sub, max_size=3).map(tuple),
        st.dictionaries(_keys, sub, max_size=3),
        st.dictionaries(_keys, sub, max_size=3).map(collections.OrderedDict),
        st.dictionaries(_keys, sub, max_size=3).map(lambda d: collections.defaultdict(list, d)),
        st.lists(sub, max_size=3).map(collections.deque),
        st.tuples(sub, sub).map(lambda t: Point(*t)),
        st.tuples(sub, sub).map(lambda t: WithEntries(*t)),
        st.lists(sub, max_size=3).map(lambda items: MySeq(*items)),
        st.tuples(sub, sub).map(lambda t: DC(*t)),
    ),
    max_leaves=12,
)


@given(tree=_trees, none_is_leaf=st.booleans())
def test_random_trees_like_optree(tree: Any, none_is_leaf: bool) -> None:
    kw: dict[str, Any] = {"none_is_leaf": none_is_leaf, "namespace": NS}
    accessors, leaves, _ = acc.tree_flatten_with_accessor(tree, **kw)
    assert [_accessor_view(a) for a in accessors] == [_accessor_view(a) for a in optree.tree_accessors(tree, **kw)]
    assert acc.tree_paths(tree, **kw) == optree.tree_paths(tree, **kw)
    assert all(a(tree) is leaf for a, leaf in zip(accessors, leaves))


def test_dicts_in_insertion_order() -> None:
    tree = {"b": 1, "a": {"d": 2, "c": 3}}
    with _registry.dict_insertion_ordered(True, namespace=NS), optree.dict_insertion_ordered(True, namespace=NS):
        ours = acc.tree_accessors(tree, namespace=NS)
        assert [_accessor_view(a) for a in ours] == [_accessor_view(a) for a in optree.tree_accessors(tree, namespace=NS)]
        assert acc.tree_paths(tree, namespace=NS) == optree.tree_paths(tree, namespace=NS) == [("b",), ("a", "d"), ("a", "c")]


def test_deep_and_wide_shapes() -> None:
    deep = acc.tree_accessors(_chain(1000))
    assert len(deep) == 1 and len(deep[0]) == 1000 and deep[0].codify() == "*" + "[0]" * 1000
    wide = {i: [i] for i in range(10_000)}
    paths = acc.tree_paths(wide)
    assert paths == [(i, 0) for i in range(10_000)]


# -- the entry classes ------------------------------------------------------------------------

K = PyTreeKind
OK = optree.PyTreeKind

ENTRY_CASES: list[tuple[str, Any, type, str]] = [
    ("PyTreeEntry", 1, list, "LIST"),
    ("GetItemEntry", "k", dict, "CUSTOM"),
    ("GetAttrEntry", "real", complex, "CUSTOM"),
    ("GetAttrEntry", "real.imag", complex, "CUSTOM"),
    ("GetAttrEntry", "not an identifier.x", object, "CUSTOM"),
    ("FlattenedEntry", 0, NoEntries, "CUSTOM"),
    ("SequenceEntry", 2, tuple, "TUPLE"),
    ("MappingEntry", ("a", 1), dict, "DICT"),
    ("NamedTupleEntry", 1, Point, "NAMEDTUPLE"),
    ("StructSequenceEntry", 3, time.struct_time, "STRUCTSEQUENCE"),
    ("StructSequenceEntry", 8, os.stat_result, "STRUCTSEQUENCE"),
    ("DataclassEntry", 1, DC, "CUSTOM"),
    ("DataclassEntry", "tag", DC, "CUSTOM"),
]


@pytest.mark.parametrize(("name", "entry", "cls", "kind"), ENTRY_CASES, ids=[f"{c[0]}-{c[1]!r}" for c in ENTRY_CASES])
def test_entry_like_optree(name: str, entry: Any, cls: type, kind: str) -> None:
    ours = getattr(acc, name)(entry, cls, K[kind])
    theirs = getattr(optree, name)(entry, cls, OK[kind])
    assert _entry_view(ours) == _entry_view(theirs)
    assert ours.codify() == theirs.codify()
    for attr in ("index", "key", "name", "field", "fields", "init_fields", "children_fields", "is_unnamed"):
        if hasattr(theirs, attr):
            assert getattr(ours, attr) == getattr(theirs, attr), attr
    assert ours == getattr(acc, name)(entry, cls, K[kind]) and hash(ours) == hash(getattr(acc, name)(entry, cls, K[kind]))
    assert ours == pickle.loads(pickle.dumps(ours)) == copy.deepcopy(ours)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ours.entry = 0


@pytest.mark.parametrize(
    ("name", "obj", "entry", "cls", "kind"),
    [
        ("SequenceEntry", [10, 20, 30], 2, list, "LIST"),
        ("MappingEntry", {"a": 1}, "a", dict, "DICT"),
        ("NamedTupleEntry", Point(1, 2), 1, Point, "NAMEDTUPLE"),
        ("StructSequenceEntry", time.gmtime(0), 0, time.struct_time, "STRUCTSEQUENCE"),
        ("StructSequenceEntry", os.stat_result(tuple(range(10))), 9, os.stat_result, "STRUCTSEQUENCE"),
        ("GetAttrEntry", Attrs(1, Inner(2)), "inner.v", Attrs, "CUSTOM"),
        ("GetItemEntry", {"k": 5}, "k", dict, "CUSTOM"),
        ("DataclassEntry", DC(1, 2), 0, DC, "CUSTOM"),
        ("DataclassEntry", DC(1, 2), "y", DC, "CUSTOM"),
        ("PyTreeEntry", (7, 8), 1, tuple, "TUPLE"),
    ],
)
def test_entry_call_like_optree(name: str, obj: Any, entry: Any, cls: type, kind: str) -> None:
    ours = getattr(acc, name)(entry, cls, K[kind])
    theirs = getattr(optree, name)(entry, cls, OK[kind])
    assert ours(obj) == theirs(obj)


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        (time.struct_time, "StructSequenceEntry"),
        (Point, "NamedTupleEntry"),
        (Pair, "NamedTupleEntry"),
        (DC, "DataclassEntry"),
        (MyMap, "MappingEntry"),
        (dict, "MappingEntry"),
        (MySeq, "SequenceEntry"),
        (list, "SequenceEntry"),
        (NoEntries, "FlattenedEntry"),
        (int, "FlattenedEntry"),
    ],
)
def test_auto_entry_dispatch(cls: type, expected: str) -> None:
    ours = acc.AutoEntry(0, cls, K.CUSTOM)
    theirs = optree.AutoEntry(0, cls, OK.CUSTOM)
    assert type(ours).__name__ == type(theirs).__name__ == expected
    assert type(ours) is getattr(acc, expected)
    assert (ours.entry, ours.type, ours.kind) == (0, cls, K.CUSTOM)


def test_generic_entry_classes() -> None:
    """The entry classes optree makes generic can be subscripted in annotations."""
    for name, args in [("SequenceEntry", (int,)), ("MappingEntry", (str, int)), ("NamedTupleEntry", (int,))]:
        alias = getattr(acc, name)[args]
        assert typing.get_origin(alias) is getattr(acc, name) and typing.get_args(alias) == args
        getattr(optree, name)[args]


def test_auto_entry_subclass_is_kept() -> None:
    class MyAuto(acc.AutoEntry):
        __slots__ = ()

    e = MyAuto(3, list, K.LIST)
    assert type(e) is MyAuto and (e.entry, e.type, e.kind) == (3, list, K.LIST)


def test_equality_rules_like_optree() -> None:
    """Entries are equal when fields and the step's methods agree (optree's rule)."""
    pairs = [
        ("PyTreeEntry", "FlattenedEntry", 0, NoEntries, "CUSTOM"),
        ("GetItemEntry", "SequenceEntry", 0, list, "LIST"),
        ("SequenceEntry", "NamedTupleEntry", 0, Point, "NAMEDTUPLE"),
        ("GetAttrEntry", "DataclassEntry", "x", DC, "CUSTOM"),
        ("SequenceEntry", "MappingEntry", 0, dict, "DICT"),
        ("SequenceEntry", "SequenceEntry", 0, list, "LIST"),
    ]
    for a, b, entry, cls, kind in pairs:
        ours = getattr(acc, a)(entry, cls, K[kind]) == getattr(acc, b)(entry, cls, K[kind])
        theirs = getattr(optree, a)(entry, cls, OK[kind]) == getattr(optree, b)(entry, cls, OK[kind])
        assert ours == theirs, (a, b)
    s = acc.SequenceEntry(0, list, K.LIST)
    assert s != acc.SequenceEntry(1, list, K.LIST) and s != acc.SequenceEntry(0, tuple, K.TUPLE)
    assert s != 0 and len({s, acc.SequenceEntry(0, list, K.LIST), acc.FlattenedEntry(0, list, K.LIST)}) == 2


def _subclasses(lib: Any) -> dict[str, Any]:
    """Entry subclasses that override the step in unusual ways, made in ``lib`` (acc or optree)."""

    class ItemGetterEntry(lib.SequenceEntry):
        __slots__ = ()
        __call__ = operator.itemgetter(0)

    class FirstEntry(lib.SequenceEntry):
        __slots__ = ()

        def __call__(self, obj: Any, /, index: int = 0) -> Any:
            return obj[index]

    class SecondEntry(lib.SequenceEntry):
        __slots__ = ()

        def __call__(self, obj: Any, /, index: int = 1) -> Any:
            return obj[index]

    class Inherited(lib.SequenceEntry):
        __slots__ = ()

    class MyAuto(lib.AutoEntry):
        __slots__ = ()

    return {
        "ItemGetterEntry": ItemGetterEntry,
        "FirstEntry": FirstEntry,
        "SecondEntry": SecondEntry,
        "Inherited": Inherited,
        "MyAuto": MyAuto,
        "SequenceEntry": lib.SequenceEntry,
        "PyTreeEntry": lib.PyTreeEntry,
    }


def test_subclass_equality_like_optree() -> None:
    """A subclass is equal to its base if and only if it takes and spells the step the same way."""
    ours, theirs = _subclasses(acc), _subclasses(optree)
    names = list(ours)
    for a in names:
        for b in names:
            x, y = ours[a](0, tuple, K.TUPLE), ours[b](0, tuple, K.TUPLE)
            tx, ty = theirs[a](0, tuple, OK.TUPLE), theirs[b](0, tuple, OK.TUPLE)
            assert (x == y) == (tx == ty), (a, b)
            assert (x != y) == (tx != ty), (a, b)
            if x == y:
                assert hash(x) == hash(y)
    assert ours["ItemGetterEntry"](0, list, K.LIST)([11, 22]) == 11
    assert ours["SecondEntry"](0, list, K.LIST)([11, 22]) == 22


def test_dataclass_entry_recorded_fields() -> None:
    """An int entry indexes the children fields recorded on the class itself, else all fields."""

    @dataclasses.dataclass
    class R:
        a: int
        b: int
        c: int

    setattr(R, acc.DATACLASS_FIELDS_ATTR, (("c", "a"), ("b",)))

    class Sub(R):
        pass

    assert acc.DataclassEntry(0, R, K.CUSTOM).field == "c"
    assert acc.DataclassEntry(1, R, K.CUSTOM)(R(1, 2, 3)) == 1
    assert acc.DataclassEntry(0, Sub, K.CUSTOM).field == "a"
    assert acc.DataclassEntry(0, R, K.CUSTOM).fields == ("a", "b", "c")


# -- accessors --------------------------------------------------------------------------------


def _both(entries: list[tuple[str, Any, type, str]]) -> tuple[acc.PyTreeAccessor, Any]:
    ours = acc.PyTreeAccessor(getattr(acc, n)(e, c, K[k]) for n, e, c, k in entries)
    theirs = optree.PyTreeAccessor(getattr(optree, n)(e, c, OK[k]) for n, e, c, k in entries)
    return ours, theirs


STEPS = [("MappingEntry", "a", dict, "DICT"), ("SequenceEntry", 1, list, "LIST"), ("NamedTupleEntry", 0, Point, "NAMEDTUPLE")]


def test_accessor_like_optree() -> None:
    ours, theirs = _both(STEPS)
    tree = {"a": [None, Point("leaf", 0)]}
    assert ours(tree) == theirs(tree) == "leaf"
    assert _accessor_view(ours) == _accessor_view(theirs)
    for sl in (slice(None, 2), slice(1, None), slice(None, None, -1), slice(3, 5)):
        assert type(ours[sl]) is acc.PyTreeAccessor
        assert _accessor_view(ours[sl]) == _accessor_view(theirs[sl])
    assert _entry_view(ours[0]) == _entry_view(theirs[0]) and _entry_view(ours[-1]) == _entry_view(theirs[-1])
    for n in (0, 1, 2):
        assert _accessor_view(ours * n) == _accessor_view(theirs * n)
        assert _accessor_view(n * ours) == _accessor_view(n * theirs)
        assert type(ours * n) is type(n * ours) is acc.PyTreeAccessor
    assert _accessor_view(ours + ours[0]) == _accessor_view(theirs + theirs[0])
    assert _accessor_view(ours + ours) == _accessor_view(theirs + theirs)
    assert _accessor_view(ours[0] + ours[1]) == _accessor_view(theirs[0] + theirs[1])
    assert _accessor_view(ours[0] + ours[1:]) == _accessor_view(theirs[0] + theirs[1:])
    assert type(ours[0] + ours[1]) is acc.PyTreeAccessor
    with pytest.raises(TypeError):
        ours + (1,)
    with pytest.raises(TypeError):
        ours[0] + 1
    with pytest.raises(TypeError):
        1 + ours
    with pytest.raises(TypeError):
        "a" + ours[0]
    with pytest.raises(IndexError):
        ours[3]
    assert acc.PyTreeAccessor() == acc.PyTreeAccessor([]) and acc.PyTreeAccessor()(tree) is tree
    assert acc.PyTreeAccessor(path=iter(ours)) == ours
    assert repr(acc.PyTreeAccessor()) == repr(optree.PyTreeAccessor()) == "PyTreeAccessor(*, ())"


def test_accessor_equality_and_hash() -> None:
    ours, _ = _both(STEPS)
    again, _ = _both(STEPS)
    assert ours == again and hash(ours) == hash(again) and not (ours != again)
    assert ours != tuple(ours) and not (ours == tuple(ours))
    assert ours != ours[:2] and {ours, again, ours[:2]} == {ours, ours[:2]}
    assert pickle.loads(pickle.dumps(ours)) == ours


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["LEAF", "NONE"])
@pytest.mark.parametrize("name", ["PyTreeEntry", "SequenceEntry", "MappingEntry", "GetAttrEntry", "FlattenedEntry"])
def test_childless_kind_is_refused(name: str, kind: str) -> None:
    with pytest.raises(ValueError):
        getattr(optree, name)(0, list, OK[kind])
    with pytest.raises(ValueError, match="PyTreeKind"):
        getattr(acc, name)(0, list, K[kind])


@pytest.mark.parametrize("kind", ["LIST", "DICT", "NAMEDTUPLE", "LEAF"])
def test_auto_entry_needs_custom_kind(kind: str) -> None:
    with pytest.raises(ValueError):
        optree.AutoEntry(0, list, OK[kind])
    with pytest.raises(ValueError, match="CUSTOM"):
        acc.AutoEntry(0, list, K[kind])


@pytest.mark.parametrize("bad", [[1], ["a"], [None], [(0, list)], "ab"], ids=repr)
def test_accessor_of_non_entries(bad: Any) -> None:
    good = acc.SequenceEntry(0, list, K.LIST)
    with pytest.raises(TypeError):
        optree.PyTreeAccessor(bad)
    with pytest.raises(TypeError, match="PyTreeEntry"):
        acc.PyTreeAccessor(bad)
    with pytest.raises(TypeError, match="PyTreeEntry"):
        acc.PyTreeAccessor([good, *bad])


def test_step_through_wrong_object() -> None:
    e = acc.PyTreeEntry(0, list, K.LIST)
    with pytest.raises(TypeError, match="cannot take entry 0"):
        e(5)
    with pytest.raises(TypeError):
        optree.PyTreeEntry(0, list, OK.LIST)(5)
    with pytest.raises(AttributeError):
        acc.GetAttrEntry("nope", object, K.CUSTOM)(object())
    with pytest.raises(KeyError):
        acc.MappingEntry("nope", dict, K.DICT)({})


@pytest.mark.parametrize("bad", [None, [1, 2], optree.tree_structure([1])], ids=["None", "list", "optree-spec"])
@pytest.mark.parametrize("func", [acc.treespec_accessors, acc.treespec_paths])
def test_treespec_functions_need_a_structure(func: Callable[[Any], Any], bad: Any) -> None:
    with pytest.raises(TypeError, match="PyTreeSpec"):
        func(bad)


def test_treespec_functions_on_spruce_structures() -> None:
    spec = structure({"b": (1, None), "a": [2]}, none_is_leaf=True)
    assert acc.treespec_paths(spec) == [("a", 0), ("b", 0), ("b", 1)]
    assert [a.codify() for a in acc.treespec_accessors(spec)] == ["*['a'][0]", "*['b'][0]", "*['b'][1]"]
    assert acc.treespec_paths(structure(None)) == [] and acc.treespec_paths(structure(1)) == [()]
    assert acc.treespec_accessors(structure(1)) == [acc.PyTreeAccessor()]
