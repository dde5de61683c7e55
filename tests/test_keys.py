"""Key-path entries and keystr."""

from __future__ import annotations

import copy
import pickle
from collections import OrderedDict, defaultdict, namedtuple
from typing import Any

import pytest

import spruce.tree as st
import spruce.tree_util as tu
from helpers import Box, KeyedBox, Params

ENTRIES = [
    # (entry, str, repr, simple str, field name, field value)
    (st.DictKey("a"), "['a']", "DictKey(key='a')", "a", "key", "a"),
    (st.DictKey(1), "[1]", "DictKey(key=1)", "1", "key", 1),
    (st.DictKey((1, "b")), "[(1, 'b')]", "DictKey(key=(1, 'b'))", "(1, 'b')", "key", (1, "b")),
    (st.SequenceKey(0), "[0]", "SequenceKey(idx=0)", "0", "idx", 0),
    (st.SequenceKey(12), "[12]", "SequenceKey(idx=12)", "12", "idx", 12),
    (st.GetAttrKey("name"), ".name", "GetAttrKey(name='name')", "name", "name", "name"),
    # FlattenedIndexKey prints as JAX's does.
    (st.FlattenedIndexKey(0), "[<flat index 0>]", "FlattenedIndexKey(key=0)", "0", "key", 0),
    (st.FlattenedIndexKey(3), "[<flat index 3>]", "FlattenedIndexKey(key=3)", "3", "key", 3),
]
ENTRY_IDS = [r for _, _, r, _, _, _ in ENTRIES]


@pytest.mark.parametrize("entry,text,rep,simple,field,value", ENTRIES, ids=ENTRY_IDS)
def test_entry_str_repr_field(entry, text, rep, simple, field, value) -> None:  # type: ignore[no-untyped-def]
    assert str(entry) == text
    assert repr(entry) == rep
    assert getattr(entry, field) == value
    assert st.keystr((entry,)) == text
    assert st.keystr((entry,), simple=True) == simple


@pytest.mark.parametrize("entry,field", [(e, f) for e, _, _, _, f, _ in ENTRIES], ids=ENTRY_IDS)
def test_entry_equal_hashable_copyable(entry, field) -> None:  # type: ignore[no-untyped-def]
    twin = type(entry)(getattr(entry, field))
    assert entry == twin and not (entry != twin)
    assert hash(entry) == hash(twin)
    assert {entry: "v"}[twin] == "v"
    assert pickle.loads(pickle.dumps(entry)) == entry
    assert copy.deepcopy(entry) == entry


def test_entries_of_different_kinds_differ() -> None:
    assert st.DictKey(0) != st.SequenceKey(0)
    assert st.SequenceKey(0) != st.FlattenedIndexKey(0)
    assert st.DictKey("a") != st.GetAttrKey("a")
    assert st.DictKey("a") != "a"
    assert st.SequenceKey(0) != 0
    assert len({st.DictKey(0), st.SequenceKey(0), st.FlattenedIndexKey(0)}) == 3
    assert st.DictKey("a") != st.DictKey("b")
    assert st.SequenceKey(1) != st.SequenceKey(2)


def test_keystr_forms() -> None:
    path = (st.DictKey("a"), st.SequenceKey(0), st.GetAttrKey("x"), st.FlattenedIndexKey(2))
    assert st.keystr(path) == "['a'][0].x[<flat index 2>]"
    assert st.keystr(path, simple=True) == "a0x2"
    assert st.keystr(path, simple=True, separator="/") == "a/0/x/2"
    assert st.keystr(path, separator="/") == "['a']/[0]/.x/[<flat index 2>]"
    assert st.keystr(()) == ""
    assert st.keystr((), simple=True, separator="/") == ""
    with pytest.raises(TypeError):
        st.keystr(path, True)  # type: ignore[misc]  # simple is keyword-only


def test_keystr_is_shared_by_tree_util() -> None:
    assert tu.keystr is st.keystr
    assert tu.DictKey is st.DictKey
    assert tu.SequenceKey is st.SequenceKey
    assert tu.GetAttrKey is st.GetAttrKey
    assert tu.FlattenedIndexKey is st.FlattenedIndexKey


P = namedtuple("P", ["alpha", "beta"])


@pytest.mark.parametrize(
    "tree,expected",
    [
        pytest.param([10, (20,)], [(st.SequenceKey(0),), (st.SequenceKey(1), st.SequenceKey(0))], id="list-tuple"),
        pytest.param({"b": 1, "a": 2}, [(st.DictKey("a"),), (st.DictKey("b"),)], id="dict"),
        pytest.param(OrderedDict(b=1, a=2), [(st.DictKey("b"),), (st.DictKey("a"),)], id="ordereddict"),
        pytest.param(defaultdict(int, b=1, a=2), [(st.DictKey("a"),), (st.DictKey("b"),)], id="defaultdict"),
        pytest.param(P(1, [2]), [(st.GetAttrKey("alpha"),), (st.GetAttrKey("beta"), st.SequenceKey(0))], id="namedtuple"),
        pytest.param(Params(w=1, b=2), [(st.GetAttrKey("w"),), (st.GetAttrKey("b"),)], id="dataclass"),
        pytest.param(Box(1, 2, "t"), [(st.FlattenedIndexKey(0),), (st.FlattenedIndexKey(1),)], id="custom-no-keys"),
        pytest.param(KeyedBox(1, 2), [(st.GetAttrKey("left"),), (st.GetAttrKey("right"),)], id="custom-with-keys"),
        pytest.param(st.Partial(max, 1, k=2),
                     [(st.FlattenedIndexKey(0), st.SequenceKey(0)), (st.FlattenedIndexKey(1), st.DictKey("k"))], id="partial"),
        pytest.param(5, [()], id="leaf"),
        pytest.param({"a": None}, [], id="none-hole"),
    ],
)  # fmt: skip
def test_key_kinds_per_node_type(tree, expected) -> None:  # type: ignore[no-untyped-def]
    paths = [p for p, _ in st.leaves_with_path(tree)]
    assert paths == expected
    assert [type(e) for p in paths for e in p] == [type(e) for p in expected for e in p]


def test_none_is_leaf_paths() -> None:
    assert [p for p, _ in st.leaves_with_path({"a": None, "b": [None]}, none_is_leaf=True)] == [
        (st.DictKey("a"),),
        (st.DictKey("b"), st.SequenceKey(0)),
    ]


def test_mixed_key_types_paths_use_dictkey() -> None:
    paths = {p for p, _ in st.leaves_with_path({1: "x", "a": "y", None: "z"})}
    assert paths == {(st.DictKey(1),), (st.DictKey("a"),), (st.DictKey(None),)}


def test_sequence_key_entries_are_shared_and_right_after_concurrent_growth() -> None:
    import threading

    from spruce._tree import _keys

    sizes = [1500, 5000, 3000, 70_000, 2048, 9999]
    got: dict[int, list[object]] = {}

    def grow(n: int) -> None:
        got[n] = _keys.sequence_keys(n)

    threads = [threading.Thread(target=grow, args=(n,)) for n in sizes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for n in sizes:
        keys = got[n]
        assert len(keys) == n
        assert all(k.idx == i for i, k in enumerate(keys))
    assert len(_keys.SEQUENCE_KEYS) == _keys._MAX_SEQUENCE_KEYS
    assert all(k.idx == i for i, k in enumerate(_keys.SEQUENCE_KEYS))
    # shared: a path through a long list reuses the cached entry
    pairs = st.flatten_with_path([0] * 3000)[0]
    assert pairs[2999][0][0] is _keys.SEQUENCE_KEYS[2999]
    assert pairs[2999][0] == (st.SequenceKey(2999),)


def test_paths_at_every_depth_by_every_walk() -> None:
    # a leaf's path is made at the leaf from the keys of the nodes above it: children of the
    # root (no key above), of a depth-1 node (one key above) and deeper take different branches,
    # and past the recursion depth the iterative walker makes them
    S, D = st.SequenceKey, st.DictKey
    deep: Any = "bottom"
    for _ in range(3000):
        deep = [deep]
    tree = [1, {"a": 2, "b": [3, (4,)]}, deep]
    want = [
        ((S(0),), 1),
        ((S(1), D("a")), 2),
        ((S(1), D("b"), S(0)), 3),
        ((S(1), D("b"), S(1), S(0)), 4),
        ((S(2),) + (S(0),) * 3000, "bottom"),
    ]
    assert st.leaves_with_path(tree) == want
    assert st.flatten_with_path(tree)[0] == want
    seen: list[Any] = []
    st.map_with_path(lambda p, x: seen.append((p, x)), tree)
    assert seen == want
    asked: list[Any] = []
    st.leaves_with_path(tree, is_leaf=lambda p, x: asked.append((p, x)) or False, is_leaf_takes_path=True)
    assert [(p, x) for p, x in asked if not isinstance(x, (list, dict, tuple))] == want
    assert [p for p, _ in asked[:3]] == [(), (S(0),), (S(1),)]
    assert st.leaves_with_path({"k": 5}) == [((D("k"),), 5)]
    assert st.leaves_with_path(7) == [((), 7)]
