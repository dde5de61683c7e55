"""PyTreeDef: counts, node data, prefix relations, repr, equality, hash, pickling, and the
module-level treedef helpers."""

from __future__ import annotations

import pickle
from collections import OrderedDict, defaultdict, deque, namedtuple
from typing import Any

import numpy as np
import pytest

import spruce.tree as st
import spruce.tree_util as tu
from helpers import Box, Params, assert_tree_equal, run_python

# ----------------------------------------------------------------------------- repr goldens

P = namedtuple("P", ["x", "y"])


class Named:
    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


st.register_pytree_node(Named, lambda n: ((n.a, n.b), "meta"), lambda aux, ch: Named(*ch))


# Each value was printed by jax.tree_util.tree_structure (jax 0.10.2) for the same tree.
@pytest.mark.parametrize(
    "tree,expected",
    [
        pytest.param(1, "PyTreeDef(*)", id="leaf"),
        pytest.param((1, 2, 3), "PyTreeDef((*, *, *))", id="tuple"),
        pytest.param([1, 2, 3], "PyTreeDef([*, *, *])", id="list"),
        pytest.param({"c": 3, "a": 1, "b": 2}, "PyTreeDef({'a': *, 'b': *, 'c': *})", id="dict"),
        pytest.param(None, "PyTreeDef(None)", id="none"),
        pytest.param([1, [None, 2], None], "PyTreeDef([*, [None, *], None])", id="none-holes"),
        pytest.param((1,), "PyTreeDef((*,))", id="1-tuple"),
        pytest.param(((),), "PyTreeDef(((),))", id="nested-empty-tuple"),
        pytest.param(P(1, 2), "PyTreeDef(CustomNode(namedtuple[P], [*, *]))", id="namedtuple"),
        pytest.param(
            OrderedDict([("b", 1), ("a", 2)]),
            "PyTreeDef(CustomNode(OrderedDict[('b', 'a')], [*, *]))",
            id="ordereddict",
        ),
        pytest.param(
            defaultdict(list, {"b": 1, "a": 2}),
            "PyTreeDef(CustomNode(defaultdict[(<class 'list'>, ('a', 'b'))], [*, *]))",
            id="defaultdict",
        ),
        # JAX prints custom node data with str(): the string 'meta' shows as meta
        pytest.param(Named(1, [2]), "PyTreeDef(CustomNode(Named[meta], [*, [*]]))", id="custom-str-aux"),
        pytest.param(
            Params(w=1, b=2, name="n"), "PyTreeDef(CustomNode(Params[('n',)], [*, *]))", id="dataclass"
        ),
        pytest.param(
            {"k": [P(1, None), (2,)]},
            "PyTreeDef({'k': [CustomNode(namedtuple[P], [*, None]), (*,)]})",
            id="nested",
        ),
        pytest.param({1: "a", -2: "b"}, "PyTreeDef({-2: *, 1: *})", id="int-keys"),
    ],
)
def test_repr_matches_jax(tree: Any, expected: str) -> None:
    assert repr(st.structure(tree)) == expected


def test_repr_of_deque_and_struct_sequences_is_readable() -> None:
    import time

    text = repr(st.structure(deque([1, 2], maxlen=4)))
    assert "deque" in text and "maxlen" in text and "4" in text
    assert "struct_time" in repr(st.structure(time.gmtime(0)))
    assert "float_info" in repr(st.structure(__import__("sys").float_info))


# --------------------------------------------------------------------------------- counts


@pytest.mark.parametrize(
    "tree,num_leaves,num_nodes",
    [
        (1, 1, 1),
        (None, 0, 1),
        ([], 0, 1),
        ([None, None], 0, 3),
        ({"a": [1, 2], "b": (3, {"c": 4})}, 4, 8),
        (P(P(1, 2), None), 2, 5),
    ],
)
def test_counts(tree: Any, num_leaves: int, num_nodes: int) -> None:
    treedef = st.structure(tree)
    assert (treedef.num_leaves, treedef.num_nodes) == (num_leaves, num_nodes)


def test_none_is_leaf_counts() -> None:
    treedef = st.structure([None, (None,)], none_is_leaf=True)
    assert (treedef.num_leaves, treedef.num_nodes) == (2, 4)
    assert st.leaves([None, (None,)], none_is_leaf=True) == [None, None]
    assert st.structure(None, none_is_leaf=True).num_leaves == 1


# ------------------------------------------------------------------------------ node_data


def test_node_data() -> None:
    assert st.structure(1).node_data() is None
    assert st.structure([1, 2]).node_data()[0] is list
    assert st.structure((1, 2)).node_data()[0] is tuple
    assert st.structure({"a": 1}).node_data()[0] is dict
    assert st.structure(None).node_data()[0] is type(None)
    assert st.structure(P(1, 2)).node_data()[0] is P
    assert st.structure(Named(1, 2)).node_data() == (Named, "meta")
    assert st.structure(Params(w=1, b=2, name="zz")).node_data() == (Params, ("zz",))
    assert st.structure(OrderedDict(a=1)).node_data()[0] is OrderedDict
    assert st.structure(defaultdict(int, a=1)).node_data()[0] is defaultdict
    assert st.structure(deque([1])).node_data()[0] is deque


# ------------------------------------------------------------------------ prefix relations


def test_is_prefix_of() -> None:
    s = st.structure
    assert s([0, 0]).is_prefix_of(s([0, (0, 0)]))
    assert not s([0, (0, 0)]).is_prefix_of(s([0, 0]))
    assert s(0).is_prefix_of(s({"a": [1, 2]}))
    assert s(0).is_prefix_of(s(None))
    assert not s([0, 0]).is_prefix_of(s((0, 0)))
    assert not s({"a": 0}).is_prefix_of(s({"b": 0}))
    assert not s([0, 0]).is_prefix_of(s([0, 0, 0]))
    assert not s(None).is_prefix_of(s(0))
    assert s({"a": 0, "b": None}).is_prefix_of(s({"b": None, "a": [1]}))
    assert not s(OrderedDict(a=0, b=0)).is_prefix_of(s(OrderedDict(b=0, a=0)))
    assert not s(Named(0, 0)).is_prefix_of(s((0, 0)))


def test_is_suffix_of_agreed_cases() -> None:
    # The spec does not define "suffix" beyond its name; only the cases every reading agrees
    # on are checked: reflexive, and false between structures that share no shape.
    s = st.structure
    for tree in ([0, (0, 0)], {"a": None}, 0, None):
        assert s(tree).is_suffix_of(s(tree))
    assert not s([0, 0]).is_suffix_of(s([0, (0, 0)]))
    assert not s({"a": 0}).is_suffix_of(s([0]))


# ------------------------------------------------------------------- children & compose


def test_children_and_treedef_helpers() -> None:
    treedef = st.structure({"b": (1, 2), "a": [3], "c": None})
    assert treedef.children() == [st.structure([3]), st.structure((1, 2)), st.structure(None)]
    assert st.treedef_children(treedef) == treedef.children()
    assert st.treedef_is_leaf(st.structure(1))
    assert not st.treedef_is_leaf(st.structure([1]))
    # JAX semantics: "leaf" here means a single-node structure, so None and [] count too
    assert st.treedef_is_leaf(st.structure(None))
    assert st.treedef_is_leaf(st.structure([]))
    assert st.treedef_is_leaf(st.structure(None, none_is_leaf=True))


def test_treedef_tuple() -> None:
    tds = [st.structure([1, 2]), st.structure(1), st.structure({"k": None})]
    t = st.treedef_tuple(tds)
    assert repr(t) == "PyTreeDef(([*, *], *, {'k': None}))"
    assert t.children() == tds
    assert t == st.structure(([0, 0], 0, {"k": None}))
    assert repr(st.treedef_tuple([])) == "PyTreeDef(())"
    assert st.treedef_tuple(iter(tds)) == t


def test_compose() -> None:
    outer = st.structure({"a": 0, "b": [0]})
    inner = st.structure((0, None, 0))
    composed = outer.compose(inner)
    assert repr(composed) == "PyTreeDef({'a': (*, None, *), 'b': [(*, None, *)]})"
    assert composed == st.structure({"a": (1, None, 2), "b": [(3, None, 4)]})
    assert composed.num_nodes == 10
    assert st.structure(0).compose(inner) == inner
    assert outer.compose(st.structure(0)) == outer


def test_unflatten_method_and_function_agree() -> None:
    treedef = st.structure({"x": [0, 0], "y": P(0, None)})
    want = {"x": [1, 2], "y": P(3, None)}
    assert treedef.unflatten([1, 2, 3]) == want
    assert st.unflatten(treedef, [1, 2, 3]) == want
    assert tu.tree_unflatten(treedef, [1, 2, 3]) == want


def test_unflatten_builds_from_a_copy_of_the_leaves_list() -> None:
    # as jax and optree (which copy the leaves into their own buffer): a callback that changes
    # the caller's list while the tree is built cannot change the tree
    given: list[Any] = []

    class Greedy:
        def __init__(self, a: Any, b: Any) -> None:
            self.a, self.b = a, b

    def unflatten(aux: Any, children: Any) -> Greedy:
        given.clear()
        return Greedy(*children)

    st.register_pytree_node(Greedy, lambda g: ((g.a, g.b), None), unflatten)
    treedef = st.structure([Greedy(0, 0), 0, Greedy(0, 0)])
    given.extend([1, 2, 3, 4, 5])
    out = treedef.unflatten(given)
    assert given == []  # the callback did clear it
    assert [type(x).__name__ for x in out] == ["Greedy", "int", "Greedy"]
    assert (out[0].a, out[0].b, out[1], out[2].a, out[2].b) == (1, 2, 3, 4, 5)


def _every_way(v: Any) -> Any:
    """A tree with every way unflatten finds a node's children (leaves in a row, the node
    built last, several built nodes, a mix with None holes), in leaf order ``v[0], v[1], ...``."""
    return {
        "z": {"b": v[1], "a": v[0]},  # leaves only, insertion order not sorted
        "y": [[v[2]], ({"k": [v[3]]},), P([v[4]], (v[5],))],  # one node child; nodes only
        "x": (None, v[6], [None, None], {"c": [v[7]], "b": None, "a": v[8]}),  # mixed, holes
        "w": [[], {}, (), Params(v[9], v[10], "n"), Box(Box(v[11], v[12], 0), [v[13]], 1)],
        "v": (v[14],),
    }


def test_unflatten_builds_every_kind_of_node_the_same_every_time() -> None:
    # keys sorted: v, w, x, y, z; in each dict the same, so leaf order is
    # v: 14; w: 9, 10, 11, 12, 13; x: 6, 8, 7; y: 2, 3, 4, 5; z: 0, 1
    order = [14, 9, 10, 11, 12, 13, 6, 8, 7, 2, 3, 4, 5, 0, 1]
    leaves, treedef = st.flatten(_every_way(list(range(15))))
    assert leaves == order
    for shift in (100, 200, 300):  # the first unflatten walks the table, later ones a plan
        new = [x + shift for x in range(15)]
        assert_tree_equal(treedef.unflatten([new[i] for i in order]), _every_way(new))
    for tree in [7, None, [], {}, (), [[[[7]]]], (None,), {"a": None}]:
        leaves, treedef = st.flatten(tree)
        for _ in range(3):
            assert_tree_equal(treedef.unflatten(leaves), tree)
    deep: Any = 7
    for i in range(3000):
        deep = [deep] if i % 2 else (deep, None, i)
    leaves, treedef = st.flatten(deep)
    for _ in range(3):
        out = treedef.unflatten(leaves)
        assert st.flatten(out) == (leaves, treedef)
        assert type(out) is list and type(out[0]) is tuple and out[0][1:] == (None, 2998)


def test_flatten_up_to() -> None:
    treedef = st.structure({"a": [0, 0], "b": 0})
    assert treedef.flatten_up_to({"a": [1, 2], "b": (3, 4)}) == [1, 2, (3, 4)]
    assert treedef.flatten_up_to({"b": None, "a": [[], {}]}) == [[], {}, None]


def test_paths() -> None:
    treedef = st.structure({"a": [0, P(0, 0)], "b": None})
    assert treedef.paths() == [
        (st.DictKey("a"), st.SequenceKey(0)),
        (st.DictKey("a"), st.SequenceKey(1), st.GetAttrKey("x")),
        (st.DictKey("a"), st.SequenceKey(1), st.GetAttrKey("y")),
    ]
    assert [st.keystr(p) for p in treedef.paths()] == ["['a'][0]", "['a'][1].x", "['a'][1].y"]


# --------------------------------------------------------------------- equality and hash


@pytest.mark.parametrize(
    "a,b",
    [
        ([1, 2], (1, 2)),
        ([1, 2], [1, 2, 3]),
        ({"a": 1}, {"b": 1}),
        (P(1, 2), (1, 2)),
        (P(1, 2), namedtuple("P", ["x", "y"])(1, 2)),  # same name and fields, another class
        (OrderedDict(a=1, b=2), OrderedDict(b=2, a=1)),
        (OrderedDict(a=1), {"a": 1}),
        (defaultdict(list, a=1), defaultdict(set, a=1)),
        (deque([1], maxlen=1), deque([1], maxlen=2)),
        (Named(1, 2), (1, 2)),
        (Params(w=1, b=2, name="x"), Params(w=1, b=2, name="y")),
        (None, 1),
        (None, ()),
        ([None], [1]),
    ],
)
def test_structures_differ(a: Any, b: Any) -> None:
    assert st.structure(a) != st.structure(b)
    assert not (st.structure(a) == st.structure(b))


def test_equal_structures_hash_equal_including_node_data() -> None:
    pairs = [
        ({"a": 1, "b": 2}, {"b": 3, "a": 4}),
        (Params(w=1, b=2, name="x"), Params(w=3, b=4, name="x")),
        (defaultdict(list, a=1), defaultdict(list, a=2)),
        (Named(1, 2), Named(3, 4)),
    ]
    for a, b in pairs:
        assert st.structure(a) == st.structure(b)
        assert hash(st.structure(a)) == hash(st.structure(b))
    # dict keys and node data take part in the hash: distinct structures spread out
    hashes = {hash(st.structure({k: 0})) for k in "abcdefghij"}
    hashes |= {hash(st.structure(Params(w=0, b=0, name=n))) for n in "abcdefghij"}
    assert len(hashes) >= 15


def test_treedef_compares_unequal_to_other_types() -> None:
    assert st.structure([1]) != [1]
    assert st.structure(1) != "PyTreeDef(*)"
    assert st.structure(1) is not None


def test_pickle_round_trip_with_custom_and_none_is_leaf() -> None:
    for treedef in (
        st.structure({"a": Params(w=[1], b=None, name="q"), "b": Box(1, 2, ("t", 1))}),
        st.structure([None, 1], none_is_leaf=True),
        st.structure(deque([OrderedDict(z=1, a=2)], maxlen=3)),
    ):
        clone = pickle.loads(pickle.dumps(treedef))
        assert clone == treedef
        assert hash(clone) == hash(treedef)
        assert repr(clone) == repr(treedef)


def test_pytreedef_is_exported_type() -> None:
    assert isinstance(st.structure(1), st.PyTreeDef)
    assert tu.PyTreeDef is st.PyTreeDef


# --------------------------------------------------------- node data that is not plain


class HoldsAux:
    """Custom node whose node data is whatever object it was built with."""

    def __init__(self, child: Any, aux: Any) -> None:
        self.child, self.aux = child, aux


st.register_pytree_node(
    HoldsAux, lambda h: ((h.child,), h.aux), lambda aux, ch: HoldsAux(ch[0], aux)
)


def test_numpy_node_data_hash_and_eq_say_hashable() -> None:
    try:
        a = st.structure(HoldsAux(1, np.arange(3)))
        b = st.structure(HoldsAux(1, np.arange(3)))
    except (TypeError, ValueError) as e:  # rejected at flatten: also allowed
        assert "hashable" in str(e)
        return
    with pytest.raises((TypeError, ValueError), match="hashable"):
        hash(a)
    with pytest.raises((TypeError, ValueError), match="hashable"):
        a == b  # noqa: B015


def test_list_node_data_is_rejected_or_snapshotted() -> None:
    aux = ["v1"]
    try:
        treedef = st.structure(HoldsAux(1, aux))
    except (TypeError, ValueError) as e:
        assert "hashable" in str(e) or "list" in str(e)
        return
    before = repr(treedef)
    assert "v1" in before
    try:
        h_before: Any = hash(treedef)
    except (TypeError, ValueError) as e:
        h_before = type(e)
    aux.append("v2")
    aux[0] = "changed"
    assert repr(treedef) == before
    assert str(treedef) == before
    try:
        h_after: Any = hash(treedef)
    except (TypeError, ValueError) as e:
        h_after = type(e)
    assert h_after == h_before


def test_node_data_with_a_broken_str_still_flattens_and_maps() -> None:
    class Broken:  # unhashable (eq without hash), and its str raises
        def __eq__(self, other: object) -> bool:
            return other is self

        def __str__(self) -> str:
            raise RuntimeError("no str")

        __repr__ = __str__
        __hash__ = None  # type: ignore[assignment]

    aux = Broken()
    treedef = st.structure(HoldsAux(1, aux))
    assert "str failed: RuntimeError" in repr(treedef)
    assert st.map(lambda x: x + 1, HoldsAux(1, aux)).child == 2
    with pytest.raises(TypeError, match="not hashable"):
        hash(treedef)


def test_list_in_dataclass_static_field_is_rejected_or_snapshotted() -> None:
    import dataclasses

    @dataclasses.dataclass
    class WithListMeta:
        x: Any
        tags: list = dataclasses.field(default_factory=list, metadata={"static": True})

    st.register_dataclass(WithListMeta)
    obj = WithListMeta(x=1, tags=["a"])
    try:
        treedef = st.structure(obj)
    except (TypeError, ValueError) as e:
        assert "tags" in str(e) or "hashable" in str(e)
        return
    before = repr(treedef)
    obj.tags.append("b")
    assert repr(treedef) == before
    assert repr(st.structure(WithListMeta(x=1, tags=["a"]))) == before


SELF_REFERENCE_SCRIPT = """
import dataclasses
import spruce.tree as st

class Holder:
    def __init__(self, child, aux):
        self.child, self.aux = child, aux

st.register_pytree_node(Holder, lambda h: ((h.child,), h.aux), lambda a, c: Holder(c[0], a))

def outcome(f):
    try:
        f()
        return "ok"
    except Exception as e:  # RecursionError, TypeError, ValueError: all terminate
        return type(e).__name__

# 1. list aux into which the treedef itself is appended after flattening
box = []
td = None
try:
    td = st.structure(Holder(1, box))
except Exception as e:
    print("rejected", type(e).__name__)
if td is not None:
    box.append(td)
    print("repr", outcome(lambda: repr(td)))
    print("hash", outcome(lambda: hash(td)))
    print("eq", outcome(lambda: td == td))

# 2. a register_static object that holds the treedef (its repr/hash/eq go through it)
class Static:
    def __init__(self):
        self.held = None
    def __repr__(self):
        return f"Static({self.held!r})"
    def __hash__(self):
        return hash(("static", self.held))
    def __eq__(self, other):
        return isinstance(other, Static) and self.held == other.held

st.register_static(Static)
s = Static()
td2 = st.structure([s, 1])
s.held = td2
print("repr2", outcome(lambda: repr(td2)))
print("hash2", outcome(lambda: hash(td2)))
s_other = Static()
td3 = st.structure([s_other, 1])
s_other.held = td3
print("eq2", outcome(lambda: td2 == td3))
print("done")
"""


@pytest.mark.subprocess
def test_self_referential_node_data_terminates() -> None:
    proc = run_python(SELF_REFERENCE_SCRIPT, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == "done", proc.stdout
    # every probe printed an outcome (returned or raised an ordinary exception, no hang/crash)
    names = [ln.split()[0] for ln in lines[:-1]]
    assert "repr2" in names and "hash2" in names and "eq2" in names
    assert ("rejected" in names) or {"repr", "hash", "eq"} <= set(names)


def test_unflatten_takes_a_spruce_or_jax_treedef_and_names_anything_else() -> None:
    import jax

    leaves, td = st.flatten({"b": 1, "a": [2, 3]})
    assert st.unflatten(td, [10, 20, 30]) == {"b": 30, "a": [10, 20]}
    jtd = jax.tree_util.tree_structure({"b": 1, "a": [2, 3]})
    assert st.unflatten(jtd, [10, 20, 30]) == {"a": [10, 20], "b": 30}
    with pytest.raises(TypeError, match="unflatten expects a PyTreeDef as its first argument, got None"):
        st.unflatten(None, [1])

    class NotCallable:
        unflatten = 5

    with pytest.raises(TypeError, match="unflatten expects a PyTreeDef as its first argument"):
        st.unflatten(NotCallable(), [1])
    with pytest.raises(ValueError, match="too few leaves"):
        st.unflatten(td, [1])
