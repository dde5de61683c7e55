"""spruce.optree's tree operations against optree's own (installed as a test oracle).

Each function is called in both libraries on the same trees (built-in containers, namedtuples,
struct sequences, ordered and default dicts, deques, None, and classes registered in a
namespace with the same functions in both) with ``none_is_leaf`` off and on, and the results
are compared: leaves, paths, rebuilt trees, broadcasts, folds, one-level flattens, and the
places ``prefix_errors`` reports.  Bad input raises the exception class optree raises.
"""

from __future__ import annotations

import operator
import time
from collections import OrderedDict, defaultdict, deque, namedtuple
from typing import Any

import optree
import pytest

import spruce.optree as so
import spruce.tree as st

NT = namedtuple("NT", ["x", "y"])

TREES: list[Any] = [
    1,
    None,
    (),
    [1, 2],
    (1, [2, None]),
    {"b": (2, [3, 4]), "a": 1, "c": None, "d": 5},
    NT(1, (2, 3)),
    OrderedDict([("z", 1), ("a", [2, 3])]),
    defaultdict(list, {"b": 1, "a": (2,)}),
    deque([1, [2]], maxlen=3),
    time.struct_time(range(9)),
    [NT([], None), {"k": deque([1])}, (None,)],
]
IDS = [f"t{i}-{type(t).__name__}" for i, t in enumerate(TREES)]
NONE = [False, True]


class Box:
    """A container registered in namespace "ops" of both libraries with entries."""

    def __init__(self, left: Any, right: Any) -> None:
        self.left, self.right = left, right

    def __eq__(self, other: object) -> bool:
        return type(other) is Box and (self.left, self.right) == (other.left, other.right)

    def __repr__(self) -> str:
        return f"Box({self.left!r}, {self.right!r})"


def _box_flatten(b: Box) -> tuple[tuple[Any, Any], str, tuple[str, str]]:
    return (b.left, b.right), "box", ("left", "right")


def _box_unflatten(meta: str, children: Any) -> Box:
    assert meta == "box"
    return Box(*children)


@pytest.fixture(scope="module", autouse=True)
def _register_box() -> Any:
    optree.register_pytree_node(Box, _box_flatten, _box_unflatten, namespace="ops")
    so.register_pytree_node(Box, _box_flatten, _box_unflatten, namespace="ops")
    yield
    optree.unregister_pytree_node(Box, namespace="ops")
    so.unregister_pytree_node(Box, namespace="ops")


BOXED = [Box(1, [2, 3]), {"a": Box(None, (4,))}]


def _same(x: Any, y: Any) -> None:
    assert type(x) is type(y), (x, y)
    assert x == y


@pytest.mark.parametrize("none_is_leaf", NONE)
@pytest.mark.parametrize("tree", TREES, ids=IDS)
def test_flatten_paths_leaves_and_rebuild(tree: Any, none_is_leaf: bool) -> None:
    leaves, spec = so.tree_flatten(tree, none_is_leaf=none_is_leaf)
    oleaves, ospec = optree.tree_flatten(tree, none_is_leaf=none_is_leaf)
    assert leaves == oleaves
    assert spec.num_leaves == ospec.num_leaves and spec.num_nodes == ospec.num_nodes
    assert so.tree_leaves(tree, none_is_leaf=none_is_leaf) == oleaves
    assert list(so.tree_iter(tree, none_is_leaf=none_is_leaf)) == oleaves
    assert so.tree_paths(tree, none_is_leaf=none_is_leaf) == optree.tree_paths(tree, none_is_leaf=none_is_leaf)
    _same(so.tree_unflatten(spec, leaves), optree.tree_unflatten(ospec, oleaves))
    assert so.tree_is_leaf(tree, none_is_leaf=none_is_leaf) == optree.tree_is_leaf(tree, none_is_leaf=none_is_leaf)


@pytest.mark.parametrize("none_is_leaf", NONE)
@pytest.mark.parametrize("tree", TREES + BOXED, ids=IDS + ["box", "dict-box"])
def test_maps(tree: Any, none_is_leaf: bool) -> None:
    kw = {"none_is_leaf": none_is_leaf, "namespace": "ops"}
    f = lambda x: (x, 0)
    _same(so.tree_map(f, tree, **kw), optree.tree_map(f, tree, **kw))
    g = lambda p, x: (p, x)
    _same(so.tree_map_with_path(g, tree, **kw), optree.tree_map_with_path(g, tree, **kw))
    # accessors: the same codified paths, and each one reaches its leaf (Box's entries are
    # FlattenedEntry, which cannot step into it: optree's rule for a class that is neither a
    # mapping, a sequence nor a dataclass)
    h = lambda a, x: (a.codify("t"), isinstance(tree, (Box, dict)) or a(tree) is x)
    _same(so.tree_map_with_accessor(h, tree, **kw), optree.tree_map_with_accessor(h, tree, **kw))
    seen: list[Any] = []
    oseen: list[Any] = []
    assert so.tree_map_(seen.append, tree, **kw) is tree
    optree.tree_map_(oseen.append, tree, **kw)
    assert seen == oseen
    seen.clear()
    oseen.clear()
    assert so.tree_map_with_path_(lambda p, x: seen.append(p), tree, **kw) is tree
    optree.tree_map_with_path_(lambda p, x: oseen.append(p), tree, **kw)
    assert seen == oseen


def test_map_with_rests_and_mismatch() -> None:
    a = {"x": [1, 2], "y": 3}
    b = {"x": [10, 20], "y": (4, 5)}
    _same(so.tree_map(lambda u, v: (u, v), a, b), optree.tree_map(lambda u, v: (u, v), a, b))
    with pytest.raises(ValueError, match="x"):
        so.tree_map(operator.add, a, {"x": [1], "y": 2})
    with pytest.raises(ValueError):
        optree.tree_map(operator.add, a, {"x": [1], "y": 2})
    with pytest.raises(ValueError):
        so.tree_map_(operator.add, a, {"x": [1], "y": 2})


def test_replace_nones_partition_and_folds() -> None:
    tree = {"a": None, "b": [1, None, (2, None)], "c": 5}
    _same(so.tree_replace_nones(0, tree), optree.tree_replace_nones(0, tree))
    assert so.tree_replace_nones(7, None) == optree.tree_replace_nones(7, None) == 7
    pred = lambda x: x > 1
    _same(so.tree_partition(pred, tree, fillvalue=-1), optree.tree_partition(pred, tree, fillvalue=-1))
    assert so.tree_sum(tree) == optree.tree_sum(tree) == 8
    assert so.tree_sum(tree, 10) == optree.tree_sum(tree, 10)
    assert so.tree_max(tree) == optree.tree_max(tree) == 5
    assert so.tree_min(tree, key=lambda x: -x) == optree.tree_min(tree, key=lambda x: -x) == 5
    assert so.tree_max([], default=3) == optree.tree_max([], default=3) == 3
    assert so.tree_reduce(operator.mul, tree, 2) == optree.tree_reduce(operator.mul, tree, 2) == 20
    assert so.tree_all([1, (True,)]) and not so.tree_any([0, (None,)])
    for lib in (so, optree):
        with pytest.raises(ValueError):
            lib.tree_max([])
        with pytest.raises(ValueError):
            lib.tree_min({})
        with pytest.raises(TypeError):
            lib.tree_reduce(operator.add, [])


BROADCASTS = [
    ([1, 2], [[0, 0], {"a": 0}]),
    ({"a": 1, "b": [2]}, {"a": (0, 0), "b": [{"x": 0}]}),
    (5, NT(0, [0, 0])),
    ([1, None], [[0], None]),
]


@pytest.mark.parametrize("prefix,full", BROADCASTS)
def test_broadcast_prefix(prefix: Any, full: Any) -> None:
    _same(so.tree_broadcast_prefix(prefix, full), optree.tree_broadcast_prefix(prefix, full))
    assert so.broadcast_prefix(prefix, full) == optree.broadcast_prefix(prefix, full)


COMMON = [
    ([1, [2, 3]], [[4, 5], 6]),
    ({"a": 1, "b": 2}, {"a": (1, 2), "b": 3}),
    (NT(1, [2]), NT([3, 4], 5)),
    (1, [2, (3, 4)]),
]


@pytest.mark.parametrize("a,b", COMMON)
def test_broadcast_common_and_map(a: Any, b: Any) -> None:
    x, y = so.tree_broadcast_common(a, b)
    ox, oy = optree.tree_broadcast_common(a, b)
    _same(x, ox)
    _same(y, oy)
    assert so.broadcast_common(a, b) == optree.broadcast_common(a, b)
    f = lambda u, v: (u, v)
    _same(so.tree_broadcast_map(f, a, b), optree.tree_broadcast_map(f, a, b))
    g = lambda p, u, v: p
    _same(so.tree_broadcast_map_with_path(g, a, b), optree.tree_broadcast_map_with_path(g, a, b))
    h = lambda acc, u, v: acc.codify()
    _same(so.tree_broadcast_map_with_accessor(h, a, b), optree.tree_broadcast_map_with_accessor(h, a, b))


def test_broadcast_errors() -> None:
    for lib in (so, optree):
        with pytest.raises(ValueError):
            lib.tree_broadcast_prefix([1, 2, 3], [0, 0])
        with pytest.raises(ValueError):
            lib.tree_broadcast_common({"a": 1}, {"b": 1})
        with pytest.raises(ValueError):
            lib.tree_broadcast_map(operator.add, [1, 2], (1, 2))


@pytest.mark.parametrize("tree", [[1, 2, 3], {"a": 1, "b": (2, 3)}, NT(1, 2)])
def test_transpose_map(tree: Any) -> None:
    f = lambda x: {"lo": x - 1, "hi": (x + 1, x)}
    _same(so.tree_transpose_map(f, tree), optree.tree_transpose_map(f, tree))
    g = lambda p, x: [repr(p), x]
    _same(so.tree_transpose_map_with_path(g, tree), optree.tree_transpose_map_with_path(g, tree))
    inner = so.tree_structure((0, 0))
    oinner = optree.tree_structure((0, 0))
    h = lambda a, x: (a.codify(), x)
    _same(
        so.tree_transpose_map_with_accessor(h, tree, inner_treespec=inner),
        optree.tree_transpose_map_with_accessor(h, tree, inner_treespec=oinner),
    )
    outer, o_outer = so.tree_structure(tree), optree.tree_structure(tree)
    nested = so.tree_map(lambda x: (x, -x), tree)
    _same(so.tree_transpose(outer, inner, nested), optree.tree_transpose(o_outer, oinner, nested))


def test_transpose_map_errors() -> None:
    for lib in (so, optree):
        with pytest.raises(ValueError):
            lib.tree_transpose_map(lambda x: (x, x), [])
        with pytest.raises(ValueError):
            lib.tree_transpose_map(lambda x: (x,) * x, [1, 2])
        with pytest.raises(ValueError):  # paths of two lengths: results of two structures
            lib.tree_transpose_map_with_path(lambda p, x: [p, x], {"a": 1, "b": (2, 3)})


@pytest.mark.parametrize("none_is_leaf", NONE)
@pytest.mark.parametrize(
    "tree",
    [[1, (2, 3)], {"b": 1, "a": 2}, NT(1, 2), OrderedDict([("z", 1), ("a", 2)]), defaultdict(int, {"k": 1}),
     deque([1, 2], maxlen=4), time.struct_time(range(9)), None, Box(1, 2)],
)  # fmt: skip
def test_flatten_one_level(tree: Any, none_is_leaf: bool) -> None:
    if tree is None and none_is_leaf:
        for lib in (so, optree):
            with pytest.raises(ValueError):
                lib.tree_flatten_one_level(tree, none_is_leaf=True)
        return
    children, meta, entries, unflatten = so.tree_flatten_one_level(tree, none_is_leaf=none_is_leaf, namespace="ops")
    ochildren, ometa, oentries, ounflatten = optree.tree_flatten_one_level(tree, none_is_leaf=none_is_leaf, namespace="ops")
    assert list(children) == list(ochildren)
    assert meta == ometa
    assert list(entries) == list(oentries)
    _same(unflatten(meta, children), ounflatten(ometa, ochildren))


def test_flatten_one_level_of_a_leaf() -> None:
    for lib in (so, optree):
        with pytest.raises(ValueError):
            lib.tree_flatten_one_level(1)
        with pytest.raises(ValueError):
            lib.tree_flatten_one_level([1], is_leaf=lambda x: isinstance(x, list))


PREFIX_CASES = [
    ([1, 2], [1, [2, 3]]),
    ([1, 2], [1, [2, 3], 4]),
    ({"a": 1, "b": 2}, {"a": 1, "c": 2}),
    ((1, 2), [1, 2]),
    ([[1, 2], [3]], [[1], [3, 4]]),
    (NT(1, 2), NT([1], {"k": 2})),
]


@pytest.mark.parametrize("prefix,full", PREFIX_CASES)
def test_prefix_errors(prefix: Any, full: Any) -> None:
    mine = [e("in_axes") for e in so.prefix_errors(prefix, full)]
    theirs = [e("in_axes") for e in optree.prefix_errors(prefix, full)]
    assert len(mine) == len(theirs)
    assert all(isinstance(e, ValueError) and "in_axes" in str(e) for e in mine)


def test_namespaced_node_is_a_leaf_elsewhere() -> None:
    b = Box(1, 2)
    assert so.tree_leaves(b) == [b]
    assert so.tree_leaves(b, namespace="ops") == [1, 2]
    assert so.tree_paths(b, namespace="ops") == [("left",), ("right",)]
    assert st.structure(b, namespace="ops").entries() == ["left", "right"]
    # the entries do not change equality of structures, as in optree
    assert so.tree_structure(Box(1, 2), namespace="ops") == so.tree_structure(Box(3, 4), namespace="ops")


def test_registration_errors() -> None:
    with pytest.raises(ValueError):
        so.register_pytree_node(Box, _box_flatten, _box_unflatten, namespace="")
    with pytest.raises(TypeError):
        so.register_pytree_node(Box, _box_flatten, _box_unflatten, namespace=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        so.register_pytree_node(Box, _box_flatten, _box_unflatten, namespace="ops")  # already there
    with pytest.raises(TypeError):
        so.register_pytree_node(Box, _box_flatten, _box_unflatten, path_entry_type=int, namespace="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        so.unregister_pytree_node(Box, namespace="nowhere")

    class Bad:
        pass

    so.register_pytree_node(Bad, lambda b: ((1, 2), None, ("only one",)), lambda m, c: Bad(), namespace="bad")
    try:
        with pytest.raises(ValueError, match="entries"):
            so.tree_leaves(Bad(), namespace="bad")
    finally:
        so.unregister_pytree_node(Bad, namespace="bad")


def test_registry_get() -> None:
    entry = so.register_pytree_node.get(Box, namespace="ops")
    assert entry.type is Box and entry.flatten_func is _box_flatten and entry.namespace == "ops"
    assert so.register_pytree_node.get(Box) is None
    assert so.register_pytree_node.get(dict).unflatten_func(["a", "b"], [1, 2]) == {"a": 1, "b": 2}
    assert so.register_pytree_node.get(NT).unflatten_func(NT, [1, 2]) == NT(1, 2)
    everything = so.register_pytree_node.get(namespace="ops")
    assert Box in everything and dict in everything and list in everything


def test_dict_insertion_ordered() -> None:
    tree = {"b": 1, "a": 2}
    with so.dict_insertion_ordered(True, namespace=so.GLOBAL_NAMESPACE):
        assert so.tree_leaves(tree) == [1, 2]
        assert so.tree_paths(tree) == [("b",), ("a",)]
    assert so.tree_leaves(tree) == [2, 1]
    with pytest.raises(ValueError):
        with so.dict_insertion_ordered(True, namespace=""):
            pass
