"""Differential tests: random trees through spruce, jax.tree_util and optree.

Where the spec promises JAX's answer (leaves, key paths, PyTreeDef repr, counts, equality of
structures, prefix semantics of map / flatten_up_to) spruce must give exactly JAX's answer.
Leaves, counts and the ``none_is_leaf=True`` mode are also checked against optree, which has
deques and struct sequences too.  The one intentional difference (a dict rebuilt by spruce keeps
the input's insertion order, JAX's comes back sorted) is tested on its own at the end.
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict, defaultdict, deque, namedtuple
from typing import Any

import hypothesis.strategies as hs
import jax.tree_util as jtu
import optree
import pytest
from hypothesis import given, settings

import spruce.tree as st
from helpers import HAND_FLATTEN, assert_leaves_equal, assert_tree_equal, follow

# ----------------------------------------------------------------- node types for both worlds

NT = namedtuple("NT", ["left", "right"])


@dataclasses.dataclass
class DC:
    p: Any
    q: Any
    meta: str = dataclasses.field(default="m", metadata={"static": True})


jtu.register_dataclass(DC)
st.register_dataclass(DC)


class CB:
    """Custom node with int aux data (its ``str`` and ``repr`` agree)."""

    def __init__(self, u: Any, v: Any) -> None:
        self.u, self.v = u, v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CB) and (self.u, self.v) == (other.u, other.v)

    __hash__ = None  # type: ignore[assignment]


def _cb_flatten(cb: CB) -> tuple[tuple[Any, Any], int]:
    return (cb.u, cb.v), 7


def _cb_unflatten(aux: int, children: Any) -> CB:
    assert aux == 7
    return CB(*children)


jtu.register_pytree_node(CB, _cb_flatten, _cb_unflatten)
st.register_pytree_node(CB, _cb_flatten, _cb_unflatten)
HAND_FLATTEN[CB] = lambda cb: (cb.u, cb.v)

# ----------------------------------------------------------------------------- strategies

LEAVES = hs.one_of(
    hs.integers(-10, 10),
    hs.text(alphabet="xyz", max_size=2),
    hs.floats(allow_nan=False, width=32),
    hs.booleans(),
)
BASE = hs.one_of(LEAVES, hs.none(), hs.just(()), hs.just([]), hs.just({}))
KEYS = hs.text(alphabet="abcdz", min_size=1, max_size=2)


def _jax_kinds(inner: Any) -> Any:
    return hs.one_of(
        hs.lists(inner, max_size=4),
        hs.lists(inner, max_size=4).map(tuple),
        hs.dictionaries(KEYS, inner, max_size=4),
        hs.dictionaries(KEYS, inner, max_size=4).map(OrderedDict),
        hs.dictionaries(KEYS, inner, max_size=3).map(lambda d: defaultdict(list, d)),
        hs.tuples(inner, inner).map(lambda t: NT(*t)),
        hs.tuples(inner, inner, hs.sampled_from(["m", "n"])).map(lambda t: DC(*t)),
        hs.tuples(inner, inner).map(lambda t: CB(*t)),
    )


MIXED_KEYS = hs.one_of(
    hs.text(alphabet="ab", min_size=1, max_size=2),
    hs.integers(-3, 3),
    hs.tuples(hs.integers(0, 2)),
    hs.none(),
)


def _all_kinds(inner: Any) -> Any:
    return hs.one_of(
        _jax_kinds(inner),
        hs.lists(inner, max_size=3).map(deque),
        hs.tuples(hs.lists(inner, max_size=3), hs.integers(3, 5)).map(
            lambda t: deque(t[0], maxlen=t[1])
        ),
        hs.lists(inner, min_size=9, max_size=9).map(time.struct_time),
        hs.dictionaries(MIXED_KEYS, inner, max_size=4),
    )


def _optree_kinds(inner: Any) -> Any:
    # builtins optree knows without registration (no custom classes)
    return hs.one_of(
        hs.lists(inner, max_size=4),
        hs.lists(inner, max_size=4).map(tuple),
        hs.dictionaries(KEYS, inner, max_size=4),
        hs.dictionaries(KEYS, inner, max_size=4).map(OrderedDict),
        hs.dictionaries(KEYS, inner, max_size=3).map(lambda d: defaultdict(list, d)),
        hs.tuples(inner, inner).map(lambda t: NT(*t)),
        hs.lists(inner, max_size=3).map(deque),
        hs.lists(inner, min_size=9, max_size=9).map(time.struct_time),
    )


JAX_TREES = hs.recursive(BASE, _jax_kinds, max_leaves=24)
ALL_TREES = hs.recursive(BASE, _all_kinds, max_leaves=24)
OPTREE_TREES = hs.recursive(BASE, _optree_kinds, max_leaves=24)


def _key_reprs(path: tuple[Any, ...]) -> tuple[str, ...]:
    return tuple(repr(k) for k in path)


# ------------------------------------------------------------------------- against JAX


@given(JAX_TREES)
def test_leaves_repr_counts_match_jax(tree: Any) -> None:
    leaves, treedef = st.flatten(tree)
    jleaves, jtreedef = jtu.tree_flatten(tree)
    assert_leaves_equal(leaves, jleaves)
    assert repr(treedef) == repr(jtreedef)
    assert treedef.num_leaves == jtreedef.num_leaves
    assert treedef.num_nodes == jtreedef.num_nodes
    assert_leaves_equal(st.leaves(tree), jtu.tree_leaves(tree))


@given(JAX_TREES)
def test_paths_match_jax(tree: Any) -> None:
    pairs = st.leaves_with_path(tree)
    jpairs = jtu.tree_leaves_with_path(tree)
    # key entries print as JAX's do (repr), so whole paths compare via repr
    assert [_key_reprs(p) for p, _ in pairs] == [_key_reprs(p) for p, _ in jpairs]
    assert_leaves_equal([x for _, x in pairs], [x for _, x in jpairs])


@given(JAX_TREES, JAX_TREES)
def test_structure_equality_matches_jax(a: Any, b: Any) -> None:
    sa, sb = st.structure(a), st.structure(b)
    ja, jb = jtu.tree_structure(a), jtu.tree_structure(b)
    assert (sa == sb) is (ja == jb)
    same_shape = jtu.tree_map(lambda x: 0, a)
    assert st.structure(same_shape) == sa
    assert hash(st.structure(same_shape)) == hash(sa)


@given(JAX_TREES)
def test_is_leaf_predicate_matches_jax(tree: Any) -> None:
    def pred(x: Any) -> bool:
        return isinstance(x, (tuple, DC)) and not isinstance(x, NT)

    jleaves, jtreedef = jtu.tree_flatten(tree, is_leaf=pred)
    leaves, treedef = st.flatten(tree, is_leaf=pred)
    assert_leaves_equal(leaves, jleaves)
    assert repr(treedef) == repr(jtreedef)


@given(JAX_TREES, hs.data())
def test_map_with_deeper_rest_matches_jax(tree: Any, data: hs.DataObject) -> None:
    jtreedef = jtu.tree_structure(tree)
    subtrees = data.draw(
        hs.lists(JAX_TREES, min_size=jtreedef.num_leaves, max_size=jtreedef.num_leaves)
    )
    deeper = jtu.tree_unflatten(jtreedef, subtrees)
    got = st.map(lambda x, s: [x, s], tree, deeper)
    want = jtu.tree_map(lambda x, s: [x, s], tree, deeper)
    assert repr(st.structure(got)) == repr(jtu.tree_structure(want))
    assert_leaves_equal(st.leaves(got), jtu.tree_leaves(want))
    assert_leaves_equal(st.structure(tree).flatten_up_to(deeper), subtrees)


@given(JAX_TREES)
def test_flatten_one_level_matches_equinox_semantics(tree: Any) -> None:
    # Equinox: flatten with is_leaf = "anything but the root"
    root_seen = []

    def only_root(x: Any) -> bool:
        if x is tree and not root_seen:
            root_seen.append(x)
            return False
        return True

    jchildren, jtreedef = jtu.tree_flatten(tree, is_leaf=only_root)
    children, treedef = st.flatten_one_level(tree)
    assert len(children) == len(jchildren)
    assert all(a is b for a, b in zip(children, jchildren))
    assert repr(treedef) == repr(jtreedef)


@given(JAX_TREES)
def test_map_with_path_matches_jax(tree: Any) -> None:
    got = st.map_with_path(lambda p, x: (_key_reprs(p), x), tree)
    want = jtu.tree_map_with_path(lambda p, x: (_key_reprs(p), x), tree)
    assert repr(st.structure(got)) == repr(jtu.tree_structure(want))
    assert st.leaves(got) == jtu.tree_leaves(want)


def _path_pred(calls: list[tuple[tuple[str, ...], str]]) -> Any:
    """An is_leaf that takes (path, x): records each call, and stops at every node whose path
    ends in key 'a' or index 1 (so the answer depends on the path, not only on x)."""

    def pred(path: tuple[Any, ...], x: Any) -> bool:
        calls.append((_key_reprs(path), type(x).__name__))
        return bool(path) and repr(path[-1]) in ("DictKey(key='a')", "SequenceKey(idx=1)")

    return pred


@given(JAX_TREES)
def test_is_leaf_takes_path_matches_jax(tree: Any) -> None:
    calls: list[tuple[tuple[str, ...], str]] = []
    jcalls: list[tuple[tuple[str, ...], str]] = []
    pairs, treedef = st.flatten_with_path(tree, _path_pred(calls), True)
    jpairs, jtreedef = jtu.tree_flatten_with_path(tree, _path_pred(jcalls), True)
    assert calls == jcalls  # the same objects asked, with the same paths, in the same order
    assert [_key_reprs(p) for p, _ in pairs] == [_key_reprs(p) for p, _ in jpairs]
    assert_leaves_equal([x for _, x in pairs], [x for _, x in jpairs])
    assert repr(treedef) == repr(jtreedef)
    calls.clear()
    jcalls.clear()
    got = st.leaves_with_path(tree, is_leaf=_path_pred(calls), is_leaf_takes_path=True)
    want = jtu.tree_leaves_with_path(tree, is_leaf=_path_pred(jcalls), is_leaf_takes_path=True)
    assert calls == jcalls
    assert [_key_reprs(p) for p, _ in got] == [_key_reprs(p) for p, _ in want]
    calls.clear()
    jcalls.clear()
    mapped = st.map_with_path(lambda p, x: _key_reprs(p), tree, is_leaf=_path_pred(calls), is_leaf_takes_path=True)
    jmapped = jtu.tree_map_with_path(
        lambda p, x: _key_reprs(p), tree, is_leaf=_path_pred(jcalls), is_leaf_takes_path=True
    )
    assert calls == jcalls
    assert repr(st.structure(mapped, is_leaf=lambda x: type(x) is tuple)) == repr(
        jtu.tree_structure(jmapped, is_leaf=lambda x: type(x) is tuple)
    )
    assert st.leaves(mapped, is_leaf=lambda x: type(x) is tuple) == jtu.tree_leaves(
        jmapped, is_leaf=lambda x: type(x) is tuple
    )


def test_is_leaf_takes_path_on_fixed_trees() -> None:
    tree = {"a": [1, 2], "b": {"a": 3, "c": (4, [5, 6])}}
    leaf_at = lambda path, x: path == (st.DictKey("b"), st.DictKey("c"))
    pairs, treedef = st.flatten_with_path(tree, leaf_at, is_leaf_takes_path=True)
    assert [(st.keystr(p), x) for p, x in pairs] == [
        ("['a'][0]", 1), ("['a'][1]", 2), ("['b']['a']", 3), ("['b']['c']", (4, [5, 6])),
    ]  # fmt: skip
    assert repr(treedef) == "PyTreeDef({'a': [*, *], 'b': {'a': *, 'c': *}})"
    # without is_leaf_takes_path, is_leaf gets one argument, as before
    assert st.leaves_with_path(tree, lambda x: isinstance(x, list))[0] == ((st.DictKey("a"),), [1, 2])
    # map_with_path over two trees: f sees the path, the leaf and the other tree's subtree
    out = st.map_with_path(
        lambda p, x, y: (st.keystr(p), x, y), tree, {"a": 0, "b": {"a": 1, "c": 2}},
        is_leaf=lambda p, x: p in ((st.DictKey("a"),), (st.DictKey("b"), st.DictKey("c"))),
        is_leaf_takes_path=True,
    )  # fmt: skip
    assert out == {"a": ("['a']", [1, 2], 0), "b": {"a": ("['b']['a']", 3, 1), "c": ("['b']['c']", (4, [5, 6]), 2)}}
    # a cycle is still named by its key path when is_leaf takes paths
    cyc: list[Any] = [0]
    cyc.append({"k": cyc})
    with pytest.raises(ValueError, match=r"cycle in pytree: .*\[1\]\['k'\]"):
        st.flatten_with_path(cyc, lambda p, x: False, True)


@given(JAX_TREES, hs.sampled_from([list, tuple, dict, NT]))
def test_broadcast_matches_jax(tree: Any, cut: type) -> None:
    # a prefix of ``tree``: every subtree of type ``cut`` (below the root) becomes one leaf
    def is_cut(x: Any) -> bool:
        return type(x) is cut and x is not tree

    prefix = jtu.tree_map(lambda x: f"p{id(x) % 97}", tree, is_leaf=is_cut)
    got = st.broadcast(prefix, tree)
    want = jtu.tree_map(lambda p, sub: jtu.tree_map(lambda _: p, sub), prefix, tree)
    assert repr(st.structure(got)) == repr(jtu.tree_structure(want))
    assert st.leaves(got) == jtu.tree_leaves(want)


# ---------------------------------------------------------------------- against optree


def _raw_path(tree: Any, path: tuple[Any, ...]) -> tuple[Any, ...]:
    """A spruce key path as optree spells it (dict keys; indices for sequences and fields)."""
    out: list[Any] = []
    node = tree
    for entry in path:
        if isinstance(entry, st.DictKey):
            out.append(entry.key)
        elif isinstance(entry, st.SequenceKey):
            out.append(entry.idx)
        elif isinstance(entry, st.GetAttrKey):
            fields = getattr(type(node), "_fields", None) or type(node).__match_args__
            out.append(list(fields).index(entry.name))
        else:
            raise AssertionError(f"unexpected key entry {entry!r} in a builtin tree")
        node = follow(node, (entry,))
    return tuple(out)


@given(OPTREE_TREES)
def test_leaves_counts_paths_match_optree(tree: Any) -> None:
    leaves, treedef = st.flatten(tree)
    oleaves, otreespec = optree.tree_flatten(tree)
    assert_leaves_equal(leaves, oleaves)
    assert treedef.num_leaves == otreespec.num_leaves
    assert treedef.num_nodes == otreespec.num_nodes
    paths = [_raw_path(tree, p) for p, _ in st.leaves_with_path(tree)]
    assert paths == optree.tree_paths(tree)


@given(OPTREE_TREES)
def test_none_is_leaf_matches_optree(tree: Any) -> None:
    leaves, treedef = st.flatten(tree, none_is_leaf=True)
    oleaves, otreespec = optree.tree_flatten(tree, none_is_leaf=True)
    assert_leaves_equal(leaves, oleaves)
    assert treedef.num_leaves == otreespec.num_leaves
    assert treedef.num_nodes == otreespec.num_nodes
    assert_leaves_equal(st.leaves(tree, none_is_leaf=True), oleaves)
    assert_tree_equal(st.unflatten(treedef, leaves), tree)
    got = st.map(lambda x: ("seen", x), tree, none_is_leaf=True)
    assert optree.tree_leaves(got, none_is_leaf=True) == [
        y for x in oleaves for y in ("seen", x)
    ]


@given(OPTREE_TREES)
def test_structure_equality_matches_optree(tree: Any) -> None:
    mapped = optree.tree_map(lambda x: 0, tree)
    assert st.structure(mapped) == st.structure(tree)
    assert hash(st.structure(mapped)) == hash(st.structure(tree))


# ----------------------------------------------------------------- round trips, all kinds


@given(ALL_TREES)
def test_round_trip_all_kinds(tree: Any) -> None:
    leaves, treedef = st.flatten(tree)
    for _ in range(3):  # a PyTreeDef unflattened again is built by a plan made the second time
        assert_tree_equal(st.unflatten(treedef, leaves), tree)
    assert_tree_equal(st.map(lambda x: x, tree), tree)
    assert treedef.num_leaves == len(leaves) == len(list(st.iter(tree)))
    for path, leaf in st.leaves_with_path(tree):
        assert follow(tree, path) is leaf
    assert_leaves_equal(treedef.flatten_up_to(tree), leaves)


@given(ALL_TREES)
def test_round_trip_none_is_leaf_all_kinds(tree: Any) -> None:
    leaves, treedef = st.flatten(tree, none_is_leaf=True)
    for _ in range(3):
        assert_tree_equal(st.unflatten(treedef, leaves), tree)
    assert_tree_equal(st.map(lambda x: x, tree, none_is_leaf=True), tree)
    assert [p for p, _ in st.leaves_with_path(tree, none_is_leaf=True)] == list(treedef.paths())


@given(ALL_TREES)
@settings(max_examples=50)
def test_treedef_pickle_round_trip_all_kinds(tree: Any) -> None:
    import pickle

    treedef = st.structure(tree)
    clone = pickle.loads(pickle.dumps(treedef))
    assert clone == treedef and hash(clone) == hash(treedef)
    assert repr(clone) == repr(treedef)
    assert_tree_equal(clone.unflatten(st.leaves(tree)), tree)


# ------------------------------------------------------- the intentional difference from JAX


@given(hs.dictionaries(KEYS, hs.integers(), min_size=2, max_size=6))
def test_dict_rebuild_keeps_insertion_order_unlike_jax(d: dict[str, int]) -> None:
    spruce_out = st.map(lambda x: x + 1, d)
    jax_out = jtu.tree_map(lambda x: x + 1, d)
    assert spruce_out == jax_out  # same mapping ...
    assert list(spruce_out) == list(d)  # ... in the input's order (spruce)
    assert list(jax_out) == sorted(d)  # ... where JAX sorts
    # leaves come in sorted-key order in both
    assert st.leaves(d) == jtu.tree_leaves(d) == [d[k] for k in sorted(d)]
