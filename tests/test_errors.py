"""Errors: each asserts the exception type and what the message must tell (where and what)."""

from __future__ import annotations

import dataclasses
import re
from collections import OrderedDict, namedtuple
from typing import Any

import pytest

import spruce.tree as st
from helpers import Point

# ------------------------------------------------------------ structure mismatch messages


def _mismatch(fn: Any, *args: Any) -> str:
    with pytest.raises(ValueError) as info:
        fn(*args)
    return str(info.value)


def _map2(a: Any, b: Any) -> Any:
    return st.map(lambda x, y: x, a, b)


def _flatten_up_to(a: Any, b: Any) -> Any:
    return st.structure(a).flatten_up_to(b)


def _broadcast(a: Any, b: Any) -> Any:
    return st.broadcast(a, b)


def _transpose(a: Any, b: Any) -> Any:
    # a and b: outer trees with (0, 0) pairs at the leaves; a gives the outer structure
    outer = st.structure(a)
    return st.transpose(outer, st.structure((0, 0)), st.map(lambda x: (x, x), b))


MISMATCHERS = [
    pytest.param(_map2, id="map"),
    pytest.param(_flatten_up_to, id="flatten_up_to"),
    pytest.param(_broadcast, id="broadcast"),
    pytest.param(_transpose, id="transpose"),
]


@pytest.mark.parametrize("fn", MISMATCHERS)
def test_type_mismatch_names_path_and_both_types(fn: Any) -> None:
    msg = _mismatch(fn, {"a": 1, "b": [1, (2, 3)]}, {"a": 1, "b": [1, [2, 3]]})
    assert "['b'][1]" in msg
    assert "tuple" in msg and "list" in msg


@pytest.mark.parametrize("fn", MISMATCHERS)
def test_length_mismatch_names_path_and_both_lengths(fn: Any) -> None:
    msg = _mismatch(fn, {"a": 1, "b": [1, [2, 3]]}, {"a": 1, "b": [1, [2, 3, 4]]})
    assert "['b'][1]" in msg
    assert re.search(r"\b2\b", msg) and re.search(r"\b3\b", msg), msg


@pytest.mark.parametrize("fn", MISMATCHERS)
def test_dict_key_mismatch_names_missing_and_extra_keys(fn: Any) -> None:
    msg = _mismatch(
        fn, {"x": {"a": 1, "b": 2, "c": 3}}, {"x": {"a": 1, "c": 3, "zz_extra": 4}}
    )
    assert "['x']" in msg
    assert "'b'" in msg  # missing
    assert "'zz_extra'" in msg  # extra


@pytest.mark.parametrize("fn", MISMATCHERS)
def test_node_versus_leaf_mismatch(fn: Any) -> None:
    msg = _mismatch(fn, [0, {"k": [0, 0]}], [0, {"k": 7}])
    assert "[1]['k']" in msg
    assert "list" in msg


@pytest.mark.parametrize("fn", MISMATCHERS)
def test_none_versus_leaf_mismatch(fn: Any) -> None:
    msg = _mismatch(fn, [0, None], [0, 5])
    assert "[1]" in msg
    assert "None" in msg


@pytest.mark.parametrize("fn", MISMATCHERS)
def test_namedtuple_versus_tuple_mismatch(fn: Any) -> None:
    msg = _mismatch(fn, {"p": Point(0, 0)}, {"p": (0, 0)})
    assert "['p']" in msg
    assert "Point" in msg and "tuple" in msg


@pytest.mark.parametrize("fn", MISMATCHERS)
def test_ordereddict_order_mismatch(fn: Any) -> None:
    msg = _mismatch(fn, [OrderedDict(a=0, b=0)], [OrderedDict(b=0, a=0)])
    assert "[0]" in msg
    assert "OrderedDict" in msg


def _assert_distinguishes(msg: str, a: type, b: type) -> None:
    qa, qb = f"{a.__module__}.{a.__qualname__}", f"{b.__module__}.{b.__qualname__}"
    by_qualname = qa != qb and qa in msg and qb in msg
    assert by_qualname or "distinct classes" in msg, msg


def _make_point_class() -> type:
    return namedtuple("Point", ["x", "y"])


@pytest.mark.parametrize("fn", MISMATCHERS)
def test_same_named_classes_from_different_places_are_distinguished(fn: Any) -> None:
    LocalPoint = namedtuple("Point", ["x", "y"])
    msg = _mismatch(fn, [Point(0, 0)], [LocalPoint(0, 0)])
    assert "[0]" in msg
    _assert_distinguishes(msg, Point, LocalPoint)


@pytest.mark.parametrize("fn", MISMATCHERS)
def test_same_named_classes_with_same_qualname_are_distinguished(fn: Any) -> None:
    A, B = _make_point_class(), _make_point_class()
    assert A.__qualname__ == B.__qualname__ and A.__module__ == B.__module__
    msg = _mismatch(fn, {"k": A(0, 0)}, {"k": B(0, 0)})
    assert "['k']" in msg
    _assert_distinguishes(msg, A, B)


def test_same_named_dataclasses_are_distinguished() -> None:
    def make() -> type:
        @dataclasses.dataclass
        class Cfg:
            v: Any

        st.register_dataclass(Cfg)
        return Cfg

    A, B = make(), make()
    msg = _mismatch(_map2, [A(1)], [B(1)])
    assert "[0]" in msg
    _assert_distinguishes(msg, A, B)


def test_map_error_names_which_tree() -> None:
    msg = _mismatch(lambda: st.map(lambda *xs: 0, [1, 2], [1, 2], [1, 2, 3]))
    assert re.search(r"\b2\b", msg) and re.search(r"\b3\b", msg)


# ------------------------------------------------------------------------- bounded size


def test_huge_dict_key_mismatch_message_is_bounded() -> None:
    a = {f"key{i:05d}": i for i in range(10_000)}
    b = {f"other{i:05d}": i for i in range(10_000)}
    for fn in (_map2, _flatten_up_to, _broadcast):
        msg = _mismatch(fn, a, b)
        assert len(msg) < 2000, (fn.__name__, len(msg))
        assert "'key0" in msg and "'other0" in msg  # some missing and some extra keys named


def test_huge_dict_one_key_differs_message_is_bounded_and_precise() -> None:
    a = {f"key{i:05d}": i for i in range(10_000)}
    b = dict(a)
    del b["key05000"]
    b["zzz_new"] = 0
    msg = _mismatch(_map2, a, b)
    assert len(msg) < 2000
    assert "'key05000'" in msg and "'zzz_new'" in msg


def test_huge_list_length_mismatch_message_is_bounded() -> None:
    msg = _mismatch(_map2, [list(range(10_000))], [list(range(10_001))])
    assert len(msg) < 2000
    assert "10000" in msg.replace(",", "").replace("_", "")
    assert "10001" in msg.replace(",", "").replace("_", "")
    assert "[0]" in msg


def test_deep_mismatch_message_is_bounded() -> None:
    # the mismatch sits 2,000 levels down: its full key path alone is 10,000 characters
    a: Any = [0]
    b: Any = (0,)
    for _ in range(2000):
        a, b = {"k": a}, {"k": b}
    msg = _mismatch(_map2, a, b)
    assert len(msg) < 2000, len(msg)
    assert "['k']" in msg
    assert "list" in msg and "tuple" in msg


def test_wide_and_deep_mismatch_reports_the_first_mismatch() -> None:
    a = {"a": [0] * 5000, "b": {"c": [0, 0]}}
    b = {"a": [0] * 5000, "b": {"c": [0, 0, 0]}}
    msg = _mismatch(_map2, a, b)
    assert "['b']['c']" in msg
    assert len(msg) < 2000


# --------------------------------------------------------------------------- transpose


def test_transpose_checks_the_whole_structure_not_only_leaf_count() -> None:
    outer = st.structure([0, 0])
    inner = st.structure((0, 0))
    with pytest.raises(ValueError) as info:
        st.transpose(outer, inner, [(1, 2), [3, 4]])
    msg = str(info.value)
    assert "[1]" in msg
    assert "tuple" in msg and "list" in msg


def test_transpose_rejects_wrong_outer() -> None:
    outer = st.structure({"a": 0, "b": 0})
    inner = st.structure([0, 0])
    with pytest.raises(ValueError) as info:
        st.transpose(outer, inner, {"a": [1, 2], "c": [3, 4]})
    assert "'b'" in str(info.value) and "'c'" in str(info.value)


def test_transpose_rejects_inner_with_same_leaf_count_but_other_shape() -> None:
    outer = st.structure([0, 0])
    inner = st.structure({"x": 0, "y": 0})
    with pytest.raises(ValueError) as info:
        st.transpose(outer, inner, [{"x": 1, "y": 2}, {"x": 3, "z": 4}])
    msg = str(info.value)
    assert "[1]" in msg and "'y'" in msg and "'z'" in msg


# --------------------------------------------------------------------------- unflatten


def test_unflatten_too_few_leaves_names_both_counts() -> None:
    treedef = st.structure([0, (0, 0), {"a": 0, "b": [0, 0, 0]}])  # 7 leaves
    assert treedef.num_leaves == 7
    with pytest.raises(ValueError) as info:
        st.unflatten(treedef, [1, 2, 3, 4, 5])
    msg = str(info.value)
    assert re.search(r"\b7\b", msg) and re.search(r"\b5\b", msg), msg


def test_unflatten_too_many_leaves_names_both_counts() -> None:
    treedef = st.structure([0, (0, 0), {"a": 0, "b": [0, 0, 0]}])
    with pytest.raises(ValueError) as info:
        st.unflatten(treedef, range(9))
    msg = str(info.value)
    assert re.search(r"\b7\b", msg) and re.search(r"\b9\b", msg), msg


def test_unflatten_too_many_leaves_from_a_generator() -> None:
    treedef = st.structure([0, 0])
    with pytest.raises(ValueError) as info:
        treedef.unflatten(iter([1, 2, 3]))
    assert re.search(r"\b2\b", str(info.value))


# ------------------------------------------------------------------- bad custom flatten


class NotAPair:
    pass


class ChildrenNotIterable:
    pass


class ThreeTuple:
    pass


class UnflattenGetsWrongCount:
    def __init__(self, a: Any) -> None:
        self.a = a


st.register_pytree_node(NotAPair, lambda x: [1, 2, 3], lambda aux, ch: NotAPair())
st.register_pytree_node(ChildrenNotIterable, lambda x: (5, None), lambda aux, ch: None)
st.register_pytree_node(ThreeTuple, lambda x: ((1,), None, "extra"), lambda aux, ch: None)


@pytest.mark.parametrize("cls", [NotAPair, ChildrenNotIterable, ThreeTuple])
def test_custom_flatten_with_wrong_shape_names_the_type(cls: type) -> None:
    with pytest.raises((TypeError, ValueError)) as info:
        st.flatten([cls()])
    assert cls.__name__ in str(info.value)


def test_custom_flatten_raising_propagates() -> None:
    class Boom:
        pass

    def bad_flatten(x: Any) -> Any:
        raise KeyError("from user flatten")

    st.register_pytree_node(Boom, bad_flatten, lambda aux, ch: Boom())
    with pytest.raises(KeyError, match="from user flatten"):
        st.flatten({"a": Boom()})


# ---------------------------------------------------------------------- other bad input


def test_reduce_of_empty_tree_without_initializer() -> None:
    with pytest.raises(TypeError):
        st.reduce(lambda a, b: a + b, [None, ()])


def test_reduce_associative_of_empty_tree_without_identity() -> None:
    with pytest.raises((TypeError, ValueError)):
        st.reduce_associative(lambda a, b: a + b, {})


def test_none_is_leaf_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        st.flatten([None], None, True)  # type: ignore[misc]



# ------------------------------------------------------------ tampered pickle states

TAMPER_SCRIPT = r'''
import itertools, json, pickle, time
from collections import OrderedDict, defaultdict, deque, namedtuple
import spruce.tree as st

P = namedtuple("P", "x y")
TREES = [
    5,
    None,
    [1, (2, 3)],
    {"a": [1, None], "b": (2,)},
    {"b": 1, "a": 2},
    OrderedDict(b=1, a=2),
    defaultdict(list, a=1),
    deque([1, 2], maxlen=3),
    deque([1]),
    time.gmtime(0),
    P(1, [2]),
    [None, (), {}],
    {1: "x", "a": "y"},
]
PAIR_TREES = TREES[2:8] + TREES[9:11]
DELETE = object()


class Opaque:
    """An unexpected but well-behaved object (hashable, picklable, equal to its copies)."""

    def __eq__(self, other):
        return type(other) is Opaque

    def __hash__(self):
        return 7


OPAQUE = Opaque()


def positions(obj, path=()):
    yield path, obj
    if type(obj) in (tuple, list):
        for i, c in enumerate(obj):
            yield from positions(c, path + (i,))


def replace(obj, path, new):
    if not path:
        return new
    items = list(obj)
    i = path[0]
    if len(path) == 1 and new is DELETE:
        del items[i]
    elif len(path) == 1 and isinstance(new, tuple) and new and new[0] is DELETE:  # duplicate
        items.insert(i, items[i])
    else:
        items[i] = replace(obj[i], path[1:], new)
    return type(obj)(items)


INT_DELTAS = [d for k in range(7) for d in (1 << k, -(1 << k))]
REPLACEMENTS = [None, "x", OPAQUE, (), [], 1.5, True, -1, 2**63, int, list, ("dict",), ("custom",)]


def single_mutations(args):
    for top in range(len(args)):
        for path, value in positions(args[top]):
            full = (top,) + path
            if type(value) is int:
                for d in INT_DELTAS:
                    yield full, value + d
                for k in range(12):
                    yield full, value ^ (1 << k)
            for r in REPLACEMENTS:
                yield full, r
            if type(value) in (tuple, list):
                for n in range(len(value)):
                    yield full, type(value)(value[:n])
                yield full, type(value)(reversed(value))
                yield full, list(value) if type(value) is tuple else tuple(value)
            if path:  # delete or duplicate this element of its parent
                yield full, DELETE
                yield full, (DELETE,)


def apply(args, mutation):
    path, new = mutation
    return replace(args, path, new)


def check(fn, args):
    try:
        td = fn(*args)
    except ValueError:
        return None
    except RecursionError:
        return None
    except Exception as e:
        return f"load raised {type(e).__name__}: {str(e)[:150]}"
    if not isinstance(td, st.PyTreeDef):
        return f"load returned {type(td).__name__}"
    try:
        repr(td)
        n = td.num_leaves
        assert td.num_nodes >= 1
        t = td.unflatten(list(range(n)))
        assert td.flatten_up_to(t) == list(range(n)), "flatten_up_to disagrees"
        assert pickle.loads(pickle.dumps(td)) == td, "pickle round trip"
        hash(td)
        assert td == td
        td.children()
        td.paths()
    except Exception as e:
        return f"accepted, then {type(e).__name__}: {str(e)[:150]}"
    return None


bad = []
total = 0
for tree in TREES:
    fn, args = st.structure(tree).__reduce__()
    args = tuple(args)
    muts = list(single_mutations(args))
    for m in muts:
        total += 1
        try:
            mutated = apply(args, m)
        except Exception:
            continue
        problem = check(fn, mutated)
        if problem:
            bad.append([repr(tree)[:60], repr(m)[:120], problem])
    if any(tree is p for p in PAIR_TREES):
        int_muts = [m for m in muts if type(m[1]) is int and m[1] >= 0][:200]
        structural = [m for m in muts if m[1] is DELETE or (isinstance(m[1], tuple) and m[1][:1] == (DELETE,))]
        for m1, m2 in itertools.product(int_muts, structural):
            total += 1
            try:
                mutated = apply(apply(args, m1), m2)
            except Exception:
                continue
            problem = check(fn, mutated)
            if problem:
                bad.append([repr(tree)[:60], repr((m1, m2))[:160], problem])

print(json.dumps({"total": total, "bad": bad[:25], "n_bad": len(bad)}))
'''


@pytest.mark.subprocess
def test_tampered_pickle_states_raise_value_error_never_crash() -> None:
    import json

    from helpers import run_python

    proc = run_python(TAMPER_SCRIPT, timeout=300)
    assert proc.returncode == 0, f"interpreter died (rc={proc.returncode}): {proc.stderr[-3000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["total"] > 1000
    assert report["n_bad"] == 0, json.dumps(report["bad"], indent=1)


def test_tampered_state_with_unregistered_custom_class() -> None:
    class Gone:
        def __init__(self, a: Any) -> None:
            self.a = a

    st.register_pytree_node(Gone, lambda g: ((g.a,), None), lambda aux, ch: Gone(*ch))
    fn, args = st.structure([Gone(1)]).__reduce__()
    st.unregister(Gone)
    with pytest.raises(ValueError) as info:
        fn(*args)
    assert "Gone" in str(info.value)


def test_pickle_round_trip_then_loads_of_garbage_state() -> None:
    import pickle

    treedef = st.structure({"a": [1, (2,)]})
    fn, args = treedef.__reduce__()
    assert fn(*args) == treedef
    for garbage in [None, 0, "state", (), [], {}, (None,), object()]:
        for j in range(len(args)):
            with pytest.raises(ValueError):
                fn(*[garbage if i == j else a for i, a in enumerate(args)])
    assert pickle.loads(pickle.dumps(treedef)) == treedef


# ------------------------------------------------------------- mutation during a walk


def test_items_appended_by_a_callback_are_not_walked() -> None:
    # as jax.tree_util: the walk sees the list as it was when entered (map used to loop forever)
    root: list[object] = [[0]]
    calls: list[object] = []

    def f(x: object) -> object:
        calls.append(x)
        root.append([0])
        return x

    assert st.map(f, root) == [[0]]
    assert calls == [0]
    # is_leaf runs on the root before the root is entered, so only appends made while the
    # list is being walked (here: when is_leaf sees its int items) are left out
    grown: list[object] = [1, 2]
    seen = st.leaves(grown, is_leaf=lambda x: isinstance(x, int) and grown.append(9) and False)
    assert seen == [1, 2]
    assert grown == [1, 2, 9, 9]


@pytest.mark.parametrize("is_leaf", [None, lambda x: False], ids=["plain", "is_leaf"])
def test_map_reads_a_dicts_values_when_it_enters_the_dict(is_leaf: Any) -> None:
    # a callback that rewrites, deletes or adds entries of a dict being mapped changes neither
    # which values are mapped nor the result's keys and insertion order (jax reads a dict's
    # items when it flattens it, before any callback runs)
    d: dict[str, Any] = {"b": 1, "a": 2, "c": [3]}
    calls: list[Any] = []

    def f(x: Any) -> Any:
        calls.append(x)
        d["c"] = "replaced"
        d.pop("b", None)
        d["z"] = 99
        return x * 10

    out = st.map(f, d, is_leaf=is_leaf)
    assert calls == [2, 1, 3]
    assert list(out.items()) == [("b", 10), ("a", 20), ("c", [30])]
    assert d == {"a": 2, "c": "replaced", "z": 99}


def test_a_stop_iteration_from_a_callback_is_not_the_end_of_the_leaves() -> None:
    # iter (and all/any, which stop early through it) is a generator: a StopIteration let out
    # of it would end the iteration and lose leaves silently.  It is raised as a RuntimeError
    # whose cause is the callback's exception; eager walks let it through, as jax does.
    stop = StopIteration("from is_leaf")

    def is_leaf(x: Any) -> bool:
        if x == 2:
            raise stop
        return False

    for walk in (lambda: list(st.iter([1, [2, 3]], is_leaf=is_leaf)),
                 lambda: st.all([1, [2, 0]], is_leaf=is_leaf),
                 lambda: st.any([0, [2, 5]], is_leaf=is_leaf)):  # fmt: skip
        with pytest.raises(RuntimeError, match="raised StopIteration") as info:
            walk()
        assert info.value.__cause__ is stop
    with pytest.raises(StopIteration):
        st.leaves([1, [2, 3]], is_leaf=is_leaf)

    class Stops:
        pass

    def flatten(node: Stops) -> tuple[list[Any], None]:
        raise stop

    st.register_pytree_node(Stops, flatten, lambda aux, ch: Stops())
    try:
        with pytest.raises(RuntimeError, match="raised StopIteration") as info:
            st.any([0, Stops(), 5])
        assert info.value.__cause__ is stop
    finally:
        st.unregister(Stops)


def test_a_registered_nodes_own_children_list_is_walked_as_a_list_is() -> None:
    # a flatten function may hand out the list the node holds: items a callback appends are
    # not walked, and removing items raises, exactly as for a list node
    class Bag:
        def __init__(self, items: list[object]) -> None:
            self.items = items

    st.register_pytree_node(Bag, lambda b: (b.items, None), lambda aux, ch: Bag(list(ch)))
    grown = Bag([1, 2, 3])
    out = st.map(lambda x: (grown.items.append(0), x)[1], grown)
    assert out.items == [1, 2, 3]
    shrunk = Bag([1, 2, 3])
    with pytest.raises(RuntimeError, match="changed size while it was being walked"):
        st.map(lambda x: (shrunk.items.clear(), x)[1], shrunk)


def test_is_leaf_sees_every_object_once_at_any_depth() -> None:
    # the uncompiled map hands subtrees below 16 levels to another walker: is_leaf must still
    # be asked once per object, so a stateful predicate gives the same answer as compiled
    tree: object = 0
    for _ in range(40):
        tree = [tree]
    seen: list[int] = []
    out = st.map(lambda x: x, tree, is_leaf=lambda x: bool(seen.append(id(x))))
    assert len(seen) == 41 and len(set(seen)) == 41
    assert st.leaves(out) == [0]


@pytest.mark.parametrize("two_trees", [False, True], ids=["map", "map2"])
def test_a_list_shrunk_by_a_callback_raises_a_clear_error(two_trees: bool) -> None:
    victim = [1, 2, 3]

    def f(x: object, *rest: object) -> object:
        victim.clear()
        return x

    trees = ([victim, 9], [[0, 0, 0], 0]) if two_trees else ([victim, 9],)
    with pytest.raises(RuntimeError, match="changed size while it was being walked"):
        st.map(f, *trees)


def test_node_data_that_print_alike_when_clipped_show_where_they_differ() -> None:
    @dataclasses.dataclass(frozen=True)
    class Tagged:
        value: Any
        tag: str

    st.register_dataclass(Tagged, data_fields=["value"], meta_fields=["tag"])
    try:
        a, b = Tagged(1.0, "x" * 150 + "A"), Tagged(2.0, "x" * 150 + "B")
        with pytest.raises(ValueError) as info:
            st.map(lambda u, v: u, a, b)
        text = str(info.value)
        assert text.count("x" * 90) == 2  # both clipped texts, alike
        assert re.search(r"; the node data first differ at character 15\d: \.\.\.\"?'?x{20,}A", text), text
        assert text.endswith("B',)\"") or text.endswith("B',)'"), text
    finally:
        st.unregister(Tagged)
