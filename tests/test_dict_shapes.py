"""Dict shapes: the node data of plain dicts with str keys is made once per key order and shared.

What sharing must never change: the leaves come in sorted key order, rebuilt dicts keep their own
insertion order, keys that are equal but not the same key (1, 1.0, True; an object equal to a
str) are never swapped for one another, a PyTreeDef made earlier is not changed by later dicts,
and the table of shapes stays bounded.
"""

from __future__ import annotations

import itertools
import pickle
from typing import Any

import pytest

import spruce.tree as st
from spruce._tree import _expand

KEYS = ["w", "b", "gamma", "beta"]


class LooksLikeA:
    """Equal to 'a' and hashed like it, but not a str: a dict keyed by it is a different dict."""

    def __hash__(self) -> int:
        return hash("a")

    def __eq__(self, other: object) -> bool:
        return other == "a" or isinstance(other, LooksLikeA)

    def __lt__(self, other: object) -> bool:
        return False


@pytest.mark.parametrize("order", list(itertools.permutations(KEYS)), ids="-".join)
def test_every_insertion_order_flattens_sorted_and_rebuilds_in_its_own_order(order: tuple[str, ...]) -> None:
    for _ in range(2):  # the second time the shape is known
        d = {k: i for i, k in enumerate(order)}
        leaves, td = st.flatten(d)
        assert leaves == [d[k] for k in sorted(order)]
        rebuilt = st.unflatten(td, leaves)
        assert list(rebuilt) == list(order) and rebuilt == d
        assert list(st.map(lambda x: x * 10, d)) == list(order)
        pairs = st.flatten_with_path(d)[0]
        assert [(p[0].key, x) for p, x in pairs] == [(k, d[k]) for k in sorted(order)]


def test_dicts_with_the_same_keys_give_equal_treedefs_whatever_their_order() -> None:
    a = st.structure({"x": 1, "y": 2})
    b = st.structure({"y": 1, "x": 2})
    assert a == b and hash(a) == hash(b)
    # ... but each rebuilds its own insertion order
    assert list(st.unflatten(a, [0, 0])) == ["x", "y"]
    assert list(st.unflatten(b, [0, 0])) == ["y", "x"]


def test_keys_that_are_equal_but_not_str_are_kept() -> None:
    st.flatten({"a": 1})  # the shape ('a',) is known now
    k = LooksLikeA()
    leaves, td = st.flatten({k: 1})
    rebuilt = st.unflatten(td, leaves)
    (key,) = rebuilt
    assert key is k
    for first, second in [(1, 1.0), (1.0, True), (True, 1)]:
        st.flatten({first: "x"})
        (key2,) = st.unflatten(st.structure({second: "x"}), ["x"])
        assert type(key2) is type(second)


def test_a_str_subclass_key_is_kept() -> None:
    class Name(str):
        pass

    st.flatten({"n": 0})
    (key,) = st.unflatten(st.structure({Name("n"): 0}), [0])
    assert type(key) is Name


def test_a_treedef_is_not_changed_by_later_dicts_or_by_mutating_the_source_dict() -> None:
    d = {"b": 1, "a": 2}
    td = st.structure(d)
    d["c"] = 3
    td2 = st.structure(d)
    assert td != td2
    assert st.unflatten(td, [10, 20]) == {"b": 20, "a": 10}
    assert list(st.unflatten(td, [10, 20])) == ["b", "a"]
    assert st.unflatten(td2, [1, 2, 3]) == {"a": 1, "b": 2, "c": 3}
    assert pickle.loads(pickle.dumps(td)) == td


def test_map2_matches_the_second_dict_by_key_in_any_order() -> None:
    a = {"w": 1, "b": 2, "s": 3}
    same_order = {"w": 10, "b": 20, "s": 30}
    other_order = {"s": 30, "w": 10, "b": 20}
    for other in (same_order, other_order):
        out = st.map(lambda x, y: x + y, a, other)
        assert out == {"w": 11, "b": 22, "s": 33}
        assert list(out) == ["w", "b", "s"]
    # a second dict keyed by an equal non-str key matches as a dict lookup would
    assert st.map(lambda x, y: (x, y), {"a": 1}, {LooksLikeA(): 2}) == {"a": (1, 2)}


def test_map2_with_a_different_key_set_still_names_the_keys() -> None:
    with pytest.raises(ValueError, match="'c'"):
        st.map(lambda x, y: x, {"a": 1, "b": 2}, {"a": 1, "c": 2})


def test_wide_and_non_str_dicts_are_not_shared_but_work() -> None:
    wide = {f"k{i:03d}": i for i in reversed(range(_expand.MAX_SHAPE_KEYS + 1))}
    leaves, td = st.flatten(wide)
    assert leaves == sorted(wide.values())
    assert list(st.unflatten(td, leaves)) == list(wide)
    mixed: dict[Any, int] = {2: 0, "a": 1, 1: 2}
    assert list(st.unflatten(*reversed(st.flatten(mixed)))) == [2, "a", 1]


def test_the_shape_table_is_bounded() -> None:
    try:
        for i in range(_expand.MAX_SHAPES + 100):
            st.flatten({f"bounded-{i}": 0})
        assert len(_expand._SHAPES) <= _expand.MAX_SHAPES
        # a dict whose shape did not fit still flattens and rebuilds
        d = {"z-last": 1, "a-last": 2}
        assert st.unflatten(*reversed(st.flatten(d))) == d
    finally:
        _expand._SHAPES.clear()  # leave the table as a real program would have it


def test_a_second_tree_list_shrunk_by_the_callback_raises_a_clear_error() -> None:
    other = [1, 2, 3]

    def f(x: object, y: object) -> object:
        other.clear()
        return x

    with pytest.raises(RuntimeError, match="changed size while it was being walked"):
        st.map(f, [1, 2, 3], other)


@pytest.mark.parametrize("n", range(1, 13))
def test_rebuilt_dicts_of_every_small_size_keep_insertion_order_and_values(n: int) -> None:
    # up to 5 keys an unsorted dict is rebuilt by inserting in insertion order, above by a
    # template: both must give the dict's own order, its values under the right keys, and the
    # same again when the PyTreeDef is used a second and third time
    for keys in ([f"k{i}" for i in range(n)], list(range(n))):
        for order in (keys[::-1], keys[1:] + keys[:1], keys[::2] + keys[1::2]):
            d: dict[Any, Any] = {k: f"v{k}" for k in order}
            leaves, td = st.flatten(d)
            for _ in range(3):
                rebuilt = st.unflatten(td, leaves)
                assert list(rebuilt.items()) == list(d.items())
            assert list(st.map(lambda x: x + "!", d).items()) == [(k, v + "!") for k, v in d.items()]


def test_a_dict_starting_with_a_known_key_object_but_other_keys_is_its_own_shape() -> None:
    # Compiled, a known shape is found by the identity of a dict's first key and its size, then
    # checked key by key: a dict that shares only its first key object is another shape.
    st.flatten({"w": 1, "b": 2})
    for d in ({"w": 1, "c": 2}, {"w": 1, "b": 2, "c": 3}, {"w": 1}, {"b": 2, "w": 1}):
        leaves, td = st.flatten(d)
        assert leaves == [d[k] for k in sorted(d)]
        rebuilt = st.unflatten(td, leaves)
        assert rebuilt == d and list(rebuilt) == list(d)


def test_equal_but_distinct_key_objects_give_the_same_structure() -> None:
    a = {"kernel": 1, "bias": 2}
    b = {"".join(["ker", "nel"]): 3, "".join(["bi", "as"]): 4}
    assert all(x is not y for x, y in zip(a, b))
    assert st.structure(a) == st.structure(b)
    assert st.leaves(b) == [4, 3]
    assert st.unflatten(st.structure(b), [0, 1]) == {"kernel": 1, "bias": 0}


def test_many_shapes_sharing_first_keys_flatten_and_rebuild_exactly() -> None:
    # More shapes than a probe holds, many with the same first key: each dict must still come
    # back with its own keys, values and order, however the shapes collide.
    import random

    rng = random.Random(0)
    names = [f"k{i}" for i in range(40)]
    for _ in range(3000):
        keys = rng.sample(names, rng.randint(1, 6))
        if rng.random() < 0.3:
            keys = ["".join(list(k)) for k in keys]  # equal keys, other objects
        d = {k: i for i, k in enumerate(keys)}
        leaves, td = st.flatten(d)
        assert leaves == [d[k] for k in sorted(d)]
        rebuilt = st.unflatten(td, leaves)
        assert rebuilt == d and list(rebuilt) == list(d)
        assert st.map(lambda x: -x, d) == {k: -v for k, v in d.items()}
