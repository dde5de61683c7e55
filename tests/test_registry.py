"""Registration: the register_* functions, unregister, is_tree_node, Partial and static."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from collections import OrderedDict, defaultdict, deque, namedtuple
from typing import Any, NamedTuple

import pytest

import spruce.tree as st
import spruce.tree_util as tu
from helpers import assert_tree_equal

# ------------------------------------------------------------------- register_pytree_node


def test_register_pytree_node_round_trip_and_paths() -> None:
    class Vec:
        def __init__(self, xs: list[Any], unit: str) -> None:
            self.xs, self.unit = xs, unit

    st.register_pytree_node(Vec, lambda v: (v.xs, v.unit), lambda unit, xs: Vec(list(xs), unit))
    leaves, treedef = st.flatten({"v": Vec([1, [2]], ("m", 2))})
    assert leaves == [1, 2]
    assert repr(treedef) == "PyTreeDef({'v': CustomNode(Vec[('m', 2)], [*, [*]])})"
    out = st.map(lambda x: x * 10, {"v": Vec([1, [2]], "m")})
    assert isinstance(out["v"], Vec) and out["v"].xs == [10, [20]] and out["v"].unit == "m"
    assert [p for p, _ in st.leaves_with_path(Vec([1, 2], "m"))] == [
        (st.FlattenedIndexKey(0),),
        (st.FlattenedIndexKey(1),),
    ]


def test_register_pytree_node_with_flatten_with_keys() -> None:
    class Named2:
        def __init__(self, a: Any, b: Any) -> None:
            self.a, self.b = a, b

    st.register_pytree_node(
        Named2,
        lambda n: ((n.a, n.b), None),
        lambda aux, ch: Named2(*ch),
        # 4th argument (JAX calls it flatten_with_keys_func)
        lambda n: (((st.DictKey("A"), n.a), (st.DictKey("B"), n.b)), None),
    )
    pairs = st.leaves_with_path(Named2(1, [2]))
    assert [st.keystr(p) for p, _ in pairs] == ["['A']", "['B'][0]"]
    assert [x for _, x in pairs] == [1, 2]
    assert st.leaves(Named2(1, [2])) == [1, 2]


def test_register_pytree_with_keys_flatten_optional() -> None:
    class KV:
        def __init__(self, k: Any, v: Any) -> None:
            self.k, self.v = k, v

    st.register_pytree_with_keys(
        KV,
        lambda kv: (((st.GetAttrKey("k"), kv.k), (st.GetAttrKey("v"), kv.v)), ("aux",)),
        lambda aux, ch: KV(*ch),
    )
    leaves, treedef = st.flatten(KV(1, 2))
    assert leaves == [1, 2]
    assert repr(treedef) == "PyTreeDef(CustomNode(KV[('aux',)], [*, *]))"
    assert [st.keystr(p) for p, _ in st.leaves_with_path(KV(1, 2))] == [".k", ".v"]
    rebuilt = st.unflatten(treedef, ["x", "y"])
    assert (rebuilt.k, rebuilt.v) == ("x", "y")


def test_register_pytree_with_keys_explicit_flatten_is_used_for_flatten() -> None:
    calls: list[str] = []

    class KV2:
        def __init__(self, k: Any) -> None:
            self.k = k

    def fwk(x: KV2) -> Any:
        calls.append("with_keys")
        return (((st.GetAttrKey("k"), x.k),), None)

    def flat(x: KV2) -> Any:
        calls.append("flatten")
        return ((x.k,), None)

    st.register_pytree_with_keys(KV2, fwk, lambda aux, ch: KV2(*ch), flat)
    assert st.leaves(KV2(3)) == [3]
    assert st.leaves_with_path(KV2(3)) == [((st.GetAttrKey("k"),), 3)]
    assert set(calls) == {"with_keys", "flatten"}


def test_register_pytree_node_class_decorator() -> None:
    @st.register_pytree_node_class
    class Pt:
        def __init__(self, x: Any, y: Any, label: str) -> None:
            self.x, self.y, self.label = x, y, label

        def tree_flatten(self) -> Any:
            return (self.x, self.y), self.label

        @classmethod
        def tree_unflatten(cls, aux: Any, children: Any) -> "Pt":
            return cls(*children, aux)

    assert isinstance(Pt, type)  # the decorator returns the class
    out = st.map(lambda v: v + 1, Pt(1, 2, "L"))
    assert (out.x, out.y, out.label) == (2, 3, "L")
    assert repr(st.structure(Pt(0, 0, 42))) == "PyTreeDef(CustomNode(Pt[42], [*, *]))"


def test_register_pytree_with_keys_class_decorator() -> None:
    @st.register_pytree_with_keys_class
    class Pk:
        def __init__(self, a: Any, b: Any) -> None:
            self.a, self.b = a, b

        def tree_flatten_with_keys(self) -> Any:
            return ((st.GetAttrKey("a"), self.a), (st.GetAttrKey("b"), self.b)), None

        def tree_flatten(self) -> Any:
            return (self.a, self.b), None

        @classmethod
        def tree_unflatten(cls, aux: Any, children: Any) -> "Pk":
            return cls(*children)

    assert isinstance(Pk, type)
    assert [st.keystr(p) for p, _ in st.leaves_with_path(Pk(1, {"z": 2}))] == [".a", ".b['z']"]
    assert st.map(lambda v: -v, Pk(1, 2)).b == -2


def test_tree_util_names_are_the_same_objects() -> None:
    pairs = {
        "tree_map": "map",
        "tree_flatten": "flatten",
        "tree_unflatten": "unflatten",
        "tree_leaves": "leaves",
        "tree_structure": "structure",
        "tree_reduce": "reduce",
        "tree_reduce_associative": "reduce_associative",
        "tree_transpose": "transpose",
        "tree_broadcast": "broadcast",
        "tree_all": "all",
        "tree_flatten_with_path": "flatten_with_path",
        "tree_leaves_with_path": "leaves_with_path",
        "tree_map_with_path": "map_with_path",
        "flatten_one_level": "flatten_one_level",
        "flatten_one_level_with_keys": "flatten_one_level_with_path",
        "all_leaves": "all_leaves",
        "Partial": "Partial",
        "PyTreeDef": "PyTreeDef",
        "keystr": "keystr",
        "register_pytree_node": "register_pytree_node",
        "register_pytree_node_class": "register_pytree_node_class",
        "register_pytree_with_keys": "register_pytree_with_keys",
        "register_pytree_with_keys_class": "register_pytree_with_keys_class",
        "register_dataclass": "register_dataclass",
        "register_static": "register_static",
        "treedef_tuple": "treedef_tuple",
        "treedef_children": "treedef_children",
        "treedef_is_leaf": "treedef_is_leaf",
        "is_tree_node": "is_tree_node",
    }
    for long, short in pairs.items():
        assert getattr(tu, long) is getattr(st, short), long


# --------------------------------------------------------------------- register_dataclass


def test_register_dataclass_infers_fields_from_static_metadata() -> None:
    @st.register_dataclass
    @dataclasses.dataclass
    class Layer:
        weight: Any
        bias: Any
        act: str = st.static(default="relu")
        width: int = dataclasses.field(default=3, metadata={"static": True})

    leaves, treedef = st.flatten(Layer([1, 2], 3))
    assert leaves == [1, 2, 3]
    assert repr(treedef) == "PyTreeDef(CustomNode(Layer[('relu', 3)], [[*, *], *]))"
    assert [st.keystr(p) for p, _ in st.leaves_with_path(Layer(1, 2))] == [".weight", ".bias"]
    assert st.structure(Layer(1, 2, "tanh")) != st.structure(Layer(1, 2))


def test_register_dataclass_explicit_fields_and_return_value() -> None:
    @dataclasses.dataclass
    class Conf:
        a: Any
        b: Any
        c: Any

    returned = st.register_dataclass(Conf, data_fields=["c", "a"], meta_fields=["b"])
    assert returned is Conf
    leaves, treedef = st.flatten(Conf(1, 2, 3))
    assert leaves == [3, 1]
    assert repr(treedef) == "PyTreeDef(CustomNode(Conf[(2,)], [*, *]))"
    assert [st.keystr(p) for p, _ in st.leaves_with_path(Conf(1, 2, 3))] == [".c", ".a"]


def test_register_dataclass_with_a_new_that_needs_arguments_says_so_when_rebuilt() -> None:
    @dataclasses.dataclass
    class Strict:
        x: Any

        def __new__(cls, x: Any) -> Any:  # a constructor spruce cannot call without arguments
            return super().__new__(cls)

    st.register_dataclass(Strict, data_fields=["x"], meta_fields=[])
    leaves, treedef = st.flatten(Strict(1))
    assert leaves == [1]
    for rebuild in (lambda: st.unflatten(treedef, [2]), lambda: st.map(lambda v: v + 1, Strict(1))):
        with pytest.raises(TypeError) as info:
            rebuild()
        msg = str(info.value)
        assert "register_dataclass" in msg and "Strict.__new__(cls) failed" in msg
        assert "register_pytree_node" in msg  # what to do instead
        assert "required positional argument" in msg  # and Python's own words


def test_fixed_keys_registration_gives_paths_and_checks_the_child_count() -> None:
    # the engine-internal registration spruce.Module uses: key paths without flatten_with_keys
    from spruce._tree._registry import register_with_fixed_keys

    class Fixed:
        def __init__(self, *items: Any) -> None:
            self.items = items

    register_with_fixed_keys(Fixed, lambda x: (list(x.items), None), lambda aux, ch: Fixed(*ch),
                             [st.GetAttrKey("u"), st.GetAttrKey("v")])
    leaves = st.leaves_with_path({"k": Fixed(1, 2)})
    assert [(st.keystr(p), v) for p, v in leaves] == [("['k'].u", 1), ("['k'].v", 2)]
    assert st.map(lambda v: v * 10, Fixed(1, 2)).items == (10, 20)
    assert st.leaves(Fixed(1, 2, 3)) == [1, 2, 3]  # keys are only read for paths
    with pytest.raises(TypeError, match="returned 3 children, but the class was registered with 2 keys"):
        st.leaves_with_path(Fixed(1, 2, 3))


def test_register_dataclass_drop_fields() -> None:
    @dataclasses.dataclass
    class WithCache:
        x: Any
        cache: Any = None

    st.register_dataclass(WithCache, data_fields=["x"], meta_fields=[], drop_fields=["cache"])
    assert st.leaves(WithCache(1, cache=[5, 6])) == [1]
    assert st.structure(WithCache(1, cache="a")) == st.structure(WithCache(2, cache="b"))


_CALLS: list[str] = []


@st.register_dataclass
@dataclasses.dataclass
class Validated:
    x: Any
    kind: str = st.static(default="k")

    def __post_init__(self) -> None:
        _CALLS.append("post_init")
        if not isinstance(self.x, int):
            raise TypeError("x must be an int")


def test_register_dataclass_unflatten_skips_init_and_post_init() -> None:
    obj = Validated(1)
    _CALLS.clear()
    out = st.map(lambda x: f"str{x}", obj)  # __post_init__ would raise on a str
    assert type(out) is Validated
    assert out.x == "str1" and out.kind == "k"
    leaves, treedef = st.flatten(obj)
    again = st.unflatten(treedef, [None])
    assert again.x is None and again.kind == "k"
    assert _CALLS == []


def test_register_dataclass_unflatten_skips_custom_init() -> None:
    calls: list[Any] = []

    @dataclasses.dataclass(init=False)
    class Custom:
        x: Any
        y: Any

        def __init__(self, x: Any) -> None:
            calls.append(x)
            self.x, self.y = x, x * 2

    st.register_dataclass(Custom, data_fields=["x", "y"], meta_fields=[])
    obj = Custom(2)
    calls.clear()
    out = st.map(lambda v: v + 100, obj)
    assert (out.x, out.y) == (102, 104)
    assert calls == []


def test_register_dataclass_frozen_and_slots() -> None:
    @dataclasses.dataclass(frozen=True)
    class Frozen:
        a: Any
        b: Any = st.static(default="s")

    @dataclasses.dataclass(slots=True)
    class Slotted:
        a: Any
        b: Any

    st.register_dataclass(Frozen)
    st.register_dataclass(Slotted)
    f = st.map(lambda v: v * 2, Frozen([1, 2]))
    assert f == Frozen([2, 4]) and f.b == "s"
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.a = 0  # type: ignore[misc]
    s = st.map(lambda v: v * 2, Slotted(1, (2,)))
    assert s == Slotted(2, (4,))
    assert not hasattr(s, "__dict__")


@pytest.mark.parametrize(
    "data,meta,field",
    [
        (["x", "y"], ["y"], "y"),  # overlap
        (["x"], ["y"], "z"),  # z missing from both
        (["x", "y", "z", "nope"], [], "nope"),  # not a field at all
    ],
)
def test_register_dataclass_bad_fields_name_the_field(data: Any, meta: Any, field: str) -> None:
    @dataclasses.dataclass
    class Three:
        x: Any
        y: Any
        z: Any

    with pytest.raises(ValueError) as info:
        st.register_dataclass(Three, data_fields=data, meta_fields=meta)
    assert field in str(info.value)
    # a failed registration leaves the class unregistered
    assert st.leaves(Three(1, 2, 3)) == [Three(1, 2, 3)]


# ---------------------------------------------------------------------- register_static


@dataclasses.dataclass(frozen=True)
class Cfg:
    lr: float


st.register_static(Cfg)


def test_register_static() -> None:
    tree = {"cfg": Cfg(0.1), "w": 5}
    leaves, treedef = st.flatten(tree)
    assert leaves == [5]
    assert repr(treedef) == "PyTreeDef({'cfg': CustomNode(Cfg[Cfg(lr=0.1)], []), 'w': *})"
    assert st.unflatten(treedef, [6]) == {"cfg": Cfg(0.1), "w": 6}
    assert st.structure(Cfg(0.1)) != st.structure(Cfg(0.2))
    assert st.structure(Cfg(0.1)) == st.structure(Cfg(0.1))


def test_register_static_as_decorator() -> None:
    @st.register_static
    class Marker:
        def __eq__(self, other: object) -> bool:
            return type(other) is Marker

        def __hash__(self) -> int:
            return 1

        def __repr__(self) -> str:
            return "Marker()"

    assert isinstance(Marker, type)
    assert st.leaves([Marker(), 1]) == [1]
    assert repr(st.structure(Marker())) == "PyTreeDef(CustomNode(Marker[Marker()], []))"


# ---------------------------------------------------------------- duplicates & unregister


@pytest.mark.parametrize(
    "builtin", [list, tuple, dict, OrderedDict, defaultdict, deque, type(None)]
)
def test_registering_a_builtin_node_type_raises(builtin: type) -> None:
    with pytest.raises(ValueError):
        st.register_pytree_node(builtin, lambda x: ((), None), lambda a, c: builtin())
    # and the builtin still behaves as before
    assert st.leaves(None if builtin is type(None) else builtin()) == []
    assert st.leaves(None if builtin is type(None) else builtin(), none_is_leaf=True) == (
        [None] if builtin is type(None) else []
    )


def test_registering_twice_raises_for_every_register_function() -> None:
    @dataclasses.dataclass
    class Once:
        pass

    st.register_pytree_node(Once, lambda x: ((), None), lambda a, c: Once())
    attempts = [
        lambda: st.register_pytree_node(Once, lambda x: ((), None), lambda a, c: Once()),
        lambda: st.register_pytree_with_keys(Once, lambda x: ((), None), lambda a, c: Once()),
        lambda: st.register_static(Once),
        lambda: st.register_dataclass(Once, data_fields=[], meta_fields=[]),
    ]
    for attempt in attempts:
        with pytest.raises(ValueError):
            attempt()


def test_registering_a_registered_dataclass_again_raises() -> None:
    @st.register_dataclass
    @dataclasses.dataclass
    class Twice:
        a: Any

    with pytest.raises(ValueError):
        st.register_dataclass(Twice)


def test_unregister_makes_instances_leaves_again_and_allows_reregistration() -> None:
    class Temp:
        def __init__(self, v: Any) -> None:
            self.v = v

    st.register_pytree_node(Temp, lambda t: ((t.v,), None), lambda a, c: Temp(c[0]))
    assert st.leaves(Temp(1)) == [1]
    st.unregister(Temp)
    t = Temp(1)
    assert st.leaves(t) == [t]
    st.register_pytree_node(Temp, lambda t: ((t.v, t.v), "x"), lambda a, c: Temp(c[0]))
    assert st.leaves(Temp(2)) == [2, 2]
    st.unregister(Temp)


def test_map_sees_a_registration_made_after_the_type_was_a_leaf() -> None:
    # map (the uncompiled build's especially: it keeps a set of known leaf types) must not
    # remember a type as a leaf once it is registered, nor as a node once it is unregistered
    class Late:
        def __init__(self, v: Any) -> None:
            self.v = v

    tree = [Late(1), [Late(2)]]
    assert st.map(lambda x: type(x).__name__, tree) == ["Late", ["Late"]]
    st.register_pytree_node(Late, lambda t: ((t.v,), None), lambda a, c: Late(c[0]))
    out = st.map(lambda x: x * 10, tree)
    assert [out[0].v, out[1][0].v] == [10, 20]
    st.unregister(Late)
    assert st.map(lambda x: type(x).__name__, tree) == ["Late", ["Late"]]


def test_racing_registrations_of_one_type_exactly_one_wins() -> None:
    class Contested:
        pass

    n = 8
    barrier = threading.Barrier(n)
    results: list[str] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        barrier.wait()
        try:
            st.register_pytree_node(
                Contested, lambda x, i=i: ((), i), lambda a, c: Contested()
            )
            outcome = "ok"
        except ValueError:
            outcome = "ValueError"
        except Exception as e:  # any other outcome fails the test below
            outcome = repr(e)
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["ValueError"] * (n - 1) + ["ok"]


# ------------------------------------------------------------------------- is_tree_node


def test_is_tree_node() -> None:
    class Plain:
        pass

    P = namedtuple("P", "a")

    class NT(NamedTuple):
        a: int

    for t in (list, tuple, dict, OrderedDict, defaultdict, deque, P, NT, type(None), st.Partial):
        assert st.is_tree_node(t) is True, t
    for t in (int, str, Plain, bytes, object):
        assert st.is_tree_node(t) is False, t
    assert st.is_tree_node(type(time.gmtime(0))) is True
    assert st.is_tree_node(type(os.stat("."))) is True
    assert st.is_tree_node(type(sys.float_info)) is True


# ------------------------------------------------------------------ struct sequences


def test_struct_sequences_are_nodes() -> None:
    fi = sys.float_info
    leaves, treedef = st.flatten(fi)
    assert leaves == list(fi)
    rebuilt = st.unflatten(treedef, leaves)
    assert type(rebuilt) is type(fi) and tuple(rebuilt) == tuple(fi)
    sr = os.stat(".")
    leaves, treedef = st.flatten(sr)
    assert leaves == list(sr)  # the visible (sequence) fields
    rebuilt = st.unflatten(treedef, leaves)
    assert type(rebuilt) is os.stat_result and tuple(rebuilt) == tuple(sr)
    # every path leads back to its leaf, including os.stat_result's unnamed fields
    from helpers import follow

    for path, leaf in st.leaves_with_path(sr):
        assert follow(sr, path) is leaf


# -------------------------------------------------------------------- namedtuples


def test_namedtuple_subclasses_are_nodes() -> None:
    class Base(NamedTuple):
        a: Any
        b: Any

    class Child(Base):
        def total(self) -> Any:
            return self.a + self.b

    out = st.map(lambda v: v * 3, Child(1, 2))
    assert type(out) is Child and out.total() == 9
    assert repr(st.structure(Child(1, 2))) == "PyTreeDef(CustomNode(namedtuple[Child], [*, *]))"
    assert st.structure(Child(1, 2)) != st.structure(Base(1, 2))


# ---------------------------------------------------------------------------- Partial


def test_partial_is_a_pytree_and_still_callable() -> None:
    def affine(x: Any, a: Any, b: Any = 0) -> Any:
        return a * x + b

    p = st.Partial(affine, a=2, b=1)
    assert p(3) == 7
    leaves, treedef = st.flatten(p)
    assert leaves == [2, 1]
    q = st.map(lambda v: v * 10, p)
    assert isinstance(q, st.Partial) and q.func is affine
    assert q(3) == 70
    assert st.structure(st.Partial(affine, 1)) != st.structure(st.Partial(max, 1))
    assert st.structure(st.Partial(affine, 1)) == st.structure(st.Partial(affine, 5))
    assert isinstance(p, __import__("functools").partial)


def test_partial_func_is_static_not_a_leaf() -> None:
    p = st.Partial(len)
    assert st.leaves(p) == []
    assert st.map(lambda v: v, p)("abc") == 3


# ----------------------------------------------------------------------------- static


def test_static_field_helper() -> None:
    f = st.static(default=3)
    assert isinstance(f, dataclasses.Field)
    assert f.default == 3
    assert f.metadata["static"] is True
    g = st.static(default_factory=list, metadata={"doc": "d"})
    assert g.metadata["static"] is True and g.metadata["doc"] == "d"


# -------------------------------------------------------------------------- broadcast


@pytest.mark.parametrize(
    "prefix,full,expected",
    [
        # each value printed by jax.tree.broadcast (jax 0.10.2) for the same arguments
        (1, [1, 2, {"a": 3}], [1, 1, {"a": 1}]),
        ([1, {"x": 2}], [[3, 4], {"x": (5, 6)}], [[1, 1], {"x": (2, 2)}]),
        ([1, None], [[3, 4], None], [[1, 1], None]),
        ({"b": "B", "a": "A"}, {"b": [0, 0], "a": 0}, {"b": ["B", "B"], "a": "A"}),
        ("v", None, None),
    ],
)
def test_broadcast_values(prefix: Any, full: Any, expected: Any) -> None:
    out = st.broadcast(prefix, full)
    assert_tree_equal(out, expected)


def test_broadcast_with_is_leaf() -> None:
    # as jax.tree.broadcast: is_leaf cuts the prefix tree; full subtrees are still expanded
    out = st.broadcast([0, 1], [[5, 6], (7,)], is_leaf=lambda x: isinstance(x, tuple))
    assert out == [[0, 0], (1,)]


# ---------------------------------------------------------------------- all / any / misc


def test_all_any() -> None:
    assert st.all([1, (True, {"a": "x"})]) is True
    assert st.all([1, (True, {"a": 0})]) is False
    assert st.all([]) is True and st.all(None) is True
    assert st.any([0, (False, {"a": ""})]) is False
    assert st.any([0, (False, {"a": "x"})]) is True
    assert st.any([]) is False
    assert st.all([[1], [0]], is_leaf=lambda x: isinstance(x, list)) is True


def test_all_leaves() -> None:
    assert st.all_leaves([1, "a", 2.0]) is True
    assert st.all_leaves([1, [2]]) is False
    assert st.all_leaves([None]) is False
    assert st.all_leaves([[1]], is_leaf=lambda x: isinstance(x, list)) is True


def test_is_leaf_function() -> None:
    assert st.is_leaf(1) is True
    assert st.is_leaf([]) is False
    assert st.is_leaf(None) is False
    assert st.is_leaf(None, none_is_leaf=True) is True
    assert st.is_leaf([1], is_leaf=lambda x: isinstance(x, list)) is True


def test_is_leaf_predicate_is_called_on_root_and_every_visited_object() -> None:
    seen: list[Any] = []
    tree = {"a": [1, (2,)], "b": None}

    def pred(x: Any) -> bool:
        seen.append(x)
        return isinstance(x, tuple)

    leaves = st.leaves(tree, is_leaf=pred)
    assert leaves == [1, (2,)]
    assert seen[0] is tree
    assert any(x is tree["a"] for x in seen)
    assert any(x == (2,) for x in seen) and 1 in seen


def test_iter_is_lazy() -> None:
    visited: list[Any] = []
    tree = [[i] for i in range(1000)]
    it = st.iter(tree, is_leaf=lambda x: visited.append(x) or False)
    assert next(it) == 0
    assert len(visited) < 20
    assert list(it) == list(range(1, 1000))


def test_map_calls_f_in_leaf_order_once_per_leaf() -> None:
    calls: list[Any] = []
    st.map(lambda x: calls.append(x), {"b": [3, 4], "a": 1, "c": None})
    assert calls == [1, 3, 4]


def test_map_with_is_leaf_and_none_is_leaf() -> None:
    assert st.map(lambda x: x is None, [None, 1], none_is_leaf=True) == [True, False]
    assert st.map(lambda x: x is None, [None, 1]) == [None, False]
    out = st.map(
        lambda x: len(x) if isinstance(x, list) else -x,
        {"a": [1, 2], "b": (3,)},
        is_leaf=lambda x: isinstance(x, list),
    )
    assert out == {"a": 2, "b": (-3,)}


def test_map_result_types_round_trip_everything() -> None:
    tree = {
        "od": OrderedDict([("z", 1), ("a", 2)]),
        "dd": defaultdict(list, {"b": 3}),
        "dq": deque([4, 5], maxlen=3),
        "ts": time.gmtime(0),
    }
    out = st.map(lambda x: x, tree)
    assert_tree_equal(out, tree)
    assert out["dd"]["missing"] == []  # the factory came back


# ------------------------------------------------------- the shared traversal parameters

TREE_WITH_NONES = {"b": [None, 1], "a": None}


def test_every_traversal_takes_none_is_leaf_keyword() -> None:
    kw = {"none_is_leaf": True}
    assert st.flatten(TREE_WITH_NONES, **kw)[0] == [None, None, 1]
    assert st.leaves(TREE_WITH_NONES, **kw) == [None, None, 1]
    assert st.structure(TREE_WITH_NONES, **kw).num_leaves == 3
    assert st.map(lambda x: x is None, TREE_WITH_NONES, **kw) == {"b": [True, False], "a": True}
    assert [x for _, x in st.flatten_with_path(TREE_WITH_NONES, **kw)[0]] == [None, None, 1]
    assert [st.keystr(p) for p, _ in st.leaves_with_path(TREE_WITH_NONES, **kw)] == [
        "['a']",
        "['b'][0]",
        "['b'][1]",
    ]
    assert st.map_with_path(lambda p, x: st.keystr(p), TREE_WITH_NONES, **kw) == {
        "b": ["['b'][0]", "['b'][1]"],
        "a": "['a']",
    }
    assert list(st.iter(TREE_WITH_NONES, **kw)) == [None, None, 1]
    assert st.reduce(lambda acc, x: acc + [x], TREE_WITH_NONES, [], **kw) == [None, None, 1]
    assert st.is_leaf(None, **kw) is True


def test_is_leaf_is_the_second_positional_parameter() -> None:
    is_list = lambda x: isinstance(x, list)
    assert st.flatten({"a": [1], "b": 2}, is_list)[0] == [[1], 2]
    assert st.leaves({"a": [1], "b": 2}, is_list) == [[1], 2]
    assert st.structure({"a": [1], "b": 2}, is_list).num_leaves == 2
    assert st.reduce(lambda acc, x: acc + [x], {"a": [1], "b": [2]}, [], is_list) == [[1], [2]]
    marker = [0, 0]  # a leaf only through is_leaf; without it [0, 0] vs [5, 6, 7] mismatch
    out = st.broadcast([marker, 1], [[5, 6, 7], 3], lambda x: x is marker)
    assert out == [[marker, marker, marker], 1] and out[0][0] is marker


def test_none_is_leaf_is_keyword_only_everywhere() -> None:
    for call in (
        lambda: st.flatten([None], None, True),
        lambda: st.leaves([None], None, True),
        lambda: st.structure([None], None, True),
        lambda: st.is_leaf(None, None, True),
    ):
        with pytest.raises(TypeError):
            call()
