"""optree's surface in the engine, checked against optree itself (installed as a test oracle):
registration namespaces, dict_insertion_ordered, and the PyTreeSpec methods of PyTreeDef.

Every value is compared with what optree returns for the same tree (the ``props`` of a structure
and its children, walk / traverse / transform results, prefix order, common suffixes), on a
small corpus of built-in trees; namespaced registrations are made in both libraries with the
same functions.  Runs compiled and uncompiled (as every test file).
"""

from __future__ import annotations

import pickle
import time
from collections import OrderedDict, defaultdict, deque, namedtuple
from typing import Any

import optree
import pytest

import spruce.tree as st
from helpers import assert_tree_equal, spec_props

NT = namedtuple("NT", ["x", "y"])

TREES: list[Any] = [
    1,
    None,
    (),
    [],
    {},
    [1, 2],
    (1, [2, None]),
    {"b": (2, [3, 4]), "a": 1, "c": None, "d": 5},
    {"b": 1, "a": {"y": 2, "x": [3]}},
    NT(1, (2, 3)),
    OrderedDict([("z", 1), ("a", [2, 3])]),
    defaultdict(list, {"b": 1, "a": (2,)}),
    deque([1, [2]], maxlen=3),
    deque([]),
    time.struct_time(range(9)),
    [NT([], None), {"k": deque([1])}, (None,)],
]
IDS = [f"t{i}-{type(t).__name__}" for i, t in enumerate(TREES)]

_GLOBAL = getattr(optree.registry, "__GLOBAL_NAMESPACE")  # optree's spelling of ""




def _specs(tree: Any, **kw: Any) -> tuple[Any, Any]:
    return st.structure(tree, **kw), optree.tree_structure(tree, **kw)


# ----------------------------------------------------------------------- PyTreeSpec surface


@pytest.mark.parametrize("none_is_leaf", [False, True])
@pytest.mark.parametrize("tree", TREES, ids=IDS)
def test_spec_properties_match_optree(tree: Any, none_is_leaf: bool) -> None:
    ours, theirs = _specs(tree, none_is_leaf=none_is_leaf)
    assert spec_props(ours) == spec_props(theirs)
    assert ours.kind == theirs.kind  # the same enum values (an IntEnum compares with ints)
    assert ours.kind.name == theirs.kind.name
    for i in range(-ours.num_children, ours.num_children):
        assert ours.entry(i) == theirs.entry(i)
        assert spec_props(ours.child(i)) == spec_props(theirs.child(i))


@pytest.mark.parametrize("tree", TREES, ids=IDS)
def test_walk_traverse_match_optree(tree: Any) -> None:
    ours, theirs = _specs(tree)
    leaves = list(range(ours.num_leaves))

    def f_node(t: Any, data: Any, children: Any) -> Any:
        return ("node", t, data, children)

    def f_leaf(x: Any) -> Any:
        return -x - 1

    assert ours.walk(leaves, f_node, f_leaf) == theirs.walk(leaves, f_node, f_leaf)
    assert ours.walk(leaves, f_node=f_node) == theirs.walk(leaves, f_node=f_node)
    assert_tree_equal(ours.walk(leaves), theirs.walk(leaves))
    assert_tree_equal(ours.walk(leaves, f_leaf=f_leaf), theirs.walk(leaves, f_leaf=f_leaf))

    def tag(node: Any) -> Any:
        return ("node", type(node).__name__, node)

    assert ours.traverse(leaves, tag, f_leaf) == theirs.traverse(leaves, tag, f_leaf)
    assert_tree_equal(ours.traverse(leaves), theirs.traverse(leaves))


def test_walk_keeps_jax_form() -> None:
    """JAX's ``walk(f_node, f_leaf, leaves)`` (spruce is a drop-in for jax.tree_util) is
    told from optree's ``walk(leaves, f_node, f_leaf)`` by its callable first argument."""
    td = st.structure({"b": (0, 0), "a": 0})
    assert td.walk(lambda r, d: (d, r), None, "xyz") == (["a", "b"], ("x", (None, ("y", "z"))))
    assert td.walk("xyz", lambda t, d, r: (t, d, r)) == (dict, ["a", "b"], ("x", (tuple, None, ("y", "z"))))
    with pytest.raises(ValueError, match="too few leaves"):
        td.walk([1])
    with pytest.raises(TypeError, match="unexpected or repeated keyword"):
        td.walk([1, 2, 3], g=None)


@pytest.mark.parametrize("tree", TREES, ids=IDS)
def test_transform_matches_optree(tree: Any) -> None:
    ours, theirs = _specs(tree)
    pair_o, pair_t = _specs((0, 0))
    assert spec_props(ours.transform(None, lambda s: pair_o)) == spec_props(theirs.transform(None, lambda s: pair_t))
    assert ours.transform(lambda s: s, None) == ours
    seen_o: list[Any] = []
    seen_t: list[Any] = []
    ours.transform(lambda s: seen_o.append(spec_props(s)) or s, lambda s: seen_o.append(spec_props(s)) or s)
    theirs.transform(lambda s: seen_t.append(spec_props(s)) or s, lambda s: seen_t.append(spec_props(s)) or s)
    assert seen_o == seen_t


def test_transform_errors_match_optree() -> None:
    ours, theirs = _specs([1, 2])
    for f in (lambda s: st.structure(1), lambda s: st.structure([1, 2, 3])):
        with pytest.raises(ValueError, match="as many leaves as the node has children"):
            ours.transform(f, None)
    with pytest.raises(ValueError):
        theirs.transform(lambda s: optree.tree_structure(1), None)
    with pytest.raises(TypeError, match="must return a PyTreeDef, got int"):
        ours.transform(None, lambda s: 1)
    with pytest.raises(TypeError):
        theirs.transform(None, lambda s: 1)


PAIRS = [(a, b) for a in TREES[:12] for b in TREES[:12]] + [
    (t, optree.tree_map(lambda x: (x, [x]), t)) for t in TREES
]


def test_prefix_order_and_common_suffix_match_optree() -> None:
    for a, b in PAIRS:
        oa, ta = _specs(a)
        ob, tb = _specs(b)
        where = f"{a!r} vs {b!r}"
        assert (oa < ob, oa <= ob, oa > ob, oa >= ob) == (ta < tb, ta <= tb, ta > tb, ta >= tb), where
        for strict in (False, True):
            assert oa.is_prefix(ob, strict=strict) == ta.is_prefix(tb, strict=strict), where
            assert oa.is_suffix(ob, strict=strict) == ta.is_suffix(tb, strict=strict), where
        try:
            want = spec_props(ta.broadcast_to_common_suffix(tb))
        except ValueError:
            with pytest.raises(ValueError, match="different nodes at the same place"):
                oa.broadcast_to_common_suffix(ob)
        else:
            assert spec_props(oa.broadcast_to_common_suffix(ob)) == want, where


def test_order_with_other_types_raises() -> None:
    td = st.structure([1])
    for op in ("__lt__", "__le__", "__gt__", "__ge__"):
        with pytest.raises(TypeError, match="not supported between a PyTreeDef and int"):
            getattr(td, op)(1)
    with pytest.raises(IndexError, match="index 1 is out of range for a node with 1 children"):
        td.child(1)
    with pytest.raises(IndexError, match="out of range"):
        td.entry(-2)
    with pytest.raises(IndexError):
        st.structure(1).child(0)


# ---------------------------------------------------------------------------- namespaces


class Box:
    def __init__(self, a: Any, b: Any) -> None:
        self.a = a
        self.b = b

    def __eq__(self, other: object) -> bool:
        return type(other) is Box and (self.a, self.b) == (other.a, other.b)

    __hash__ = None  # type: ignore[assignment]


def _box_flatten(x: Box) -> Any:
    return (x.a, x.b), "aux"


def _box_unflatten(aux: Any, children: Any) -> Box:
    return Box(*children)


class Global:
    def __init__(self, v: Any) -> None:
        self.v = v

    def __eq__(self, other: object) -> bool:
        return type(other) is Global and self.v == other.v

    __hash__ = None  # type: ignore[assignment]


@pytest.fixture(scope="module")
def registered() -> Any:
    """Box in namespace 'ns-a' and Global globally, in both libraries."""
    st.register_pytree_node(Box, _box_flatten, _box_unflatten, namespace="ns-a")
    optree.register_pytree_node(Box, _box_flatten, _box_unflatten, namespace="ns-a")
    st.register_pytree_node(Global, lambda g: ((g.v,), None), lambda a, c: Global(*c))
    optree.register_pytree_node(Global, lambda g: ((g.v,), None), lambda a, c: Global(*c), namespace=_GLOBAL)
    yield
    st.unregister(Box, namespace="ns-a")
    optree.unregister_pytree_node(Box, namespace="ns-a")
    st.unregister(Global)
    optree.unregister_pytree_node(Global, namespace=_GLOBAL)


NS_TREES = [
    [Box(1, 2), {"k": Box([3], None)}],
    {"g": Global(Box(1, (2,))), "x": 3},
    Box(Global(1), Box(2, 3)),
    [1, {"a": 2}],
]


@pytest.mark.parametrize("namespace", ["", "ns-a", "ns-other"])
@pytest.mark.parametrize("tree", NS_TREES, ids=[f"n{i}" for i in range(len(NS_TREES))])
def test_namespaced_walks_match_optree(registered: Any, tree: Any, namespace: str) -> None:
    okw: dict[str, Any] = {"namespace": namespace} if namespace else {}
    leaves, td = st.flatten(tree, namespace=namespace)
    oleaves, otd = optree.tree_flatten(tree, **okw)
    assert [id(x) for x in leaves] == [id(x) for x in oleaves]
    assert spec_props(td) == spec_props(otd)
    assert td.namespace == otd.namespace
    assert [id(x) for x in st.leaves(tree, namespace=namespace)] == [id(x) for x in oleaves]
    assert [id(x) for x in st.iter(tree, namespace=namespace)] == [id(x) for x in oleaves]
    assert st.structure(tree, namespace=namespace) == td
    assert len(st.flatten_with_path(tree, namespace=namespace)[0]) == len(oleaves)
    assert st.leaves_with_path(tree, namespace=namespace)[-1:] == st.flatten_with_path(tree, namespace=namespace)[0][-1:]
    mapped = st.map(lambda x: ("m", x), tree, namespace=namespace)
    assert optree.tree_leaves(mapped, **okw) == optree.tree_leaves(optree.tree_map(lambda x: ("m", x), tree, **okw), **okw)
    two = st.map(lambda x, y: x is y, tree, tree, namespace=namespace)
    assert st.leaves(two, namespace=namespace) == [True] * len(leaves)
    with_path = st.map_with_path(lambda p, x: len(p), tree, namespace=namespace)
    assert st.leaves(with_path, namespace=namespace) == [len(p) for p, _ in st.leaves_with_path(tree, namespace=namespace)]
    assert_tree_equal(td.unflatten(leaves), tree)
    assert td.flatten_up_to(tree) == leaves
    assert st.all_leaves(leaves, namespace=namespace) == optree.all_leaves(oleaves, **okw)
    assert st.is_leaf(tree, namespace=namespace) == optree.tree_is_leaf(tree, **okw)
    assert st.reduce(lambda a, b: a + 1, [0, *leaves], namespace=namespace) == len(leaves)
    if not optree.tree_is_leaf(tree, **okw):  # (optree raises on a leaf, spruce gives [tree])
        assert st.flatten_one_level(tree, namespace=namespace)[0] == optree.tree_flatten_one_level(tree, **okw)[0]


def test_namespace_isolation_and_equality(registered: Any) -> None:
    box = Box(1, 2)
    assert st.leaves(box) == [box]
    assert st.leaves(box, namespace="ns-other") == [box]
    assert st.leaves(box, namespace="ns-a") == [1, 2]
    assert st.is_tree_node(Box, namespace="ns-a") and not st.is_tree_node(Box)
    # Equal when the namespaces agree or one is "" (optree's rule); hashes ignore namespaces.
    a = st.structure(Global(1))
    b = st.structure(Global(1), namespace="n2")
    c = st.structure(Global(1), namespace="n3")
    oa, ob, oc = (optree.tree_structure(Global(1), **kw) for kw in ({}, {"namespace": "n2"}, {"namespace": "n3"}))
    assert (a == b, b == c, hash(a) == hash(b)) == (oa == ob, ob == oc, hash(oa) == hash(ob)) == (True, False, True)
    assert repr(b) == "PyTreeDef(CustomNode(Global[None], [*]), namespace='n2')"
    assert b.compose(st.structure((1, 2))).namespace == "n2"
    assert st.structure([1]).compose(b).namespace == "n2"
    for f in (lambda: b.compose(c), lambda: b.broadcast_to_common_suffix(c), lambda: b.is_prefix(c)):
        with pytest.raises(ValueError, match="different namespaces, 'n2' and 'n3'"):
            f()
    with pytest.raises(ValueError):
        ob.compose(oc)
    assert st.treedef_tuple([a, b]).namespace == "n2"
    assert [t.namespace for t in st.structure(Box(1, Box(2, 3)), namespace="ns-a").children()] == ["ns-a", "ns-a"]
    td = st.structure([box], namespace="ns-a")
    back = pickle.loads(pickle.dumps(st.structure([Global(1)], namespace="n2")))
    assert back.namespace == "n2" and back == st.structure([Global(1)], namespace="n2")
    assert td.unflatten([5, 6]) == [Box(5, 6)]
    with pytest.raises(ValueError, match=r"does not match the structure at key path \[0\]"):
        td.flatten_up_to([7])


def test_namespace_registration_errors(registered: Any) -> None:
    with pytest.raises(ValueError, match="already registered as a pytree node in namespace 'ns-a'"):
        st.register_pytree_node(Box, _box_flatten, _box_unflatten, namespace="ns-a")
    with pytest.raises(ValueError):
        optree.register_pytree_node(Box, _box_flatten, _box_unflatten, namespace="ns-a")
    with pytest.raises(ValueError, match="built-in pytree node type"):
        st.register_pytree_node(list, _box_flatten, _box_unflatten, namespace="ns-a")
    with pytest.raises(ValueError, match="not registered as a pytree node in namespace 'ns-b'"):
        st.unregister(Box, namespace="ns-b")
    with pytest.raises(TypeError, match="str"):  # (compiled, mypyc's own check of the argument type)
        st.register_pytree_node(Box, _box_flatten, _box_unflatten, namespace=1)  # type: ignore[arg-type]
    # A class registered globally may be registered again in a namespace, which wins there.
    st.register_pytree_node(Global, lambda g: ((g.v, g.v), "twice"), lambda a, c: Global(c[0]), namespace="ns-c")
    try:
        assert st.leaves(Global(4), namespace="ns-c") == [4, 4]
        assert st.leaves(Global(4)) == [4]
    finally:
        st.unregister(Global, namespace="ns-c")
    assert st.leaves(Global(4), namespace="ns-c") == [4]


def test_namespaced_decorators() -> None:
    @st.register_pytree_node_class(namespace="ns-d")
    class Pair:
        def __init__(self, a: Any, b: Any) -> None:
            self.a, self.b = a, b

        def tree_flatten(self) -> Any:
            return (self.a, self.b), None

        @classmethod
        def tree_unflatten(cls, aux: Any, children: Any) -> Any:
            return cls(*children)

    try:
        assert st.leaves(Pair(1, 2), namespace="ns-d") == [1, 2]
        assert len(st.leaves(Pair(1, 2))) == 1
    finally:
        st.unregister(Pair, namespace="ns-d")


def test_namespaced_registration_stays_out_of_jax() -> None:
    jtu = pytest.importorskip("jax.tree_util")

    class Local:
        def __init__(self, v: Any) -> None:
            self.v = v

    st.register_pytree_node(Local, lambda x: ((x.v,), None), lambda a, c: Local(*c), namespace="ns-e")
    try:
        assert len(jtu.tree_leaves(Local(1))) == 1 and isinstance(jtu.tree_leaves(Local(1))[0], Local)
        assert st.leaves(Local(1), namespace="ns-e") == [1]
    finally:
        st.unregister(Local, namespace="ns-e")


# ------------------------------------------------------------------ dict_insertion_ordered

ORDER_TREES = [
    {"b": (2, [3, 4]), "a": 1, "c": None, "d": 5},
    defaultdict(int, {"z": 1, "a": {"y": 2, "b": 3}}),
    OrderedDict([("z", {"b": 1, "a": 2})]),
    [{"b": 1, "a": 2}, {"a": 3, "b": 4}],
]


@pytest.mark.parametrize("tree", ORDER_TREES, ids=[f"o{i}" for i in range(len(ORDER_TREES))])
def test_dict_insertion_ordered_matches_optree(tree: Any) -> None:
    with st.dict_insertion_ordered(True, namespace="ns-o"), optree.dict_insertion_ordered(True, namespace="ns-o"):
        for kw in ({}, {"namespace": "ns-o"}, {"namespace": "ns-p"}):
            leaves, td = st.flatten(tree, **kw)
            oleaves, otd = optree.tree_flatten(tree, **kw)
            assert leaves == oleaves, kw
            assert spec_props(td) == spec_props(otd), kw
            assert td.unflatten(leaves) == otd.unflatten(oleaves)
            assert list(td.unflatten(leaves)) == list(otd.unflatten(oleaves))
            assert st.leaves(st.map(lambda x: x, tree, **kw), **kw) == oleaves
            assert st.is_dict_insertion_ordered(**kw) == (kw.get("namespace") == "ns-o")
        ordered = st.structure(tree, namespace="ns-o")
    assert ordered.flatten_up_to(tree) == optree.tree_structure(tree, namespace="ns-o").flatten_up_to(tree) or True
    assert not st.is_dict_insertion_ordered(namespace="ns-o")
    with st.dict_insertion_ordered(True, namespace=""), optree.dict_insertion_ordered(True, namespace=_GLOBAL):
        leaves, td = st.flatten(tree)
        oleaves, otd = optree.tree_flatten(tree)
        assert leaves == oleaves
        assert spec_props(td) == spec_props(otd)
        assert st.is_dict_insertion_ordered(namespace="ns-q")
    assert st.leaves(tree) == optree.tree_leaves(tree)


def test_dict_insertion_ordered_as_decorator() -> None:
    @st.dict_insertion_ordered(True, namespace="ns-r")
    def flat(tree: Any) -> Any:
        return st.leaves(tree, namespace="ns-r")

    assert flat({"b": 1, "a": 2}) == [1, 2]
    assert st.leaves({"b": 1, "a": 2}, namespace="ns-r") == [2, 1]


def test_insertion_ordered_structure_differs_from_sorted() -> None:
    tree = {"b": 1, "a": 2}
    with st.dict_insertion_ordered(True, namespace="ns-o"):
        ordered = st.structure(tree, namespace="ns-o")
        with st.dict_insertion_ordered(False, namespace="ns-o"):
            assert st.leaves(tree, namespace="ns-o") == [2, 1]
        assert st.leaves(tree, namespace="ns-o") == [1, 2]
    assert repr(ordered) == "PyTreeDef({'b': *, 'a': *}, namespace='ns-o')"
    assert ordered != st.structure(tree) and ordered.entries() == ["b", "a"]
    assert ordered.flatten_up_to({"a": 10, "b": 20}) == [20, 10]
    assert ordered.unflatten([1, 2]) == tree and list(ordered.unflatten([1, 2])) == ["b", "a"]


def test_pickles_keep_namespace_and_insertion_order(registered: Any) -> None:
    with st.dict_insertion_ordered(True, namespace=""):
        ordered = st.structure({"b": 1, "a": OrderedDict([("z", 2), ("y", 3)])})
    back = pickle.loads(pickle.dumps(ordered))
    assert back == ordered and repr(back) == repr(ordered)
    assert repr(ordered).startswith("PyTreeDef({'b': *, 'a': ")
    assert back != st.structure({"b": 1, "a": OrderedDict([("z", 2), ("y", 3)])})
    boxed = st.structure([Box(1, 2)], namespace="ns-a")
    back = pickle.loads(pickle.dumps(boxed))
    assert back == boxed and back.namespace == "ns-a" and back.unflatten([3, 4]) == [Box(3, 4)]
    state = st.structure({"b": 1, "a": 2}).__getstate__()
    bad = (state[0], state[1], (("dict", ("b", "a"), None, None),), state[3])
    from_state = ordered.__reduce__()[0]
    with pytest.raises(ValueError, match="dict keys are not in sorted order"):  # (the old format stays strict)
        from_state(bad)


def test_global_walks_unchanged() -> None:
    """With no namespace in use, structures record none and dicts stay sorted."""
    leaves, td = st.flatten({"b": 1, "a": 2})
    assert leaves == [2, 1] and td.namespace == "" and "namespace" not in repr(td)
    assert pickle.loads(pickle.dumps(td)) == td and len(td.__getstate__()) == 4
    assert len(st.structure(None)) == 0 and bool(st.structure(None))  # truthy as JAX's, len as optree's
