"""Thread safety: concurrent registration and traversal give no error and correct results."""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections import OrderedDict, deque
from typing import Any, Callable

import pytest

import spruce.tree as st

N_THREADS = 8


@pytest.fixture(autouse=True)
def _fast_switching() -> Any:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # interleave the threads as much as possible
    yield
    sys.setswitchinterval(old)


def _run_threads(target: Callable[[int], None]) -> list[BaseException]:
    barrier = threading.Barrier(N_THREADS)
    errors: list[BaseException] = []
    lock = threading.Lock()

    def body(i: int) -> None:
        try:
            barrier.wait()
            target(i)
        except BaseException as e:  # collected and reported by the test
            with lock:
                errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return errors


def test_concurrent_distinct_registrations_and_flattening() -> None:
    shared_tree = {"b": [1, (2, 3)], "a": OrderedDict(z=4, y=deque([5], maxlen=2)), "c": None}

    def work(i: int) -> None:
        for j in range(40):
            # a brand-new type per iteration, registered in one of several ways
            if j % 3 == 0:

                class Fresh:
                    def __init__(self, a: Any, b: Any) -> None:
                        self.a, self.b = a, b

                st.register_pytree_node(
                    Fresh, lambda f, tag=(i, j): ((f.a, f.b), tag), lambda aux, ch: Fresh(*ch)
                )
                obj: Any = Fresh([i, j], {"k": j})
            elif j % 3 == 1:

                @dataclasses.dataclass
                class FreshDC:
                    a: Any
                    b: Any
                    tag: Any = st.static(default=(i, j))

                st.register_dataclass(FreshDC)
                obj = FreshDC([i, j], {"k": j})
            else:

                class FreshKeyed:
                    def __init__(self, a: Any, b: Any) -> None:
                        self.a, self.b = a, b

                st.register_pytree_with_keys(
                    FreshKeyed,
                    lambda f: (((st.GetAttrKey("a"), f.a), (st.GetAttrKey("b"), f.b)), None),
                    lambda aux, ch: FreshKeyed(*ch),
                )
                obj = FreshKeyed([i, j], {"k": j})
            tree = {"mine": obj, "shared": shared_tree}
            leaves, treedef = st.flatten(tree)
            assert leaves == [i, j, j, 4, 5, 1, 2, 3], leaves
            rebuilt = st.unflatten(treedef, leaves)
            assert type(rebuilt["mine"]) is type(obj)
            assert st.leaves(st.map(lambda v: v + 1, tree)) == [v + 1 for v in leaves]
            assert st.structure(rebuilt) == treedef
            paths = [st.keystr(p) for p, _ in st.leaves_with_path(tree)]
            assert paths[-3:] == ["['shared']['b'][0]", "['shared']['b'][1][0]", "['shared']['b'][1][1]"]
            if j % 6 == 5:
                st.unregister(type(obj))

    errors = _run_threads(work)
    assert errors == [], errors[:3]


def _race_to_register_one_class() -> None:
    class Contested:
        pass

    outcomes: list[str] = []
    lock = threading.Lock()

    def race(i: int) -> None:
        try:
            st.register_pytree_node(Contested, lambda x: ((), None), lambda a, c: Contested())
            result = "ok"
        except ValueError:
            result = "ValueError"
        with lock:
            outcomes.append(result)

    errors = _run_threads(race)
    assert errors == []
    assert sorted(outcomes) == ["ValueError"] * (N_THREADS - 1) + ["ok"]


def test_concurrent_racing_registration_exactly_one_winner_repeatedly() -> None:
    for _ in range(10):
        _race_to_register_one_class()


def test_concurrent_traversals_of_one_tree() -> None:
    tree = {f"k{i}": [i, (i, {"x": i})] for i in range(300)}
    expected_leaves = [v for k in sorted(tree) for v in (tree[k][0], tree[k][1][0], tree[k][1][1]["x"])]
    expected_treedef = st.structure(tree)

    def work(i: int) -> None:
        for _ in range(20):
            leaves, treedef = st.flatten(tree)
            assert leaves == expected_leaves
            assert treedef == expected_treedef
            assert st.unflatten(treedef, leaves) == tree
            assert repr(treedef) == repr(expected_treedef)
            assert hash(treedef) == hash(expected_treedef)

    assert _run_threads(work) == []
