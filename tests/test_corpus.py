"""Every operation, run over the one shared corpus of example trees (tests/helpers.py)."""

from __future__ import annotations

import copy
import functools
import itertools
import pickle
from collections import OrderedDict, defaultdict, deque
from typing import Any

import pytest

import spruce.tree as st
from helpers import (
    CASES,
    Case,
    OneOf,
    assert_leaves_equal,
    assert_tree_equal,
    cases,
    follow,
    same_leaf,
)

ALL = cases()


class Tag:
    """A leaf that records what a mapped function saw (a plain class is always a leaf)."""

    def __init__(self, *items: Any) -> None:
        self.items = items

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Tag)
            and len(self.items) == len(other.items)
            and all(same_leaf(a, b) for a, b in zip(self.items, other.items))
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Tag{self.items!r}"


def _order_free(case: Case, items: list[Any], key: Any = repr) -> list[Any]:
    """Cases whose child order the spec leaves open are compared in a canonical order."""
    return items if case.ordered else sorted(items, key=key)


def _check_leaves(case: Case, actual: list[Any]) -> None:
    assert_leaves_equal(_order_free(case, list(actual)), _order_free(case, list(case.leaves)))


def _golden_paths(case: Case) -> tuple[tuple[str, ...], ...]:
    return case.paths.options if isinstance(case.paths, OneOf) else (case.paths,)


def _check_paths(case: Case, actual: tuple[str, ...]) -> None:
    goldens = _golden_paths(case)
    if case.ordered:
        assert actual in goldens, f"paths {actual} not in {goldens}"
    else:
        assert sorted(actual) in [sorted(g) for g in goldens], f"paths {actual} vs {goldens}"


def _fresh_leaves(n: int) -> list[Any]:
    return [f"leaf{i}" for i in range(n)]


# ------------------------------------------------------------------------------ flatten & co.


@pytest.mark.parametrize("case", ALL)
def test_flatten_leaves(case: Case) -> None:
    leaves, treedef = st.flatten(case.tree)
    _check_leaves(case, leaves)
    assert isinstance(treedef, st.PyTreeDef)


@pytest.mark.parametrize("case", ALL)
def test_leaves_matches_flatten(case: Case) -> None:
    _check_leaves(case, st.leaves(case.tree))
    assert_leaves_equal(st.leaves(case.tree), st.flatten(case.tree)[0])


@pytest.mark.parametrize("case", ALL)
def test_iter_yields_the_leaves(case: Case) -> None:
    it = st.iter(case.tree)
    assert iter(it) is it, "iter() must return an iterator"
    assert_leaves_equal(list(it), st.leaves(case.tree))


@pytest.mark.parametrize("case", ALL)
def test_structure_repr(case: Case) -> None:
    text = repr(st.structure(case.tree))
    if case.treedef_repr is not None:
        assert text == case.treedef_repr
    else:
        assert text.startswith("PyTreeDef("), text
        for needle in case.repr_mentions:
            assert needle in text, f"{needle!r} not in {text!r}"
    assert str(st.structure(case.tree)) == text


@pytest.mark.parametrize("case", ALL)
def test_counts(case: Case) -> None:
    treedef = st.structure(case.tree)
    assert treedef.num_leaves == case.num_leaves
    assert treedef.num_nodes == case.num_nodes
    assert treedef.num_leaves == len(case.leaves)


@pytest.mark.parametrize("case", ALL)
def test_is_leaf_of_root(case: Case) -> None:
    expect_leaf = case.num_nodes == 1 and case.num_leaves == 1
    assert st.is_leaf(case.tree) is expect_leaf


# ---------------------------------------------------------------------------------- paths


@pytest.mark.parametrize("case", ALL)
def test_flatten_with_path(case: Case) -> None:
    pairs, treedef = st.flatten_with_path(case.tree)
    assert treedef == st.structure(case.tree)
    _check_paths(case, tuple(st.keystr(p) for p, _ in pairs))
    _check_leaves(case, [leaf for _, leaf in pairs])
    for path, leaf in pairs:
        assert isinstance(path, tuple)
        # A path leads, by hand, to exactly its leaf.
        assert follow(case.tree, path) is leaf


@pytest.mark.parametrize("case", ALL)
def test_leaves_with_path_and_treedef_paths_agree(case: Case) -> None:
    pairs = st.leaves_with_path(case.tree)
    via_flatten = st.flatten_with_path(case.tree)[0]
    assert [p for p, _ in pairs] == [p for p, _ in via_flatten]
    assert_leaves_equal([x for _, x in pairs], [x for _, x in via_flatten])
    assert list(st.structure(case.tree).paths()) == [p for p, _ in pairs]
    _check_paths(case, tuple(st.keystr(p) for p in st.structure(case.tree).paths()))


@pytest.mark.parametrize("case", ALL)
def test_map_with_path(case: Case) -> None:
    out = st.map_with_path(lambda p, x: Tag(st.keystr(p), x), case.tree)
    got = st.leaves(out)
    _check_paths(case, tuple(t.items[0] for t in got))
    _check_leaves(case, [t.items[1] for t in got])
    assert st.structure(out) == st.structure(case.tree)


# ------------------------------------------------------------------------ unflatten & map


@pytest.mark.parametrize("case", ALL)
def test_flatten_unflatten_round_trip(case: Case) -> None:
    leaves, treedef = st.flatten(case.tree)
    rebuilt = st.unflatten(treedef, leaves)
    assert_tree_equal(rebuilt, case.tree)  # types, dict insertion order, aux, leaves
    assert_tree_equal(treedef.unflatten(leaves), case.tree)


@pytest.mark.parametrize("case", ALL)
def test_unflatten_puts_new_leaves_in_leaf_order(case: Case) -> None:
    treedef = st.structure(case.tree)
    new = _fresh_leaves(treedef.num_leaves)
    rebuilt = st.unflatten(treedef, new)
    assert st.leaves(rebuilt) == new
    assert st.structure(rebuilt) == treedef
    assert [p for p, _ in st.leaves_with_path(rebuilt)] == list(treedef.paths())


@pytest.mark.parametrize("case", ALL)
def test_unflatten_accepts_any_iterable(case: Case) -> None:
    treedef = st.structure(case.tree)
    new = _fresh_leaves(treedef.num_leaves)
    assert st.leaves(st.unflatten(treedef, iter(new))) == new
    assert st.leaves(st.unflatten(treedef, tuple(new))) == new


@pytest.mark.parametrize("case", ALL)
def test_map_identity(case: Case) -> None:
    assert_tree_equal(st.map(lambda x: x, case.tree), case.tree)


@pytest.mark.parametrize("case", ALL)
def test_map_two_trees(case: Case) -> None:
    treedef = st.structure(case.tree)
    other = st.unflatten(treedef, range(treedef.num_leaves))
    out = st.map(Tag, case.tree, other)
    assert st.structure(out) == treedef
    leaves = st.leaves(case.tree)
    assert st.leaves(out) == [Tag(x, i) for i, x in enumerate(leaves)]


@pytest.mark.parametrize("case", ALL)
def test_map_rest_tree_may_be_deeper(case: Case) -> None:
    # The first tree is a prefix of the others: f receives whole subtrees of the rest.
    treedef = st.structure(case.tree)
    subtrees = [[i, {"k": (i,)}] for i in range(treedef.num_leaves)]
    deeper = st.unflatten(treedef, subtrees)
    out = st.map(lambda x, sub: Tag(sub), case.tree, deeper)
    assert [t.items[0] for t in st.leaves(out)] == subtrees
    assert_tree_equal(st.map(lambda x, sub: sub, case.tree, deeper), deeper)


@pytest.mark.parametrize("case", ALL)
def test_map_preserves_types_and_key_order(case: Case) -> None:
    treedef = st.structure(case.tree)
    out = st.map(lambda x: "mapped", case.tree)
    expected = st.unflatten(treedef, ["mapped"] * treedef.num_leaves)
    assert_tree_equal(out, expected)
    # same container types, same dict key order as the input
    assert_tree_equal(
        st.map(lambda x: x, out),
        st.unflatten(st.structure(case.tree), ["mapped"] * treedef.num_leaves),
    )


# ----------------------------------------------------------------------------- reductions


@pytest.mark.parametrize("case", ALL)
def test_reduce_with_initializer(case: Case) -> None:
    got = st.reduce(lambda acc, x: acc + [x], case.tree, [])
    _check_leaves(case, got)


@pytest.mark.parametrize("case", [c for c in ALL if c.values[0].num_leaves > 0])
def test_reduce_without_initializer_is_a_left_fold(case: Case) -> None:
    got = st.reduce(lambda a, b: Tag(a, b), case.tree)
    leaves = st.leaves(case.tree)
    # Tag(...) compares leaves with same_leaf (identity for arrays)
    assert Tag(got) == Tag(functools.reduce(lambda a, b: Tag(a, b), leaves))


@pytest.mark.parametrize("case", ALL)
def test_reduce_associative(case: Case) -> None:
    # string concatenation is associative but not commutative: the order must be kept
    leaves = st.leaves(case.tree)
    tree = st.unflatten(st.structure(case.tree), [f"<{i}>" for i in range(len(leaves))])
    got = st.reduce_associative(lambda a, b: a + b, tree, identity="")
    assert got == "".join(f"<{i}>" for i in range(len(leaves)))


# ----------------------------------------------------------------- treedef operations


@pytest.mark.parametrize("case", ALL)
def test_flatten_up_to(case: Case) -> None:
    treedef = st.structure(case.tree)
    assert_leaves_equal(treedef.flatten_up_to(case.tree), st.leaves(case.tree))
    subtrees = [{"s": [i, None]} for i in range(treedef.num_leaves)]
    assert treedef.flatten_up_to(st.unflatten(treedef, subtrees)) == subtrees


@pytest.mark.parametrize("case", ALL)
def test_pickle_copy_deepcopy_treedef(case: Case) -> None:
    treedef = st.structure(case.tree)
    for clone in (
        pickle.loads(pickle.dumps(treedef)),
        pickle.loads(pickle.dumps(treedef, protocol=2)),
        copy.copy(treedef),
        copy.deepcopy(treedef),
    ):
        assert clone == treedef
        assert hash(clone) == hash(treedef)
        assert repr(clone) == repr(treedef)
        assert clone.num_leaves == treedef.num_leaves
        assert clone.num_nodes == treedef.num_nodes
        leaves = st.leaves(case.tree)
        assert_tree_equal(clone.unflatten(leaves), case.tree)


@pytest.mark.parametrize("case", ALL)
def test_structure_equal_for_equal_trees(case: Case) -> None:
    a = st.structure(case.tree)
    b = st.structure(copy.deepcopy(case.tree))
    assert a == b
    assert not (a != b)
    assert hash(a) == hash(b)
    assert {a: 1}[b] == 1


def _identity_of(case: Case) -> str:
    return case.treedef_repr if case.treedef_repr is not None else f"<unique {case.id}>"


@pytest.mark.parametrize(
    "left,right",
    [
        pytest.param(a, b, id=f"{a.id}-vs-{b.id}")
        for a, b in itertools.combinations(CASES, 2)
    ],
)
def test_structure_equality_across_corpus(left: Case, right: Case) -> None:
    a, b = st.structure(left.tree), st.structure(right.tree)
    expect_equal = _identity_of(left) == _identity_of(right)
    assert (a == b) is expect_equal
    assert (a != b) is (not expect_equal)
    if expect_equal:
        assert hash(a) == hash(b)


@pytest.mark.parametrize("case", ALL)
def test_children(case: Case) -> None:
    treedef = st.structure(case.tree)
    children = treedef.children()
    if treedef.num_nodes == 1 and treedef.num_leaves == 1:  # a leaf
        assert children == []
        return
    expected = [st.structure(c) for c in case.children]
    assert _order_free(case, children) == _order_free(case, expected)
    assert st.treedef_children(treedef) == children
    assert sum(c.num_leaves for c in children) == treedef.num_leaves
    assert sum(c.num_nodes for c in children) == treedef.num_nodes - 1


@pytest.mark.parametrize("case", ALL)
def test_flatten_one_level(case: Case) -> None:
    children, treedef = st.flatten_one_level(case.tree)
    assert isinstance(children, list)
    assert len(children) == len(case.children)
    for got, want in zip(_order_free(case, children), _order_free(case, case.children)):
        assert_tree_equal(got, want)
    assert treedef.num_leaves == len(children)
    assert treedef.num_nodes == len(children) + (0 if case.num_nodes == 1 == case.num_leaves else 1)
    assert_tree_equal(treedef.unflatten(children), case.tree)
    if case.num_nodes == 1 and case.num_leaves == 1:
        assert repr(treedef) == "PyTreeDef(*)"


@pytest.mark.parametrize("case", [c for c in ALL if c.values[0].num_nodes > 1 or not c.values[0].num_leaves])
def test_flatten_one_level_with_path(case: Case) -> None:
    # (a leaf has no key to give its single "child"; the spec leaves that case open)
    pairs, treedef = st.flatten_one_level_with_path(case.tree)
    assert treedef == st.flatten_one_level(case.tree)[1]
    assert len(pairs) == len(case.children)
    for key, child in pairs:
        assert follow(case.tree, (key,)) is child


@pytest.mark.parametrize("case", ALL)
def test_compose(case: Case) -> None:
    outer = st.structure(case.tree)
    inner = st.structure(("i", ["j"]))
    composed = outer.compose(inner)
    assert composed.num_leaves == outer.num_leaves * 2
    assert composed.num_nodes == outer.num_nodes + outer.num_leaves * (inner.num_nodes - 1)
    leaves = _fresh_leaves(composed.num_leaves)
    by_hand = st.unflatten(
        outer,
        [(leaves[2 * i], [leaves[2 * i + 1]]) for i in range(outer.num_leaves)],
    )
    assert_tree_equal(composed.unflatten(leaves), by_hand)
    assert composed == st.structure(by_hand)


@pytest.mark.parametrize("case", ALL)
def test_is_prefix_of(case: Case) -> None:
    treedef = st.structure(case.tree)
    deeper = treedef.compose(st.structure([0, (0,)]))
    assert treedef.is_prefix_of(treedef)
    assert st.structure(0).is_prefix_of(treedef)
    assert treedef.is_prefix_of(deeper)
    assert treedef.is_suffix_of(treedef)
    if treedef.num_leaves:
        assert not deeper.is_prefix_of(treedef)
    else:
        assert deeper == treedef


NONEMPTY = [c for c in ALL if c.values[0].num_leaves > 0]


# JAX and optree both reject transposing an outer structure with no leaves; the spec says
# nothing about it, so only non-empty outer structures are checked here.
@pytest.mark.parametrize("case", NONEMPTY)
def test_transpose(case: Case) -> None:
    outer = st.structure(case.tree)
    inner = st.structure(("a", "b"))
    n = outer.num_leaves
    tree = st.unflatten(outer, [(f"a{i}", f"b{i}") for i in range(n)])
    got = st.transpose(outer, inner, tree)
    want = (
        st.unflatten(outer, [f"a{i}" for i in range(n)]),
        st.unflatten(outer, [f"b{i}" for i in range(n)]),
    )
    assert_tree_equal(got, want)
    # inner structure inferred from the first leaf when None is passed
    assert_tree_equal(st.transpose(outer, None, tree), want)


@pytest.mark.parametrize("case", ALL)
def test_broadcast(case: Case) -> None:
    treedef = st.structure(case.tree)
    assert_tree_equal(
        st.broadcast(0, case.tree), st.unflatten(treedef, [0] * treedef.num_leaves)
    )
    assert_tree_equal(st.broadcast(case.tree, case.tree), case.tree)


@pytest.mark.parametrize("case", ALL)
def test_partition(case: Case) -> None:
    treedef = st.structure(case.tree)
    pred = lambda x: isinstance(x, int)
    yes, no = st.partition(pred, case.tree)
    leaves = st.leaves(case.tree)
    assert_leaves_equal(treedef.flatten_up_to(yes), [x if pred(x) else None for x in leaves])
    assert_leaves_equal(treedef.flatten_up_to(no), [None if pred(x) else x for x in leaves])
    yes, no = st.partition(pred, case.tree, fill_value="gap")
    assert_leaves_equal(st.leaves(yes), [x if pred(x) else "gap" for x in leaves])
    assert_leaves_equal(st.leaves(no), ["gap" if pred(x) else x for x in leaves])
    assert st.structure(yes) == treedef == st.structure(no)


# --------------------------------------------------------------- dict insertion order


def test_map_keeps_input_insertion_order() -> None:
    out = st.map(lambda x: x * 10, {"zeta": 1, "alpha": 2})
    assert list(out.items()) == [("zeta", 10), ("alpha", 20)]


def test_unflatten_keeps_input_insertion_order_and_sorted_leaf_order() -> None:
    leaves, treedef = st.flatten({"b": "B", "c": "C", "a": "A"})
    assert leaves == ["A", "B", "C"]
    assert list(st.unflatten(treedef, [1, 2, 3]).items()) == [("b", 2), ("c", 3), ("a", 1)]


def test_nested_dict_insertion_order_kept_through_map() -> None:
    tree = {"z": {"y": 1, "x": 2}, "a": [{"q": 3, "p": 4}]}
    out = st.map(lambda v: -v, tree)
    assert list(out) == ["z", "a"]
    assert list(out["z"]) == ["y", "x"]
    assert list(out["a"][0]) == ["q", "p"]
    assert out == {"z": {"y": -1, "x": -2}, "a": [{"q": -3, "p": -4}]}


def test_map_over_two_dicts_with_different_insertion_orders() -> None:
    out = st.map(lambda a, b: a - b, {"b": 10, "a": 20}, {"a": 1, "b": 2})
    assert out == {"b": 8, "a": 19}
    assert list(out) == ["b", "a"]  # the first tree decides the rebuilt order


def test_dict_structures_equal_whatever_insertion_order() -> None:
    a = st.structure({"x": 1, "y": {"p": 2, "q": 3}})
    b = st.structure({"y": {"q": 3, "p": 2}, "x": 1})
    assert a == b and hash(a) == hash(b)
    assert repr(a) == repr(b) == "PyTreeDef({'x': *, 'y': {'p': *, 'q': *}})"


def test_mixed_key_dicts_flatten_identically_whatever_insertion_order() -> None:
    keys = ["a", 1, (2,), 2.5, None, "b", 0]
    results = []
    for perm in itertools.islice(itertools.permutations(keys), 0, 5040, 97):
        d = {k: repr(k) for k in perm}
        leaves, treedef = st.flatten(d)
        results.append((leaves, treedef, [p for p, _ in st.leaves_with_path(d)]))
        assert sorted(leaves) == sorted(repr(k) for k in keys)
        # leaves and paths agree: the leaf for key k is repr(k)
        assert [repr(p[0].key) for p in results[-1][2]] == leaves
        assert_tree_equal(st.unflatten(treedef, leaves), d)
    first = results[0]
    for leaves, treedef, paths in results[1:]:
        assert leaves == first[0]
        assert treedef == first[1] and hash(treedef) == hash(first[1])
        assert paths == first[2]


def test_ordereddict_order_is_structure() -> None:
    a = st.structure(OrderedDict([("a", 1), ("b", 2)]))
    b = st.structure(OrderedDict([("b", 1), ("a", 2)]))
    assert a != b
    assert st.leaves(OrderedDict([("b", 1), ("a", 2)])) == [1, 2]


def test_defaultdict_factory_is_structure() -> None:
    assert st.structure(defaultdict(list, a=1)) != st.structure(defaultdict(dict, a=1))
    assert st.structure(defaultdict(list, a=1)) == st.structure(defaultdict(list, a=2))
    assert st.structure(defaultdict(list, a=1)) != st.structure({"a": 1})


def test_deque_maxlen_is_structure() -> None:
    assert st.structure(deque([1], maxlen=2)) != st.structure(deque([1], maxlen=3))
    assert st.structure(deque([1])) != st.structure(deque([1], maxlen=1))
    assert st.structure(deque([1], maxlen=3)) == st.structure(deque([9], maxlen=3))
    assert st.structure(deque([1])) != st.structure([1])
